"""The `ailens` command end to end: `python -m ailens ...` in a subprocess on real run
directories (synthetic ones written through the trace writer, and one from real MPI ranks)."""

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
from conftest import REPO, mpiexec, run_ranks
from synthetic import write_run

import ailens
from ailens.phases import assign, magnitude, pas2p_assign, phase_table, simo

TIMEOUT = 120


def cli(*args, env: dict | None = None, code: str | None = None) -> subprocess.CompletedProcess:
    """Run ``python -m ailens ARGS`` (or ``python -c CODE ARGS``) with a hard timeout."""
    cmd = (
        [sys.executable, "-c", code, *map(str, args)]
        if code
        else [sys.executable, "-m", "ailens", *map(str, args)]
    )
    return subprocess.run(
        cmd,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        cwd=REPO,
        env={**os.environ, **(env or {})},
    )


def assert_one_line_error(out: subprocess.CompletedProcess, *needles: str) -> None:
    assert out.returncode == 2, (out.returncode, out.stdout, out.stderr)
    assert "Traceback" not in out.stderr and "Traceback" not in out.stdout
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    assert lines[0].startswith("ailens: error: "), lines[0]
    for n in needles:
        assert n in lines[0], (n, lines[0])


@pytest.fixture(scope="module")
def syn(tmp_path_factory):
    return write_run(tmp_path_factory.mktemp("cli") / "run", ranks=4, steps=60, seed=3)


def expected_table(s, tolerance=1, min_share=0.01):
    """The phase table ailens.phases gives on the synthetic ground truth."""
    sv = s.simo()
    ids = assign(sv, tolerance, key=s.op.astype(np.int64))
    comm, compute = s.comm_compute_s()
    return ids, phase_table(
        ids, comm, compute, op=s.op, simo=sv, op_names=s.op_names, min_share=min_share
    )


# --------------------------------------------------------------------------- basics


def test_version_and_help():
    out = cli("--version")
    assert out.returncode == 0 and out.stdout.strip() == f"ailens {ailens.__version__}"
    out = cli("--help")
    assert out.returncode == 0
    for cmd in ("report", "predict", "whatif", "export", "calibrate"):
        assert cmd in out.stdout
    for cmd in ("report", "predict", "whatif", "export"):
        out = cli(cmd, "--help")
        assert out.returncode == 0 and "RUN_DIR" in out.stdout, cmd
    assert "--ranks-per-node" in cli("whatif", "--help").stdout
    assert "--html" in cli("report", "--help").stdout


def test_no_command_prints_help_and_exits_2():
    out = cli()
    assert out.returncode == 2 and "report" in out.stdout


# --------------------------------------------------------------------------- report


def test_report_text_has_tables_and_every_phase(syn):
    out = cli("report", syn.path)
    assert out.returncode == 0, out.stderr
    text = out.stdout
    for heading in (
        "Table 2",
        "Table 3",
        "Previous phases (PAS2P)",
        "Current phases (SIMO)",
        "Top",
        "Skew across ranks",
        "Forecast",
        "What-if",
    ):
        assert heading in text, heading
    assert "Counter: instructions" in text
    ids, table = expected_table(syn)
    t2 = text.split("Table 2", 1)[1].split("Table 3", 1)[0]
    rows = {line.split()[0] for line in t2.splitlines() if line.strip()}
    for p in table.phases:
        assert str(p.id) in rows, (p.id, t2)
    assert f"{table.n_phases}" in text.split("Table 3", 1)[1].split("\n\n")[0]
    assert "WARNING" not in text


