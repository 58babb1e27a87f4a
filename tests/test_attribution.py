"""benchmarks/overhead/_attribution.py: the per-component bookkeeping of ``bench_overhead.py
--kind attribution`` (exclusive times that add up, framework calls left out, the timers' own
cost removed, ailens's threads' CPU clocks), and the real thing on two torchrun ranks."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks" / "overhead"))

import _attribution as attribution  # noqa: E402

from ailens import Lens  # noqa: E402


class FakeClocks:
    """Both clocks of the profiler, advanced only by ``spend`` (ns): exact bookkeeping."""

    def __init__(self) -> None:
        self.now = 0

    def __call__(self) -> int:
        return self.now

    def spend(self, ns: int) -> None:
        self.now += ns


@pytest.fixture
def clocks(monkeypatch) -> FakeClocks:
    c = FakeClocks()
    monkeypatch.setattr(attribution.time, "thread_time_ns", c)
    monkeypatch.setattr(attribution.time, "perf_counter_ns", c)
    return c


def test_exclusive_times_add_up_and_framework_calls_are_left_out(clocks):
    prof = attribution.Profiler()
    framework_call = prof.foreign(lambda: clocks.spend(1000))  # the collective a hook launches

    def buffer_begin() -> None:
        clocks.spend(30)

    begin = prof.timed(buffer_begin, "buffer")

    def hook() -> None:
        clocks.spend(200)
        begin()
        framework_call()
        clocks.spend(50)

    timed_hook = prof.timed(hook, "hooks")
    t0 = clocks.now
    for _ in range(4):
        timed_hook()
    inclusive = clocks.now - t0
    t = prof.totals()
    assert t["hooks"] == [4 * 250, 4 * 250, 4, 8]  # cpu, wall, calls, nested timers
    assert t["buffer"] == [4 * 30, 4 * 30, 4, 0]
    assert t["framework"] == [4 * 1000, 4 * 1000, 4, 0]
    assert sum(row[0] for row in t.values()) == inclusive  # the tree adds up exactly

    rep = prof.report(steps=2)
    comps = rep["components"]
    assert comps["hooks"]["cpu_us_per_step"] == pytest.approx(0.5)
    assert comps["buffer"]["cpu_us_per_step"] == pytest.approx(0.06)
    assert comps["framework"]["cpu_us_per_step"] == pytest.approx(2.0)
    own = sum(comps[c]["cpu_us_per_step"] for c in attribution.COMPONENTS)
    assert rep["total_cpu_us_per_step"] == pytest.approx(own) == pytest.approx(0.56)


def test_the_timers_own_cost_is_removed_per_call_and_per_nested_timer(clocks):
    prof = attribution.Profiler()
    prof.bias = {"self_cpu": 5, "self_wall": 7, "parent_cpu": 10, "parent_wall": 20}
    inner = prof.timed(lambda: clocks.spend(100), "buffer")

    def outer() -> None:
        clocks.spend(300)
        inner()
        inner()

    prof.timed(outer, "hooks")()
    rep = prof.report(steps=1)["components"]
    # hooks: 300 - 1 call x 5 - 2 nested x 10; buffer: 200 - 2 calls x 5
    assert rep["hooks"]["cpu_us_per_step"] == pytest.approx(0.275)
    assert rep["hooks"]["wall_us_per_step"] == pytest.approx((300 - 7 - 40) / 1e3)
    assert rep["buffer"]["cpu_us_per_step"] == pytest.approx(0.19)
    assert prof.report(steps=1)["instrument_cpu_us_per_step"] == pytest.approx(0.035)


def test_timers_on_other_threads_count_apart_and_exceptions_still_count(clocks):
    prof = attribution.Profiler()

    def fails() -> None:
        clocks.spend(40)
        raise ValueError("framework error")

    timed = prof.timed(fails, "hooks")
    worker = threading.Thread(target=lambda: pytest.raises(ValueError, timed))
    worker.start()
    worker.join()
    with pytest.raises(ValueError):
        timed()
    assert prof.totals()["hooks"][:3] == [80, 80, 2]
    assert len(prof._tables) == 2  # one table per thread: no lost updates between threads


def test_calibration_measures_a_positive_cost_per_timer():
    prof = attribution.Profiler()
    bias = attribution.calibrate(prof, rounds=2000)
    assert bias["self_cpu"] >= 0 and bias["parent_cpu"] > 0
    assert bias["parent_cpu"] < 100_000  # a timer costs nanoseconds to microseconds, not more


def _burn(seconds: float) -> None:
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


def test_a_background_exchange_stays_in_the_background_and_is_timed(tmp_path):
    finished = []

    def exchange(a):
        return a * 2  # as if a second, identical rank

    def start(a):
        return lambda: (finished.append(1), a * 2)[1]

    exchange.start = start
    lens = Lens(run_dir=tmp_path / "run", world_size=2, rank=0, exchange=exchange,
                exchange_seconds=0)  # fmt: skip
    prof = attribution.Profiler()
    prof.attach_lens(lens)
    for _ in range(30):
        lens.collective_begin("allreduce", 64)
        lens.collective_end()
        lens.step_end()
    assert callable(getattr(lens.session.exchange_fn, "start", None))
    calls = prof.totals()["exchange_wait"][2]
    # Every round a start and a finish, both timed (the last one may still be in flight).
    assert len(finished) >= 3 and calls == 2 * len(finished) + lens.session.in_flight
    prof.restore()
    assert lens.session.exchange_fn is exchange
    lens.close()


def test_ailens_threads_cpu_from_their_thread_clocks():
    prof = attribution.Profiler()
    go, release = threading.Event(), threading.Event()
    burned = {name: threading.Event() for name in ("ailens-writer", "ailens-helper", "framework")}

    def work(name: str, seconds: float) -> None:
        go.wait()
        _burn(seconds)
        burned[name].set()
        release.wait()  # alive until read: a thread's clock ends with it

    threads = [
        threading.Thread(target=work, args=(name, s), name=name)
        for name, s in (("ailens-writer", 0.05), ("ailens-helper", 0.02), ("framework", 0.05))
    ]
    for t in threads:
        t.start()
    prof.start_threads()
    go.set()
    for e in burned.values():
        assert e.wait(30)
    prof.read_threads()
    release.set()
    for t in threads:
        t.join()
    comps = prof.report(steps=1)["components"]
    # All of the ailens threads' CPU time, none of the bystander's.
    assert 45_000 <= comps["writer_thread"]["cpu_us_per_step"] <= 80_000
    assert comps["writer_thread"]["wall_us_per_step"] is None
    assert 15_000 <= comps["other_threads"]["cpu_us_per_step"] <= 40_000


def test_attach_lens_times_a_real_lens_and_restore_puts_it_back(tmp_path):
    lens = Lens(run_dir=tmp_path / "run", world_size=1, rank=0)
    original_begin = lens.collective_begin
    prof = attribution.Profiler()
    prof.attach_lens(lens)
    for _ in range(50):
        for _ in range(3):
            lens.collective_begin("allreduce", 4096)
            lens.collective_end()
        lens.step_end()
    prof.read_threads()
    prof.restore()
    assert lens.collective_begin == original_begin
    assert lens.recorder.buf.on_full == lens.recorder.flush
    lens.close()
    rep = prof.report(steps=lens.steps)
    comps = rep["components"]
    assert comps["buffer"]["calls_per_step"] == 6  # 3 begins and 3 ends a step
    assert comps["step_end"]["calls_per_step"] >= 1  # Lens.step_end, and the step log in it
    assert comps["online"]["calls_per_step"] >= 1
    assert comps["exchange"]["calls_per_step"] > 0  # alone: an evaluation point each exchange
    assert rep["total_cpu_us_per_step"] > 0
    assert lens.disabled is None


def test_the_set_up_the_ab_leaves_out_is_left_out_of_the_counts(tmp_path, clocks):
    """Issue 33: the first lensed call (with TF: the tracing of the training function, once
    per run) and the warm-up block (the run's start: step inference's votes, the first
    forecasts) are what the A/B leaves out; the figures are the steps it times, and the
    set-up's ailens CPU is reported apart."""
    lens = Lens(run_dir=tmp_path / "run", world_size=1, rank=0)
    prof = attribution.Profiler()
    prof.attach_lens(lens)
    hook = prof.timed(lambda cost: clocks.spend(cost), "hooks")

    def run(n: int, cost: int) -> None:
        for _ in range(n):
            hook(cost)
            lens.step_end()

    # the set-up call is 10^4 times dearer, the warm-up block's steps 500 times
    costs = iter([1_000_000, 50_000, 100, 100])
    counted = prof.count_steps(lambda n: run(n, next(costs)))
    counted(1)
    counted(4)
    counted(6)
    counted(4)
    rep = prof.report(steps=lens.steps)
    lens.close()
    assert rep["steps"] == 10 == prof.steps_counted
    assert rep["components"]["hooks"]["calls_per_step"] == 1
    assert rep["components"]["hooks"]["cpu_us_per_step"] == pytest.approx(0.1)
    assert rep["setup_steps"] == 5
    assert rep["setup_cpu_us"] >= (1_000_000 + 4 * 50_000) / 1e3


