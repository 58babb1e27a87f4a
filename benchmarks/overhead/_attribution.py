"""Where ailens's per-step cost goes, measured directly (``bench_overhead.py --kind attribution``).

An opt-in profiler for the rank scripts of ``benchmarks/overhead/``: it lives here, not in
ailens. It wraps, from the outside and only in the run being attributed, the parts of an
attached Lens with timers (instance attributes, the functions an adapter patched into the
framework's modules, the DDP comm hook as it is registered), and reads the CPU clocks of the
threads ailens starts. Nothing in ailens changes; without ``--attribution`` nothing here runs.

Every timer records, per thread, the **exclusive** time of its region (its time minus that
of the timed regions nested in it) on two clocks: this thread's CPU clock
(``CLOCK_THREAD_CPUTIME_ID``: what ailens's code costs whatever else runs on the machine)
and the wall clock. The framework's own calls inside ailens's wrappers (the collective a
wrapper launches, the DDP hook's allreduce) are timed as ``framework`` regions, so they are
not counted as ailens's cost; they are reported apart (``framework``). With DDP that row is
the comm hook's launch: the averaging pass over the bucket and the allreduce's launch, which
DDP's built-in reduction fuses into its copy: the comm-hook floor (``ddp_hook_floor``), a cost
of any hook, not of ailens's Python. The collectives ailens issues itself (the cross-rank
exchange, step-inference votes) are components of their own, on the wall clock too: the time
a rank waits in them is the cost (a rank that waits there would often have waited as long
in the framework's next collective: such time is shifted rather than added).

Thread CPU clocks do not count the time a thread is descheduled, so the CPU figures do not
grow with the number of other processes; they do grow with what those processes do to the
caches and with the cost of syscalls on a busy (virtual) machine. Read them as upper bounds
there, and compare runs made at similar loads (every line carries ``loadavg``).

Components (``COMPONENTS``; their CPU sum is ailens's cost on the training thread and on its
own threads, the wall sum what it adds to a step when nothing overlaps):

- ``hooks``: the Python of the adapter's wrappers and hooks around the framework's calls
  (``Attachment.call``/``begin``/``end``, patched module functions, the DDP comm hook, mpi4py
  methods), excluding what is listed below;
- ``buffer``: ``collective_begin``/``collective_end``/``record_collectives`` (the event buffer);
- ``step_infer`` / ``step_vote``: step inference (``StepFinder``) and its cross-rank votes;
- ``step_end``: ``Lens.step_end`` itself and the step log;
- ``flush``: handing rows, steps and marks to the writer (summaries included);
- ``exchange``: the exchange round's own work (summaries, payload, logging);
- ``exchange_wait``: the exchange collective (including the time ranks wait in it);
- ``online``: the run model (``OnlineAnalysis``: step queue, phases, forecast, signature);
- ``live``: rank 0's live outputs (progress lines, ``forecast.json``);
- ``writer_thread`` / ``other_threads``: CPU time of the threads ailens starts (from their
  thread CPU clocks; no wall figure: they run beside training).

Timers cost time themselves. :func:`calibrate` measures, in the same process, what one
timer adds to the region around it and to its own region; :meth:`Profiler.report` removes
that from each component (``instrument_*`` say how much was removed).
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable
from typing import Any

from _ab import print_line  # a sibling module, on the rank scripts' path like this one

COMPONENTS = ("hooks", "buffer", "step_infer", "step_vote", "step_end", "flush", "exchange",
              "exchange_wait", "online", "live", "writer_thread", "other_threads")  # fmt: skip
FRAMEWORK = "framework"  # the framework's own calls inside ailens's regions: not ailens's cost
_THREAD_COMPONENTS = ("writer_thread", "other_threads")


def thread_cpu_ns(thread: threading.Thread) -> int | None:
    """CPU time of a live ``thread`` of this process (its thread CPU clock), or None."""
    try:
        return time.clock_gettime_ns(time.pthread_getcpuclockid(thread.ident))
    except (OSError, TypeError, AttributeError):
        return _proc_thread_cpu_ns(thread.native_id)


def _proc_thread_cpu_ns(tid: int | None) -> int | None:
    """utime + stime of thread ``tid`` from /proc (clock ticks: 10 ms resolution)."""
    if tid is None:
        return None
    try:
        with open(f"/proc/self/task/{tid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    ticks = int(fields[11]) + int(fields[12])  # utime, stime (fields 14, 15 of stat)
    return ticks * 1_000_000_000 // os.sysconf("SC_CLK_TCK")


class Profiler:
    """Exclusive-time timers per component and thread, and ailens's thread clocks."""

    def __init__(self, *, lean: bool = False) -> None:
        # lean: no timers of their own on the per-collective path inside the adapter's
        # wrappers (``begin``/``end``, the event buffer): that time is the wrappers' then.
        self.lean = lean
        self._local = threading.local()
        self._tables: list[dict[str, list[int]]] = []  # one per thread that ran a timer
        self._lock = threading.Lock()
        self._undo: list[Callable[[], None]] = []
        self._foreign: dict[Any, Callable] = {}  # framework callable -> its timed stand-in
        self._thread_cpu0: dict[int, int] = {}
        self._thread_cpu: dict[str, int] = {c: 0 for c in _THREAD_COMPONENTS}
        self.bias = {"self_cpu": 0, "self_wall": 0, "parent_cpu": 0, "parent_wall": 0}
        self.steps_counted = 0  # lensed steps run through count_steps
        self.steps_at_reset = 0  # the Lens's steps and ticks when the counts last restarted
        self.ticks_at_reset = 0
        self._lens = None
        self.block_cpu_ns = 0  # process CPU time of those steps (all threads)
        self.block_wall_ns = 0
        self.setup_cpu_ns = 0  # ailens's CPU (training thread's timers) in the set-up calls
        self.setup_steps = 0

    # ------------------------------------------------------------ timers

    def _stack(self) -> list[list[int]]:
        local = self._local
        local.stack, local.table = [], {}
        with self._lock:
            self._tables.append(local.table)
        return local.stack

    def timed(self, fn: Callable, component: str) -> Callable:
        """``fn`` with its exclusive time counted under ``component`` on the calling thread."""
        local, cpu, wall = self._local, time.thread_time_ns, time.perf_counter_ns
        stack_of = self._stack

        def timer(*args, **kwargs):
            try:
                stack = local.stack
            except AttributeError:
                stack = stack_of()
            frame = [0, 0, 0]  # nested timers' cpu, wall, count
            stack.append(frame)
            c0, w0 = cpu(), wall()
            try:
                return fn(*args, **kwargs)
            finally:
                w1, c1 = wall(), cpu()
                stack.pop()
                dc, dw = c1 - c0, w1 - w0
                row = local.table.get(component)
                if row is None:
                    row = local.table[component] = [0, 0, 0, 0]
                row[0] += dc - frame[0]
                row[1] += dw - frame[1]
                row[2] += 1
                row[3] += frame[2]
                if stack:
                    parent = stack[-1]
                    parent[0] += dc
                    parent[1] += dw
                    parent[2] += 1

        timer.__name__ = getattr(fn, "__name__", "timer")
        timer.__doc__ = getattr(fn, "__doc__", None)
        return timer

    def foreign(self, fn: Callable) -> Callable:
        """``fn`` (a framework call) timed as ``framework``; one stand-in per callable."""
        try:
            hit = self._foreign.get(fn)
        except TypeError:  # unhashable: time it without caching
            return self.timed(fn, FRAMEWORK)
        if hit is None:
            hit = self._foreign[fn] = self.timed(fn, FRAMEWORK)
        return hit

    def patch(self, owner: Any, name: str, component: str) -> None:
        """``owner.name`` timed under ``component`` until :meth:`restore`."""
        old = getattr(owner, name, None)
        if old is None or not callable(old):
            return
        had = name in vars(owner)
        setattr(owner, name, self.timed(old, component))

        def undo() -> None:
            if had:
                setattr(owner, name, old)
            else:
                delattr(owner, name)

        self._undo.append(undo)

    def swap_cells(self, fn: Callable, names: tuple[str, ...]) -> None:
        """In ``fn``'s closure, the variables ``names`` (framework callables) become timed as
        ``framework`` until :meth:`restore`."""
        code, cells = getattr(fn, "__code__", None), getattr(fn, "__closure__", None)
        if code is None or not cells:
            return
        for var, cell in zip(code.co_freevars, cells, strict=True):
            if var in names and callable(cell.cell_contents):
                real = cell.cell_contents
                cell.cell_contents = self.timed(real, FRAMEWORK)
                self._undo.append(lambda cell=cell, real=real: setattr(cell, "cell_contents", real))

    def swap_real(self, fn: Callable, real: Callable, depth: int = 2) -> None:
        """The framework function ``real`` in ``fn``'s closure timed as ``framework``, also
        one or two wrappers down (``tfgraph.wrap``'s wrapper sits inside AutoGraph's
        ``do_not_convert``: without this, the collective it calls, with the wait for the
        other ranks, counted as ailens's hook)."""
        if getattr(fn, "real", None) is real and not hasattr(fn, "__closure__"):
            fn.real = self.timed(real, FRAMEWORK)  # a compiled wrapper (_recorder.AsyncCall)
            self._undo.append(lambda: setattr(fn, "real", real))
            return
        names = _closure_names_of(fn, real)
        if names:
            self.swap_cells(fn, names)
            return
        if depth <= 0:
            return
        for cell in getattr(fn, "__closure__", None) or ():
            inner = _cell(cell)
            if callable(inner) and getattr(inner, "__closure__", None):
                self.swap_real(inner, real, depth - 1)

    def restore(self) -> None:
        undo, self._undo = self._undo, []
        for fn in reversed(undo):
            fn()

    # ------------------------------------------------------------ what to time

    def attach_lens(self, lens) -> None:
        """Time the parts of a recording ``lens`` (call after it started, before training)."""
        self._lens = lens
        if not self.lean:
            self.patch(lens, "collective_begin", "buffer")
            self.patch(lens, "collective_end", "buffer")
        self.patch(lens, "record_collectives", "buffer")
        self.patch(lens, "step_end", "step_end")
        self.patch(lens, "_exchange", "exchange")
        session = lens.session
        if session.exchange_fn is not None:
            self._time_exchange(session)
        rec = lens.recorder
        if rec is not None:
            self.patch(rec, "log_exchange", "exchange")
            self.patch(rec, "flush", "flush")
            rec.buf.on_full = rec.flush  # the buffer's own reference to flush
            self._undo.append(lambda: setattr(rec.buf, "on_full", type(rec).flush.__get__(rec)))
        online = lens.online
        if online is not None:
            for name in ("on_step", "on_batch", "on_mark", "predict", "live_forecast"):
                self.patch(online, name, "online")
        live = getattr(lens, "_live", None)
        if live is not None:
            for name in ("on_step", "on_signature", "on_evaluation"):
                self.patch(live, name, "live")
        self.start_threads()

    def _time_exchange(self, session) -> None:
        """The exchange collective as ``exchange_wait``: the blocking call, and a background
        round's start and finish (``Exchange.start``) when the adapter has them."""
        real = session.exchange_fn
        timed = self.timed(real, "exchange_wait")
        start = getattr(real, "start", None)
        if start is not None:
            timed_start = self.timed(start, "exchange_wait")
            timed.start = lambda a: self.timed(timed_start(a), "exchange_wait")
        session.exchange_fn = timed
        self._undo.append(lambda: setattr(session, "exchange_fn", real))

    def attach_handle(self, handle, packages: tuple[str, ...] = ()) -> None:
        """Time an adapter's attachment ``handle`` (an ``integrations._base.Attachment``) and
        the wrappers it patched into the modules of ``packages`` (call before building an
        ``_ab.Unpatched`` of them, so the plain blocks swap these out too)."""
        self.attach_lens(handle.lens)
        real_call = handle.call
        foreign = self.foreign

        def call(fn, *args, **kwargs):
            return real_call(foreign(fn), *args, **kwargs)

        handle.call = self.timed(call, "hooks")
        self._undo.append(lambda: vars(handle).pop("call", None))
        for name in ("_record",) if self.lean else ("begin", "end", "_record"):
            if callable(getattr(handle, name, None)):
                self.patch(handle, name, "hooks")
        if type(handle).__module__ == "ailens.integrations.mpi":
            self._time_mpi_methods(handle)
        if getattr(handle, "_finder", None) is not None:
            self.patch(handle, "_observe", "step_infer")
            finder = handle._finder
            if getattr(finder, "_agree", None) is not None:
                self.patch(finder, "_agree", "step_vote")
        if packages:
            self.patch_modules(packages)

    def _time_mpi_methods(self, handle) -> None:
        """A ``LensComm``'s blocking collectives record in their own frame (or a compiled
        wrapper), not through ``call``: each is timed as ``hooks``, and the real
        communicator's method it calls as ``framework`` (the compiled wrapper's ``real``, and
        through a stand-in for ``handle.comm`` for the Python methods)."""
        from ailens.integrations import mpi

        names = frozenset({**mpi._BUFFER_OPS, **mpi._OBJECT_OPS})
        for name in names:
            native = vars(handle).get(name)
            if mpi.BLOCKING_CALL is not None and isinstance(native, mpi.BLOCKING_CALL):
                self.swap_real(native, native.real)  # a compiled wrapper holds its own
            self.patch(handle, name, "hooks")
        real_comm, foreign = handle.comm, self.foreign

        class TimedComm:
            def __getattr__(self, name: str):
                attr = getattr(real_comm, name)
                return foreign(attr) if name in names else attr

        handle.comm = TimedComm()
        self._undo.append(lambda: setattr(handle, "comm", real_comm))

    def patch_modules(self, packages: tuple[str, ...]) -> None:
        """Time the ailens wrappers found in the loaded modules of ``packages`` (``hooks``),
        with the framework function each wraps (``__wrapped__``, in its closure) as
        ``framework``."""
        import sys

        timed: dict[int, Callable] = {}
        for mod_name, mod in list(sys.modules.items()):
            if mod is None or not mod_name.startswith(packages):
                continue
            for attr, value in list(vars(mod).items()):
                real = getattr(value, "__wrapped__", None)
                if real is None or not str(getattr(value, "__module__", "")).startswith("ailens"):
                    continue
                if id(value) not in timed:
                    self.swap_real(value, real)
                    t = self.timed(value, "hooks")
                    t.__wrapped__, t.__module__ = real, value.__module__
                    timed[id(value)] = t
                setattr(mod, attr, timed[id(value)])
                self._undo.append(lambda mod=mod, attr=attr, v=value: setattr(mod, attr, v))

    def time_tf_reads(self, tf) -> None:
        """TensorFlow variable reads (``Variable.numpy()``) as ``framework``: ailens reads its
        graph-timed collectives from variables, and a read waits for the graphs still
        running (their work, not ailens's)."""
        cls = type(tf.Variable(0))
        own = vars(cls).get("numpy")
        real = cls.numpy
        cls.numpy = self.timed(lambda var: real(var), FRAMEWORK)

        def undo() -> None:
            if own is None:
                del cls.numpy
            else:
                cls.numpy = own

        self._undo.append(undo)

    def intercept_comm_hook(self, model) -> None:
        """Time the comm hook that will be registered on DDP ``model`` (call before
        ``attach``): the hook as ``hooks``, its launch of the allreduce as ``framework``."""
        register = model.register_comm_hook

        def register_timed(state, hook):
            self.swap_cells(hook, ("launch",))
            timed = self.timed(hook, "hooks")
            timed.__wrapped__ = hook  # DDP checks the hook's signature (state, bucket)
            return register(state, timed)

        model.register_comm_hook = register_timed

    def count_steps(self, run: Callable[[int], None], set_up: int = 2) -> Callable[[int], None]:
        """``run(n)`` (the lensed block) counting its steps and process CPU and wall time.
        Its first ``set_up`` calls are what ``_ab.measure`` leaves out of the A/B: one
        untimed step (with TF, the tracing of the training function and ailens's graph hooks
        in it, seconds once per run) and the warm-up block (the run's start: step inference's
        search and votes, the first forecasts, forecast.json rewritten at steps 1.25x apart).
        Everything counted until they end is dropped (:meth:`reset`; its ailens CPU total is
        kept as ``setup_cpu_ns``), so the figures are the steps the A/B times."""
        calls = [0]

        def counted(n: int) -> None:
            calls[0] += 1
            if calls[0] <= set_up:
                try:
                    run(n)
                finally:
                    self.setup_steps += n
                    if calls[0] == set_up:
                        totals = self.totals()
                        self.setup_cpu_ns = sum(totals.get(c, [0])[0] for c in COMPONENTS)
                        self.reset()
                return
            c0, w0 = time.process_time_ns(), time.perf_counter_ns()
            try:
                run(n)
            finally:
                self.block_cpu_ns += time.process_time_ns() - c0
                self.block_wall_ns += time.perf_counter_ns() - w0
                self.steps_counted += n

        return counted

    def reset(self) -> None:
        """Start every count from now: timers, ailens's thread clocks, counted steps (call
        between steps, on the training thread)."""
        with self._lock:
            for table in self._tables:
                table.clear()
        self._thread_cpu = {c: 0 for c in _THREAD_COMPONENTS}
        self._thread_cpu0.clear()
        self.start_threads()
        self.steps_counted = self.block_cpu_ns = self.block_wall_ns = 0
        lens = self._lens
        self.steps_at_reset = lens.steps if lens is not None else 0
        self.ticks_at_reset = lens.ticks if lens is not None else 0

    # ------------------------------------------------------------ ailens's threads

    def _ailens_threads(self) -> list[threading.Thread]:
        me = threading.current_thread()
        return [t for t in threading.enumerate() if t is not me and t.name.startswith("ailens")]

    def start_threads(self) -> None:
        """Note the CPU clocks of ailens's threads now (later ones start from 0)."""
        for t in self._ailens_threads():
            if t.native_id not in self._thread_cpu0:
                self._thread_cpu0[t.native_id] = thread_cpu_ns(t) or 0

    def read_threads(self) -> None:
        """Add ailens's threads' CPU since :meth:`start_threads` (call before the Lens
        closes: the writer thread ends there)."""
        for t in self._ailens_threads():
            now = thread_cpu_ns(t)
            if now is None:
                continue
            used = now - self._thread_cpu0.get(t.native_id, 0)
            self._thread_cpu0[t.native_id] = now
            key = "writer_thread" if t.name == "ailens-writer" else "other_threads"
            self._thread_cpu[key] += used

    # ------------------------------------------------------------ results

    def totals(self) -> dict[str, list[int]]:
        """Per component, summed over threads: [cpu ns, wall ns, calls, nested timers]."""
        out: dict[str, list[int]] = {}
        with self._lock:
            tables = list(self._tables)
        for table in tables:
            for comp, row in list(table.items()):
                acc = out.setdefault(comp, [0, 0, 0, 0])
                for i in range(4):
                    acc[i] += row[i]
        return out

    def report(self, steps: int) -> dict:
        """Per component: µs per step (CPU and wall) with the instrument's own cost removed;
        their sums; the instrument's estimated cost; the steps' own CPU and wall time.
        ``steps``: the Lens's steps (those before the last :meth:`reset` are left out)."""
        totals, b = self.totals(), self.bias
        steps = max(int(steps) - self.steps_at_reset, 1)
        comps: dict[str, dict] = {}
        removed_cpu = removed_wall = 0
        for comp in (*COMPONENTS, FRAMEWORK):
            cpu, wall, calls, nested = totals.get(comp, [0, 0, 0, 0])
            fix_cpu = calls * b["self_cpu"] + nested * b["parent_cpu"]
            fix_wall = calls * b["self_wall"] + nested * b["parent_wall"]
            if comp in _THREAD_COMPONENTS:
                cpu, wall, fix_cpu, fix_wall = self._thread_cpu[comp], None, 0, 0
            cpu_c = max(cpu - fix_cpu, 0)
            wall_c = None if wall is None else max(wall - fix_wall, 0)
            if comp != FRAMEWORK:
                removed_cpu += cpu - cpu_c
                removed_wall += 0 if wall is None else wall - wall_c
            comps[comp] = {
                "cpu_us_per_step": round(cpu_c / steps / 1e3, 3),
                "wall_us_per_step": None if wall_c is None else round(wall_c / steps / 1e3, 3),
                "calls_per_step": round(calls / steps, 3),
            }
        own = [c for c in COMPONENTS]
        total_cpu = sum(comps[c]["cpu_us_per_step"] for c in own)
        # Wall: the training thread's components; ailens's threads run beside it.
        total_wall = sum(comps[c]["wall_us_per_step"] or 0 for c in own)
        n = max(self.steps_counted, 1)
        step_cpu_us = self.block_cpu_ns / n / 1e3 if self.steps_counted else None
        step_wall_us = self.block_wall_ns / n / 1e3 if self.steps_counted else None
        return {
            "steps": steps,
            # The collectives of the counted steps (the set-up's left out, as above).
            "collectives_per_step": None
            if self._lens is None
            else round((self._lens.ticks - self.ticks_at_reset) / steps, 3),
            "components": comps,
            "total_cpu_us_per_step": round(total_cpu, 3),
            "total_wall_us_per_step": round(total_wall, 3),
            "instrument_cpu_us_per_step": round(removed_cpu / steps / 1e3, 3),
            "instrument_wall_us_per_step": round(removed_wall / steps / 1e3, 3),
            "step_cpu_us": None if step_cpu_us is None else round(step_cpu_us, 1),
            "step_wall_us": None if step_wall_us is None else round(step_wall_us, 1),
            "cpu_share_pct": None if not step_cpu_us else round(100 * total_cpu / step_cpu_us, 4),
            "bias_ns": dict(self.bias),
            "timers": "lean" if self.lean else "full",
            # The set-up left out above, once per run (timers' cost in: an upper bound).
            "setup_steps": self.setup_steps,
            "setup_cpu_us": round(self.setup_cpu_ns / 1e3, 1),
        }


