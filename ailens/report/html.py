"""One self-contained HTML page for an analysed run: tables plus matplotlib plots.

No external references: CSS is inline and every plot is a PNG embedded as a base64 data
URI, so the page can be mailed or attached to a ticket. matplotlib is imported only here,
inside :func:`render_html`; without it a clear ``PlotUnavailable`` names the extra to install.
"""

from __future__ import annotations

import base64
import html
import io
from typing import Any

import numpy as np

from .._io import fmt_s
from .._version import __version__
from .rows import NO_TICKS, Header, Section
from .sections import build_report

__all__ = ["PlotUnavailable", "render_html"]

_MAX_POINTS = 40_000  # SIMO scatter: more points only blur into each other
_DROPPED = "#b0b0b0"
_COMM, _COMPUTE = "#d9534f", "#4a7fb5"


class PlotUnavailable(ImportError):
    """matplotlib is missing; the message says how to install it."""


def _pyplot():
    try:
        import matplotlib
    except ImportError:
        raise PlotUnavailable(
            "the HTML report needs matplotlib: pip install ailens[plot]"
        ) from None
    matplotlib.use("Agg", force=True)  # files only, never a window (no display on a cluster)
    import matplotlib.pyplot as plt

    return plt


def _png(fig) -> str:
    buf = io.BytesIO()
    # No Software/URL metadata: the page must not carry external references.
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight", metadata={"Software": None})
    fig.clf()
    import matplotlib.pyplot as plt

    plt.close(fig)
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def _phase_colors(a) -> dict[int, str]:
    """Kept phases get distinct colours in order of time; dropped ones one grey."""
    from matplotlib import colormaps

    cmap = colormaps["tab10" if len(a.table.phases) <= 10 else "tab20"]
    ranked = sorted(a.table.phases, key=lambda p: p.total_s, reverse=True)
    colors = {}
    for i, p in enumerate(ranked):
        rgba = cmap(i % cmap.N)
        colors[p.id] = "#{:02x}{:02x}{:02x}".format(*(int(255 * c) for c in rgba[:3]))
    return colors


# --------------------------------------------------------------------------- plots


