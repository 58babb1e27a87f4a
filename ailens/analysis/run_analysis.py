"""Offline analysis of a saved run: logical trace across ranks, phases, per-step table,
forecast. The one reader of rank traces: everything downstream reads a ``RunAnalysis``.

``ailens.analyze(run_dir)`` rebuilds what the Lens computed online from the trace files
alone: the per-tick summaries of every rank (``record.ticks.summarise``, the Lens's own
definition), the SIMO phases, and the forecast — by feeding ``OnlineAnalysis`` exactly the
step ends, marks and exchanged batches the trace recorded (``model.online.feed_recorded``), so the
signature step and forecast are the ones the run decided. It adds the per-step table
(``analysis.steps``) that the what-if, the signature record and the HTML report read.
"""

from __future__ import annotations

import dataclasses
import functools
import os
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from .._io import read_json
from ..model.forecast import Forecast
from ..model.online import OnlineAnalysis, feed_recorded
from ..phases import PhaseTable, assign, pas2p_assign, phase_table, simo
from ..record.config import LensConfig
from ..record.exchange import summed
from ..record.reader import Run, load_run
from ..record.ticks import summarise
from .device import DeviceRank, DeviceSummary, device_rank, device_summary
from .steps import StepTable, step_table

__all__ = ["PhaseSkew", "RunAnalysis", "StepTable", "analyze"]


@dataclass(frozen=True)
class PhaseSkew:
    """Load imbalance inside one phase: compute seconds per rank (the time before the
    collective; time inside it absorbs the waiting, so it is not used here)."""

    phase: int
    slowest_rank: int
    spread_pct: float  # (max - min) / mean of the per-rank compute time, in percent
    per_rank_s: tuple[float, ...]

    def to_dict(self) -> dict:
        d = asdict(self)
        d["per_rank_s"] = list(self.per_rank_s)
        return d


@dataclass(frozen=True, eq=False)
class RunAnalysis:
    """Everything the report, ``predict``, ``whatif`` and the signature record read about
    one run (made by :func:`analyze`). Per-tick columns cover the ``n_ticks`` ticks every
    rank present holds; per-rank columns follow ``run.ranks``."""

    run: Run
    counter: str
    ranks: int  # world size
    op_names: tuple[str, ...]
    n_ticks: int  # ticks present on every rank present
    simo: np.ndarray  # (n_ticks,)
    phase_ids: np.ndarray  # (n_ticks,) 1-based
    table: PhaseTable
    n_phases_previous: int  # PAS2P baseline
    comm_s: np.ndarray  # (n_ticks,) exclusive comm per tick, mean over ranks
    compute_s: np.ndarray  # (n_ticks,) compute gap per tick, mean over ranks
    tick_s_by_rank: np.ndarray  # (n_ticks, ranks present) comm + compute per tick and rank
    step_end_s: np.ndarray  # rank 0's step ends, seconds since its Lens started
    total_s: float  # first rank's start to the last rank's end (wall clock)
    comm_pct: float
    compute_pct: float
    skew: tuple[PhaseSkew, ...]
    forecast: Forecast | None
    warnings: tuple[str, ...]
    # Per-tick columns for the what-if and exports.
    tick_op: np.ndarray  # (n_ticks,) op id into op_names
    tick_nbytes: np.ndarray  # (n_ticks,)
    tick_step: np.ndarray  # (n_ticks,) step the tick began in (0-based)
    comm_min_s: np.ndarray  # (n_ticks,) exclusive comm, minimum over ranks (cost-model fit)
    config: LensConfig
    hosts: tuple[str, ...]  # one per rank present
    nodes: tuple[dict, ...]  # one per rank present: the node it ran on (meta "node")
    work_mean: np.ndarray  # (n_ticks,) work before each collective, mean over ranks
    steps: StepTable  # per step and rank: wall, compute, exposed comm, overlap, sections
    online: dict | None = None  # forecast.json as rank 0 wrote it, if present
    device_ranks: tuple[DeviceRank, ...] = ()  # device time per rank (GPU runs), if recorded
    device: DeviceSummary | None = None  # its medians: step, collective, gpu-ns per step

    @functools.cached_property
    def op_sizes(self) -> tuple[tuple[str, int], ...]:
        """Every (op name, bytes) any rank recorded, ticks past those every rank holds
        included (``calibrate --sizes-from``). Read from the traces on first use: a pass over
        every event that no other reader of the analysis pays for."""
        return _op_sizes(self.run.ranks)


