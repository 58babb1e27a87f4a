"""``ailens probe``: a platform descriptor from short micro-benchmarks, so a target node
can be described without running the job there.

* compute: one worker process (BLAS/OpenMP at 1 thread) running a numpy matrix product for
  ``seconds``: GFLOP/s of one core; then one worker per usable core side by side: the
  node's GFLOP/s (a CPU quota shows here: workers share the quota);
* memory: one worker copying a 64 MiB array: GB/s;
* collectives: when launched with ranks (mpiexec / torchrun / horovodrun), the collective
  alpha/beta of that transport by ``ailens calibrate``'s sweep (small sizes, few
  repetitions).

Workers are subprocesses so their thread settings hold whatever numpy this process loaded.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time

from ..record.node import describe_node

__all__ = ["PROBE_VERSION", "probe", "launched_ranks", "usable_cores", "check_platform"]

PROBE_VERSION = 1
_ONE_THREAD = {k: "1" for k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")}


def usable_cores(node: dict) -> float:
    """Cores this process may use: its CPU affinity, capped by the cgroup CPU quota."""
    cores = float(len(node.get("affinity") or []) or node.get("cores") or 1)
    q = node.get("cpu_quota")
    return min(cores, float(q)) if isinstance(q, (int, float)) and q > 0 else cores


def _worker(kind: str, seconds: float) -> None:
    """Runs in a subprocess: prints the rate of ``kind`` over ``seconds`` of wall time."""
    import numpy as np

    if kind == "matmul":
        n = 192
        a = np.random.default_rng(0).standard_normal((n, n))
        b = a.T.copy()
        once, unit = (lambda: a @ b), 2.0 * n**3 / 1e9  # GFLOP per product
    else:
        src = np.ones(8 << 20)  # 64 MiB of float64
        dst = np.empty_like(src)
        once, unit = (lambda: np.copyto(dst, src)), 2 * src.nbytes / 1e9  # GB read + written
    once()
    done, t0 = 0, time.perf_counter()
    while (t := time.perf_counter() - t0) < seconds:
        once()
        done += 1
    print(json.dumps({"rate": done * unit / t}))


def _rates(kind: str, workers: int, seconds: float) -> list[float]:
    env = {**os.environ, **_ONE_THREAD}
    code = f"from ailens.tools.probe import _worker; _worker({kind!r}, {seconds!r})"
    procs = [
        subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, env=env, text=True)
        for _ in range(workers)
    ]
    out = []
    for p in procs:
        try:
            text, _ = p.communicate(timeout=seconds * 10 + 60)
        except subprocess.TimeoutExpired:
            p.kill()
            p.communicate()
            continue
        if p.returncode == 0 and text.strip():
            out.append(float(json.loads(text.strip().splitlines()[-1])["rate"]))
    return out


def launched_ranks() -> int:
    """Ranks the launcher started (mpiexec / torchrun / horovodrun), 1 when not launched."""
    for key in ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "HOROVOD_SIZE", "WORLD_SIZE"):
        try:
            return int(os.environ[key])
        except (KeyError, ValueError):
            continue
    return 1


def probe(*, seconds: float = 0.5, name: str | None = None, transport=None) -> dict | None:
    """The platform descriptor of this node. With ``transport`` (the world of a launched
    probe, a ``calibrate.Transport``) the ranks also measure collectives: rank 0 gets the
    descriptor, other ranks None after taking part in the sweep."""
    links = None
    if transport is not None:
        from .calibrate import calibrate

        doc = calibrate(transport, max_bytes=1 << 20, reps=5, compute=False)
        if doc is None:
            return None
        links = {k: doc.get(k) for k in ("transport", "library", "ranks", "intra", "inter")}
    node = describe_node()
    cores = usable_cores(node)
    one = _rates("matmul", 1, seconds)
    side = _rates("matmul", max(1, math.ceil(cores)), seconds)
    mem = _rates("copy", 1, seconds)
    if not one or not side or not mem:
        raise RuntimeError("a probe worker failed (see its error above)")
    return {
        "format": "ailens-platform",
        "version": PROBE_VERSION,
        "name": name or f"{node['cpu_model']} x{cores:g} cores",
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "node": node,
        "usable_cores": cores,
        "core_gflops": one[0],  # numpy float64 matmul, one thread, alone
        "node_gflops": sum(side),  # one single-thread worker per usable core at once
        "mem_gbps": mem[0],  # one thread copying 64 MiB
        "seconds_per_benchmark": seconds,
        "collectives": links,
    }


def check_platform(doc, where: str) -> dict:
    """A platform descriptor (``ailens probe``) or ValueError naming ``where``."""
    ok = (
        isinstance(doc, dict)
        and doc.get("format") == "ailens-platform"
        and all(isinstance(doc.get(k), (int, float)) and doc[k] > 0
                for k in ("usable_cores", "core_gflops", "node_gflops", "mem_gbps"))
    )  # fmt: skip
    if not ok:
        raise ValueError(
            f"{where}: not an ailens platform descriptor (write one with `ailens probe -o {where}`)"
        )
    if doc.get("version") != PROBE_VERSION:
        raise ValueError(
            f"{where}: platform descriptor version {doc.get('version')!r}, expected "
            f"{PROBE_VERSION}; probe again"
        )
    return doc
