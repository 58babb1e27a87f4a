"""Export a run as Chrome trace event JSON (opens in Perfetto and chrome://tracing).

One process track per rank (``rank N (host)``) with three kinds of threads:

* ``steps``: one slice per training step (previous step end -> this step end);
* ``compute``: the gaps with no collective in flight (the same partition the Lens uses),
  args carry the work counter delta recorded before the next collective;
* ``collectives``: one slice per collective, name = op, args: bytes, tick, step, phase id
  and SIMO (when an analysis is given). Collectives that overlap (DDP buckets) go to extra
  lanes ``collectives 2``, ``3``, ... so slices on one thread never overlap.

Timestamps are µs since the earliest rank's start, each rank shifted by its
``start_wall_ns`` so the ranks line up. The file is written as a stream: memory stays small
for long runs.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator

import numpy as np

from .._io import atomic_file
from ..record.ticks import partition

__all__ = ["chrome_trace_events", "write_chrome_trace"]

_TID_STEPS, _TID_COMPUTE, _TID_COLL = 0, 1, 2


def _lanes(t_begin: np.ndarray, t_end: np.ndarray) -> np.ndarray:
    """Lane per event so events in one lane never overlap (greedy, in begin order)."""
    lane = np.zeros(len(t_begin), dtype=np.int64)
    if len(t_begin) and np.all(t_begin[1:] >= t_end[:-1]):
        return lane  # the usual case: collectives never overlap
    free_at: list[int] = []  # end time of the last event per lane
    for i in range(len(t_begin)):
        b, e = int(t_begin[i]), int(t_end[i])
        for k, f in enumerate(free_at):
            if b >= f:
                free_at[k] = e
                lane[i] = k
                break
        else:
            lane[i] = len(free_at)
            free_at.append(e)
    return lane


def _thread_meta(pid: int, tid: int, name: str) -> Iterator[dict]:
    yield {"ph": "M", "pid": pid, "tid": tid, "name": "thread_name", "args": {"name": name}}
    # Keep steps, compute, collectives in this order in the viewer.
    yield {
        "ph": "M",
        "pid": pid,
        "tid": tid,
        "name": "thread_sort_index",
        "args": {"sort_index": tid},
    }


def _us_list(ns: np.ndarray) -> list[float]:
    return np.round(np.asarray(ns, dtype=np.float64) / 1e3, 3).tolist()


def _us(ns: float) -> float:
    return round(ns / 1e3, 3)


def chrome_trace_events(run, analysis=None) -> Iterator[dict]:
    """Trace events (dicts) for every rank of ``run`` (an :class:`ailens.Run`).

    ``analysis`` (a RunAnalysis, optional) labels collectives with phase id and SIMO for the
    ticks it covers (ticks present on every rank).
    """
    t0 = min(int(t.meta.get("start_wall_ns", 0)) for t in run.ranks)
    phase_ids = simo = None
    if analysis is not None:
        phase_ids, simo = np.asarray(analysis.phase_ids), np.asarray(analysis.simo)
    counter = run.meta.get("counter", "work")
    for trace in run.ranks:
        shift = int(trace.meta.get("start_wall_ns", t0)) - t0
        yield from _rank_meta(trace)
        yield from _step_events(trace, shift, counter)
        yield from _collective_events(trace, shift, counter, phase_ids, simo)


def _rank_meta(trace) -> Iterator[dict]:
    pid = trace.rank
    host = trace.meta.get("host", "?")
    yield {
        "ph": "M",
        "pid": pid,
        "tid": 0,
        "name": "process_name",
        "args": {"name": f"rank {pid} ({host})"},
    }
    yield {
        "ph": "M",
        "pid": pid,
        "tid": 0,
        "name": "process_sort_index",
        "args": {"sort_index": pid},
    }
    for tid, name in ((_TID_STEPS, "steps"), (_TID_COMPUTE, "compute")):
        yield from _thread_meta(pid, tid, name)


def _step_events(trace, shift: int, counter: str) -> Iterator[dict]:
    steps = trace.steps
    prev = 0
    for k in range(len(steps["step"])):
        t = int(steps["t_ns"][k])
        yield {
            "ph": "X",
            "pid": trace.rank,
            "tid": _TID_STEPS,
            "name": f"step {int(steps['step'][k])}",
            "cat": "step",
            "ts": _us(shift + prev),
            "dur": _us(max(t - prev, 0)),
            "args": {
                "step": int(steps["step"][k]),
                f"{counter}_since_start": int(steps["work"][k]),
            },
        }
        prev = t


def _collective_events(trace, shift: int, counter: str, phase_ids, simo) -> Iterator[dict]:
    """Each collective on its lane, and the compute gap before it (the Lens's own, see
    record/ticks.py) on the compute track."""
    pid = trace.rank
    ev = trace.events
    n = len(ev["op"])
    if n == 0:
        return
    begin = ev["t_begin"]
    unfinished = ev["t_end"] < 0
    end = np.where(unfinished, begin, ev["t_end"])
    lane = _lanes(begin, end)
    for k in range(int(lane.max()) + 1):
        name = "collectives" if k == 0 else f"collectives {k + 1}"
        yield from _thread_meta(pid, _TID_COLL + k, name)
    _, gap, _ = partition(begin, end)
    ops = trace.ops
    covered = 0 if phase_ids is None else min(len(phase_ids), n)
    # Plain Python lists: indexing numpy scalars in this loop would dominate the export.
    gap_l = gap.tolist()
    gap_ts, gap_dur = _us_list(shift + begin - gap), _us_list(gap)
    ts_l, dur_l = _us_list(shift + begin), _us_list(end - begin)
    op_l, bytes_l, step_l = ev["op"].tolist(), ev["nbytes"].tolist(), ev["step"].tolist()
    work_l, lane_l, unf_l = ev["work"].tolist(), lane.tolist(), unfinished.tolist()
    ids_l = phase_ids[:covered].tolist() if covered else []
    simo_l = simo[:covered].tolist() if covered else []
    work_key = f"{counter}_before"
    for i in range(n):
        if gap_l[i] > 0:
            yield {
                "ph": "X",
                "pid": pid,
                "tid": _TID_COMPUTE,
                "name": "compute",
                "cat": "compute",
                "ts": gap_ts[i],
                "dur": gap_dur[i],
                "args": {"before_tick": i, counter: work_l[i]},
            }
        args = {"bytes": bytes_l[i], "tick": i, "step": step_l[i], work_key: work_l[i]}
        if i < covered:
            args["phase"] = ids_l[i]
            args["simo"] = simo_l[i]
        if unf_l[i]:
            args["unfinished"] = True
        yield {
            "ph": "X",
            "pid": pid,
            "tid": _TID_COLL + lane_l[i],
            "name": ops[op_l[i]],
            "cat": "collective",
            "ts": ts_l[i],
            "dur": dur_l[i],
            "args": args,
        }


_ENCODER = json.JSONEncoder(separators=(",", ":"))
_BATCH = 4096


def _write_batch(f, batch: list[dict], count: int) -> int:
    """One encoder call per batch (one call per event costs more than the events' content)."""
    if batch:
        f.write(("," if count else "") + _ENCODER.encode(batch)[1:-1] + "\n")
        count += len(batch)
        batch.clear()
    return count


def write_chrome_trace(run, out: str | os.PathLike, analysis=None) -> int:
    """Write the Chrome trace JSON of ``run`` to ``out``; returns the number of events.

    The file is written to a temporary name and renamed, so a reader never sees half a file.
    """
    count = 0
    other = {
        "ailens_run_id": run.meta.get("run_id"),
        "world_size": run.world_size,
        "counter": run.meta.get("counter"),
        "complete": run.complete,
        "missing_ranks": list(run.missing_ranks),
    }
    with atomic_file(out) as f:
        f.write('{"displayTimeUnit": "ms",\n"otherData": ')
        f.write(json.dumps(other))
        f.write(',\n"traceEvents": [\n')
        batch: list[dict] = []
        for ev in chrome_trace_events(run, analysis):
            batch.append(ev)
            if len(batch) == _BATCH:
                count = _write_batch(f, batch, count)
        count = _write_batch(f, batch, count)
        f.write("\n]}\n")
    return count