def test_lean_timers_leave_the_per_collective_path_untimed(tmp_path):
    """``--timers lean``: begin/end and the event buffer get no timers of their own (their
    time is the wrapper's around them); the rest is timed as before."""
    lens = Lens(run_dir=tmp_path / "run", world_size=1, rank=0)
    original_begin = lens.collective_begin
    prof = attribution.Profiler(lean=True)
    prof.attach_lens(lens)
    assert lens.collective_begin == original_begin
    for _ in range(20):
        lens.collective_begin("allreduce", 4096)
        lens.collective_end()
        lens.step_end()
    prof.restore()
    lens.close()
    rep = prof.report(steps=lens.steps)
    assert rep["timers"] == "lean"
    assert rep["components"]["buffer"]["calls_per_step"] == 0
    assert rep["components"]["step_end"]["calls_per_step"] >= 1


def test_the_collective_inside_a_tf_graph_wrapper_counts_as_the_framework(clocks):
    """``tfgraph.wrap``'s wrapper sits inside AutoGraph's ``do_not_convert``: the framework
    function it calls (with the wait for the other ranks) is found one closure down."""
    tf = pytest.importorskip("tensorflow")
    from ailens.integrations import tfgraph

    def collective(x):  # stands where horovod.tensorflow's allreduce is
        clocks.spend(5000)
        return x

    wrapped = tfgraph.wrap(tf, "attribution-test", collective, "allreduce", lambda a, k: None)
    prof = attribution.Profiler()
    prof.swap_real(wrapped, collective)
    timed = prof.timed(wrapped, "hooks")
    timed(1)
    prof.restore()
    t = prof.totals()
    assert t["framework"][:3] == [5000, 5000, 1]
    assert t["hooks"][0] == 0  # the wrapper's own Python: nothing on these clocks
    timed(1)  # restored: the real function is back, untimed
    assert prof.totals()["framework"][2] == 1