def _closure_names_of(fn: Callable, real: Callable) -> tuple[str, ...]:
    """The closure variables of ``fn`` that hold ``real``."""
    code, cells = getattr(fn, "__code__", None), getattr(fn, "__closure__", None)
    if code is None or not cells:
        return ()
    return tuple(v for v, c in zip(code.co_freevars, cells, strict=True)
                 if _cell(c) is real)  # fmt: skip


def _cell(cell) -> Any:
    try:
        return cell.cell_contents
    except ValueError:  # an empty cell
        return None


def calibrate(profiler: Profiler, rounds: int = 20_000) -> dict[str, int]:
    """Measure the timers' own cost here and store it in ``profiler.bias`` (ns): what a
    timer adds to its own region (``self_*``: its call layer and clock reads) and to the
    region around it (``parent_*``). Medians of 5 tries."""

    def empty() -> None:
        return None

    def tries() -> tuple[int, int, int, int]:
        probe = Profiler()
        child = probe.timed(empty, "child")

        def with_timers() -> None:
            for _ in range(rounds):
                child()

        def without() -> None:
            for _ in range(rounds):
                empty()

        probe.timed(with_timers, "a")()
        probe.timed(without, "b")()
        t = probe.totals()
        a, b, c = t["a"], t["b"], t["child"]
        per_empty_cpu, per_empty_wall = b[0] / rounds, b[1] / rounds
        return (
            max(int(c[0] / rounds - per_empty_cpu), 0),
            max(int(c[1] / rounds - per_empty_wall), 0),
            max(int((a[0] - b[0]) / rounds), 0),
            max(int((a[1] - b[1]) / rounds), 0),
        )

    runs = sorted(tries() for _ in range(5))
    cols = list(zip(*runs, strict=True))
    med = [sorted(col)[len(col) // 2] for col in cols]
    profiler.bias = {"self_cpu": med[0], "self_wall": med[1], "parent_cpu": med[2],
                     "parent_wall": med[3]}  # fmt: skip
    return profiler.bias


def enabled(args) -> bool:
    """Whether this rank script attributes (``--attribution``, see ``_ab.add_common_args``)."""
    return bool(getattr(args, "attribution", None))


def profiler_for(args) -> Profiler | None:
    """The calibrated profiler ``--attribution [full|lean]`` asks for; None without it."""
    if not enabled(args):
        return None
    profiler = Profiler(lean=args.attribution == "lean")
    calibrate(profiler)
    return profiler


def emit(profiler: Profiler, steps: int, *, rank: int, name: str, **extra) -> None:
    """Print this rank's ``ATTRIBUTION {json}`` line (every rank prints its own)."""
    doc = {"name": name, "rank": rank, **profiler.report(steps), "loadavg": list(os.getloadavg()),
           **extra}  # fmt: skip
    print_line("ATTRIBUTION " + json.dumps(doc))