def _plot_simo(plt, a, colors) -> str:
    n = int(a.n_ticks)
    fig, ax = plt.subplots(figsize=(10, 3.6))
    stride = max(1, -(-n // _MAX_POINTS))
    x = np.arange(0, n, stride)
    ids = np.asarray(a.phase_ids)[::stride]
    s = np.asarray(a.simo)[::stride]
    kept = np.isin(ids, list(colors))
    ax.scatter(
        x[~kept],
        s[~kept],
        s=6,
        c=_DROPPED,
        label="dropped (<1%)" if (~kept).any() else None,
        linewidths=0,
    )
    for p in sorted(a.table.phases, key=lambda p: p.id):
        m = ids == p.id
        if m.any():
            ax.scatter(
                x[m], s[m], s=8, c=colors[p.id], label=f"phase {p.id} ({p.op})", linewidths=0
            )
    ax.set_xlabel("tick (k-th collective)" + (f", every {stride}th shown" if stride > 1 else ""))
    ax.set_ylabel("SIMO (Σ over ranks of log10 work)")
    ax.set_title("SIMO per tick, coloured by phase")
    ax.yaxis.get_major_locator().set_params(integer=True)
    ax.grid(alpha=0.3)
    ax.legend(
        loc="center left", bbox_to_anchor=(1.01, 0.5), fontsize=8, frameon=False, markerscale=2
    )
    return _png(fig)


def _plot_share(plt, a, colors) -> str:
    phases = sorted(a.table.phases, key=lambda p: p.total_s)
    labels = [f"phase {p.id}\n{p.op}" for p in phases]
    comm = [100 * p.comm_per_occurrence_s * p.weight / a.table.total_s for p in phases]
    comp = [100 * p.compute_per_occurrence_s * p.weight / a.table.total_s for p in phases]
    if a.table.dropped:
        labels.insert(0, f"{len(a.table.dropped)} dropped")
        comm.insert(0, 0.0)
        comp.insert(0, 100 * a.table.dropped_s / a.table.total_s)
    h = max(2.2, 0.45 * len(labels) + 1.0)
    fig, ax = plt.subplots(figsize=(7, h))
    y = np.arange(len(labels))
    ax.barh(y, comm, color=_COMM, label="communication")
    ax.barh(y, comp, left=comm, color=_COMPUTE, label="compute")
    for yi, (c, g) in enumerate(zip(comm, comp, strict=True)):
        ax.text(c + g + 0.5, yi, f"{c + g:.1f}%", va="center", fontsize=8)
    ax.set_yticks(y, labels, fontsize=8)
    for tick, p in zip(ax.get_yticklabels()[-len(phases) :], phases, strict=True):
        tick.set_color(colors.get(p.id, "black"))
    ax.set_xlabel("% of the phase-table time")
    ax.set_xlim(0, max([c + g for c, g in zip(comm, comp, strict=True)] + [1]) * 1.15)
    ax.set_title("Time share by phase (communication + compute)")
    ax.legend(loc="lower right", fontsize=8)
    ax.grid(axis="x", alpha=0.3)
    return _png(fig)


def _plot_comm_compute(plt, a) -> str:
    """Compute and exposed communication per step (the analysis's step table, mean over
    ranks), plus the run's overall split."""
    table = a.steps
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(10, 3.2), gridspec_kw={"width_ratios": [4, 1]})
    if a.n_ticks and table.n_steps:
        steps = np.arange(table.n_steps)
        c = table.exposed_s.mean(axis=1) * 1e3
        g = table.compute_s.mean(axis=1) * 1e3
        ax.fill_between(
            steps, 0, g, step="mid", color=_COMPUTE, alpha=0.85, label="compute", linewidth=0
        )
        ax.fill_between(
            steps,
            g,
            g + c,
            step="mid",
            color=_COMM,
            alpha=0.85,
            label="exposed communication",
            linewidth=0,
        )
        ax.set_xlim(steps[0], steps[-1] if len(steps) > 1 else 1)
    ax.set_xlabel("training step")
    ax.set_ylabel("ms per step (mean over ranks)")
    ax.set_title("Compute vs exposed communication per step")
    ax.legend(loc="upper right", fontsize=8)
    ax.grid(alpha=0.3)
    # The same split over all steps (the phase table's comm % counts overlapped collectives).
    step_s = float(table.wall_s.sum()) if a.n_ticks else 0.0
    comp_pct = 100 * float(table.compute_s.sum()) / step_s if step_s > 0 else 0.0
    comm_pct = 100 * float(table.exposed_s.sum()) / step_s if step_s > 0 else 0.0
    ax2.bar([0], [comp_pct], color=_COMPUTE, width=0.6)
    ax2.bar([0], [comm_pct], bottom=[comp_pct], color=_COMM, width=0.6)
    for y, label in ((comp_pct / 2, "compute"), (comp_pct + comm_pct / 2, "comm")):
        pct = comp_pct if label == "compute" else comm_pct
        ax2.text(0, y, f"{label}\n{pct:.1f}%", ha="center", va="center", color="white", fontsize=8)
    ax2.set_xlim(-0.6, 0.6)
    ax2.set_ylim(0, 100)
    ax2.set_xticks([])
    ax2.set_title("all steps")
    return _png(fig)


def _plot_forecast(plt, a) -> str | None:
    f = a.forecast
    if f is None or len(f.history) < 2:
        return None
    hist = np.asarray(f.history, dtype=float)
    # Early forecasts (a few noisy steps) can be far off; drawing them to scale would squash
    # the convergence that matters. Show +/-50% around the forecast and pin outliers to the edge.
    center = f.predicted_total_s
    lo_y, hi_y = 0.5 * center, 1.5 * center
    y = np.clip(hist[:, 1], lo_y, hi_y)
    clipped = y != hist[:, 1]
    fig, ax = plt.subplots(figsize=(10, 3.4))
    if clipped.any():
        ax.set_ylim(lo_y * 0.97, hi_y * 1.03)
        ax.scatter(
            hist[clipped, 0],
            y[clipped],
            marker="x",
            color="#d9534f",
            zorder=3,
            label=f"{int(clipped.sum())} early forecast(s) off by >50% (pinned to the edge)",
        )
    ax.plot(
        hist[:, 0],
        y,
        color="#333",
        lw=1.5,
        marker="o" if len(hist) < 40 else None,
        ms=3,
        label="predicted total",
    )
    if f.interval_s is not None:
        lo, hi = f.interval_s
        ax.axhspan(lo, hi, color="#4a7fb5", alpha=0.15, label=f"interval {fmt_s(lo)} – {fmt_s(hi)}")
    if f.actual_total_s is not None:
        ax.axhline(
            f.actual_total_s,
            color="#2a9d4a",
            lw=1.5,
            ls="--",
            label=f"actual {fmt_s(f.actual_total_s)}",
        )
    if f.signature_step is not None:
        ax.axvline(
            f.signature_step,
            color="#d9534f",
            lw=1.2,
            ls=":",
            label=f"signature at step {f.signature_step}",
        )
    ax.set_xlabel("training step at which the forecast was made")
    ax.set_ylabel("predicted total time (s)")
    ax.set_title("Forecast converging over the run")
    ax.grid(alpha=0.3)
    ax.legend(loc="best", fontsize=8)
    return _png(fig)


def _plain_formatter():
    from matplotlib.ticker import FuncFormatter

    return FuncFormatter(lambda v, _pos: f"{v:g}")


def _plot_scaling(plt, rows, ranks_now: int, mode: str) -> str | None:
    if not rows:
        return None
    r = np.array([w.ranks for w in rows], dtype=float)
    sp = np.array([w.speedup for w in rows], dtype=float)
    eff = 100 * np.array([w.efficiency for w in rows], dtype=float)
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(10, 3.4))
    ax.plot(r, sp, "o-", color="#4a7fb5", label="predicted")
    if mode == "strong":
        ax.plot(r, r / r.min() * sp[r.argmin()], ls="--", color="#999", label="ideal")
    else:
        ax.plot(
            r,
            r / r.min() * sp[r.argmin()],
            ls="--",
            color="#999",
            label="ideal (throughput ∝ ranks)",
        )
    ax2.plot(r, eff, "o-", color="#d9534f")
    ax2.axhline(100, ls="--", color="#999")
    # Log-log: ideal speedup is a straight line and every doubling gets the same room.
    ax.set_yscale("log", base=2)
    ax.yaxis.set_major_formatter(_plain_formatter())
    for axis in (ax, ax2):
        axis.set_xscale("log", base=2)
        axis.set_xticks(r, [str(int(x)) for x in r])
        axis.minorticks_off()
        axis.set_xlabel("ranks")
        axis.grid(alpha=0.3)
        if ranks_now in r:
            axis.axvline(ranks_now, color="#2a9d4a", lw=1, ls=":")
    ax.set_ylabel("speedup")
    ax.set_title(f"Predicted speedup ({mode} scaling; dotted = this run)")
    ax.legend(fontsize=8)
    ax2.set_ylabel("parallel efficiency (%)")
    ax2.set_ylim(0, max(110, eff.max() * 1.1))
    ax2.set_title("Predicted efficiency")
    return _png(fig)