def test_report_json_matches_phases_on_the_same_data(syn):
    out = cli("report", syn.path, "--json")
    assert out.returncode == 0, out.stderr
    d = json.loads(out.stdout)
    for key in (
        "phases",
        "comm_pct",
        "compute_pct",
        "counter",
        "ranks",
        "forecast",
        "whatif",
        "table3",
        "skew",
        "warnings",
    ):
        assert key in d, key
    assert d["ranks"] == 4 and d["counter"] == "instructions" and d["warnings"] == []
    assert d["n_ticks"] == syn.n_ticks
    ids, table = expected_table(syn)
    got = {p["id"]: p for p in d["phases"]}
    assert sorted(got) == [p.id for p in table.phases]
    for p in table.phases:
        g = got[p.id]
        assert g["weight"] == p.weight and g["simo"] == p.simo and g["op"] == p.op
        assert g["time_per_occurrence_s"] == pytest.approx(
            p.time_per_occurrence_s, rel=1e-6, abs=1e-9
        )
    assert d["comm_pct"] == pytest.approx(table.comm_pct, abs=1e-6)
    assert d["compute_pct"] == pytest.approx(table.compute_pct, abs=1e-6)
    assert d["comm_pct"] + d["compute_pct"] == pytest.approx(100)
    prev = int(pas2p_assign(syn.op, syn.nbytes, magnitude(syn.work)).max())
    assert d["table3"]["previous_phases"] == prev
    assert d["table3"]["current_phases"] == table.n_phases < prev
    assert d["table3"]["processes"] == 4
    assert [r["ranks"] for r in d["whatif"]] == [1, 2, 4, 8, 16]
    assert {s["slowest_rank"] for s in d["skew"]} <= set(range(4))


def test_report_options_change_the_analysis(syn):
    d0 = json.loads(
        cli("report", syn.path, "--json", "--tolerance", "0", "--min-share", "0").stdout
    )
    ids, table = expected_table(syn, tolerance=0, min_share=0.0)
    assert len(d0["phases"]) == table.n_phases == d0["table3"]["current_phases"]
    d = json.loads(cli("report", syn.path, "--json", "--ranks", "2,32", "--mode", "strong").stdout)
    assert [r["ranks"] for r in d["whatif"]] == [2, 32] and d["whatif_mode"] == "strong"


def test_report_names_the_cpu_ns_fallback(tmp_path):
    reason = "perf_event_open: kernel.perf_event_paranoid=4 forbids hardware counters"
    s = write_run(tmp_path / "run", steps=30, counter="cpu-ns", counter_fallback=reason)
    out = cli("report", s.path)
    assert out.returncode == 0, out.stderr
    assert "Counter: cpu-ns" in out.stdout and reason in out.stdout
    d = json.loads(cli("report", s.path, "--json").stdout)
    assert d["counter"] == "cpu-ns" and d["counter_fallback"] == reason


def test_killed_rank_still_reports_with_a_warning(tmp_path):
    s = write_run(tmp_path / "run", ranks=2, steps=80, kill_rank=1, kill_step=50)
    out = cli("report", s.path)
    assert out.returncode == 0, out.stderr
    assert "Traceback" not in out.stderr
    warn = [line for line in out.stdout.splitlines() if line.startswith("WARNING")]
    assert warn and any("rank 1" in w and "rank-00001.ailens" in w for w in warn), out.stdout
    d = json.loads(cli("report", s.path, "--json").stdout)
    assert d["complete"] is False and d["warnings"]
    assert d["n_ticks"] == s.ticks_written[1] < s.n_ticks


def test_report_writes_the_signature_record_once_when_allowed(tmp_path):
    """The run never writes signature.json; report does, once, unless the run set
    signature_record=False, --no-record is given, or the run is partial."""
    s = write_run(tmp_path / "run", ranks=2, steps=40)
    record = s.path / "signature.json"
    assert not record.exists()
    out = cli("report", s.path, "--no-record")
    assert out.returncode == 0 and not record.exists(), out.stderr
    out = cli("report", s.path, "--json")
    assert out.returncode == 0 and json.loads(out.stdout)["ranks"] == 2, out.stderr
    assert f"wrote {record}" in out.stderr
    rec = json.loads(record.read_text())
    assert rec["format"] == "ailens-signature" and rec["layout"]["ranks"] == 2
    assert rec["analytic"]["weak"] and rec["analytic"]["strong"]
    again = cli("report", s.path)
    assert again.returncode == 0 and "signature.json" not in again.stderr  # kept, not rebuilt
    off = write_run(tmp_path / "off", ranks=2, steps=40, config={"signature_record": False})
    out = cli("report", off.path)
    assert out.returncode == 0 and "signature_record=False" in out.stderr, out.stderr
    assert not (off.path / "signature.json").exists()
    killed = write_run(tmp_path / "killed", ranks=2, steps=40, kill_rank=1, kill_step=20)
    out = cli("report", killed.path)
    assert out.returncode == 0 and "partial" in out.stderr, out.stderr
    assert not (killed.path / "signature.json").exists()


