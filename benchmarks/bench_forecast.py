"""Forecast accuracy: ailens against the progress-bar ETA and Composer's RuntimeEstimator, on
a corpus of real runs replayed deterministically, and live on the examples.

    .venv/bin/python benchmarks/bench_forecast.py corpus --json OUT.json   # replay the corpus
    .venv/bin/python benchmarks/bench_forecast.py corpus --mlperf-dir ../shared/mlperf-dev
                                                     # every finished log of a development set
    .venv/bin/python benchmarks/bench_forecast.py corpus --no-mlperf --no-synthetic \
        --logs tests/data/logs                       # the public sample logs of every format
    .venv/bin/python benchmarks/bench_forecast.py record                   # re-record (quiet!)
    .venv/bin/python benchmarks/bench_forecast.py live --examples kmeans   # end to end, now
    .venv/bin/python benchmarks/bench_forecast.py live --public            # others' scripts

``corpus`` replays, each tagged with its ``source`` (``mlperf``, ``recorded`` or ``synthetic``)
and its ``set`` (the source, with ``recorded-loaded`` for recordings made on a loaded machine):

- ``mlperf``: the MLPerf Training logs under ``benchmarks/forecast_corpus/mlperf/`` (real
  large-scale runs; see its README for provenance and the selection rule), through the public
  timeline API (``ailens.read_timeline`` -> ``ailens.forecast_timeline``), from ``run_start``
  to ``run_stop``, with the run's real number of steps given (MLPerf runs stop at a target
  accuracy: the forecaster gets what a progress bar is given);
- ``recorded``: runs of the examples recorded by ``record`` on a quiet machine (1-minute load
  average <= 0.5 before the run, not forced), through the same code as ``ailens predict``
  (``analyze`` -> ``OnlineAnalysis``);
- ``recorded-loaded`` (source ``recorded``): recordings made while other work shared the machine
  (every run recorded before the load check existed): a robustness set, reported apart, never in
  the headline;
- ``synthetic``: runs with known answers (a real Lens driven by a fake clock: steady, noisy,
  evaluation marked or not, checkpoints, changes of speed, one-off pauses, drift).

At 1, 5, 10, 20 and 50 % of the steps it takes the forecast a user would have read at that step,
the progress-bar ETA (elapsed + remaining steps x mean step time so far, as tqdm and Keras'
progbar compute it) and Composer's RuntimeEstimator (``ailens.model.baselines``), all scored against
the run's actual total. The headline (``summary``) is over the real runs (``mlperf`` and
``recorded`` sets); ``synthetic`` and ``recorded-loaded`` are reported apart. The tables group by
set (``summary_by_source``) and by set and model family.

Goals (issue 30): median |error| <= 2 / 1 / 0.5 / 0.25 % at 5 / 10 / 20 / 50 %; closer than
the better baseline on >= 80 % of (run, fraction) points and worse by > 0.25 points on <= 5 %;
95 % interval coverage 90-98 % at every fraction; a signature on >= 95 % of runs at a median
<= 15 % of the steps (<= 10 % on runs of >= 200 steps) with median |error| <= 1.5 % there. Each
run's row holds the signature's step fraction and its error beside the progress bar's and
Composer's at the same step (``signature_naive_error_pct``, ``signature_composer_error_pct``);
the summaries their medians (``signature_median_abs_error_naive_pct``,
``signature_median_abs_error_composer_pct``) and the signature's median fraction on runs of
>= 200 steps. Each row also says whether the signature's interval held the actual end
(``signature_covered``) and what held the signature at the evaluation point before it
(``signature_waited_for``, as the rule said it; ``signature_held_by``, by kind); the
summaries give ``signature_coverage_pct`` and count the kinds (``signature_held_by``, and
``signature_held_by_runs_ge_200_steps``). ``signature_sweep.py`` sweeps the rule's constants.

Its rooms: ``forecast_replay.py`` scores one run, ``forecast_summary.py`` summarises and prints
the scores, ``forecast_synthetic.py`` makes the synthetic runs, ``forecast_recording.py`` holds
the recorded cases and ``record``, ``forecast_public.py`` the public scripts ``live --public``
runs (issue 30's live goal: each script with only the one ailens line, scored the same way,
with its epoch-level forecast where nothing says the length, and the goal per script).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import _harness as harness  # noqa: E402
from curate_mlperf import nodes  # noqa: E402
from forecast_public import PUBLIC_SCRIPTS, goal_line, run_public, score_public  # noqa: E402
from forecast_recording import CASES, QUIET_LOAD, record, recording_set  # noqa: E402
from forecast_replay import replay, replay_log, replay_mlperf  # noqa: E402
from forecast_summary import group_table, summarise, summary_lines, table  # noqa: E402
from forecast_synthetic import SYNTHETIC, synthetic  # noqa: E402

import ailens  # noqa: E402

CORPUS = REPO / "benchmarks" / "forecast_corpus"
MLPERF = CORPUS / "mlperf"
# The headline figures: real runs on quiet machines (synthetic runs and loaded recordings are
# reported apart).
HEADLINE_SETS = ("mlperf", "recorded")


# --------------------------------------------------------------------------- corpus


def corpus(args) -> int:
    if args.no_mlperf:
        rows = []
    elif args.mlperf_dir:
        rows = mlperf_dir_rows(args.mlperf_dir)
    else:
        rows = mlperf_rows()
    if args.logs:
        rows += log_rows(args.logs)
    rows += recorded_rows(args.dir)
    if not args.no_synthetic:
        rows += synthetic_rows(args.seeds)
    report_corpus(rows, args.json)
    return 0


def mlperf_rows() -> list[dict]:
    """A row per MLPerf log of ``forecast_corpus/mlperf/index.json`` (none without it)."""
    rows = []
    index = MLPERF / "index.json"
    if not index.is_file():
        return rows
    for x in json.loads(index.read_text()):
        row = _mlperf_row(MLPERF / x["file"], x["file"], x["benchmark"], x.get("nodes_from_name"))
        if row is not None:
            rows.append(row)
    return rows


def mlperf_dir_rows(root: Path) -> list[dict]:
    """A row per finished MLPerf log of a folder with an ``index.json`` (``file``,
    ``system``, ``benchmark`` per log, as ``../shared/mlperf-dev`` has): every log of a
    development set, not the curated selection (``--mlperf-dir``: do the curated set's
    figures hold on the whole set?)."""
    rows = []
    for x in json.loads((root / "index.json").read_text()):
        row = _mlperf_row(root / x["file"], x["file"], x["benchmark"], nodes(x["system"]))
        if row is not None:
            rows.append(row)
    return rows


def _mlperf_row(path: Path, name: str, benchmark: str, nodes_from_name) -> dict | None:
    """One MLPerf log replayed and tagged; None (said on stderr) for one with no finished run."""
    row = _replayed(name, replay_mlperf, path)
    if row is None:
        return None
    return {
        "name": "mlperf/" + name.removesuffix(".gz").removesuffix(".txt"),
        "kind": "mlperf",
        "source": "mlperf",
        "set": "mlperf",
        "family": _FAMILY.get(benchmark, benchmark),
        "structure": ["eval"] if row["evaluations"] else [],
        "nodes": nodes_from_name,
        **row,
    }


def log_rows(root: Path) -> list[dict]:
    """A row per finished training log under ``root`` (any format ``ailens forecast`` reads:
    ``tests/data/logs`` holds a real public log of each, with its source; READMEs skipped),
    its family the format: ``set`` "logs", reported apart from the headline."""
    rows = []
    for path in sorted(p for p in root.rglob("*") if p.is_file() and p.suffix != ".md"):
        name = str(path.relative_to(root))
        row = _replayed(name, replay_log, path)
        if row is None:
            continue
        rows.append(
            {
                "name": "logs/" + name,
                "kind": "logs",
                "source": "logs",
                "set": "logs",
                "family": row["format"],
                "structure": ["eval"] if row["evaluations"] else [],
                **row,
            }
        )
    return rows


def _replayed(name: str, replay_fn, target: Path, errors=(ValueError, ailens.LogError)):
    """``replay_fn(target)``'s row, or None, said on stderr, for one it cannot score."""
    try:
        return replay_fn(target)
    except errors as e:
        print(f"skipped {name}: {e}", file=sys.stderr)
        return None


