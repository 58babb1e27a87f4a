"""``ailens forecast LOG --follow``: the forecast of a running job, from its log as it grows.

The log is read again whenever it changes (size, time or inode: a rotated or truncated log
reads anew). A log is fed to the forecast incrementally (``TimelineReplay``): each read feeds
only the steps and sections it added, so a read costs what the log grew by, not its length; a
log that changed what was already read (replaced, or a restart the reader merges
differently) is fed again from its start. A run directory is analysed whole at each change
(``analysis.run_forecast.latest_run``: through ``analyze``, as ``ailens report``). On a
terminal one live line is redrawn (carriage return) every ``POLL_S``; otherwise a plain line
is printed per update; ``--json-lines`` prints one JSON object per update (keys: docs/
forecast.md); ``--tensorboard DIR`` writes each update as scalars with TensorBoard's own
writer. It ends when the log says the run ended, or on Ctrl-C (exit 0).
"""

from __future__ import annotations

import json
import math
import shutil
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

from .._io import fmt_s
from ._common import CliError

__all__ = ["POLL_S", "Update", "follow", "live_line"]

# How often the log is looked at (and the live line redrawn).
POLL_S = 0.5
# A long log's first read is fed in pieces, this many steps first, then sized to take about
# POLL_S each.
_FIRST_CHUNK_STEPS = 500


@dataclass(frozen=True)
class Update:
    """What one read of the log says: the keys of a ``--json-lines`` object."""

    status: str  # "waiting" (nothing to forecast from yet), "running", "finished", "ended"
    steps: int = 0
    total_steps: int | None = None
    unit: str = "step"
    elapsed_s: float | None = None  # the run's time at its last step, from its start
    predicted_total_s: float | None = None
    interval_s: tuple[float, float] | None = None
    eta_s: float | None = None  # ailens: still to go after the last step
    progress_bar_total_s: float | None = None
    progress_bar_eta_s: float | None = None
    composer_total_s: float | None = None
    step_time_s: float | None = None
    signature_step: int | None = None
    actual_total_s: float | None = None
    end_wall_time: float | None = None  # Unix time the forecast puts the run's end at
    rereads: int = 0  # times the log changed what was read, and was read from its start
    message: str = ""  # why there is no forecast (yet)

    def to_dict(self, log: str, now: float) -> dict:
        d = {"time": now, "log": log, **self.__dict__}
        d["interval_s"] = None if self.interval_s is None else list(self.interval_s)
        return d

    @property
    def ended(self) -> bool:
        return self.status in ("finished", "ended")


def _update(tl, latest, signature_step, actual_total_s, last_step_wall, rereads) -> Update:
    """An update from a timeline and the forecast after its last step."""
    status = "running" if tl.end_s is None else ("finished" if tl.finished else "ended")
    u = Update(
        status=status,
        steps=tl.steps,
        total_steps=tl.total_steps,
        unit=tl.unit,
        signature_step=signature_step,
        actual_total_s=actual_total_s,
        rereads=rereads,
    )
    if latest is None:
        return replace(u, message="no step yet" if not tl.steps else "")
    bar = latest.progress_bar_total_s
    eta = latest.eta_s
    return replace(
        u,
        elapsed_s=latest.elapsed_s,
        predicted_total_s=latest.predicted_total_s,
        interval_s=latest.interval_s,
        eta_s=eta,
        progress_bar_total_s=bar,
        progress_bar_eta_s=None if bar is None else max(bar - latest.elapsed_s, 0.0),
        composer_total_s=latest.composer_total_s,
        step_time_s=latest.step_time_s,
        end_wall_time=None if eta is None or last_step_wall is None else last_step_wall + eta,
        message="" if latest.predicted_total_s is not None else _why_none(tl, latest),
    )


def _why_none(tl, latest) -> str:
    if latest.step_time_s is None:
        return "warming up"
    if not tl.total_steps:
        return "total steps unknown: give --total-steps or --epochs"
    return ""