def test_missing_rank_file_reports_with_a_warning(tmp_path):
    s = write_run(tmp_path / "run", ranks=3, steps=30)
    s.files[2].unlink()
    out = cli("report", s.path, "--json")
    assert out.returncode == 0, out.stderr
    d = json.loads(out.stdout)
    assert d["missing_ranks"] == [2] and any(
        "rank 2" in w and "missing" in w for w in d["warnings"]
    )


# --------------------------------------------------------------------------- html


def test_report_html_is_self_contained(syn, tmp_path):
    from test_report import check_html_page

    page = tmp_path / "report.html"
    out = cli("report", syn.path, "--html", page)
    assert out.returncode == 0, out.stderr
    assert "Table 2" in out.stdout and str(page) in out.stderr
    check_html_page(page.read_text(), min_images=5)


def test_html_without_matplotlib_says_how_to_install(syn, tmp_path):
    # matplotlib made unimportable in the child only: the rest of the report path is real.
    code = (
        "import sys; sys.modules['matplotlib'] = None; "
        "from ailens.cli import main; raise SystemExit(main())"
    )
    out = cli("report", syn.path, "--html", tmp_path / "x.html", code=code)
    assert_one_line_error(out, "pip install ailens[plot]")
    assert not (tmp_path / "x.html").exists()


# --------------------------------------------------------------------------- predict / whatif


def test_predict_json(syn):
    out = cli("predict", syn.path, "--json")
    assert out.returncode == 0, out.stderr
    d = json.loads(out.stdout)
    for key in (
        "predicted_total_s",
        "interval_s",
        "signature_step",
        "signature_fraction",
        "actual_total_s",
    ):
        assert key in d, key
    assert d["predicted_total_s"] > 0
    lo, hi = d["interval_s"]
    assert lo <= d["predicted_total_s"] <= hi
    assert d["actual_total_s"] == pytest.approx(syn.total_s, rel=0.05)
    text = cli("predict", syn.path)
    assert text.returncode == 0 and "Predicted total time" in text.stdout


def test_whatif_json_and_text(syn):
    out = cli("whatif", syn.path, "--ranks", "1,2,4,8,16", "--json")
    assert out.returncode == 0, out.stderr
    rows = json.loads(out.stdout)
    assert [r["ranks"] for r in rows] == [1, 2, 4, 8, 16]
    for r in rows:
        for key in ("ranks", "step_time_s", "total_time_s", "speedup", "efficiency", "comm_pct"):
            assert key in r, key
        assert r["step_time_s"] > 0 and r["total_time_s"] > 0
    strong = json.loads(
        cli(
            "whatif",
            syn.path,
            "--ranks",
            "2,8",
            "--mode",
            "strong",
            "--ranks-per-node",
            "2",
            "--json",
        ).stdout
    )
    assert [r["ranks"] for r in strong] == [2, 8]
    text = cli("whatif", syn.path, "--ranks", "2,4")
    assert text.returncode == 0 and "Efficiency" in text.stdout and "4*" in text.stdout


@pytest.mark.parametrize("bad", ["x", "0,2", "2,-1", ""])
def test_whatif_rejects_bad_rank_lists(syn, bad):
    out = cli("whatif", syn.path, "--ranks", bad)
    assert out.returncode == 2 and "Traceback" not in out.stderr and "--ranks" in out.stderr


# --------------------------------------------------------------------------- errors


def test_missing_run_directory(tmp_path):
    for cmd in ("report", "predict", "whatif", "export"):
        assert_one_line_error(
            cli(cmd, tmp_path / "nope"), str(tmp_path / "nope"), "no such run directory"
        )


def test_empty_run_directory(tmp_path):
    assert_one_line_error(cli("report", tmp_path), str(tmp_path), "no rank-*.ailens")