def recorded_rows(corpus_dir: Path) -> list[dict]:
    """A row per recorded run (a folder with a ``case.json``) in ``corpus_dir``."""
    rows = []
    for d in sorted(p for p in corpus_dir.iterdir() if (p / "case.json").is_file()):
        case = json.loads((d / "case.json").read_text())
        row = _replayed(d.name, replay, d, errors=(ValueError, ailens.TraceError))
        if row is None:
            continue
        rows.append(
            {
                "name": d.name,
                "kind": _load_group(case),
                "source": "recorded",
                "set": recording_set(case),
                "family": d.name.split("-")[0],
                "structure": case["structure"],
                "load": [case.get("load_before"), case.get("load_after")],
                **row,
            }
        )
    return rows


def synthetic_rows(seeds: int) -> list[dict]:
    """A row per synthetic run (``SYNTHETIC``, ``seeds`` seeds each), written and replayed in
    a temporary folder."""
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in SYNTHETIC:
            for seed in range(seeds):
                run_dir = Path(tmp) / f"{name}-{seed}"
                structure = synthetic(name, run_dir, seed)
                row = replay(run_dir)
                rows.append(
                    {
                        "name": f"synthetic/{name}/{seed}",
                        "kind": "synthetic",
                        "source": "synthetic",
                        "set": "synthetic",
                        "family": "synthetic",
                        "structure": structure,
                        **row,
                    }
                )
    return rows


