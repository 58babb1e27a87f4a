"""Fail open on one rank: the first fault inside ailens disables it there with one warning,
and training goes on.

``FailOpen`` holds why the rank is disabled (``reason``, None while recording) and says it
once: an internal error with its traceback, an unusable run directory without one (not a
bug in ailens), a writer-thread failure (the trace file named). Later disk problems on the
rank are info, not warnings: one clear warning, not one per chunk. ``on_disable(thread)`` is
the owner's switch: ``"training"`` from the training thread, ``"writer"`` from the writer
thread (which must not touch the buffers the training thread owns).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

log = logging.getLogger("ailens")

__all__ = ["FailOpen"]


class FailOpen:
    """The fail-open state of one rank (see the module docstring)."""

    def __init__(self, rank: int, on_disable: Callable[[str], None]) -> None:
        self.rank = rank
        self.reason: str | None = None
        self.disk_warned = False
        self.on_disk_trouble: Callable[[], None] | None = None  # e.g. live outputs stop writing
        self._on_disable = on_disable

    def fault(self, exc: BaseException, disk: bool = False) -> None:
        """A fault on the training thread (``disk``: the run directory is unusable)."""
        if self.reason is not None:
            return
        self.reason = f"{type(exc).__name__}: {exc}"
        log.warning(
            "ailens: %s on rank %d, instrumentation disabled on this rank; training continues (%s)",
            "cannot write to the run directory" if disk else "internal error",
            self.rank,
            self.reason,
            exc_info=None if disk else exc,
        )
        self._on_disable("training")

    def writer_fault(self, exc: BaseException, path) -> None:
        """The writer thread could not write the trace file ``path``."""
        if self.reason is not None:
            return
        self.reason = f"trace file {path}: {type(exc).__name__}: {exc}"
        log.warning(
            "ailens: cannot write the trace on rank %d, instrumentation disabled on "
            "this rank; training continues (%s)",
            self.rank,
            self.reason,
        )
        self._on_disable("writer")

    def disk_trouble(self, message: str) -> None:
        """A side file could not be written (the trace is unaffected)."""
        level = logging.INFO if self.disk_warned else logging.WARNING
        self.disk_warned = True
        log.log(level, "ailens: rank %d: %s", self.rank, message)
        if self.on_disk_trouble is not None:
            self.on_disk_trouble()