def test_mismatched_run_ids(tmp_path):
    a = write_run(tmp_path / "a", ranks=2, steps=10, run_id="aaaa")
    b = write_run(tmp_path / "b", ranks=2, steps=10, run_id="bbbb")
    shutil.copy(b.files[1], a.files[1])
    assert_one_line_error(cli("report", a.path), "rank-00001.ailens", "run_id", "different runs")


def test_corrupted_header(tmp_path):
    s = write_run(tmp_path / "run", ranks=2, steps=10)
    data = bytearray(s.files[1].read_bytes())
    data[20] ^= 0xFF  # inside the metadata JSON: its checksum no longer matches
    s.files[1].write_bytes(bytes(data))
    assert_one_line_error(cli("report", s.path), "rank-00001.ailens", "checksum")


def test_rank_file_truncated_inside_its_header(tmp_path):
    """A rank killed before its header reached the disk recorded nothing: the run reports
    without it and says so; with no readable rank at all it is an error naming the file."""
    s = write_run(tmp_path / "run", ranks=2, steps=10)
    s.files[0].write_bytes(s.files[0].read_bytes()[:30])
    out = cli("report", s.path)
    assert out.returncode == 0, out.stderr
    warn = [line for line in out.stdout.splitlines() if line.startswith("WARNING")]
    assert any("rank-00000.ailens" in w for w in warn), out.stdout
    s.files[1].write_bytes(s.files[1].read_bytes()[:30])
    assert_one_line_error(cli("report", s.path, "--json"), str(s.path), "rank-0000")


def test_not_a_trace_file(tmp_path):
    s = write_run(tmp_path / "run", ranks=2, steps=10)
    s.files[1].write_text("hello\n" * 10)
    assert_one_line_error(cli("export", s.path), "rank-00001.ailens", "not an ailens trace")


def test_run_without_collectives(tmp_path):
    s = write_run(tmp_path / "run", ranks=2, steps=10, kill_rank=0, kill_step=0)
    s.files[1].unlink()
    assert_one_line_error(cli("report", s.path), str(s.path), "no collective and no step")


def test_unwritable_output(syn, tmp_path):
    out = cli("export", syn.path, "-o", tmp_path / "no" / "such" / "dir" / "t.json")
    assert_one_line_error(out, str(tmp_path / "no" / "such" / "dir"))


def test_calibration_file_that_is_not_json(syn, tmp_path):
    bad = tmp_path / "cal.json"
    bad.write_text("{nope")
    assert_one_line_error(
        cli("whatif", syn.path, "--calibration", bad), str(bad), "not a calibration"
    )


# --------------------------------------------------------------------------- real ranks


@pytest.mark.parallel
def test_report_and_export_of_a_real_mpi_run(tmp_path):
    run_dir = tmp_path / "run"
    out = run_ranks(
        [
            mpiexec(),
            "-n",
            "2",
            sys.executable,
            str(REPO / "tests/parallel/plain_lens_mpi.py"),
            str(run_dir),
            "30",
        ],
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    # Every rank finished and wrote its table.
    for rank in (0, 1):
        assert json.loads((run_dir / f"table-{rank}.json").read_text())["rank"] == rank
    assert all(t.complete for t in ailens.load_run(run_dir).ranks)
    rep = cli("report", run_dir, "--json")
    assert rep.returncode == 0, rep.stderr
    d = json.loads(rep.stdout)
    assert (
        d["ranks"] == 2
        and d["n_ticks"] == 60
        and d["framework"] == "mpi4py-plain"
        and d["complete"]
    )
    assert sum(p["weight"] for p in d["phases"]) <= 60 and d["phases"]
    run = ailens.load_run(run_dir)
    work = np.stack([r.events["work"] for r in run.ranks], axis=1)
    ids = assign(simo(work), 1, key=run.ranks[0].events["op"].astype(np.int64))
    assert d["table3"]["current_phases"] == int(ids.max())
    trace = tmp_path / "t.json"
    exp = cli("export", run_dir, "-o", trace)
    assert exp.returncode == 0, exp.stderr
    events = json.loads(trace.read_text())["traceEvents"]
    for rank in (0, 1):
        colls = [e for e in events if e["pid"] == rank and e.get("cat") == "collective"]
        assert len(colls) == 60, rank