def report_corpus(rows: list[dict], json_path) -> None:
    """Print the corpus' tables and summaries; write them to ``json_path`` when given."""
    headline = [r for r in rows if r["set"] in HEADLINE_SETS]
    summary = summarise(headline)
    groups = {k: summarise([r for r in rows if r["kind"] == k]) for k in _kinds(rows)}
    # By set: the sources, with the recordings made on a loaded machine apart.
    by_source = {k: summarise([r for r in rows if r["set"] == k]) for k in _values(rows, "set")}
    by_family = {
        f"{src}/{fam}": summarise([r for r in rows if r["set"] == src and r["family"] == fam])
        for src, fam in sorted({(r["set"], r["family"]) for r in rows})
    }
    print(table(rows, summary))
    print("\n" + group_table("source", by_source))
    print("\n" + group_table("source/family", by_family))
    for src, sm in by_source.items():
        print(f"\n-- {src} ({sm['runs']} runs)\n" + "\n".join(summary_lines(sm)))
    print(f"\n-- headline: real runs, {' + '.join(HEADLINE_SETS)} ({summary['runs']} runs)")
    print("\n".join(summary_lines(summary)))
    if json_path:
        doc = {
            "runs": rows,
            "summary": summary,
            "summary_by_kind": groups,
            "summary_by_source": by_source,
            "summary_by_family": by_family,
        }
        harness.write_json(json_path, doc)


# MLPerf benchmark names -> model family (v0.6 Google logs call Mask R-CNN "mask").
_FAMILY = {"mask": "maskrcnn", "dlrm_dcnv2": "dlrm"}


def _load_group(case: dict) -> str:
    """Recorded runs by the machine's 1-minute load average around them: "busy" when it
    exceeded the cores (more runnable threads than cores: other jobs took time)."""
    loads = [
        float(str(x).split("/")[0]) for x in (case.get("load_before"), case.get("load_after")) if x
    ]
    busy = bool(loads) and max(loads) > (case.get("cores") or 2)
    return "recorded, busy machine" if busy else "recorded"


def _kinds(rows: list[dict]) -> list[str]:
    return sorted({r["kind"] for r in rows})


def _values(rows: list[dict], key: str) -> list[str]:
    return sorted({r[key] for r in rows})


# --------------------------------------------------------------------------- live


def live(args) -> int:
    """Run examples end to end now and score their forecasts (the machine's load included)."""
    if args.public:
        return live_public(args)
    rows = []
    for name in args.examples.split(","):
        script, ranks, flags, structure, _ = CASES[name]
        with tempfile.TemporaryDirectory() as tmp:
            run_dir = Path(tmp) / "run"
            before = harness.loadavg_text()
            cmd = [sys.executable, str(REPO / script), "--ranks", str(ranks),
                   "--run-dir", str(run_dir), "--progress-every", "0", *flags]  # fmt: skip
            code = harness.launch(cmd, None, args.timeout)[0]
            if code:
                print(f"{name}: exit code {code}", file=sys.stderr)
                continue
            rows.append(
                {
                    "name": name,
                    "kind": "live",
                    "structure": structure,
                    "load": [before, harness.loadavg_text()],
                    **replay(run_dir),
                }
            )
    summary = summarise(rows)
    print(table(rows, summary))
    print("\n".join(summary_lines(summary)))
    print("load average before/after: " + ", ".join(f"{r['name']} {r['load']}" for r in rows))
    if args.json:
        harness.write_json(args.json, {"runs": rows, "summary": summary})
    return 0


