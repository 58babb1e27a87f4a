"""Fit the packaged platforms (``ailens/predict/platform_data/*.json``) on public collective data.

    python benchmarks/public_platforms.py [--data DIR]   # rewrites ailens/predict/platform_data/

Each is ``ailens calibrate --from-nccl-tests``'s fit (``predict.nccl_fit.fit_platform``) on every
GPU count of one source, starting from the datasheet default of its node: labels a user can give
instead of a datasheet default when the cluster is of the same kind. The benchmark
(``bench_whatif.py --public``) does not use them: its cases fit on some counts and predict
the others.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import public_cases as pc  # noqa: E402

from ailens.predict import DEFAULT_PLATFORMS, fit_platform, platform_to_dict  # noqa: E402

OUT = pc.REPO / "ailens" / "predict" / "platform_data"


def fitted(data: Path) -> dict:
    coll = data / "collectives"
    echo = pc._tables(pc._read(coll / "echo_allreduce_ndv4.csv"), "ndv4", "echo_allreduce_ndv4.csv")
    vt_rows = pc._read(coll / "vtrain_allreduce_lut.csv")
    mib = 1 << 20
    picked = {mib << k for k in range(11)} | {3 * (mib << k) // 2 for k in range(1, 10)}
    out = {}
    specs = (
        ("ndv4-echo", "azure-nd-a100-v4", list(echo.values()),
         "Azure ND A100 v4 as NetX-lab/Echo measured it (nccl-tests all_reduce_perf, 2-16 GPUs)"),
    )  # fmt: skip
    for model, base, label in (
        ("A100", "dgx-a100", "a100-vtrain"),
        ("V100", "dgx1-v100", "dgx1-v100-vtrain"),
    ):
        rows = [r for r in vt_rows if r["gpu_model"] == model]
        tables = list(pc._tables(rows, model, f"vtrain_allreduce_lut.csv {model}", picked).values())
        what = (
            f"{model} node as VIA-Research/vTrain's all-reduce tables measured it (2, 4, 8 GPUs, "
            "1 MiB-1 GiB; machine not named by the source)"
        )
        specs += ((label, base, tables, what),)
    for label, base, tables, what in specs:
        plat = fit_platform(tables, DEFAULT_PLATFORMS[base], name=label)
        out[label] = replace(plat, description=f"{what}; start: {base} datasheet default")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, default=None)
    args = ap.parse_args()
    data = args.data or pc.default_data_dir()
    OUT.mkdir(exist_ok=True)
    for label, plat in fitted(data).items():
        path = OUT / f"{label}.json"
        path.write_text(json.dumps(platform_to_dict(plat), indent=2) + "\n")
        print(f"wrote {path}: {plat.notes[-1] if plat.notes else ''}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
