"""The recorded runs of the forecast corpus that checkpoint on an announced schedule, replayed
as recorded and with the bytes a checkpoint writes as this release's torch adapter states
them (issue 30: a checkpoint not seen yet was priced at nothing).

    .venv/bin/python benchmarks/forecast_checkpoint_bytes.py [--json OUT.json]

Their traces predate ``checkpoint_bytes``; the adapter learns it after the first optimizer
step from the model's parameters and buffers and the optimizer's state. Here it is that
figure for the script that made them (``benchmarks/device/gpu.py forecast``: AdamW, fp32: the
parameters and two moments, 12 bytes a parameter, from the parameter count the trace
records; the buffers and AdamW's step counters, under 1 % of it, left out). The replay is the
one ``ailens forecast RUN_DIR`` makes, at 5/10/20/50 % of the steps, beside the progress bar.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import ailens  # noqa: E402

CORPUS = REPO / "benchmarks" / "forecast_corpus"
FRACTIONS = (0.05, 0.10, 0.20, 0.50)
ADAMW_BYTES_PER_PARAMETER = 12  # fp32 weights and AdamW's two moments


def _runs() -> list[Path]:
    """Recorded runs whose schedule announces checkpoints, with a parameter count."""
    out = []
    for d in sorted(CORPUS.iterdir()):
        if not (d / "case.json").exists() or "AdamW" not in _script(d):
            continue
        tl = ailens.read_timeline(d)
        if tl.schedule.get("checkpoint_every_steps") and _params(d):
            out.append(d)
    return out


def _script(d: Path) -> str:
    cmd = json.loads((d / "case.json").read_text()).get("command", "")
    script = REPO / cmd.split()[0] if cmd else None
    return script.read_text() if script is not None and script.exists() else ""


def _params(d: Path) -> int | None:
    return ailens.load_run(d).meta.get("run", {}).get("param_count")


def _scores(tl) -> dict:
    fc = ailens.forecast_timeline(tl)
    actual = fc.actual_total_s
    out = {}
    for f in FRACTIONS:
        sf = fc.at_fraction(f)
        lo, hi = sf.interval_s
        out[f"{round(100 * f)}"] = {
            "ailens_pct": 100 * (sf.predicted_total_s / actual - 1),
            "bar_pct": 100 * (sf.progress_bar_total_s / actual - 1),
            "interval_s": [lo, hi],
            "covered": lo <= actual <= hi,
        }
    return {"actual_s": actual, "at": out, "signature_step": fc.signature_step}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", help="write the rows here")
    args = ap.parse_args()
    rows = []
    for d in _runs():
        tl = ailens.read_timeline(d)
        nbytes = ADAMW_BYTES_PER_PARAMETER * _params(d)
        stated = replace(tl, schedule={**tl.schedule, "checkpoint_bytes": nbytes})
        rows.append({"run": d.name, "checkpoint_bytes": nbytes,
                     "as_recorded": _scores(tl), "bytes_stated": _scores(stated)})  # fmt: skip
    for r in rows:
        print(f"{r['run']}: {r['checkpoint_bytes'] / 1e9:.3g} GB a checkpoint")
        for kind in ("as_recorded", "bytes_stated"):
            cells = "  ".join(
                f"{k} %: {v['ailens_pct']:+6.2f} {'in ' if v['covered'] else 'OUT'}"
                f" [{v['interval_s'][0]:.1f}, {v['interval_s'][1]:.1f}] s"
                for k, v in r[kind]["at"].items()
            )
            print(f"  {kind:12s} {cells}   signature at step {r[kind]['signature_step']}")
        bar = "  ".join(f"{k} %: {v['bar_pct']:+6.2f}" for k, v in r["as_recorded"]["at"].items())
        print(f"  {'progress bar':12s} {bar}   (actual {r['as_recorded']['actual_s']:.2f} s)")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
