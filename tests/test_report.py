"""Text, JSON and HTML reports in process, on synthetic run directories."""

import base64
import dataclasses
import html
import json
import re
from html.parser import HTMLParser

import numpy as np
import pytest
from synthetic import Collective, write_run

import ailens
from ailens._io import fmt_s
from ailens.phases import assign, format_table2, format_table3_row
from ailens.report import sections as _report
from ailens.report.rows import Row, default_whatif_ranks
from ailens.report.sections import build_report
from ailens.report.text import (
    format_forecast,
    format_report,
    grid,
    render_json,
    render_text,
    report_dict,
)

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


class _Refs(HTMLParser):
    def __init__(self):
        super().__init__()
        self.imgs: list[str] = []
        self.refs: list[tuple[str, str, str]] = []

    def handle_starttag(self, tag, attrs):
        for name, value in attrs:
            if name in ("src", "href", "data", "action", "poster", "srcset") and value is not None:
                self.refs.append((tag, name, value))
                if tag == "img" and name == "src":
                    self.imgs.append(value)


def check_html_page(page: str, *, min_images: int) -> None:
    """A self-contained page: every reference is a PNG data URI that decodes, no URL anywhere
    outside the images (no scripts, stylesheets, fonts or links to fetch)."""
    assert page.startswith("<!DOCTYPE html>") and page.rstrip().endswith("</html>")
    p = _Refs()
    p.feed(page)
    assert len(p.imgs) >= min_images, len(p.imgs)
    for tag, name, value in p.refs:
        assert tag == "img" and name == "src" and value.startswith("data:image/png;base64,"), (
            tag,
            name,
            value[:60],
        )
    for uri in p.imgs:
        data = base64.b64decode(uri.split(",", 1)[1], validate=True)
        assert data.startswith(PNG_MAGIC) and data[-8:-4] == b"IEND", "not a complete PNG"
    text_only = re.sub(r"data:image/png;base64,[A-Za-z0-9+/=]+", "", page)
    for bad in ("http://", "https://", "//cdn", "<script", "<link", "@import", "url("):
        assert bad not in text_only, bad


@pytest.fixture(scope="module")
def analysis(tmp_path_factory):
    from ailens import analyze

    s = write_run(tmp_path_factory.mktemp("rep") / "run", ranks=4, steps=60, seed=1)
    return s, analyze(ailens.load_run(s.path))


def _rows(a, ranks=None):
    from ailens.predict.whatif import whatif

    return whatif(a, ranks or default_whatif_ranks(a.ranks)) if a.forecast is not None else []


# --------------------------------------------------------------------------- helpers


def test_default_whatif_ranks_surround_the_run():
    assert default_whatif_ranks(1) == [1, 2, 4, 8, 16]
    assert default_whatif_ranks(2) == [1, 2, 4, 8, 16]
    assert default_whatif_ranks(6) == [1, 2, 4, 6, 8, 16]
    assert default_whatif_ranks(64) == [8, 16, 32, 64, 128, 256]


def test_fmt_s_reads_at_a_glance():
    assert fmt_s(0.00035) == "350 µs"
    assert fmt_s(0.0124) == "12.4 ms"
    assert fmt_s(0.3) == "300 ms"
    assert fmt_s(1.3) == "1.30 s"
    assert fmt_s(245) == "4 min 05 s"
    assert fmt_s(7380) == "2 h 03 min"
    assert fmt_s(None) == "n/a" and fmt_s(float("nan")) == "n/a"


def test_grid_aligns_columns():
    out = grid([["a", "bb"], ["ccc", "1"], ["d", "22"]], [False, True]).splitlines()
    assert out == ["a    bb", "---  --", "ccc   1", "d    22"]


# --------------------------------------------------------------------------- report


def test_report_dict_is_json_and_mirrors_the_analysis(analysis):
    s, a = analysis
    rows = _rows(a)
    d = report_dict(a, rows)
    json.dumps(d, allow_nan=False)  # plain types only, no NaN
    assert d["phases"] == a.table.to_dict()["phases"]
    assert d["ranks"] == 4 and d["counter"] == "instructions"
    assert d["table3"]["previous_phases"] == a.n_phases_previous
    assert d["table3"]["current_phases"] == a.table.n_phases
    assert d["top_phases"][0] == max(a.table.phases, key=lambda p: p.total_s).id
    assert len(d["whatif"]) == len(rows)
    assert d["total_s"] == pytest.approx(s.total_s, rel=0.05)


def test_format_report_sections_in_order(analysis):
    _, a = analysis
    text = format_report(a, _rows(a), top=3)
    order = [
        "ailens report:",
        "Counter:",
        "Table 2",
        "Table 3",
        "Top 3 phases",
        "Skew",
        "Forecast",
        "What-if",
    ]
    pos = [text.index(h) for h in order]
    assert pos == sorted(pos)
    # Table 2's Total row adds up the column above it.
    t2 = text.split("Table 2", 1)[1].split("Table 3", 1)[0]
    total = float(next(line for line in t2.splitlines() if line.startswith("Total")).split()[-2])
    assert total == pytest.approx(a.table.total_s, abs=1e-6)


