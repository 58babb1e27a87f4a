"""``ailens calibrate``: measure the links the what-if scales collectives with.

Run on the ranks you train on::

    mpiexec -n 2 python -m ailens calibrate --out RUN_DIR/calibration.json

Every rank times allreduce, allgather and broadcast over a sweep of message sizes (the time
of a repetition is its maximum over ranks, the size's time the median over repetitions);
rank 0 fits alpha, beta and gamma by non-negative least squares (_forecast.fit_cost_params)
and writes the JSON that ``whatif`` reads. Node-local ranks (MPI shared-memory split) give
the intra-node parameters; when the job spans nodes, the whole communicator gives the
inter-node ones (a ring crossing nodes runs at the pace of its slowest link).
"""

from __future__ import annotations

import argparse
import os
import socket
import time
from pathlib import Path

import numpy as np

from . import __version__
from ._forecast import fit_cost_params
from ._online import write_json

OPS = ("allreduce", "allgather", "broadcast")


def _mpi():
    try:
        from mpi4py import MPI
    except ImportError as e:  # the extra is optional: say how to get it
        raise ImportError("pip install ailens[mpi]") from e
    return MPI


def sizes(min_bytes: int, max_bytes: int) -> list[int]:
    """Message sizes of the sweep: powers of 4 from ``min_bytes`` (>= 8) up to ``max_bytes``."""
    out, n = [], max(8, int(min_bytes))
    while n <= max_bytes:
        out.append(n)
        n *= 4
    return out


def _time_op(MPI, comm, op: str, nbytes: int, reps: int) -> float:
    """Median over repetitions of the slowest rank's time for one collective."""
    count = max(nbytes // 8, 1)
    send = np.ones(count)
    recv = np.empty(count * comm.size) if op == "allgather" else np.empty(count)

    def once() -> None:
        if op == "allreduce":
            comm.Allreduce(send, recv, op=MPI.SUM)
        elif op == "allgather":
            comm.Allgather(send, recv)
        else:
            comm.Bcast(send, root=0)

    once()  # warm-up: connection set-up and buffer registration
    times = np.empty(reps)
    for i in range(reps):
        comm.Barrier()
        t = time.perf_counter()
        once()
        times[i] = time.perf_counter() - t
    slowest = np.empty(reps)
    comm.Allreduce(times, slowest, op=MPI.MAX)
    return float(np.median(slowest))


def sweep(
    comm, *, min_bytes: int = 8, max_bytes: int = 16 << 20, reps: int = 20, ops=OPS
) -> list[dict]:
    """Time every op at every size on ``comm``: rows of {op, nbytes, seconds}."""
    MPI = _mpi()
    rows = []
    for n in sizes(min_bytes, max_bytes):
        # Fewer repetitions for large messages keep the sweep to seconds.
        r = reps if n <= 1 << 20 else max(3, reps // 4)
        for op in ops:
            rows.append({"op": op, "nbytes": n, "seconds": _time_op(MPI, comm, op, n, r)})
    return rows


def _fit(rows: list[dict], p: int, source: str) -> dict | None:
    if p < 2 or not rows:
        return None
    fit = fit_cost_params(
        [r["op"] for r in rows],
        p,
        [r["nbytes"] for r in rows],
        [r["seconds"] for r in rows],
        source=source,
    )
    if fit.params is None:
        return None
    return {
        **fit.params.to_dict(),
        "ranks": p,
        "rel_rmse": fit.rel_rmse,
        "fitted": list(fit.fitted),
        "note": fit.note,
        "samples": rows,
    }


def calibrate(*, min_bytes: int = 8, max_bytes: int = 16 << 20, reps: int = 20) -> dict | None:
    """Run the sweep on MPI.COMM_WORLD (collective: every rank calls it); rank 0 gets the
    calibration document, other ranks None."""
    MPI = _mpi()
    world = MPI.COMM_WORLD
    host = MPI.Get_processor_name() or socket.gethostname()
    hosts = world.allgather(host)
    node = world.Split_type(MPI.COMM_TYPE_SHARED)
    t0 = time.perf_counter()
    # Node-local sweep on every node at once; rank 0's node speaks for intra-node links.
    intra_rows = (
        sweep(node, min_bytes=min_bytes, max_bytes=max_bytes, reps=reps) if node.size > 1 else []
    )
    multi = len(set(hosts)) > 1
    inter_rows = sweep(world, min_bytes=min_bytes, max_bytes=max_bytes, reps=reps) if multi else []
    node_size = node.size
    node.Free()
    if world.rank != 0:
        return None
    per_node = max(hosts.count(h) for h in set(hosts))
    return {
        "version": 1,
        "ailens_version": __version__,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "ranks": world.size,
        "hosts": sorted(set(hosts)),
        "ranks_per_node": per_node,
        "mpi": MPI.Get_library_version().splitlines()[0].strip(),
        "seconds": time.perf_counter() - t0,
        "intra": _fit(intra_rows, node_size, "ailens calibrate (intra-node)"),
        "inter": _fit(inter_rows, world.size, "ailens calibrate (inter-node)"),
    }


def main(argv: list[str] | None = None) -> int:
    """``ailens calibrate [--out PATH] [--max-bytes N] [--reps N]``; run under mpiexec."""
    ap = argparse.ArgumentParser(prog="ailens calibrate", description=__doc__.split("\n\n")[0])
    default_out = Path(os.environ.get("AILENS_RUN_DIR", ".")) / "calibration.json"
    ap.add_argument(
        "--out", type=Path, default=default_out, help=f"JSON to write (default {default_out})"
    )
    ap.add_argument("--min-bytes", type=int, default=8)
    ap.add_argument("--max-bytes", type=int, default=16 << 20)
    ap.add_argument(
        "--reps", type=int, default=20, help="repetitions per size (a quarter above 1 MiB)"
    )
    args = ap.parse_args(argv)
    MPI = _mpi()
    if MPI.COMM_WORLD.size < 2:
        if MPI.COMM_WORLD.rank == 0:
            print(
                "ailens calibrate: needs 2 or more ranks: "
                "mpiexec -n 2 python -m ailens calibrate --out ..."
            )
        return 2
    doc = calibrate(min_bytes=args.min_bytes, max_bytes=args.max_bytes, reps=args.reps)
    if doc is None:
        return 0
    args.out.parent.mkdir(parents=True, exist_ok=True)
    write_json(args.out, doc)
    for kind in ("intra", "inter"):
        d = doc[kind]
        if d:
            print(
                f"ailens calibrate: {kind}-node on {d['ranks']} ranks: "
                f"alpha {d['alpha'] * 1e6:.2f} us, "
                f"bandwidth {1 / d['beta'] / 1e9 if d['beta'] else float('inf'):.2f} GB/s, "
                f"gamma {d['gamma'] * 1e9:.3f} ns/B (fit error {100 * d['rel_rmse']:.0f}%)"
            )
    print(f"ailens calibrate: wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
