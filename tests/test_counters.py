"""Tests of ailens.record.counters: real cpu-ns and perf plumbing, plus the thread logic with a
fake."""

from __future__ import annotations

import ctypes
import errno
import os
import re
import threading
import time

import pytest

from ailens.record import counters as C
from ailens.record.counters import (
    COUNTER_KINDS,
    CounterUnavailable,
    open_counter,
    perf_event_available,
)

HW_OK, HW_REASON = perf_event_available()


def _busy(n: int = 300_000) -> int:
    """Pure-Python CPU work (holds the GIL, so only one thread burns CPU at a time)."""
    return sum(i * i for i in range(n))


def _delta(counter, work) -> int:
    before = counter.read()
    work()
    return counter.read() - before


def _in_new_thread(work):
    def run():
        t = threading.Thread(target=work)
        t.start()
        t.join()

    return run


def _open_task_clock() -> C.PerfCounter:
    """The real perf path (same struct, syscall, per-thread fds) on a software event."""
    return C.PerfCounter(
        C.PERF_TYPE_SOFTWARE,
        C.PERF_COUNT_SW_TASK_CLOCK,
        kind="task-clock",
        unit="ns",
        event="PERF_COUNT_SW_TASK_CLOCK",
    )


def _check_counts_all_threads(factory) -> None:
    """Work in the caller, in a thread created after open, and in a thread created after open
    by a thread that existed before open must all be counted by ``factory()``'s counter."""
    go, done = threading.Event(), threading.Event()

    def old_thread():  # exists before open, spawns its worker only after open
        go.wait()
        _in_new_thread(_busy)()
        done.set()

    old = threading.Thread(target=old_thread)
    old.start()
    c = factory()
    try:
        main = _delta(c, _busy)
        assert main > 0
        assert _delta(c, _in_new_thread(_busy)) > 0.5 * main

        def via_old():
            go.set()
            assert done.wait(30)

        assert _delta(c, via_old) > 0.5 * main
    finally:
        c.close()
        go.set()
        old.join()


# ---- kinds -----------------------------------------------------------------------------------


def test_unknown_kind_names_valid_kinds():
    with pytest.raises(ValueError) as info:
        open_counter("cycles")
    for kind in COUNTER_KINDS:
        assert kind in str(info.value)


def test_cpu_ns_is_builtin_monotonic_and_grows():
    c = open_counter("cpu-ns")
    assert (c.kind, c.unit, c.fallback_reason) == ("cpu-ns", "ns", None)
    assert c.read is time.process_time_ns  # no Python frame on the hot path
    values = [c.read() for _ in range(1000)]
    assert values == sorted(values)
    assert _delta(c, lambda: _busy(1_000_000)) > 10_000_000  # > 10 ms of CPU
    c.close()


def test_auto_falls_back_with_reason_when_unavailable():
    c = open_counter("auto")
    try:
        if HW_OK:
            assert (c.kind, c.unit, c.fallback_reason) == ("instructions", "instructions", None)
        else:
            assert (c.kind, c.unit) == ("cpu-ns", "ns")
            assert c.fallback_reason == HW_REASON
            assert re.search(r"\bE[A-Z]+\b", HW_REASON), HW_REASON  # names the errno
    finally:
        c.close()


def test_instructions_unavailable_raises_the_same_reason():
    if HW_OK:
        pytest.skip("hardware counter available here")
    with pytest.raises(CounterUnavailable) as info:
        open_counter("instructions")
    assert str(info.value) == HW_REASON
    assert HW_REASON.startswith("perf_event_open(PERF_COUNT_HW_INSTRUCTIONS) failed with E")


def test_instructions_real_hardware():
    if not HW_OK:
        pytest.skip(HW_REASON)
    c = open_counter("instructions")
    assert (c.kind, c.unit, c.fallback_reason) == ("instructions", "instructions", None)
    small = _delta(c, lambda: _busy(100_000))
    big = _delta(c, lambda: _busy(1_000_000))
    assert 0 < small < big
    c.close()
    _check_counts_all_threads(lambda: open_counter("instructions"))


# ---- the real perf plumbing on a software event ------------------------------------------------