# --------------------------------------------------------------------------- page

_CSS = """
body{font:15px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:#222;margin:0;
 background:#f6f7f9}
main{max-width:1100px;margin:0 auto;padding:24px 32px 48px;background:#fff}
h1{font-size:24px;margin:0 0 4px}
h2{font-size:18px;margin:32px 0 8px;border-bottom:1px solid #ddd;padding-bottom:4px}
.sub{color:#666;font-size:13px;margin:0 0 16px}
.cards{display:flex;flex-wrap:wrap;gap:12px;margin:16px 0}
.card{flex:1 1 150px;border:1px solid #e2e4e8;border-radius:8px;padding:10px 14px;
 background:#fafbfc}
.card b{display:block;font-size:22px;font-weight:600}.card small{font-size:13px}
.card span{color:#666;font-size:12px}
table{border-collapse:collapse;margin:8px 0;font-size:14px}
th,td{padding:4px 12px;border-bottom:1px solid #eee;text-align:right;white-space:nowrap}
th{background:#f0f2f5;font-weight:600}td.l,th.l{text-align:left}
tr.total td{font-weight:600;border-top:2px solid #ccc}tr.this td{font-weight:600}
.warn{background:#fff4e5;border-left:4px solid #f0a020;padding:8px 12px;margin:12px 0}
.note{color:#666;font-size:13px}
figure{margin:16px 0}figure img{max-width:100%;height:auto}figcaption{color:#666;font-size:13px}
.swatch{display:inline-block;width:10px;height:10px;border-radius:2px;margin-right:6px;vertical-align:middle}
"""


def _e(x: Any) -> str:
    return html.escape(str(x))


def _swatch(colors: dict[int, str], phase: int | None) -> str:
    color = colors.get(phase) if phase is not None else None
    return f'<span class="swatch" style="background:{color}"></span>' if color else ""