SCRIPT = REPO / "benchmarks" / "overhead" / "mnist_ddp.py"
TORCHRUN = Path(sys.executable).parent / "torchrun"
LINE = re.compile(r"^ATTRIBUTION (\{.*\})$", re.M)


@pytest.mark.parallel
@pytest.mark.timeout(240)
def test_attribution_on_two_ddp_ranks_counts_every_hook_and_leaves_ailens_on():
    pytest.importorskip("torch")
    if not TORCHRUN.exists():
        pytest.skip("torchrun not found next to the interpreter")
    cmd = [str(TORCHRUN), "--standalone", "--nproc_per_node=2", str(SCRIPT), "--pairs", "1",
           "--block-s", "0.05", "--attribution"]  # fmt: skip
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=200,
                          env={**os.environ, "OMP_NUM_THREADS": "1",
                               "PYTHONPATH": str(REPO)})  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    over = json.loads(re.search(r"^OVERHEAD (\{.*\})$", proc.stdout, re.M).group(1))
    assert over["ailens_disabled"] is None  # the timed comm hook passed DDP's checks
    ranks = sorted((json.loads(m) for m in LINE.findall(proc.stdout)), key=lambda a: a["rank"])
    assert [a["rank"] for a in ranks] == [0, 1]
    assert over["collectives_per_step"] > 0
    for a in ranks:
        c = a["components"]
        per_step = a["collectives_per_step"]  # in the counted steps (the set-up left out)
        # A begin and an end per collective (both figures rounded: 2 and 3 decimals).
        assert c["buffer"]["calls_per_step"] == pytest.approx(2 * per_step, abs=0.011)
        assert c["hooks"]["calls_per_step"] >= per_step  # the comm hook, at least
        assert c["framework"]["calls_per_step"] >= per_step  # each bucket's allreduce launch
        assert c["step_end"]["calls_per_step"] >= 1
        own = sum(c[k]["cpu_us_per_step"] for k in attribution.COMPONENTS)
        assert a["total_cpu_us_per_step"] == pytest.approx(own, abs=0.01)
        assert a["step_cpu_us"] > 0 and a["cpu_share_pct"] is not None


def test_the_mpi4py_methods_are_timed_as_hooks_and_their_collective_as_the_framework(tmp_path):
    """A LensComm's blocking collectives record in their own frame or compiled wrapper (not
    through ``call``): each is timed as ``hooks``, the real communicator's call inside as
    ``framework``, step inference as ``step_infer``; restore puts the communicator, the
    methods and the compiled wrappers' calls back."""
    MPI = pytest.importorskip("mpi4py.MPI")
    import numpy as np
    from ailens.integrations.mpi import LensComm, wrap

    comm = wrap(MPI.COMM_SELF, run_dir=str(tmp_path / "run"))
    real_comm, native = comm.comm, vars(comm).get("Allreduce")  # the compiled wrapper, if built
    real_allreduce = getattr(native, "real", None)
    prof = attribution.Profiler()
    prof.attach_handle(comm)
    a, out = np.ones(8), np.empty(8)
    for _ in range(40):
        comm.Allreduce(a, out, op=MPI.SUM)
        comm.Allreduce(a, out, op=MPI.SUM)
        comm.allreduce(1.0, op=MPI.SUM)
    prof.restore()
    assert comm.comm is real_comm and vars(comm).get("Allreduce") is native
    if native is None:
        assert comm.Allreduce.__func__ is LensComm.Allreduce
    else:
        assert native.real is real_allreduce
    steps = comm.lens.steps
    comm.close()
    comps = prof.report(steps=steps)["components"]
    assert steps >= 38  # inferred: every iteration a step
    assert comps["hooks"]["calls_per_step"] >= 3  # each collective, and _record's while found
    assert comps["framework"]["calls_per_step"] >= 3  # the real collectives
    # Step inference: each observation; compiled, those of the search (the loop followed in C).
    assert comps["step_infer"]["calls_per_step"] >= (3 if native is None else 0.1)