def test_report_of_a_run_whose_behaviour_changes(tmp_path):
    """A slow second half (e.g. a data loader slowing down) shows up as new phases."""
    fast = (Collective("allreduce", 1 << 20, compute_s=0.002, comm_s=0.001, work=3e6),)
    slow = (Collective("allreduce", 1 << 20, compute_s=0.02, comm_s=0.001, work=3e8),)
    s = write_run(
        tmp_path / "run", ranks=2, steps=40, pattern=lambda step: fast if step < 20 else slow
    )
    from ailens import analyze

    a = analyze(ailens.load_run(s.path))
    assert a.table.n_phases >= 2
    text = format_report(a, _rows(a))
    for p in a.table.phases:
        assert f"\n{p.id} " in text


def test_short_run_reports_without_crashing(tmp_path):
    s = write_run(tmp_path / "run", ranks=2, steps=3)
    from ailens import analyze

    a = analyze(ailens.load_run(s.path))
    text = format_report(a, _rows(a))
    assert "Table 2" in text and "Forecast" in text
    json.dumps(report_dict(a, _rows(a)), allow_nan=False)


# --------------------------------------------------------------------------- sections


def _cells_in_order(line: str, cells) -> bool:
    """``line`` is the row of ``cells``: each one there, in order, two spaces apart or more."""
    pattern = r"\s{2,}".join(re.escape(c) for c in cells if c)
    return re.fullmatch(r"\s*" + pattern, line) is not None


def test_every_section_reaches_all_three_renderers(analysis):
    """One build, three renderers: each row's cells are in the text and on the page, each
    section's JSON keys in ``report --json``."""
    pytest.importorskip("matplotlib")
    from ailens.report.html import render_html

    _, a = analysis
    rows = _rows(a)
    report = build_report(a, rows)
    text, page, d = render_text(report), render_html(a, rows), render_json(report)
    assert text == format_report(a, rows) and d == report_dict(a, rows)
    keys = [s.key for s in report.sections]
    assert keys == [
        "table2", "table3", "top", "skew", "forecast", "forecast_parts", "device", "whatif"
    ]  # fmt: skip
    for s in report.sections:
        if s.key == "device":  # a CPU run: no device time (tests/test_device.py fills it)
            assert not s.rows and s.json == {"device": None}
            continue
        assert s.rows, s.key  # this run fills every section
        assert s.title in text and html.escape(s.title) in page, s.title
        for row in s.rows:
            assert any(_cells_in_order(ln, row.cells) for ln in text.splitlines()), row
            for cell in row.cells:
                assert f">{html.escape(cell)}</" in page, cell
        for key, value in s.json.items():
            assert d[key] == json.loads(json.dumps(value)), key
    for f in report.header.figures:
        assert f.value in text and html.escape(f.value) in page, f


def test_a_row_added_to_the_forecast_section_shows_everywhere(analysis, monkeypatch):
    """The one change a new forecast line needs: a row in ``forecast_section``."""
    pytest.importorskip("matplotlib")
    from ailens.report.html import render_html

    _, a = analysis
    build = _report.forecast_section

    def with_progress_bar(a):
        s = build(a)
        extra = Row(("A progress bar would say", "12.3 s"))
        return dataclasses.replace(s, rows=(*s.rows, extra))

    monkeypatch.setattr(_report, "forecast_section", with_progress_bar)
    assert "A progress bar would say  12.3 s" in format_forecast(a).splitlines()
    assert "A progress bar would say  12.3 s" in format_report(a, _rows(a)).splitlines()
    page = render_html(a, _rows(a))
    assert '<td class="l"><b>A progress bar would say</b></td><td class="l">12.3 s</td>' in page


def test_forecast_error_is_the_forecasts_own(tmp_path):
    from ailens import analyze

    s = write_run(tmp_path / "run", ranks=2, steps=200, noise=0.02)
    f = analyze(ailens.load_run(s.path)).forecast
    assert f.signature_step is not None and f.actual_total_s and f.error_pct is not None
    lines = format_forecast(analyze(ailens.load_run(s.path))).splitlines()
    actual = next(line for line in lines if line.startswith("Actual total time"))
    where = "inside" if f.covered else "OUTSIDE"
    assert f"(error {f.error_pct:+.1f}%, {where} the interval)" in actual


