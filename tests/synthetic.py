"""Synthetic run directories written through the real trace writer, for analysis tests.

``write_run(path, ...)`` simulates a data-parallel job on a global clock and writes what the
Lens would have written: one ``rank-NNNNN.ailens`` per rank through
``ailens.record.trace.TraceWriter`` (header metadata exactly as ``ailens/live/lens.py`` writes it,
``OPS``/``EVTS``/``STEP`` chunks, a closing ``INFO`` record) and rank 0's
``phases-online.json``. Everything is controllable and reproducible from ``seed``.

The model, per training step and per collective ``c`` of the step's pattern:

* rank r computes ``c.compute_s * rank_factor[r] * (1 + noise*N(0,1))`` seconds, then enters
  the collective; work recorded before it is ``c.work * rank_factor[r] * (1 + noise*N(0,1))``
  (``c.work`` defaults to ``c.compute_s * ips`` instructions, or CPU ns with counter "cpu-ns");
* the collective ends on every rank at ``max(begin over ranks) + c.comm_s * (1 + noise*N)``,
  so a rank that computes less waits longer inside the collective (as in real DDP/Horovod);
* after the step's last collective each rank spends ``tail_s`` (optimizer) and ends the step.

``rank_factor`` differs between ranks (``imbalance``) so per-rank magnitudes differ and
straddle decade boundaries: SIMO groups them while the PAS2P baseline sees many patterns.

Rank r's monotonic clock starts ``r * rank_offset_s`` after rank 0's, and its
``start_wall_ns`` says so: tools that align ranks by ``start_wall_ns`` see simultaneous
collective ends.

Examples::

    run = write_run(tmp_path / "run", ranks=4, steps=50)
    run = write_run(tmp_path / "run", kill_rank=1, kill_step=30)   # rank 1 killed mid-run
    run = write_run(tmp_path / "run", pattern=lambda step: STEADY if step < 20 else SLOW)
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

import ailens
from ailens._io import write_json
from ailens.phases import OnlinePhases, magnitude
from ailens.record.config import LensConfig
from ailens.record.ticks import partition
from ailens.record.trace import (
    FORMAT_VERSION,
    TraceWriter,
    encode_events,
    encode_exchanges,
    encode_json,
)


@dataclass(frozen=True)
class Collective:
    """One collective of a step: the compute before it, its own duration and payload.

    ``every``/``offset``: emitted only on steps where ``step % every == offset`` (an
    evaluation or checkpoint broadcast every N steps). ``work`` is rank 0's counter delta
    before the collective at rank_factor 1 (None: derived from ``compute_s``).
    """

    op: str
    nbytes: int
    compute_s: float
    comm_s: float
    work: float | None = None
    every: int = 1
    offset: int = 0


# A small DDP-like step: a large gradient bucket after backward, a second bucket, a tiny
# metric allreduce; plus a parameter broadcast every 25 steps. Work values sit near decade
# boundaries (1e7, 1e6, 1e4) so per-rank magnitudes differ and SIMO tolerance matters.
DEFAULT_PATTERN: tuple[Collective, ...] = (
    Collective("allreduce", 4_000_000, compute_s=0.004, comm_s=0.003, work=9e6),
    Collective("allreduce", 1_000_000, compute_s=0.0006, comm_s=0.0012, work=9e5),
    Collective("allreduce", 8, compute_s=0.00004, comm_s=0.0001, work=9e3),
    Collective("broadcast", 2_000_000, compute_s=0.0003, comm_s=0.002, work=2e5, every=25),
)

Pattern = Sequence[Collective] | Callable[[int], Sequence[Collective]]


@dataclass(frozen=True)
class SyntheticRun:
    """What was written, as ground truth (times in ns on the global clock, rank 0's t=0).

    Arrays with a ``ranks`` axis hold every simulated tick, also those a killed rank never
    wrote; ``ticks_written[r]`` says how many rank r's file holds.
    """

    path: Path
    ranks: int
    steps: int
    run_id: str
    counter: str
    op_names: tuple[str, ...]
    op: np.ndarray  # (ticks,) op id
    nbytes: np.ndarray  # (ticks,)
    step: np.ndarray  # (ticks,) step of each tick
    work: np.ndarray  # (ticks, ranks) int64 counter delta before each collective
    begin_ns: np.ndarray  # (ticks, ranks) global ns
    end_ns: np.ndarray  # (ticks, ranks) global ns (equal across ranks)
    step_end_ns: np.ndarray  # (steps, ranks) global ns
    offsets_ns: np.ndarray  # (ranks,) rank r's clock start on the global clock
    start_wall_ns: np.ndarray  # (ranks,)
    ticks_written: tuple[int, ...]
    killed_rank: int | None = None
    files: tuple[Path, ...] = field(default=())

    @property
    def n_ticks(self) -> int:
        return len(self.op)

    @property
    def total_s(self) -> float:
        """Wall time from the first rank's start to the last rank's last step end."""
        return float(self.step_end_ns.max() - self.offsets_ns.min()) / 1e9

    def simo(self) -> np.ndarray:
        """SIMO per tick over all ranks (ailens.phases.simo)."""
        from ailens.phases import simo

        return simo(self.work)

    def comm_compute_s(self) -> tuple[np.ndarray, np.ndarray]:
        """Per-tick exclusive comm and compute gap in seconds, mean over ranks (the Lens's
        partition: compute = time with no collective in flight before the tick)."""
        comm = np.zeros(self.work.shape, dtype=np.float64)
        compute = np.zeros(self.work.shape, dtype=np.float64)
        for r in range(self.ranks):
            c, g, _ = partition(
                self.begin_ns[:, r] - self.offsets_ns[r], self.end_ns[:, r] - self.offsets_ns[r]
            )
            comm[:, r], compute[:, r] = c, g
        return comm.mean(axis=1) / 1e9, compute.mean(axis=1) / 1e9


def _rank_factors(ranks: int, imbalance: float) -> np.ndarray:
    # Rank 0 does the least, the last rank (1 + imbalance) times as much.
    return np.linspace(1.0, 1.0 + imbalance, ranks) if ranks > 1 else np.ones(1)


def write_run(
    path: str | Path,
    *,
    ranks: int = 2,
    steps: int = 100,
    pattern: Pattern = DEFAULT_PATTERN,
    seed: int = 0,
    counter: str = "instructions",
    counter_fallback: str | None = None,
    imbalance: float = 0.5,
    rank_factor: Sequence[float] | None = None,
    noise: float = 0.1,
    ips: float = 2.5e9,
    tail_s: float = 0.0005,
    startup_s: float = 0.01,
    rank_offset_s: float = 0.0013,
    kill_rank: int | None = None,
    kill_step: int | None = None,
    run_id: str | None = None,
    host: str | Sequence[str] = "synthhost",
    framework: str = "synthetic",
    backend: str = "",
    chunk_events: int = 64,
    start_wall_ns: int | None = None,
    online: bool = True,
    config: dict | None = None,
    running: bool = False,
    known_total: bool = True,
    exchange_every: int = 5,
    extra_meta: dict | None = None,
) -> SyntheticRun:
    """Write a synthetic run directory at ``path`` and return its ground truth.

    ``pattern``: the collectives of every step, or a function ``step -> collectives`` (a run
    whose behaviour changes). ``kill_rank``/``kill_step``: that rank's file stops inside the
    chunk holding its first event of ``kill_step`` (cut mid-chunk, no closing record), as
    after SIGKILL; other ranks finish. ``counter``: "instructions" or "cpu-ns" (metadata and
    default work scale); ``counter_fallback`` is the recorded fallback reason. ``config``:
    LensConfig fields recorded in the header (e.g. ``{"total_steps": 500}`` for a run read
    before its end, ``{"tolerance": 0}``). ``running``: no rank writes its closing record, as
    when a run directory is read while training still goes on. ``online``: also write rank 0's
    ``phases-online.json``. ``known_total``: the run said its total steps at the start (a
    schedule mark, as integrations write when the framework knows it). ``exchange_every``:
    steps between the exchange records (the online analysis's evaluation points).
    ``extra_meta``: more header keys (``node``, ``run``), as the Lens writes them. ``host``:
    one hostname, or one per rank (ranks on several nodes).
    """
    if ranks < 1 or steps < 1:
        raise ValueError("ranks and steps must be >= 1")
    if (kill_rank is None) != (kill_step is None):
        raise ValueError("give kill_rank and kill_step together")
    rng = np.random.default_rng(seed)
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    factor = (
        np.asarray(rank_factor, dtype=float)
        if rank_factor is not None
        else _rank_factors(ranks, imbalance)
    )
    if factor.shape != (ranks,):
        raise ValueError(f"rank_factor needs {ranks} values")
    offsets = np.round(np.arange(ranks) * rank_offset_s * 1e9).astype(np.int64)
    wall0 = time.time_ns() if start_wall_ns is None else int(start_wall_ns)
    run_id = run_id or f"{int(rng.integers(1, 2**52)):013x}"

    op_names: list[str] = []
    ops, sizes, step_of, works, begins, ends = [], [], [], [], [], []
    step_end = np.zeros((steps, ranks), dtype=np.int64)
    cursor = offsets.astype(np.float64) + startup_s * 1e9

    def jitter(shape=None):
        return np.maximum(1.0 + noise * rng.standard_normal(shape), 0.05)

    for s in range(steps):
        colls = pattern(s) if callable(pattern) else pattern
        for c in colls:
            if s % c.every != c.offset:
                continue
            if c.op not in op_names:
                op_names.append(c.op)
            base_work = (
                c.work
                if c.work is not None
                else (c.compute_s * (ips if counter == "instructions" else 1e9))
            )
            begin = cursor + c.compute_s * 1e9 * factor * jitter(ranks)
            end = begin.max() + c.comm_s * 1e9 * float(jitter())
            ops.append(op_names.index(c.op))
            sizes.append(c.nbytes)
            step_of.append(s)
            works.append(np.maximum(np.round(base_work * factor * jitter(ranks)), 1))
            begins.append(begin)
            ends.append(np.full(ranks, end))
            cursor = np.full(ranks, end)
        cursor = cursor + tail_s * 1e9 * factor * jitter(ranks)
        step_end[s] = np.round(cursor)

    n = len(ops)
    op = np.asarray(ops, dtype=np.uint16)
    nbytes = np.asarray(sizes, dtype=np.int64)
    step_arr = np.asarray(step_of, dtype=np.uint32)
    work = np.asarray(works, dtype=np.int64).reshape(n, ranks)
    begin_ns = np.round(np.asarray(begins)).astype(np.int64).reshape(n, ranks)
    end_ns = np.round(np.asarray(ends)).astype(np.int64).reshape(n, ranks)

    cfg = LensConfig(
        run_dir=path, framework=framework, backend=backend, counter="auto", **(config or {})
    )
    files, written = [], []
    for r in range(ranks):
        meta = {
            "format_version": FORMAT_VERSION,
            "ailens_version": ailens.__version__,
            "run_id": run_id,
            "rank": r,
            "world_size": ranks,
            "host": host if isinstance(host, str) else host[r],
            "pid": 10_000 + r,
            "framework": framework,
            "backend": backend,
            "counter": counter,
            "counter_unit": "instructions" if counter == "instructions" else "ns",
            "counter_fallback": counter_fallback,
            "start_wall_ns": wall0 + int(offsets[r]),
            "start_time": time.strftime(
                "%Y-%m-%dT%H:%M:%S%z", time.localtime((wall0 + int(offsets[r])) / 1e9)
            ),
            "config": cfg.to_dict(),
            **(extra_meta or {}),
        }
        f = path / f"rank-{r:05d}.ailens"
        files.append(f)
        killed = r == kill_rank
        written.append(
            _write_rank(
                f,
                meta,
                op_names,
                op,
                step_arr,
                nbytes,
                begin_ns[:, r] - offsets[r],
                end_ns[:, r] - offsets[r],
                work[:, r],
                step_end[:, r] - offsets[r],
                chunk_events,
                kill_step if killed else None,
                close=not running,
                total=(cfg.total_steps or steps) if known_total else None,
                exchange_every=exchange_every,
            )
        )

    if online:
        comm, compute = np.zeros((n, ranks)), np.zeros((n, ranks))
        for r in range(ranks):
            comm[:, r], compute[:, r], _ = partition(
                begin_ns[:, r] - offsets[r], end_ns[:, r] - offsets[r]
            )
        ph = OnlinePhases(tolerance=cfg.tolerance, min_share=cfg.min_phase_share)
        ph.add(
            magnitude(work).astype(np.int64).sum(axis=1),
            op.astype(np.int64),
            comm.mean(axis=1) / 1e9,
            compute.mean(axis=1) / 1e9,
        )
        write_json(
            path / "phases-online.json",
            {
                "source": "online",
                "world_size": ranks,
                "disabled_ranks": 0,
                "elapsed_s": float(step_end[-1, 0] - offsets[0]) / 1e9,
                "steps": steps,
                "table": ph.table().to_dict(),
                "op_names": list(op_names),
            },
        )

    return SyntheticRun(
        path=path,
        ranks=ranks,
        steps=steps,
        run_id=run_id,
        counter=counter,
        op_names=tuple(op_names),
        op=op,
        nbytes=nbytes,
        step=step_arr,
        work=work,
        begin_ns=begin_ns,
        end_ns=end_ns,
        step_end_ns=step_end,
        offsets_ns=offsets,
        start_wall_ns=wall0 + offsets,
        ticks_written=tuple(written),
        killed_rank=kill_rank,
        files=tuple(files),
    )


def _write_rank(
    f: Path,
    meta: dict,
    op_names: list[str],
    op,
    step,
    nbytes,
    t_begin,
    t_end,
    work,
    step_t,
    chunk_events: int,
    kill_step: int | None,
    close: bool = True,
    total: int | None = None,
    exchange_every: int = 5,
) -> int:
    """Write one rank's file like the Lens's writer thread does; returns events written."""
    n = len(op)
    steps = len(step_t)
    cut = n if kill_step is None else int(np.searchsorted(step, kill_step))
    step_work = np.zeros(steps, dtype=np.int64)
    # Counter value at each step end: all work of the ticks of steps <= s (tail work ignored).
    per_step = np.bincount(step, weights=work, minlength=steps)[:steps]
    step_work[:] = np.cumsum(per_step).astype(np.int64)
    w = TraceWriter(f, meta)
    w.write_ops(op_names)
    if total:
        schedule = {"kind": "schedule", "total_steps": total, "seq": 0, "step": 0, "at_step": 0}
        w.write_raw(encode_json(b"MARK", [schedule]))
    # Exchanges every ``exchange_every`` step ends (and at the end), covering the ticks begun.
    ends = [s for s in range(exchange_every, steps + 1, exchange_every)]
    if not ends or ends[-1] != steps:
        ends.append(steps)
    upto = np.searchsorted(step, np.asarray(ends), side="left")
    x_rows = {
        "seq": np.arange(1, len(ends) + 1),
        "step": np.asarray(ends),
        "ticks": np.minimum(upto, n),
        "live": np.ones(len(ends)),
        "disabled": np.zeros(len(ends)),
        "stop": np.zeros(len(ends)),
        "t_ns": step_t[np.asarray(ends) - 1],
    }
    steps_done = 0
    pos = 0
    try:
        while pos < n:
            stop = min(pos + chunk_events, n)
            cols = {
                "op": op[pos:stop],
                "step": step[pos:stop],
                "nbytes": nbytes[pos:stop],
                "t_begin": t_begin[pos:stop],
                "t_end": t_end[pos:stop],
                "work": work[pos:stop],
            }
            if cut < stop:
                # Killed while writing this chunk: half of it reached the disk.
                chunk = encode_events(cols)
                w._write(chunk[: len(chunk) // 2])
                return pos
            w.write_events(cols)
            pos = stop
            # Exchanges whose ticks are all written by now go with this chunk.
            keep = x_rows["ticks"] <= stop
            if kill_step is not None:
                keep &= x_rows["step"] <= kill_step
            if keep.any():
                w.write_raw(encode_exchanges({k: v[keep] for k, v in x_rows.items()}))
                x_rows = {k: v[~keep] for k, v in x_rows.items()}
            # Steps that ended before this chunk's last collective began are flushed with it.
            upto = int(np.searchsorted(step_t, t_begin[stop - 1]))
            if upto > steps_done:
                w.write_steps(
                    {
                        "step": np.arange(steps_done, upto, dtype=np.uint32),
                        "t_ns": step_t[steps_done:upto],
                        "work": step_work[steps_done:upto],
                    }
                )
                steps_done = upto
        if steps_done < steps:
            w.write_steps(
                {
                    "step": np.arange(steps_done, steps, dtype=np.uint32),
                    "t_ns": step_t[steps_done:],
                    "work": step_work[steps_done:],
                }
            )
        if len(x_rows["seq"]):
            w.write_raw(encode_exchanges(x_rows))
        if not close:
            return n
        end_ns = int(step_t[-1]) + 200_000
        w.write_info(
            {
                "closed": True,
                "disabled": None,
                "ticks": n,
                "steps": steps,
                "end_ns": end_ns,
                "end_wall_ns": int(meta["start_wall_ns"]) + end_ns,
                "work_total": int(work.sum()),
            }
        )
        return n
    finally:
        w.close()