def _run_config(meta: dict) -> LensConfig:
    """The LensConfig the run was recorded with (unknown or invalid keys ignored)."""
    raw = meta.get("config") or {}
    names = {f.name for f in dataclasses.fields(LensConfig)}
    kwargs = {k: v for k, v in raw.items() if k in names}
    try:
        return LensConfig(**kwargs)
    except (TypeError, ValueError):
        return LensConfig(run_dir=raw.get("run_dir", "."))


def _read_online(path: Path) -> dict | None:
    return read_json(path / "forecast.json") if path.is_dir() else None


def _open_at_summary(trace) -> np.ndarray:
    """Ticks this rank summarised while still open (they count as ending at their begin)."""
    ticks = [t for m in trace.marks if m.get("kind") == "open_at_summary" for t in m["ticks"]]
    return np.asarray(ticks, dtype=np.int64)


def analyze(
    run: Run | str | os.PathLike,
    *,
    tolerance: int | None = None,
    min_share: float | None = None,
    phase_key: str | None = None,
    total_steps: int | None = None,
    watch=None,
) -> RunAnalysis:
    """Analyse a run: its directory (or one trace file), or a run already loaded with
    ``ailens.load_run``.

    ``tolerance``, ``min_share``, ``phase_key`` default to the run's own settings (its
    LensConfig), so the forecast fed from the trace is the online one. ``total_steps``
    defaults to what the run's schedule said (or, for a run that finished without early
    stop, the steps recorded). Partial runs (a rank missing or cut short) are analysed over
    the ticks every present rank holds, with warnings. ``watch(online_analysis)`` is called
    after every step end fed to the forecast (benchmarks read it as the run went). Raises
    ``ailens.TraceError`` (naming the file) for a directory that holds no readable run.
    """
    if not isinstance(run, Run):
        run = load_run(run)
    own_cfg = _run_config(run.meta)
    cfg = own_cfg.replace(
        tolerance=own_cfg.tolerance if tolerance is None else int(tolerance),
        min_phase_share=own_cfg.min_phase_share if min_share is None else float(min_share),
        phase_key=own_cfg.phase_key if phase_key is None else phase_key,
    )
    warnings = list(run.warnings)
    traces = run.ranks
    lt = _logical_trace(run, warnings)
    n = lt.n
    mag, comm_r, compute_r, key = _summaries(traces, n, by_size=cfg.phase_key == "op+size")
    comm_s = comm_r.sum(axis=1) / max(len(traces), 1) / 1e9
    compute_s = compute_r.sum(axis=1) / max(len(traces), 1) / 1e9
    work = np.stack([t.events["work"][:n] for t in traces], axis=1).astype(np.int64)
    s = simo(work) if n else np.zeros(0, dtype=np.int64)
    ids = assign(s, tolerance=cfg.tolerance, key=key)
    table = phase_table(
        ids, comm_s, compute_s, op=lt.op, simo=s, op_names=lt.names, min_share=cfg.min_phase_share
    )
    previous = int(pas2p_assign(lt.op, lt.nbytes, mag).max()) if n else 0
    online = _read_online(Path(run.path))
    fed = (mag, comm_r, compute_r, key)
    forecast = _run_forecast(run, cfg, own_cfg, lt, fed, total_steps, watch, online, warnings)
    backend = str(run.meta.get("backend", ""))
    device = [d for t in traces if (d := device_rank(t.rank, t.marks, backend=backend))]
    return RunAnalysis(
        run=run,
        counter=str(run.meta.get("counter", "")),
        ranks=run.world_size,
        op_names=tuple(lt.names),
        n_ticks=n,
        simo=s,
        phase_ids=ids,
        table=table,
        n_phases_previous=previous,
        comm_s=comm_s,
        compute_s=compute_s,
        tick_s_by_rank=(comm_r + compute_r) / 1e9,
        step_end_s=traces[0].steps["t_ns"].astype(np.int64) / 1e9,
        total_s=_wall_total(run),
        comm_pct=table.comm_pct,
        compute_pct=table.compute_pct,
        skew=_skew(ids, table, compute_r, [t.rank for t in traces]),
        forecast=forecast,
        warnings=tuple(warnings),
        tick_op=lt.op,
        tick_nbytes=lt.nbytes,
        tick_step=lt.tick_step,
        comm_min_s=comm_r.min(axis=1) / 1e9 if n else np.zeros(0),
        config=cfg,
        hosts=tuple(str(t.meta.get("host", "")) for t in traces),
        nodes=tuple(dict(t.meta.get("node") or {}) for t in traces),
        work_mean=work.astype(np.float64).mean(1) if n else np.zeros(0),
        steps=_step_table(run, lt),
        online=online,
        device_ranks=tuple(device),
        device=device_summary(device),
    )