def live_public(args) -> int:
    """Run the public scripts (``forecast_public.PUBLIC_SCRIPTS``) with only the one ailens
    line and score them as ``live`` scores the examples, with issue 30's live goal per script."""
    names = list(PUBLIC_SCRIPTS) if args.public == "all" else args.public.split(",")
    unknown = [n for n in names if n not in PUBLIC_SCRIPTS]
    if unknown:
        print(f"bench_forecast live --public: no script {', '.join(unknown)}; the scripts: "
              f"all, {', '.join(PUBLIC_SCRIPTS)}", file=sys.stderr)  # fmt: skip
        return 2
    rows = []
    for name in names:
        missing = harness.missing_module(list(PUBLIC_SCRIPTS[name].needs))
        if missing:
            print(f"{name}: skipped, {missing}", file=sys.stderr)
            continue
        with tempfile.TemporaryDirectory() as tmp:
            run_dir = Path(tmp) / "run"
            before = harness.loadavg_text()
            try:
                code, out, wall = run_public(name, run_dir, smoke=args.smoke, timeout=args.timeout)
            except subprocess.TimeoutExpired as e:
                print(f"{name}: over --timeout {args.timeout:.0f} s; not scored", file=sys.stderr)
                print(str(e.output or "")[-3000:], file=sys.stderr)
                continue
            if code:
                print(f"{name}: exit code {code}\n{out[-3000:]}", file=sys.stderr)
                continue
            row = {"name": name, "kind": "live-public", "structure": [], "wall_s": round(wall, 1)}
            try:
                row |= score_public(run_dir)
            except (ValueError, ailens.TraceError) as e:
                print(f"{name}: not scored: {e}", file=sys.stderr)
                continue
            rows.append(row | {"load": [before, harness.loadavg_text()]})
    summary = summarise(rows)
    print(table(rows, summary))
    print("\n".join(summary_lines(summary)))
    print("\n".join(goal_line(r["name"], r) for r in rows))
    print("load average before/after: " + ", ".join(f"{r['name']} {r['load']}" for r in rows))
    held = sum(r["goal"]["holds"] for r in rows)
    unscored = len(names) - len(rows)
    print(
        f"live goal (issue 30): holds on {held} of {len(names)} public scripts"
        + (f" ({unscored} not run or not scored: not reached)" if unscored else "")
    )
    if args.json:
        doc = {"runs": rows, "summary": summary, "scripts": names, "goal_holds": held}
        harness.write_json(args.json, doc)
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="mode")
    c = sub.add_parser("corpus", help="replay the stored corpus and the synthetic runs")
    c.add_argument("--dir", type=Path, default=CORPUS)
    c.add_argument("--json", type=Path)
    c.add_argument("--seeds", type=int, default=2, help="seeds per synthetic scenario")
    c.add_argument("--no-synthetic", action="store_true")
    c.add_argument("--no-mlperf", action="store_true", help="leave the MLPerf logs out")
    c.add_argument(
        "--mlperf-dir",
        type=Path,
        help="replay every finished MLPerf log of this folder's index.json (e.g. "
        "../shared/mlperf-dev) instead of the curated corpus logs",
    )
    c.add_argument(
        "--logs",
        type=Path,
        help="also replay every finished training log under this folder, any format ailens "
        "forecast reads (e.g. tests/data/logs: a real public log of each), reported apart",
    )
    r = sub.add_parser("record", help="run the examples and store their traces in the corpus")
    r.add_argument("--dir", type=Path, default=CORPUS)
    r.add_argument("--only", help="comma-separated case names: " + ", ".join(CASES))
    r.add_argument(
        "--max-load",
        type=float,
        default=QUIET_LOAD,
        help=f"refuse to record above this 1-minute load average (default {QUIET_LOAD})",
    )
    r.add_argument(
        "--settle",
        type=float,
        default=300,
        help="seconds to wait between cases for the previous run's load to decay (default 300)",
    )
    r.add_argument(
        "--force", action="store_true", help="record even on a loaded machine (cases marked forced)"
    )
    v = sub.add_parser("live", help="run examples end to end now and score their forecasts")
    v.add_argument("--examples", default="kmeans-2,resnet50-ddp-2,mnist-torch-2")
    v.add_argument(
        "--public",
        nargs="?",
        const="all",
        help="run the public scripts instead, each with only the one ailens line (all, or "
        "comma-separated: " + ", ".join(PUBLIC_SCRIPTS) + ")",
    )
    v.add_argument(
        "--smoke",
        action="store_true",
        help="with --public: a few seconds each (checks the harness; its figures mean nothing)",
    )
    v.add_argument("--json", type=Path)
    v.add_argument("--timeout", type=float, default=1800)
    args = ap.parse_args()
    if args.mode is None:
        ap.print_help()
        return 2
    return {"corpus": corpus, "record": record, "live": live}[args.mode](args)


if __name__ == "__main__":
    raise SystemExit(main())
