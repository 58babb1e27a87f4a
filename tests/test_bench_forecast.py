"""benchmarks/bench_forecast.py corpus --mlperf-dir: every finished MLPerf log of a folder's
index.json replayed as the curated corpus logs are (real logs from the curated corpus); --logs:
every finished training log of a folder, any format (the real public sample logs)."""

from __future__ import annotations

import gzip
import json
import shutil
import sys
from pathlib import Path

import pytest

import ailens

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))

import bench_forecast  # noqa: E402

MLPERF = REPO / "benchmarks" / "forecast_corpus" / "mlperf"


def test_a_development_folder_is_replayed_log_by_log_like_the_curated_corpus(tmp_path, capsys):
    curated = {x["file"]: x for x in json.loads((MLPERF / "index.json").read_text())}
    files = [
        "v3.0/ASUSTeK/ESC4000-E11-4xA100-PCIE-80GB/rnnt/result_0.txt.gz",
        "v1.1/Azure/nd96amsr_a100_v4_n16_ngc21.09_pytorch/rnnt/result_0.txt.gz",
    ]
    index = []
    for f in files:
        (tmp_path / f).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(MLPERF / f, tmp_path / f)
        x = curated[f]
        index.append({k: x[k] for k in ("file", "system", "benchmark")})
    # The first log cut before its run_stop: a run that did not finish is left out, said so.
    unfinished = "v0.6/unfinished/system_n2/rnnt/result_0.txt.gz"
    lines = gzip.decompress((MLPERF / files[0]).read_bytes()).decode().splitlines()
    cut = [line for line in lines if '"run_stop"' not in line]
    (tmp_path / unfinished).parent.mkdir(parents=True)
    (tmp_path / unfinished).write_bytes(gzip.compress("\n".join(cut).encode()))
    index.append({"file": unfinished, "system": "system_n2", "benchmark": "rnnt"})
    (tmp_path / "index.json").write_text(json.dumps(index))

    rows = bench_forecast.mlperf_dir_rows(tmp_path)

    assert [r["name"] for r in rows] == ["mlperf/" + f.removesuffix(".txt.gz") for f in files]
    assert f"skipped {unfinished}" in capsys.readouterr().err
    # Each row is the one the curated corpus makes of the same log, its node count read from
    # the system's name as the curation reads it.
    for row, f in zip(rows, files, strict=True):
        x = curated[f]
        assert row == bench_forecast._mlperf_row(
            MLPERF / f, f, x["benchmark"], x["nodes_from_name"]
        )
        assert row["family"] == "rnnt" and row["actual_total_s"] > 0
    assert [r["nodes"] for r in rows] == [1, 16]


def test_the_sample_logs_of_every_format_are_replayed_and_scored_apart(tmp_path, capsys):
    logs = Path(__file__).resolve().parent / "data" / "logs"
    for rel in (
        "llamafactory/trainer_log.jsonl",  # finished, a line every 10 steps
        "nanogpt/train.log",  # its total unknown: left out, said so
        "llamafactory/README.md",  # READMEs are not logs
    ):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(logs / rel, tmp_path / rel)

    rows = bench_forecast.log_rows(tmp_path)

    (row,) = rows
    assert row["name"] == "logs/llamafactory/trainer_log.jsonl"
    assert (row["set"], row["family"]) == ("logs", "llamafactory")
    assert "skipped nanogpt/train.log" in capsys.readouterr().err
    tl = ailens.read_timeline(tmp_path / "llamafactory" / "trainer_log.jsonl")
    r = ailens.forecast_timeline(tl)
    for pct in ("5", "10", "20", "50"):
        # The forecast at the step of that fraction: the one made at the log's last line then.
        p = r.at_fraction(int(pct) / 100)
        assert row["error_pct"]["ailens"][pct] == pytest.approx(
            100 * (p.predicted_total_s / r.actual_total_s - 1)
        )
        assert row["covered"][pct] is True