def _run_forecast(run, cfg, own_cfg, lt, fed, total_steps, watch, online, warnings):
    """The forecast fed from the trace (``fed``: the per-rank summaries), with the warnings
    that say why there is none or where it departs from the online run's."""
    first = run.ranks[0]
    if len(first.steps["t_ns"]) == 0:
        warnings.append("no step boundaries recorded (step_end never called): no forecast")
        return None
    oa = _feed(run, cfg, lt.names, *fed, lt.tick_step, total_steps, watch)
    forecast = _forecast(oa, first.meta, online, cfg, len(first.steps["t_ns"]), warnings)
    if online is not None and cfg == own_cfg and not total_steps:
        _check_signature(oa.signature_step, online, warnings)
    return forecast


def _check_signature(step, online: dict, warnings: list[str]) -> None:
    if step != online.get("signature_step"):
        warnings.append(
            f"offline analysis reached the signature at step {step}, the online "
            f"run at step {online.get('signature_step')}: the data differ (missing, cut or "
            "disabled ranks) or the run was recorded by another ailens version"
        )


def _step_table(run: Run, lt: _Logical) -> StepTable:
    names = np.asarray(lt.names, dtype=object)
    return step_table(
        run.ranks,
        lt.n,
        lt.tick_step,
        names[lt.op] if lt.n else np.zeros(0, dtype=object),
        world_size=run.world_size,
        fw=str(run.meta.get("framework", "")),
        counter=str(run.meta.get("counter", "")),
    )


@dataclass(frozen=True)
class _Logical:
    """The logical trace: tick k is the k-th collective on every rank present."""

    n: int  # ticks every rank present holds
    names: list[str]  # op names: the lowest rank's order, then names only others saw
    op: np.ndarray  # (n,) op id into names (the lowest rank's)
    nbytes: np.ndarray  # (n,)
    tick_step: np.ndarray  # (n,) step the tick began in (0-based)


