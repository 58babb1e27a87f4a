"""One self-contained HTML page for an analysed run: tables plus matplotlib plots.

No external references: CSS is inline and every plot is a PNG embedded as a base64 data
URI, so the page can be mailed or attached to a ticket. matplotlib is imported only here,
inside :func:`render_html`; without it a clear ``PlotUnavailable`` names the extra to install.
"""

from __future__ import annotations

import base64
import html
import io
import re
from typing import Any

import numpy as np

from . import __version__
from ._report import COUNTER_LABELS, fmt_s, format_forecast, report_dict

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
    """Comm vs compute per step (rank-mean seconds), plus the run's overall split."""
    step = np.asarray(a.tick_step, dtype=np.int64)
    comm = np.asarray(a.comm_s, dtype=float)
    comp = np.asarray(a.compute_s, dtype=float)
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(10, 3.2), gridspec_kw={"width_ratios": [4, 1]})
    if len(step):
        steps = np.arange(int(step.max()) + 1)
        c = np.bincount(step, weights=comm, minlength=len(steps)) * 1e3
        g = np.bincount(step, weights=comp, minlength=len(steps)) * 1e3
        ax.fill_between(
            steps, 0, g, step="mid", color=_COMPUTE, alpha=0.85, label="compute", linewidth=0
        )
        ax.fill_between(
            steps, g, g + c, step="mid", color=_COMM, alpha=0.85, label="communication", linewidth=0
        )
        ax.set_xlim(steps[0], steps[-1] if len(steps) > 1 else 1)
    ax.set_xlabel("training step")
    ax.set_ylabel("ms per step (mean over ranks)")
    ax.set_title("Communication vs compute per step")
    ax.legend(loc="upper right", fontsize=8)
    ax.grid(alpha=0.3)
    ax2.bar([0], [a.compute_pct], color=_COMPUTE, width=0.6)
    ax2.bar([0], [a.comm_pct], bottom=[a.compute_pct], color=_COMM, width=0.6)
    ax2.text(
        0,
        a.compute_pct / 2,
        f"compute\n{a.compute_pct:.1f}%",
        ha="center",
        va="center",
        color="white",
        fontsize=8,
    )
    ax2.text(
        0,
        a.compute_pct + a.comm_pct / 2,
        f"comm\n{a.comm_pct:.1f}%",
        ha="center",
        va="center",
        color="white",
        fontsize=8,
    )
    ax2.set_xlim(-0.6, 0.6)
    ax2.set_ylim(0, 100)
    ax2.set_xticks([])
    ax2.set_title("whole run")
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
.card b{display:block;font-size:22px;font-weight:600}.card span{color:#666;font-size:12px}
table{border-collapse:collapse;margin:8px 0;font-size:14px}
th,td{padding:4px 12px;border-bottom:1px solid #eee;text-align:right;white-space:nowrap}
th{background:#f0f2f5;font-weight:600}td.l,th.l{text-align:left}
tr.total td{font-weight:600;border-top:2px solid #ccc}
.warn{background:#fff4e5;border-left:4px solid #f0a020;padding:8px 12px;margin:12px 0}
.note{color:#666;font-size:13px}
figure{margin:16px 0}figure img{max-width:100%;height:auto}figcaption{color:#666;font-size:13px}
.swatch{display:inline-block;width:10px;height:10px;border-radius:2px;margin-right:6px;vertical-align:middle}
"""


def _e(x: Any) -> str:
    return html.escape(str(x))


def _table(
    head: list[str], rows: list[list[str]], left: set[int] = frozenset(), total_last: bool = False
) -> str:
    th = "".join(
        f'<th class="l">{_e(h)}</th>' if i in left else f"<th>{_e(h)}</th>"
        for i, h in enumerate(head)
    )
    body = []
    for j, row in enumerate(rows):
        cls = ' class="total"' if total_last and j == len(rows) - 1 else ""
        tds = "".join(
            f'<td class="l">{c}</td>' if i in left else f"<td>{c}</td>" for i, c in enumerate(row)
        )
        body.append(f"<tr{cls}>{tds}</tr>")
    return f"<table><thead><tr>{th}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def _figure(uri: str | None, caption: str) -> str:
    if uri is None:
        return ""
    cap = _e(caption)
    return f'<figure><img src="{uri}" alt="{cap}"><figcaption>{cap}</figcaption></figure>'


def _tick_figures(plt, a, colors) -> list[str]:
    simo_cap = (
        "SIMO of every tick; ticks within ±tolerance of a phase's first SIMO share its colour."
    )
    return [
        _figure(_plot_simo(plt, a, colors), simo_cap),
        _figure(
            _plot_share(plt, a, colors),
            "Share of the run's time per phase, split into communication and compute.",
        ),
        _figure(
            _plot_comm_compute(plt, a),
            "Where each step's time goes, summed over the step's collectives.",
        ),
    ]


def render_html(
    a, whatif_rows=None, *, whatif_mode: str = "weak", title: str | None = None, top: int = 5
) -> str:
    """The report page of analysis ``a`` (a RunAnalysis) with ``whatif_rows`` as one HTML string.

    Raises :class:`PlotUnavailable` when matplotlib is not installed.
    """
    plt = _pyplot()
    d = report_dict(a, whatif_rows, whatif_mode=whatif_mode, top=top)
    colors = _phase_colors(a)
    table = a.table
    meta = a.run.meta
    title = title or f"ailens report: {a.run.path.name or a.run.path}"

    parts = [f"<h1>{_e(title)}</h1>"]
    backend = f"/{meta['backend']}" if meta.get("backend") else ""
    parts.append(
        f'<p class="sub">run {_e(meta.get("run_id"))} · {a.ranks} ranks on '
        f"{_e(', '.join(d['hosts']))} · "
        f"{_e(meta.get('framework') or '?')}{_e(backend)} · "
        f"started {_e(meta.get('start_time', '?'))} · "
        f"counter {_e(COUNTER_LABELS.get(a.counter, a.counter))}"
        + (f" (fallback: {_e(meta['counter_fallback'])})" if meta.get("counter_fallback") else "")
        + "</p>"
    )
    for w in a.warnings:
        parts.append(f'<div class="warn"><b>Warning:</b> {_e(w)}</div>')

    f = a.forecast
    cards = [
        (fmt_s(a.total_s), "wall time"),
        (f"{a.comm_pct:.1f}% / {a.compute_pct:.1f}%", "communication / compute"),
        (f"{table.n_phases} <small>({a.n_phases_previous:,} PAS2P)</small>", "phases (SIMO)"),
        (f"{a.n_ticks:,}", f"collectives per rank, {len(a.step_end_s):,} steps"),
    ]
    if f is not None and f.predicted_total_s is not None:
        label = "forecast total"
        if f.signature_step is not None:
            label += f", from step {f.signature_step}"
        cards.append((fmt_s(f.predicted_total_s), label))
    parts.append(
        '<div class="cards">'
        + "".join(
            f'<div class="card"><b>{v if "<small>" in v else _e(v)}</b><span>{_e(k)}</span></div>'
            for v, k in cards
        )
        + "</div>"
    )

    # Table 2
    parts.append("<h2>Table 2. Phases</h2>")
    rows = []
    for p in table.phases:
        sw = f'<span class="swatch" style="background:{colors[p.id]}"></span>'
        rows.append(
            [
                f"{sw}{p.id}",
                _e(p.op),
                _e(p.simo),
                f"{p.time_per_occurrence_s:.6f}",
                f"{p.weight:,}",
                f"{p.total_s:.6f}",
                f"{100 * p.share:.1f}%",
            ]
        )
    if table.dropped:
        rows.append(
            [
                f"{len(table.dropped)} dropped (&lt;{100 * table.min_share:g}%)",
                "",
                "",
                "",
                "",
                f"{table.dropped_s:.6f}",
                f"{100 * table.dropped_s / table.total_s:.1f}%" if table.total_s else "",
            ]
        )
    rows.append(["Total", "", "", "", f"{table.n_ticks:,}", f"{table.total_s:.6f}", "100%"])
    parts.append(
        _table(
            ["Phase", "Op", "SIMO", "Time/occurrence (s)", "Weight", "Time×Weight (s)", "Share"],
            rows,
            left={0, 1},
            total_last=True,
        )
    )
    parts.append(
        '<p class="note">Time per occurrence is the mean over ranks of the communication time plus '
        "the compute gap before the collective; weight is the number of occurrences (ticks).</p>"
    )

    # Table 3
    t3 = d["table3"]
    parts.append("<h2>Table 3. Phase detection and execution time</h2>")
    parts.append(
        _table(
            [
                "Processes",
                "Previous phases (PAS2P)",
                "Current phases (SIMO)",
                "AET (s)",
                "% Comm.",
                "% Compute",
            ],
            [
                [
                    str(t3["processes"]),
                    f"{t3['previous_phases']:,}",
                    f"{t3['current_phases']:,}",
                    f"{t3['aet_s']:.2f}",
                    f"{t3['comm_pct']:.2f}",
                    f"{t3['compute_pct']:.2f}",
                ]
            ],
        )
    )

    if not a.n_ticks:
        parts.append("<p>No plots of phases: no collective was recorded on every rank.</p>")
    else:
        parts += _tick_figures(plt, a, colors)

    # Skew
    skew = {s["phase"] if "phase" in s else s.get("id"): s for s in d["skew"]}
    ops = {p.id: p.op for p in table.phases}
    srows = [
        [str(pid), _e(ops[pid]), _e(s.get("slowest_rank")), f"{s.get('spread_pct', 0.0):.1f}%"]
        for pid, s in sorted(skew.items())
        if pid in ops
    ]
    if srows:
        parts.append("<h2>Skew across ranks</h2>")
        parts.append(
            _table(
                ["Phase", "Op", "Slowest rank", "Spread of compute (max−min)/mean"], srows, left={1}
            )
        )

    # Forecast: the same lines as the terminal report, as a two-column table.
    parts.append("<h2>Forecast</h2>")
    text = format_forecast(a)
    if f is None or f.predicted_total_s is None:
        parts.append(f"<p>{_e(text)}</p>")
    else:
        pairs = [re.split(r"\s{2,}", line.strip(), maxsplit=1) for line in text.splitlines()]
        rows = [[f"<b>{_e(k)}</b>", _e(v[0] if v else "")] for k, *v in pairs]
        parts.append(
            _table(["", ""], rows, left={0, 1}).replace(
                '<thead><tr><th class="l"></th><th class="l"></th></tr></thead>', ""
            )
        )
        parts.append(
            _figure(
                _plot_forecast(plt, a),
                "The total time predicted from the steps seen so far, as the run went on.",
            )
        )

    # What-if
    parts.append("<h2>What-if: other rank counts</h2>")
    if whatif_rows:
        wrows = [
            [
                f"<b>{r.ranks}</b>" if r.ranks == a.ranks else str(r.ranks),
                fmt_s(r.step_time_s),
                fmt_s(r.total_time_s),
                f"{r.speedup:.2f}×",
                f"{100 * r.efficiency:.0f}%",
                f"{r.comm_pct:.1f}",
            ]
            for r in whatif_rows
        ]
        parts.append(
            f'<p class="note">{_e(whatif_mode)} scaling; speedup against 1 rank; '
            "bold = this run.</p>"
        )
        parts.append(
            _table(["Ranks", "Step time", "Total time", "Speedup", "Efficiency", "% Comm."], wrows)
        )
        parts.append(
            _figure(
                _plot_scaling(plt, whatif_rows, a.ranks, whatif_mode),
                "Speedup and parallel efficiency predicted by the what-if model; dashed: ideal.",
            )
        )
    else:
        parts.append("<p>No what-if: no collective was recorded on every rank.</p>")

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