def test_attr_layout():
    assert ctypes.sizeof(C.PerfEventAttr) == 136  # PERF_ATTR_SIZE_VER8
    assert C.PerfEventAttr.flags.offset == 40
    assert C.PerfEventAttr.config3.offset == 128


def test_software_event_one_fd_per_thread_and_sum_matches_cpu_time():
    stop = threading.Event()
    helpers = [threading.Thread(target=stop.wait) for _ in range(3)]
    for t in helpers:
        t.start()
    try:
        c = _open_task_clock()
        assert len(c.fds) == len(os.listdir("/proc/self/task"))
        assert not c.inherits_processes  # this kernel accepts inherit_thread
        cpu = time.process_time_ns()
        task = _delta(c, lambda: _busy(1_000_000))
        cpu = time.process_time_ns() - cpu
        assert 0.5 * cpu < task < 1.5 * cpu
        values = [c.read() for _ in range(100)]
        assert values == sorted(values)
        fds = c.fds
        c.close()
        for fd in fds:  # really closed
            with pytest.raises(OSError):
                os.fstat(fd)
        assert c.read() == values[-1]
    finally:
        stop.set()
        for t in helpers:
            t.join()


def test_software_event_counts_threads_created_after_open():
    _check_counts_all_threads(_open_task_clock)


def test_software_event_does_not_count_forked_children():
    c = _open_task_clock()
    try:
        if c.inherits_processes:
            pytest.skip("kernel < 5.13: inherit_thread unsupported, forked children are counted")
        child_cpu_ns = []

        def fork_child():
            pid = os.fork()
            if pid == 0:  # child: burn CPU, then leave without running any Python cleanup
                for _ in range(4):
                    _busy()
                os._exit(0)
            _, _, usage = os.wait4(pid, 0)
            child_cpu_ns.append(int(usage.ru_utime * 1e9))

        counted = _delta(c, fork_child)
        # The parent's own share (fork of a large process copies page tables) is counted;
        # the child's burn must not be. Compare with what the child really used.
        assert child_cpu_ns[0] > 0
        assert counted < 0.5 * child_cpu_ns[0]
    finally:
        c.close()


# ---- thread handling, summing and errors with a fake backend -----------------------------------


class FakePerf:
    def __init__(self, tids, fail=None, reject_inherit_thread=False):
        self.tids = list(tids)
        self.fail = fail or {}  # tid -> errno
        self.reject_inherit_thread = reject_inherit_thread
        self.opened: list[tuple[int, int, C.PerfEventAttr]] = []  # (tid, fd, attr)
        self.values: dict[int, int] = {}
        self.closed: list[int] = []

    def open_fd(self, attr, tid):
        if self.reject_inherit_thread and attr.flags & C.FLAG_INHERIT_THREAD:
            raise OSError(errno.EINVAL, os.strerror(errno.EINVAL))
        if tid in self.fail:
            raise OSError(self.fail[tid], os.strerror(self.fail[tid]))
        fd = 1000 + len(self.opened)
        self.opened.append((tid, fd, attr))
        self.values[fd] = 0
        return fd

    def read_fd(self, fd):
        assert fd not in self.closed
        return self.values[fd]

    def close_fd(self, fd):
        self.closed.append(fd)

    def hooks(self):
        return {
            "_open_fd": self.open_fd,
            "_read_fd": self.read_fd,
            "_list_tids": lambda: list(self.tids),
            "_close_fd": self.close_fd,
        }

    @property
    def fds(self):
        return [fd for _, fd, _ in self.opened]


def test_fake_one_fd_per_tid_caller_first_with_right_attr():
    own = threading.get_native_id()
    fake = FakePerf([11, own, 12, 13])
    c = open_counter("instructions", **fake.hooks())
    assert (c.kind, c.unit, c.fallback_reason) == ("instructions", "instructions", None)
    assert [tid for tid, _, _ in fake.opened] == [own, 11, 12, 13]
    assert list(c.fds) == fake.fds
    attr = fake.opened[0][2]
    assert (attr.type, attr.config) == (C.PERF_TYPE_HARDWARE, C.PERF_COUNT_HW_INSTRUCTIONS)
    assert attr.size == ctypes.sizeof(C.PerfEventAttr)
    want = C.FLAG_INHERIT | C.FLAG_EXCLUDE_KERNEL | C.FLAG_EXCLUDE_HV | C.FLAG_INHERIT_THREAD
    assert attr.flags == want  # disabled=0: counting starts at open
    assert not c.inherits_processes