def _logical_trace(run: Run, warnings: list[str]) -> _Logical:
    traces = run.ranks
    # One op-name list for the run: the lowest rank's order (= its local ids, which the
    # online key used), names only other ranks saw appended.
    names: list[str] = list(traces[0].ops)
    remaps = []
    for t in traces:
        for name in t.ops:
            if name not in names:
                names.append(name)
        remaps.append(np.array([names.index(x) for x in t.ops] or [0], dtype=np.int64))

    counts = [t.n_events for t in traces]
    n = min(counts) if counts else 0
    if counts and max(counts) != n:
        short = [t.rank for t, c in zip(traces, counts, strict=True) if c == n]
        warnings.append(
            f"ranks hold {min(counts)}-{max(counts)} ticks; analysed the first {n} that every rank "
            f"present holds (shortest: rank {', '.join(map(str, short))})"
        )
    ev0 = traces[0].events
    op = remaps[0][ev0["op"][:n].astype(np.int64)] if n else np.zeros(0, dtype=np.int64)
    for t, remap in zip(traces[1:], remaps[1:], strict=True):
        other = remap[t.events["op"][:n].astype(np.int64)] if n else op
        bad = np.flatnonzero(other != op)
        if len(bad):
            warnings.append(
                f"rank {t.rank} issued a different collective than rank {traces[0].rank} at tick "
                f"{int(bad[0])} ({len(bad)} ticks differ): the logical trace is out of step there"
            )
    if run.missing_ranks:
        warnings.append(
            "SIMO sums the ranks present only; rank(s) "
            f"{', '.join(map(str, run.missing_ranks))} missing, so values differ from the "
            "online ones"
        )
    return _Logical(
        n, names, op, ev0["nbytes"][:n].astype(np.int64), ev0["step"][:n].astype(np.int64)
    )


def _summaries(traces, n: int, *, by_size: bool):
    """Per rank, the summary the Lens sent into the exchange (same function, same rule for
    ticks that were still open when summarised): magnitude, comm ns, compute ns per tick and
    rank, and the lowest rank's phase key per tick."""
    ranks_n = len(traces)
    mag = np.zeros((n, ranks_n), dtype=np.int64)
    comm_r = np.zeros((n, ranks_n), dtype=np.int64)
    compute_r = np.zeros((n, ranks_n), dtype=np.int64)
    key = np.zeros(n, dtype=np.int64)
    for j, t in enumerate(traces):
        ev = t.events
        t_end = ev["t_end"][:n].copy()
        opened = _open_at_summary(t)
        opened = opened[opened < n]
        t_end[opened] = ev["t_begin"][:n][opened]
        summary, _ = summarise(
            ev["op"][:n],
            ev["nbytes"][:n],
            ev["t_begin"][:n],
            t_end,
            ev["work"][:n],
            by_size=by_size,
        )
        mag[:, j], comm_r[:, j], compute_r[:, j] = summary.mag, summary.comm_ns, summary.compute_ns
        if j == 0:
            key = summary.key
    return mag, comm_r, compute_r, key


def _forecast(oa, meta: dict, online, cfg, steps: int, warnings: list[str]) -> Forecast | None:
    """The run's forecast from the fed online analysis, placed in the job (process start to
    exit) when the trace says where; None with a warning when there is none to give."""
    start, proc = meta.get("start_wall_ns"), meta.get("process_start_wall_ns")
    offset = (start - proc) / 1e9 if start and proc and start >= proc else None
    job_end = (online or {}).get("exit_wall_ns")
    forecast = oa.forecast(
        actual_total_s=oa.actual_total_s,
        job_offset_s=offset,
        actual_job_total_s=(job_end - proc) / 1e9 if job_end and proc else None,
    )
    if forecast is None:
        warnings.append(
            f"only {steps} steps ({cfg.warmup_steps} of warm-up): too few for a forecast"
        )
    elif forecast.predicted_total_s is None:
        step = forecast.step_time_s
        about = f"training step {step:.6g} s after warm-up, " if step is not None else ""
        warnings.append(
            f"total steps unknown: {about}no total forecast (pass total_steps, or set it "
            "in the Lens)"
        )
        forecast = None
    return forecast