def _table(s: Section, colors: dict[int, str]) -> str:
    """A section's rows as an HTML table; label/value sections: no header row, labels bold."""
    left = [not r for r in s.right] if s.head else [True, True]

    def cell(tag: str, col: int, inner: str) -> str:
        return f'<{tag} class="l">{inner}</{tag}>' if left[col] else f"<{tag}>{inner}</{tag}>"

    head = "".join(cell("th", i, _e(h)) for i, h in enumerate(s.head))
    body = []
    for r in s.rows:
        inner = [_e(c) for c in r.cells]
        inner[0] = _swatch(colors, r.phase) + (inner[0] if s.head else f"<b>{inner[0]}</b>")
        tds = "".join(cell("td", i, c) for i, c in enumerate(inner))
        body.append(f'<tr class="{r.kind}">{tds}</tr>' if r.kind else f"<tr>{tds}</tr>")
    thead = f"<thead><tr>{head}</tr></thead>" if head else ""
    return f"<table>{thead}<tbody>{''.join(body)}</tbody></table>"


def _section(s: Section, colors: dict[int, str]) -> str:
    if not s.rows and not s.empty:
        return ""
    parts = [f"<h2>{_e(s.title)}</h2>"]
    parts.append(_table(s, colors) if s.rows else f"<p>{_e(s.empty)}</p>")
    parts += [f'<p class="note">{_e(n)}</p>' for n in s.notes]
    return "\n".join(parts)


def _header(h: Header, title: str) -> str:
    parts = [f"<h1>{_e(title)}</h1>"]
    about = " · ".join((*h.about, f"counter {h.counter}"))
    parts.append(f'<p class="sub">{_e(about)}</p>')
    parts += [f'<div class="warn"><b>Warning:</b> {_e(w)}</div>' for w in h.warnings]
    cards = "".join(
        f'<div class="card"><b>{_e(f.value)}'
        + (f" <small>({_e(f.detail)})</small>" if f.detail else "")
        + f"</b><span>{_e(f.label)}</span></div>"
        for f in h.figures
    )
    parts.append(f'<div class="cards">{cards}</div>')
    return "\n".join(parts)


def _figure(uri: str | None, caption: str) -> str:
    if uri is None:
        return ""
    cap = _e(caption)
    return f'<figure><img src="{uri}" alt="{cap}"><figcaption>{cap}</figcaption></figure>'


def _plots(plt, a, whatif_rows, mode: str, colors) -> dict[str, list[str]]:
    """The plots of the page, by the key of the section they follow."""
    if not a.n_ticks:
        ticks = [f"<p>No plots of phases: {_e(NO_TICKS)}</p>"]
    else:
        ticks = [
            _figure(
                _plot_simo(plt, a, colors),
                "SIMO of every tick; ticks within ±tolerance of a phase's first SIMO share "
                "its colour.",
            ),
            _figure(
                _plot_share(plt, a, colors),
                "Share of the run's time per phase, split into communication and compute.",
            ),
            _figure(
                _plot_comm_compute(plt, a),
                "Where each step's time goes, summed over the step's collectives.",
            ),
        ]
    forecast = []
    if a.forecast is not None and a.forecast.predicted_total_s is not None:
        forecast.append(
            _figure(
                _plot_forecast(plt, a),
                "The total time predicted from the steps seen so far, as the run went on.",
            )
        )
    scaling = []
    if whatif_rows:
        scaling.append(
            _figure(
                _plot_scaling(plt, whatif_rows, a.ranks, mode),
                "Speedup and parallel efficiency predicted by the what-if model; dashed: ideal.",
            )
        )
    return {"table3": ticks, "forecast": forecast, "whatif": scaling}


def render_html(
    a, whatif_rows=None, *, whatif_mode: str = "weak", title: str | None = None, top: int = 5
) -> str:
    """The report page of analysis ``a`` (a RunAnalysis) with ``whatif_rows`` as one HTML string:
    the sections of :func:`ailens.report.sections.build_report`, each followed by its plots.

    Raises :class:`PlotUnavailable` when matplotlib is not installed.
    """
    plt = _pyplot()
    report = build_report(a, whatif_rows, whatif_mode=whatif_mode, top=top)
    colors = _phase_colors(a)
    plots = _plots(plt, a, whatif_rows, whatif_mode, colors)
    title = title or report.header.title
    parts = [_header(report.header, title)]
    for s in report.sections:
        parts.append(_section(s, colors))
        parts += plots.get(s.key, [])
    parts.append(
        f'<p class="note">Generated by ailens {_e(__version__)} from {_e(a.run.path)}.</p>'
    )
    body = "\n".join(p for p in parts if p)
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{_e(title)}</title>"
        f"<style>{_CSS}</style></head><body><main>\n{body}\n</main></body></html>\n"
    )
