"""What ``import ailens`` (through an adapter) costs a training script's start-up: the median
wall time of the import in fresh interpreters that imported the framework first, as a job
does (issue 33: a short job pays it on every rank; the k-means job's ratio is mostly this).

    .venv/bin/python benchmarks/overhead/_import_cost.py [--runs 15]
        [--module ailens.integrations.mpi]
                                                         [--before "import numpy, mpi4py.MPI"]

Prints one ``IMPORT {json}`` line: the median and the fastest of ``--runs`` imports (ms), and
the modules the import loaded beyond what ``--before`` had loaded (``-X importtime`` says
what each costs).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import _harness as harness  # noqa: E402

_PROBE = """
import sys, time
{before}
had = set(sys.modules)
t = time.perf_counter()
import {module}
ms = (time.perf_counter() - t) * 1e3
print(ms, len(set(sys.modules) - had))
"""


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=15)
    p.add_argument("--module", default="ailens.integrations.mpi")
    p.add_argument("--before", default="import numpy, mpi4py.MPI", help="the framework's imports")
    args = p.parse_args()
    code = _PROBE.format(before=args.before, module=args.module)
    harness.compile_bytecode()  # the package as installed, its bytecode written
    times, modules = [], 0
    for _ in range(args.runs):
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             check=True)  # fmt: skip
        ms, modules = out.stdout.split()
        times.append(float(ms))
    doc = {"module": args.module, "before": args.before, "runs": args.runs,
           "median_ms": round(statistics.median(times), 2), "min_ms": round(min(times), 2),
           "modules_loaded": int(modules)}  # fmt: skip
    print("IMPORT " + json.dumps(doc))


if __name__ == "__main__":
    main()