def test_fake_read_is_the_sum_and_never_decreases():
    fake = FakePerf([1, 2, 3])
    c = open_counter("instructions", **fake.hooks())
    assert c.read() == 0
    for fd, v in zip(fake.fds, (5, 7, 11), strict=True):
        fake.values[fd] = v
    assert c.read() == 23
    fake.values[fake.fds[1]] = 100  # e.g. inherited children added into this thread's fd
    assert c.read() == 116
    fake.values[fake.fds[0]] = 0  # a fd in error state reads 0
    assert c.read() == 116


def test_fake_failure_on_nth_tid_closes_earlier_fds():
    fake = FakePerf([1, 2, 3, 4], fail={3: errno.EMFILE})
    with pytest.raises(CounterUnavailable, match="EMFILE"):
        open_counter("instructions", **fake.hooks())
    assert fake.closed == fake.fds and len(fake.closed) == 2
    # auto falls back on the same failure, still without leaking fds
    fake = FakePerf([1, 2, 3, 4], fail={3: errno.EMFILE})
    c = open_counter("auto", **fake.hooks())
    assert c.kind == "cpu-ns" and "EMFILE" in c.fallback_reason
    assert fake.closed == fake.fds


def test_fake_thread_exited_before_open_is_skipped():
    fake = FakePerf([1, 2, 3], fail={2: errno.ESRCH})
    c = open_counter("instructions", **fake.hooks())
    assert [tid for tid, _, _ in fake.opened] == [1, 3]
    assert len(c.fds) == 2


@pytest.mark.parametrize(
    ("err", "words"),
    [
        (errno.ENOENT, ["ENOENT", "PMU", "bare metal"]),
        (errno.EACCES, ["EACCES", "perf_event_paranoid"]),
        (errno.EPERM, ["EPERM", "perf_event_paranoid", "seccomp"]),
        (errno.ENOSYS, ["ENOSYS", "CONFIG_PERF_EVENTS"]),
        (errno.EIO, ["EIO", "perf_event_paranoid"]),  # unmapped errno: generic advice
    ],
)
def test_fake_errno_reason(err, words):
    fake = FakePerf([1, 2], fail={1: err})
    with pytest.raises(CounterUnavailable) as info:
        open_counter("instructions", **fake.hooks())
    reason = str(info.value)
    assert "\n" not in reason
    for w in words:
        assert w in reason
    assert fake.opened == [] and fake.closed == []
    c = open_counter("auto", **fake.hooks())
    assert (c.kind, c.fallback_reason) == ("cpu-ns", reason)


def test_fake_old_kernel_retries_without_inherit_thread():
    fake = FakePerf([1, 2], reject_inherit_thread=True)
    c = open_counter("instructions", **fake.hooks())
    assert c.inherits_processes
    assert all(not attr.flags & C.FLAG_INHERIT_THREAD for _, _, attr in fake.opened)
    assert all(attr.flags & C.FLAG_INHERIT for _, _, attr in fake.opened)


def test_fake_close_closes_all_fds_once():
    fake = FakePerf([1, 2, 3])
    c = open_counter("instructions", **fake.hooks())
    fake.values[fake.fds[2]] = 9
    assert c.read() == 9
    c.close()
    c.close()
    assert fake.closed == fake.fds
    assert c.read() == 9  # the last total, no read of a closed fd


def test_fake_no_threads_or_no_proc():
    with pytest.raises(CounterUnavailable, match="no thread"):
        open_counter("instructions", **FakePerf([]).hooks())

    def no_proc():
        raise FileNotFoundError(errno.ENOENT, "No such file or directory", "/proc/self/task")

    hooks = FakePerf([1]).hooks() | {"_list_tids": no_proc}
    with pytest.raises(CounterUnavailable, match="cannot list threads"):
        open_counter("instructions", **hooks)


def test_unknown_machine(monkeypatch):
    monkeypatch.setattr(C, "_MACHINE", "sparc64")
    with pytest.raises(CounterUnavailable, match="sparc64"):
        open_counter("instructions")
    assert open_counter("auto").kind == "cpu-ns"
