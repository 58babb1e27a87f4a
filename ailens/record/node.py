"""Where a rank runs: its rank and world size as the launcher says (``detect_rank_world``), and
what it computes on: the node's cores, the cores and CPU quota this process may use, memory,
and the thread settings the usual libraries read. Written into every trace header
(``meta["node"]``) so the what-if and the learned predictor know the layout a run had.

Stdlib only; every probe tolerates a missing file and says ``None`` rather than guess.
"""

from __future__ import annotations

import os
import platform
from pathlib import Path

__all__ = ["describe_node", "cgroup_cpu_quota", "detect_rank_world"]

THREAD_ENV = (
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "TF_NUM_INTRAOP_THREADS",
    "TF_NUM_INTEROP_THREADS",
)


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return None


def _cpu_model() -> str:
    text = _read("/proc/cpuinfo") or ""
    for line in text.splitlines():
        if line.lower().startswith(("model name", "cpu model", "hardware")):
            return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def _own_cgroup(controller: str) -> str:
    """This process's cgroup path for a v1 controller ('' for v2 or the root)."""
    for line in (_read("/proc/self/cgroup") or "").splitlines():
        _, names, path = line.split(":", 2)
        if controller in names.split(","):
            return path
    return ""


def cgroup_cpu_quota() -> float | None:
    """CPUs' worth of time this process's cgroup may use (quota / period), None if unlimited.

    cgroup v1 (``cpu.cfs_quota_us`` / ``cpu.cfs_period_us`` under the cpu controller) first,
    then v2 (``cpu.max``)."""
    rel = _own_cgroup("cpu").lstrip("/")
    for root in ("/sys/fs/cgroup/cpu", "/sys/fs/cgroup/cpu,cpuacct"):
        base = Path(root) / rel if rel else Path(root)
        quota, period = _read(f"{base}/cpu.cfs_quota_us"), _read(f"{base}/cpu.cfs_period_us")
        if quota is not None and period is not None:
            q, p = int(quota), int(period)
            return q / p if q > 0 and p > 0 else None
    line = _read("/sys/fs/cgroup/cpu.max")
    if line:
        quota, _, period = line.partition(" ")
        if quota != "max" and period:
            return int(quota) / int(period)
    return None


def _mem_total_bytes() -> int | None:
    for line in (_read("/proc/meminfo") or "").splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) * 1024
    return None


def describe_node() -> dict:
    """Cores, usable cores, CPU quota, memory and thread settings of this process's node."""
    try:
        affinity = sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        affinity = list(range(os.cpu_count() or 1))
    return {
        "hostname": platform.node(),  # the uname node name: no socket import
        "cpu_model": _cpu_model(),
        "cores": os.cpu_count() or 1,  # logical CPUs of the node
        "affinity": affinity,  # the CPUs this process may run on
        "cpu_quota": cgroup_cpu_quota(),  # CPUs' worth of time allowed, None = unlimited
        "mem_total_bytes": _mem_total_bytes(),
        "thread_env": {k: os.environ[k] for k in THREAD_ENV if k in os.environ},
    }


def _env_int(*names: str) -> int | None:
    for name in names:
        value = os.environ.get(name)
        if value is not None and value.strip().lstrip("-").isdigit():
            return int(value)
    return None


def detect_rank_world() -> tuple[int, int]:
    """Rank and world size from the launcher's environment (torchrun, MPI, Horovod), else (0, 1)."""
    rank = _env_int("RANK", "HOROVOD_RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK")
    world = _env_int("WORLD_SIZE", "HOROVOD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE")
    return (rank or 0, world or 1)