def test_phases_tables_are_the_reports_rows(analysis):
    """ailens.phases' Table 2 and Table 3 formats show the cells of the report's tables."""
    _, a = analysis
    text = format_report(a, _rows(a))
    t2 = text.split("Table 2", 1)[1].split("Table 3", 1)[0].splitlines()
    for line in format_table2(a.table, detail=True).splitlines()[1:]:
        cells = re.split(r"\s{2,}", line.strip())
        row = next(ln for ln in t2 if ln.startswith(cells[0] + " "))
        assert re.split(r"\s{2,}", row.strip())[:-1] == cells  # the report adds Share
    t3 = text.split("Table 3", 1)[1].splitlines()[4].split()
    row = format_table3_row(a.table, a.n_phases_previous, processes=a.ranks).split(" | ")
    assert row[0] == "" and row[1:4] == t3[:3] and row[5:] == t3[4:]  # AET: wall time there


# --------------------------------------------------------------------------- html


def test_html_page_validates(analysis):
    """The page parses and is self-contained; tests/test_html_render.py opens it in a browser."""
    pytest.importorskip("matplotlib")
    from ailens.report.html import render_html

    _, a = analysis
    page = render_html(a, _rows(a))
    check_html_page(page, min_images=5)
    for text in ("Table 2. Phases", "Table 3.", "Top ", "Skew", "Forecast", "What-if"):
        assert f"<h2>{text}" in page, text
    for p in a.table.phases:
        assert f"</span>{p.id}</td>" in page  # coloured like the phase in the plots
    assert page.count('<tr class="total">') == 1 and page.count('<tr class="this">') == 1


def test_html_of_a_partial_run_shows_the_warning(tmp_path):
    pytest.importorskip("matplotlib")
    from ailens import analyze
    from ailens.report.html import render_html

    s = write_run(tmp_path / "run", ranks=2, steps=60, kill_rank=1, kill_step=40)
    a = analyze(ailens.load_run(s.path))
    page = render_html(a, _rows(a))
    check_html_page(page, min_images=3)
    assert 'class="warn"' in page and "rank 1" in page


def test_html_escapes_run_metadata(tmp_path):
    pytest.importorskip("matplotlib")
    from ailens import analyze
    from ailens.report.html import render_html

    s = write_run(
        tmp_path / "run",
        ranks=2,
        steps=20,
        host="<img src=x onerror=alert(1)>",
        framework="<b>x</b>",
    )
    a = analyze(ailens.load_run(s.path))
    page = render_html(a, [])
    check_html_page(page, min_images=3)
    assert "&lt;img src=x" in page and "<b>x</b>" not in page


def test_plots_survive_many_ticks(tmp_path):
    """A long run: the SIMO scatter is thinned, the page stays small."""
    pytest.importorskip("matplotlib")
    from ailens import analyze
    from ailens.report.html import render_html

    s = write_run(
        tmp_path / "run", ranks=2, steps=20_000, noise=0.05, online=False, chunk_events=4096
    )
    a = analyze(ailens.load_run(s.path))
    assert a.n_ticks > 40_000
    page = render_html(a, _rows(a))
    check_html_page(page, min_images=4)
    assert len(page) < 3_000_000
    assert np.isfinite(a.total_s)


def test_report_of_a_run_still_going(tmp_path):
    """Read while training goes on (no closing records): forecast of the whole run, no actual."""
    from ailens import analyze

    s = write_run(tmp_path / "run", ranks=2, steps=80, config={"total_steps": 200}, running=True)
    a = analyze(ailens.load_run(s.path))
    assert a.forecast is not None and a.forecast.actual_total_s is None
    per_step = (s.step_end_ns[-1, 0] - s.step_end_ns[40, 0]) / 39 / 1e9
    assert a.forecast.predicted_total_s == pytest.approx(s.total_s + 120 * per_step, rel=0.1)
    text = format_report(a, _rows(a))
    assert "unknown (the run has not finished)" in text
    assert "no closing record" in text  # the warning says why the run is partial


def test_synthetic_run_round_trips_through_the_reader(tmp_path):
    s = write_run(tmp_path / "run", ranks=3, steps=30, seed=7, chunk_events=16)
    run = ailens.load_run(s.path)
    assert run.complete and run.world_size == 3 and not run.warnings
    for r, t in enumerate(run.ranks):
        ev = t.events
        assert t.meta["run_id"] == s.run_id and t.meta["start_wall_ns"] == s.start_wall_ns[r]
        assert ev["work"].tolist() == s.work[:, r].tolist()
        assert ev["op"].tolist() == s.op.tolist() and ev["step"].tolist() == s.step.tolist()
        assert (ev["t_end"] + s.offsets_ns[r]).tolist() == s.end_ns[:, r].tolist()
        assert t.steps["step"].tolist() == list(range(30))
        assert t.info["closed"] and t.info["ticks"] == s.n_ticks
    # Per-rank work differs and straddles decades: SIMO groups what PAS2P splits.
    from ailens.phases import magnitude, pas2p_assign

    assert (magnitude(s.work)[:, 0] != magnitude(s.work)[:, 2]).any()
    ids = assign(s.simo(), 1, key=s.op.astype(np.int64))
    assert ids.max() < pas2p_assign(s.op, s.nbytes, magnitude(s.work)).max()