class _LogSource:
    """A log file, fed to the forecast as it grows (after ``earlier``: the logs of the same
    run's earlier jobs, complete)."""

    def __init__(self, path: Path, read_kwargs: dict, earlier: tuple[Path, ...] = ()) -> None:
        self.path = path
        self.earlier = earlier
        self.read_kwargs = read_kwargs
        self.replay = None
        self.rereads = 0

    def stamp(self):
        try:
            st = self.path.stat()
        except OSError:
            return None
        return (st.st_ino, st.st_size, st.st_mtime_ns)

    def read(self, progress) -> Update:
        from ..analysis.logs import read_timeline
        from ..model.timeline import TimelineReplay

        tl = read_timeline([*self.earlier, self.path], **self.read_kwargs)
        if self.replay is None or not self.replay.extends(tl):
            if self.replay is not None:
                self.rereads += 1
            self.replay = TimelineReplay()
        r = self.replay
        m = r.timeline.steps if r.timeline is not None else 0
        chunk = _FIRST_CHUNK_STEPS
        # A long stretch to feed (the first read of a long log) goes in pieces of about
        # POLL_S each, the live line saying how far it got.
        while m + chunk < tl.steps:
            t0 = time.monotonic()
            m += chunk
            r.feed(tl.head(m))
            progress(f"reading {self.path}: step {m:,} of {tl.steps:,}")
            took = max(time.monotonic() - t0, 1e-3)
            chunk = max(_FIRST_CHUNK_STEPS // 5, int(chunk * POLL_S / took))
        r.feed(tl)
        oa = r.oa
        wall = _mtime(self.path)
        return _update(tl, r.latest(), oa.signature_step, oa.actual_total_s, wall, self.rereads)


class _RunDirSource:
    """An ailens run directory, analysed whole at each change."""

    def __init__(self, path: Path, read_kwargs: dict) -> None:
        self.path = path
        self.total = {k: read_kwargs.get(k) for k in ("total_steps", "epochs")}

    def stamp(self):
        try:
            # The rank traces: what the analysis reads (forecast.json is rewritten every
            # 2 s without a new step on disk).
            files = [(p.name, p.stat()) for p in self.path.glob("rank-*")]
            return tuple(sorted((name, st.st_size, st.st_mtime_ns) for name, st in files))
        except OSError:
            return None

    def read(self, progress) -> Update:
        from ..analysis.run_forecast import latest_run

        got = latest_run(self.path, **self.total)
        start, latest = got.start_wall_s, got.latest
        # The run's clock starts at its Lens's start: the last step ended that much later.
        wall = None if start is None or latest is None else start + latest.elapsed_s
        actual = got.timeline.end_s if got.timeline.finished else None
        return _update(got.timeline, latest, got.signature_step, actual, wall, 0)


def _mtime(p: Path) -> float | None:
    try:
        return p.stat().st_mtime
    except OSError:
        return None


# --------------------------------------------------------------------------- outputs


def live_line(u: Update, *, read_ago_s: float | None = None) -> str:
    """One line a person reads at a glance: steps seen, the forecast end with its interval
    and time to go (and the wall-clock time it puts the end at), the progress bar's ETA."""
    n = u.total_steps
    steps = f"step {u.steps:,}" + (f"/{n:,} ({100 * u.steps / n:.0f}%)" if n else "")
    parts = [f"ailens: {steps}"]
    if u.status == "waiting":
        parts.append(f"waiting: {u.message}")
    elif u.predicted_total_s is not None:
        lo, hi = u.interval_s
        parts.append(
            f"forecast end {fmt_s(u.predicted_total_s, 'compact')} "
            f"[{fmt_s(lo, 'compact')}, {fmt_s(hi, 'compact')}]"
        )
        if not u.ended:
            at = ""
            if u.end_wall_time is not None:
                at = time.strftime(" ~%H:%M:%S", time.localtime(u.end_wall_time))
            parts.append(f"to go {fmt_s(u.eta_s, 'compact')}{at}")
            if u.progress_bar_eta_s is not None:
                parts.append(f"progress bar: to go {fmt_s(u.progress_bar_eta_s, 'compact')}")
    else:
        parts.append(u.message or "no forecast yet")
    if u.ended:
        actual = u.actual_total_s
        parts.append(
            f"{u.status}" + (f" at {fmt_s(actual, 'compact')}" if actual is not None else "")
        )
    elif read_ago_s is not None and read_ago_s >= 2:
        parts.append(f"log quiet {read_ago_s:.0f}s")
    return "  ".join(parts)


class _Tensorboard:
    """Each update as scalars (step: the steps seen), written with TensorBoard's own
    writer (``tensorboard.summary.Writer``)."""

    TAGS = (
        ("ailens/forecast_total_s", "predicted_total_s"),
        ("ailens/forecast_eta_s", "eta_s"),
        ("ailens/progress_bar_total_s", "progress_bar_total_s"),
        ("ailens/progress_bar_eta_s", "progress_bar_eta_s"),
        ("ailens/composer_total_s", "composer_total_s"),
        ("ailens/step_time_s", "step_time_s"),
    )

    def __init__(self, logdir: Path) -> None:
        try:
            from tensorboard.summary import Writer
        except ImportError:
            raise CliError(
                "--tensorboard needs the tensorboard package (pip install tensorboard, or "
                "pip install ailens[tensorboard])"
            ) from None
        logdir.mkdir(parents=True, exist_ok=True)
        self.writer = Writer(str(logdir))

    def write(self, u: Update) -> None:
        if u.status == "waiting" or not u.steps:
            return
        for tag, key in self.TAGS:
            v = getattr(u, key)
            if v is not None and math.isfinite(v):
                self.writer.add_scalar(tag, v, u.steps)
        if u.interval_s is not None:
            self.writer.add_scalar("ailens/forecast_interval_low_s", u.interval_s[0], u.steps)
            self.writer.add_scalar("ailens/forecast_interval_high_s", u.interval_s[1], u.steps)
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


class _Screen:
    """The live line on a terminal (redrawn in place, cut to its width), plain lines
    elsewhere, or JSON lines."""

    def __init__(self, log: str, *, json_lines: bool) -> None:
        self.log = log
        self.json_lines = json_lines
        self.tty = sys.stdout.isatty() and not json_lines
        self.drawn = False

    def update(self, u: Update) -> None:
        if self.json_lines:
            sys.stdout.write(json.dumps(u.to_dict(self.log, time.time())) + "\n")
            sys.stdout.flush()
        elif not self.tty:
            sys.stdout.write(live_line(u) + "\n")
            sys.stdout.flush()

    def draw(self, text: str) -> None:
        """Redraw the live line (terminal only)."""
        if not self.tty:
            return
        width = shutil.get_terminal_size((100, 24)).columns - 1
        sys.stdout.write("\r" + text[:width] + "\x1b[K")
        sys.stdout.flush()
        self.drawn = True

    def done(self) -> None:
        if self.drawn:
            sys.stdout.write("\n")
            sys.stdout.flush()
            self.drawn = False


def follow(args, read_kwargs: dict) -> int:
    """The ``--follow`` loop; returns the exit code (0: the run ended, or Ctrl-C)."""
    from ..analysis.logs import LogError
    from ..record.trace import TraceError

    *earlier, path = args.log  # the run's earlier jobs' logs, then the one being written
    src = None
    screen = _Screen(str(path), json_lines=args.json_lines)
    board = _Tensorboard(args.tensorboard) if args.tensorboard is not None else None
    last_stamp, last_change, shown = object(), time.monotonic(), None
    u = Update(status="waiting", message=f"no {path} yet")
    try:
        while True:
            # A run directory or a log: known once the path is there (it may come later).
            if path.is_dir() and not earlier:
                if not isinstance(src, _RunDirSource):
                    src = _RunDirSource(path, read_kwargs)
            elif not isinstance(src, _LogSource):
                src = _LogSource(path, read_kwargs, tuple(earlier))
            stamp = src.stamp()
            if stamp != last_stamp:
                last_stamp, last_change = stamp, time.monotonic()
                if stamp is None:
                    u = replace(u, status="waiting", message=f"no {path} yet")
                else:
                    try:
                        u = src.read(screen.draw)
                    except (LogError, TraceError, ValueError, OSError) as e:
                        # A log too short to read yet, or a line cut mid-write: wait for
                        # more; what was read stands meanwhile.
                        if u.status == "waiting":
                            u = Update(status="waiting", message=_one_line(e))
                if u != shown:
                    shown = u
                    screen.update(u)
                    if board is not None:
                        board.write(u)
            screen.draw(live_line(u, read_ago_s=time.monotonic() - last_change))
            if u.ended:
                break
            time.sleep(POLL_S)
    except KeyboardInterrupt:
        pass  # the user stopped following: the job goes on, this is no error
    finally:
        screen.done()
        if board is not None:
            board.close()
    return 0


def _one_line(e: BaseException) -> str:
    text = str(e).splitlines()[0] if str(e) else type(e).__name__
    return text if len(text) <= 200 else text[:197] + "..."
