"""Text, JSON and HTML reports in process, on synthetic run directories."""

import base64
import json
import re
import shutil
import subprocess
import tempfile
from html.parser import HTMLParser

import numpy as np
import pytest
from synthetic import Collective, write_run

import ailens
from ailens._report import default_whatif_ranks, fmt_s, format_report, grid, report_dict
from ailens.phases import assign

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
    from ailens._analysis import analyze

    s = write_run(tmp_path_factory.mktemp("rep") / "run", ranks=4, steps=60, seed=1)
    return s, analyze(ailens.load_run(s.path))


def _rows(a, ranks=None):
    from ailens._whatif import whatif

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
    from ailens._analysis import analyze

    a = analyze(ailens.load_run(s.path))
    assert a.table.n_phases >= 2
    text = format_report(a, _rows(a))
    for p in a.table.phases:
        assert f"\n{p.id} " in text


def test_short_run_reports_without_crashing(tmp_path):
    s = write_run(tmp_path / "run", ranks=2, steps=3)
    from ailens._analysis import analyze

    a = analyze(ailens.load_run(s.path))
    text = format_report(a, _rows(a))
    assert "Table 2" in text and "Forecast" in text
    json.dumps(report_dict(a, _rows(a)), allow_nan=False)


# --------------------------------------------------------------------------- html


def test_html_page_validates_and_renders(analysis, tmp_path):
    pytest.importorskip("matplotlib")
    from ailens._html import render_html

    _, a = analysis
    page = render_html(a, _rows(a))
    check_html_page(page, min_images=5)
    for text in ("Table 2. Phases", "Table 3.", "Forecast", "What-if", "Skew"):
        assert text in page, text
    for p in a.table.phases:
        assert f"</span>{p.id}</td>" in page
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        pytest.skip("chromium not installed: HTML validated but not rendered")
    html_file, shot = tmp_path / "r.html", tmp_path / "r.png"
    html_file.write_text(page)
    with tempfile.TemporaryDirectory() as profile:
        subprocess.run(
            [
                chromium,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                f"--user-data-dir={profile}",
                f"--screenshot={shot}",
                "--window-size=1280,2400",
                html_file.as_uri(),
            ],
            capture_output=True,
            timeout=90,
            check=False,
        )
    data = shot.read_bytes()
    assert data.startswith(PNG_MAGIC) and len(data) > 50_000  # a rendered page, not a blank one


def test_html_of_a_partial_run_shows_the_warning(tmp_path):
    pytest.importorskip("matplotlib")
    from ailens._analysis import analyze
    from ailens._html import render_html

    s = write_run(tmp_path / "run", ranks=2, steps=60, kill_rank=1, kill_step=40)
    a = analyze(ailens.load_run(s.path))
    page = render_html(a, _rows(a))
    check_html_page(page, min_images=3)
    assert 'class="warn"' in page and "rank 1" in page


def test_html_escapes_run_metadata(tmp_path):
    pytest.importorskip("matplotlib")
    from ailens._analysis import analyze
    from ailens._html import render_html

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
    from ailens._analysis import analyze
    from ailens._html import render_html

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
    from ailens._analysis import analyze

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
