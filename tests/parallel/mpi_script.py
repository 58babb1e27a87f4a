"""Launched by tests/test_integration_mpi.py under mpiexec: a loop of mpi4py collectives of
every kind, with or without ailens, printing one ``RESULT {json}`` line per rank."""

import argparse
import hashlib
import json
import os

import numpy as np
from mpi4py import MPI


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--lens", action="store_true")
    ap.add_argument("--steps-mode", default="infer")
    ap.add_argument("--run-dir", default="")
    ap.add_argument("--iterations", type=int, default=30)
    ap.add_argument("--fault", default="", help="RANK:TICK: make ailens fail there")
    args = ap.parse_args()

    world = MPI.COMM_WORLD
    comm = world
    if args.lens:
        from ailens.integrations.mpi import wrap
        from inject_fault import inject

        comm = wrap(
            world,
            steps=args.steps_mode,
            run_dir=args.run_dir,
            exchange_ticks=32,
            total_steps=args.iterations,
        )
        inject(comm.lens, args.fault)
    rank, size = world.Get_rank(), world.Get_size()
    rng = np.random.default_rng(rank)
    expected: dict[str, int] = {}
    counts: dict[str, int] = {}

    def note(op: str, nbytes: int) -> None:
        expected[op] = expected.get(op, 0) + nbytes
        counts[op] = counts.get(op, 0) + 1

    # Prologue: a pickled config broadcast (0 bytes recorded: not an array).
    cfg = comm.bcast({"lr": 0.1} if rank == 0 else None, root=0)
    note("broadcast", 0)
    w = np.zeros(64)
    for _ in range(args.iterations):
        g = rng.standard_normal(64) * cfg["lr"]
        total = np.empty_like(g)
        comm.Allreduce(g, total, op=MPI.SUM)  # plain buffers
        note("allreduce", g.nbytes)
        req = comm.Iallreduce(g, total, op=MPI.SUM)  # non-blocking, Wait
        req.Wait()
        note("allreduce", g.nbytes)
        inplace = g.copy()
        comm.Allreduce(MPI.IN_PLACE, inplace, op=MPI.SUM)  # IN_PLACE: recvbuf bytes
        note("allreduce", inplace.nbytes)
        w -= inplace / size
        root_buf = np.arange(8, dtype=np.float32) if rank == 0 else np.empty(8, np.float32)
        comm.Bcast([root_buf, MPI.FLOAT], root=0)  # [buf, datatype] spec
        note("broadcast", 32)
        comm.Bcast([root_buf, 4, MPI.FLOAT], root=0)  # [buf, count, datatype]
        note("broadcast", 16)
        mine = np.full(3, rank, dtype=np.int64)
        everyone = np.empty(3 * size, dtype=np.int64)
        r1 = comm.Iallgather(mine, everyone)  # Waitall on wrapped requests
        r2 = comm.Ibarrier()
        MPI.Request.Waitall([r1, r2])
        note("allgather", 24)
        note("barrier", 0)
        loss = comm.allreduce(float(np.abs(g).sum()), op=MPI.SUM)  # pickled float: 0 bytes
        note("allreduce", 0)
        arr_sum = comm.allreduce(np.ones(5), op=MPI.SUM)  # pickled array: nbytes
        note("allreduce", 40)
        req = comm.Ibcast(w, root=0)  # Test until done
        while not req.Test():
            pass
        note("broadcast", w.nbytes)
        part = np.empty(2)
        comm.Scatter(np.arange(2.0 * size) if rank == 0 else None, part, root=0)
        note("scatter", 16)
        comm.barrier()
        note("barrier", 0)
        w += 1e-3 * (loss + arr_sum.sum() + part.sum())
        if args.lens and args.steps_mode == "manual":
            comm.step_end()
    comm.Barrier()
    note("barrier", 0)

    digest = hashlib.sha256(w.tobytes()).hexdigest()
    result = {
        "rank": rank,
        "checksum": digest,
        "iterations": args.iterations,
        "expected_bytes": expected,
        "expected_counts": counts,
    }
    if args.lens:
        lens = comm.lens
        comm.close()
        result.update(
            ticks=lens.ticks,
            lens_steps=lens.steps,
            disabled=lens.disabled,
            merged=comm.steps_merged,
            period=comm.inferred_period,
            table=lens.online.table().to_dict() if lens.online else None,
        )
        if lens.disabled is None:
            from ailens.record.reader import read_trace

            tr = read_trace(os.path.join(args.run_dir, f"rank-{rank:05d}.ailens"))
            by_op: dict[str, int] = {}
            n_by_op: dict[str, int] = {}
            for o, b in zip(tr.events["op"].tolist(), tr.events["nbytes"].tolist(), strict=True):
                name = tr.ops[o]
                by_op[name] = by_op.get(name, 0) + b
                n_by_op[name] = n_by_op.get(name, 0) + 1
            result.update(
                recorded_bytes=by_op,
                recorded_counts=n_by_op,
                events=tr.n_events,
                open_events=int((tr.events["t_end"] < 0).sum()),
                trace_steps=len(tr.steps["step"]),
            )
    print("RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