def _feed(run: Run, cfg, names, mag, comm_r, compute_r, key, tick_step, total_steps, watch):
    """The online analysis of the lowest rank present, fed what its trace recorded."""
    traces = run.ranks
    first = traces[0]
    n = len(key)
    oa = OnlineAnalysis(cfg, run.world_size, first.rank, list(names))
    # Ranks live at batch b are those that recorded it (a rank that disabled itself stops).
    recorded = np.array([len(t.exchanges["seq"]) for t in traces])
    ref = traces[int(np.argmax(recorded))]
    xs = ref.exchanges
    if len(xs["seq"]):
        rows = list(
            zip(
                xs["seq"].tolist(),
                xs["step"].tolist(),
                xs["ticks"].tolist(),
                xs["disabled"].tolist(),
                strict=True,
            )
        )
    else:
        # Format 1 (no exchange records): evaluate at every step end, over the ticks begun.
        steps = len(first.steps["t_ns"])
        upto = np.searchsorted(tick_step, np.arange(1, steps + 1), side="left")
        rows = [(0, s + 1, int(upto[s]), 0) for s in range(steps)]
    counter = {"b": 0}

    def batch(lo: int, hi: int, disabled: int):
        b = counter["b"]
        counter["b"] += 1
        hi = min(hi, n)
        live = recorded > b if len(xs["seq"]) else np.ones(len(traces), dtype=bool)
        totals = summed(
            mag[lo:hi][:, live].sum(axis=1),
            comm_r[lo:hi][:, live].sum(axis=1),
            compute_r[lo:hi][:, live].sum(axis=1),
            world_size=run.world_size,
            disabled=disabled,
        )
        return totals, key[lo:hi], tick_step[lo:hi]

    marks = [m for m in first.marks if m.get("kind") in ("schedule", "section")]
    if total_steps:
        marks.append({"kind": "schedule", "total_steps": int(total_steps), "at_step": 0, "seq": 0})
    # The run ended when rank 0 closed, if every rank finished (a killed rank: it did not).
    end = first.info.get("end_ns") if run.complete else None
    crashed = bool(first.info.get("crashed"))
    feed_recorded(oa, first.steps["t_ns"], marks, rows, batch, end, watch, crashed)
    return oa


def _op_sizes(traces) -> tuple[tuple[str, int], ...]:
    pairs = set()
    for t in traces:
        ev = t.events
        for op_id, nbytes in set(zip(ev["op"].tolist(), ev["nbytes"].tolist(), strict=True)):
            if op_id < len(t.ops):
                pairs.add((t.ops[op_id], int(nbytes)))
    return tuple(sorted(pairs))


def _wall_total(run: Run) -> float:
    """First rank start to last rank end on the wall clock (each rank's monotonic offsets
    placed at its ``start_wall_ns``)."""
    starts, ends = [], []
    for t in run.ranks:
        start = int(t.meta.get("start_wall_ns", 0))
        end = t.info.get("end_ns")
        if end is None:
            cands = [0]
            if t.n_events:
                cands.append(int(max(t.events["t_end"].max(), t.events["t_begin"].max())))
            if len(t.steps["t_ns"]):
                cands.append(int(t.steps["t_ns"].max()))
            end = max(cands)
        starts.append(start)
        ends.append(start + int(end))
    return (max(ends) - min(starts)) / 1e9 if starts else 0.0


def _skew(
    ids: np.ndarray, table: PhaseTable, compute_r: np.ndarray, ranks: list[int]
) -> tuple[PhaseSkew, ...]:
    if not len(ids) or not table.phases:
        return ()
    size = int(ids.max()) + 1
    per = (
        np.stack(
            [np.bincount(ids, weights=compute_r[:, j], minlength=size) for j in range(len(ranks))],
            axis=1,
        )
        / 1e9
    )
    out = []
    for p in table.phases:
        row = per[p.id]
        mean = float(row.mean())
        spread = 100.0 * float(row.max() - row.min()) / mean if mean > 0 else 0.0
        out.append(
            PhaseSkew(p.id, ranks[int(np.argmax(row))], spread, tuple(float(x) for x in row))
        )
    return tuple(out)
