"""Work counters: how much work this process did between two collectives.

``open_counter(kind)`` returns an object with ``.kind``, ``.unit``, ``.read() -> int``,
``.close()`` and ``.fallback_reason``. Only differences between two ``read()`` values are
meaningful: the instructions counter starts near 0 at open, ``cpu-ns`` is the CPU time of the
process since it started.

kinds
  ``instructions``  retired user-space instructions of the whole process (hardware PMU through
                    ``perf_event_open``); raises ``CounterUnavailable`` when the PMU is not there.
  ``cpu-ns``        ``time.process_time_ns()``: CPU time of all threads, always available.
  ``auto``          ``instructions`` if it opens, else ``cpu-ns`` with ``fallback_reason`` set.

How threads are counted (instructions)
  A perf counter opened for a pid counts one *thread*. So at open we list
  ``/proc/self/task`` and open one counter per thread (pid=tid, cpu=-1), the calling thread
  first. Every counter has ``inherit=1``: a thread created later by a counted thread gets a
  child counter whose count the kernel adds into the parent's fd on read, including the
  counts of children that already exited. So intra-op pools created after open are counted
  whichever counted thread creates them, and also threads created by threads that existed
  before open. ``read()`` is the sum over all fds.
  ``inherit_thread=1`` (Linux >= 5.13) limits inheritance to threads: forked child processes
  (DataLoader workers, subprocesses) are *not* counted, which matches ``cpu-ns``. On older
  kernels, which reject that bit with EINVAL, we retry without it and set
  ``inherits_processes = True`` (forked children are then counted too).
  Limits: processes that are not our descendants (other ranks, a server process) are never
  counted; a thread created during the opening window by a thread whose counter is not open
  yet is missed (the window is one syscall per thread, and the caller's thread is opened first
  because it is the usual creator of pools); counters opened in one process mean nothing after
  ``fork()`` in the child, so open the counter in the process that uses it.

Reading: each fd is read as its raw 8-byte count (no PERF_FORMAT_TOTAL_TIME_*). With one
event per thread and no group, the kernel multiplexes it only if other perf users oversubscribe
the PMU (instructions has a fixed counter on x86); scaling would turn the total into an estimate
that can go backwards and would cost a larger read, so we accept undercounting in that rare case.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import sys
import threading
import time
from collections.abc import Callable, Iterable
from typing import Protocol

__all__ = [
    "COUNTER_KINDS",
    "Counter",
    "CounterUnavailable",
    "CpuNsCounter",
    "PerfCounter",
    "open_counter",
    "perf_event_available",
]

COUNTER_KINDS = ("auto", "instructions", "cpu-ns")


class CounterUnavailable(RuntimeError):
    """The requested counter cannot be opened here; ``str(exc)`` is the one-line reason."""


class Counter(Protocol):
    kind: str
    unit: str
    fallback_reason: str | None

    def read(self) -> int: ...

    def close(self) -> None: ...


# ---- perf_event_open ABI (include/uapi/linux/perf_event.h) ----------------------------------

PERF_TYPE_HARDWARE = 0
PERF_TYPE_SOFTWARE = 1
PERF_COUNT_HW_INSTRUCTIONS = 1
PERF_COUNT_SW_TASK_CLOCK = 1

# Bit positions inside the attr's 64-bit flags bitfield word.
FLAG_DISABLED = 1 << 0
FLAG_INHERIT = 1 << 1
FLAG_EXCLUDE_KERNEL = 1 << 5  # also required when perf_event_paranoid >= 2
FLAG_EXCLUDE_HV = 1 << 6
FLAG_INHERIT_THREAD = 1 << 35  # Linux 5.13+: inherit into CLONE_THREAD children only

PERF_FLAG_FD_CLOEXEC = 1 << 3  # so exec'd children do not inherit our fds

_SYSCALL_NR = {"x86_64": 298, "aarch64": 241}
_MACHINE = platform.machine()
_BYTEORDER = sys.byteorder  # the kernel writes the u64 count in native order


class PerfEventAttr(ctypes.Structure):
    """``struct perf_event_attr`` up to PERF_ATTR_SIZE_VER8 (136 bytes)."""

    _fields_ = [
        ("type", ctypes.c_uint32),
        ("size", ctypes.c_uint32),
        ("config", ctypes.c_uint64),
        ("sample_period", ctypes.c_uint64),  # union with sample_freq
        ("sample_type", ctypes.c_uint64),
        ("read_format", ctypes.c_uint64),
        ("flags", ctypes.c_uint64),  # the disabled:1, inherit:1, ... bitfield
        ("wakeup_events", ctypes.c_uint32),  # union with wakeup_watermark
        ("bp_type", ctypes.c_uint32),
        ("config1", ctypes.c_uint64),  # union with bp_addr
        ("config2", ctypes.c_uint64),  # union with bp_len
        ("branch_sample_type", ctypes.c_uint64),
        ("sample_regs_user", ctypes.c_uint64),
        ("sample_stack_user", ctypes.c_uint32),
        ("clockid", ctypes.c_int32),
        ("sample_regs_intr", ctypes.c_uint64),
        ("aux_watermark", ctypes.c_uint32),
        ("sample_max_stack", ctypes.c_uint16),
        ("_reserved_2", ctypes.c_uint16),
        ("aux_sample_size", ctypes.c_uint32),
        ("_reserved_3", ctypes.c_uint32),
        ("sig_data", ctypes.c_uint64),
        ("config3", ctypes.c_uint64),
    ]


def make_attr(type_: int, config: int, flags: int) -> PerfEventAttr:
    """A counting (non-sampling) attr for one event."""
    return PerfEventAttr(type=type_, size=ctypes.sizeof(PerfEventAttr), config=config, flags=flags)


_libc: ctypes.CDLL | None = None


def sys_perf_event_open(attr: PerfEventAttr, tid: int) -> int:
    """Open a counter for thread ``tid`` on any CPU; raise OSError carrying the errno."""
    global _libc
    nr = _SYSCALL_NR.get(_MACHINE)
    if nr is None:
        raise CounterUnavailable(
            f"perf_event_open: syscall number unknown for machine {_MACHINE!r}"
        )
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
    # syscall() is variadic: pass every argument as a full C long.
    L = ctypes.c_long
    fd = _libc.syscall(L(nr), ctypes.byref(attr), L(tid), L(-1), L(-1), L(PERF_FLAG_FD_CLOEXEC))
    if fd < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return fd


def read_u64(fd: int) -> int:
    """Raw count of one counter fd."""
    return int.from_bytes(os.read(fd, 8), _BYTEORDER)


def list_self_tids() -> list[int]:
    """Thread ids of this process."""
    return [int(t) for t in os.listdir("/proc/self/task")]


_PMU_HINT = "run on bare metal / a VM exposing the PMU"
_PERM_HINT = (
    "not permitted; check /proc/sys/kernel/perf_event_paranoid (<= 2 needed), CAP_PERFMON, "
    "or a seccomp/LSM policy of the container"
)
# What an errno from perf_event_open means, and what to do about it.
_ERRNO_MEANING = {
    errno.ENOENT: "the kernel does not expose this hardware event (no PMU in "
    "/sys/bus/event_source/devices, typical of VMs and containers without PMU passthrough); "
    f"{_PMU_HINT}",
    errno.EOPNOTSUPP: f"the PMU cannot count this event in this mode; {_PMU_HINT}",
    errno.ENODEV: f"there is no PMU for this event; {_PMU_HINT}",
    errno.EACCES: _PERM_HINT,
    errno.EPERM: _PERM_HINT,
    errno.ENOSYS: "perf_event_open is not available (kernel built without CONFIG_PERF_EVENTS "
    "or the syscall is blocked by a seccomp filter)",
    errno.EINVAL: "the kernel rejected the perf_event_attr (kernel too old or event invalid)",
    errno.EMFILE: "out of file descriptors (one is needed per thread); raise `ulimit -n`",
    errno.EBUSY: "the PMU is in exclusive use by another program",
}


def perf_error_reason(err: int, event: str) -> str:
    """One-line reason for a failed perf_event_open: errno name, meaning, what to check."""
    name = errno.errorcode.get(err, f"errno {err}")
    meaning = _ERRNO_MEANING.get(err, f"check /proc/sys/kernel/perf_event_paranoid or {_PMU_HINT}")
    return f"perf_event_open({event}) failed with {name} ({os.strerror(err)}): {meaning}"


class PerfCounter:
    """Sum of one inherited perf counter per thread of this process (see module docstring)."""

    def __init__(
        self,
        type_: int,
        config: int,
        *,
        kind: str,
        unit: str,
        event: str,
        open_fd: Callable[[PerfEventAttr, int], int] | None = None,
        read_fd: Callable[[int], int] | None = None,
        list_tids: Callable[[], Iterable[int]] | None = None,
        close_fd: Callable[[int], None] | None = None,
    ) -> None:
        self.kind = kind
        self.unit = unit
        self.event = event
        self.fallback_reason: str | None = None
        self.inherits_processes = False
        self._open_fd = open_fd or sys_perf_event_open
        self._read_fd = read_fd or read_u64
        self._close_fd = close_fd or os.close
        self._fds: tuple[int, ...] = ()
        self._last = 0
        base = FLAG_INHERIT | FLAG_EXCLUDE_KERNEL | FLAG_EXCLUDE_HV  # disabled=0: counts now
        self.attr = make_attr(type_, config, base | FLAG_INHERIT_THREAD)
        try:
            tids = list((list_tids or list_self_tids)())
        except OSError as exc:
            raise CounterUnavailable(f"cannot list threads in /proc/self/task: {exc}") from None
        own = threading.get_native_id()
        # The calling thread first: it usually creates the pools, so its later children are
        # covered by inherit even if they appear while the other counters are being opened.
        tids.sort(key=lambda t: t != own)
        fds: list[int] = []
        try:
            for tid in tids:
                fd = self._open_one(tid, base, first=not fds)
                if fd is not None:
                    fds.append(fd)
        except BaseException:
            for fd in fds:
                self._close_quietly(fd)
            raise
        if not fds:
            raise CounterUnavailable(f"perf_event_open({event}): no thread could be opened")
        self._fds = tuple(fds)
        self._last = self.read()

    def _open_one(self, tid: int, base: int, first: bool) -> int | None:
        try:
            return self._open_fd(self.attr, tid)
        except OSError as exc:
            err = exc.errno or 0
            if err == errno.ESRCH:
                return None  # the thread exited after listing: nothing left to count
            if err == errno.EINVAL and first and self.attr.flags & FLAG_INHERIT_THREAD:
                # Kernel < 5.13 rejects inherit_thread: inherit into forked children as well.
                self.attr = make_attr(self.attr.type, self.attr.config, base)
                self.inherits_processes = True
                return self._open_one(tid, base, first=False)
            raise CounterUnavailable(perf_error_reason(err, self.event)) from None

    @property
    def fds(self) -> tuple[int, ...]:
        """The open counter fds, one per thread that existed at open."""
        return self._fds

    def read(self) -> int:
        """Total count over all threads since open; never decreases."""
        # One read syscall per fd: ~1 us per fd here for a software event (8 fds: ~6.6 us);
        # hardware counters of threads running on another CPU also need an IPI to be read.
        total = sum(map(self._read_fd, self._fds))
        if total < self._last:  # a fd in error state reads as 0; keep the total monotonic
            return self._last
        self._last = total
        return total

    def close(self) -> None:
        """Close every fd; later reads return the last total. Idempotent."""
        fds, self._fds = self._fds, ()
        for fd in fds:
            self._close_quietly(fd)

    def _close_quietly(self, fd: int) -> None:
        try:
            self._close_fd(fd)
        except OSError:
            pass

    def __del__(self) -> None:
        try:  # do not leak fds when the owner forgets close(); never raise from a finalizer
            self.close()
        except Exception:
            pass


class CpuNsCounter:
    """Process CPU time in ns (all threads, including exited ones); always available."""

    kind = "cpu-ns"
    unit = "ns"

    def __init__(self, fallback_reason: str | None = None) -> None:
        # The hot path calls read() at every collective, so read *is* the builtin: no Python
        # frame. Measured here (Python 3.11, 2-vCPU Firecracker VM on AMD EPYC, timeit best of 7,
        # several runs): time.process_time_ns() 510-650 ns per call (a real clock_gettime
        # syscall: CLOCK_PROCESS_CPUTIME_ID has no vDSO path; about the same with 1 or 33
        # threads) versus time.perf_counter_ns() 45-66 ns (vDSO). A Python method wrapping it
        # would add ~30-40 ns more.
        self.read: Callable[[], int] = time.process_time_ns
        self.fallback_reason = fallback_reason

    def close(self) -> None:
        """Nothing to release."""


def open_counter(
    kind: str = "auto",
    *,
    _open_fd: Callable[[PerfEventAttr, int], int] | None = None,
    _read_fd: Callable[[int], int] | None = None,
    _list_tids: Callable[[], Iterable[int]] | None = None,
    _close_fd: Callable[[int], None] | None = None,
) -> Counter:
    """Open a work counter of ``kind`` (one of COUNTER_KINDS).

    The underscore hooks replace the syscall, fd read, thread listing and fd close (tests).
    Raises ValueError for an unknown kind and CounterUnavailable for ``instructions`` when the
    hardware counter cannot be opened; ``auto`` then falls back to ``cpu-ns``.
    """
    if kind not in COUNTER_KINDS:
        raise ValueError(f"unknown counter kind {kind!r}; valid kinds: {', '.join(COUNTER_KINDS)}")
    if kind == "cpu-ns":
        return CpuNsCounter()
    try:
        return PerfCounter(
            PERF_TYPE_HARDWARE,
            PERF_COUNT_HW_INSTRUCTIONS,
            kind="instructions",
            unit="instructions",
            event="PERF_COUNT_HW_INSTRUCTIONS",
            open_fd=_open_fd,
            read_fd=_read_fd,
            list_tids=_list_tids,
            close_fd=_close_fd,
        )
    except CounterUnavailable as exc:
        if kind == "instructions":
            raise
        return CpuNsCounter(fallback_reason=str(exc))


def perf_event_available() -> tuple[bool, str]:
    """Whether the hardware instructions counter opens here: (True, "") or (False, reason)."""
    try:
        counter = open_counter("instructions")
    except CounterUnavailable as exc:
        return False, str(exc)
    counter.close()
    return True, ""
