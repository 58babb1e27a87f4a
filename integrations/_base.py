"""What every adapter shares: the attachment (lifecycle, the recorded call, one patch
registry, inferred steps) and the rank-0 notice. Framework modules subclass
:class:`Attachment` and only translate their framework's calls into it.

Fail open: a failure in ailens's own code disables ailens on that rank (``lens.disable``);
the framework's call still runs exactly once and every collective still counts as a tick,
so the ranks keep issuing the same exchanges.
"""

from __future__ import annotations

import logging
import sys
import threading
from collections.abc import Callable, Hashable
from typing import Any

from ailens import Lens, LensConfig
from ailens.record.steps import Agree, StepFinder

log = logging.getLogger("ailens")

SKIP = object()
"""``step_key`` of a collective that is not an observation for step inference."""

_ABSENT = object()


class _Local(threading.local):
    depth = 0  # > 0: this thread is inside ailens's own collective or a recorded call


_local = _Local()


class _Quiet:
    """``with quiet():`` collectives this thread issues inside are not recorded: the exchange,
    and the calls a recorded call makes in turn (recorded once, at the outermost). A class,
    not a generator: it is on the hot path."""

    __slots__ = ()

    def __enter__(self) -> None:
        _local.depth += 1

    def __exit__(self, *exc) -> None:
        _local.depth -= 1


_QUIET = _Quiet()


def quiet() -> _Quiet:
    """See :class:`_Quiet`."""
    return _QUIET


def open_lens(**kwargs: Any) -> Lens:
    """A Lens, or a disabled one (with a warning) when starting it fails: never break
    training. A misspelt or invalid setting still raises here, at the user's line."""
    settings = {
        k: v for k, v in kwargs.items() if k not in ("rank", "world_size", "exchange", "meta")
    }
    LensConfig(**settings)
    try:
        return Lens(**kwargs)
    except Exception as e:  # noqa: BLE001
        log.warning("ailens: could not start (%s: %s); ailens is off", type(e).__name__, e)
        return disabled_lens(settings)


def disabled_lens(settings: dict[str, Any]) -> Lens:
    """A Lens that records nothing, for a rank where starting ailens failed."""
    return Lens(rank=0, world_size=1, **{**settings, "enabled": False})


def goes_on_without(what: str, e: Exception) -> None:
    """Warn that ``what`` failed in ailens's own code and training goes on without it."""
    log.warning("ailens: %s (%s: %s); training goes on without it", what, type(e).__name__, e)


def named_like(wrapper: Callable, real: Callable) -> Callable:
    """``wrapper`` dressed as the framework function ``real`` it stands in for."""
    name = getattr(real, "__name__", None)
    if name is not None:
        wrapper.__name__ = name
    wrapper.__doc__ = getattr(real, "__doc__", None)
    wrapper.__wrapped__ = real
    return wrapper


class Patches:
    """The one patch registry: attributes replaced while attached, and undo callbacks."""

    def __init__(self) -> None:
        self._undo: list[Callable[[], None]] = []

    def set(self, owner: Any, name: str, new: Any) -> None:
        """``owner.name = new`` until :meth:`restore`, which puts back the previous value
        (or removes an instance attribute) if ``new`` is still there."""
        old = vars(owner).get(name, _ABSENT)
        setattr(owner, name, new)

        def undo() -> None:
            if vars(owner).get(name, _ABSENT) is not new:
                return  # replaced since (e.g. wrapped by someone else): leave it
            if old is _ABSENT:
                delattr(owner, name)
            else:
                setattr(owner, name, old)

        self._undo.append(undo)

    def set_in_package(self, package: str, wrappers: dict[int, tuple[Any, Any]]) -> None:
        """Replace each original (``wrappers[id(original)] == (original, new)``) in every
        loaded module of ``package`` that holds it, under whatever name."""
        for mod_name, mod in list(sys.modules.items()):
            if mod is not None and (mod_name == package or mod_name.startswith(package + ".")):
                for attr, value in list(vars(mod).items()):
                    hit = wrappers.get(id(value))
                    if hit is not None and hit[0] is value:
                        self.set(mod, attr, hit[1])

    def on_restore(self, fn: Callable[[], None]) -> None:
        self._undo.append(fn)

    def restore(self) -> None:
        undo, self._undo = self._undo, []
        for fn in reversed(undo):
            try:
                fn()
            except Exception as e:  # noqa: BLE001 - restore the rest
                log.warning("ailens: could not undo a patch (%s: %s)", type(e).__name__, e)


class Attachment:
    """An adapter's handle on a Lens: ``.lens``, ``should_stop``, ``step_end()``,
    ``set_total_steps()``, ``close()``, ``detach()``; a context manager that closes on exit.

    ``infer_steps``: steps are inferred from the collectives (``ailens.record.steps``) until the
    script marks one itself; ``agree`` is the cross-rank int64 sum the votes use.
    """

    def __init__(self, lens: Lens, *, infer_steps: bool = False, agree: Agree | None = None):
        self.lens = lens
        self.patches = Patches()
        self.attached = True
        self.lock = threading.RLock()  # framework threads (TF executors, comm hooks) record too
        self._finder = StepFinder(agree) if infer_steps and lens.config.enabled else None
        self._steps_marked = lens.steps
        self._merged = 0
        self._after_step: tuple[Callable[[], None], ...] = ()
        lens.add_close_hook(self._closing)

    # ------------------------------------------------------------ public

    @property
    def should_stop(self) -> bool:
        """True on every rank at the same step once ``early_stop=True`` and the signature is
        ready: check it in the loop and break."""
        return self.lens.should_stop

    def step_end(self) -> None:
        """Mark the end of a training step; from then on steps are not inferred."""
        if self._finder is not None:
            self._finder.stop()
            self._finder = None
        self._step_end()

    def set_total_steps(self, total_steps: int) -> None:
        """Tell the forecast how many steps the run has."""
        self.lens.set_total_steps(total_steps)

    def detach(self) -> None:
        """Stop recording and restore what was patched. Idempotent."""
        self.attached = False
        self.patches.restore()

    def close(self) -> None:
        """Close the Lens (collective: every rank calls it) and detach. Without it the Lens
        closes itself at interpreter exit, without the last cross-rank exchange."""
        self.lens.close()
        self.detach()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ------------------------------------------------------------ recording

    @property
    def infers_steps(self) -> bool:
        """Whether steps are being inferred from the collectives."""
        return self._finder is not None

    @property
    def wants_step_keys(self) -> bool:
        """Whether step inference is still looking at the keys (not only the ops)."""
        finder = self._finder
        return finder is not None and finder.needs_keys

    @property
    def inferred_period(self) -> int:
        """Collectives per inferred step once found; 0 before, or when steps are not inferred."""
        return self._finder.period if self._finder is not None else 0

    @property
    def recording(self) -> bool:
        """Whether a collective called on this thread now is recorded (closing detaches)."""
        return self.attached and not _local.depth

    def begin(
        self,
        op: str,
        nbytes: int | Callable[[], int],
        *,
        step_key: Hashable | None = None,
        step_op: str | None = None,
    ) -> int:
        """Begin a tick; never raises (a tick is always counted, so ranks stay in step).
        ``step_key``/``step_op``: the observation for step inference (default ``(op,
        nbytes)`` and ``op``; :data:`SKIP`: none)."""
        if callable(nbytes):
            try:
                nbytes = int(nbytes())
            except Exception:  # noqa: BLE001 - an argument we cannot size: 0 bytes, no fault
                nbytes = 0
        if self._finder is None or step_key is SKIP:  # no lock: one call into the buffer
            return self._begin_tick(op, nbytes)
        with self.lock:  # the observation and the tick in the same order on every thread
            if self._finder is not None:
                self._observe(step_op or op, (op, nbytes) if step_key is None else step_key)
            return self._begin_tick(op, nbytes)

    def _begin_tick(self, op: str, nbytes: int) -> int:
        lens = self.lens
        try:
            return lens.collective_begin(op, nbytes)
        except Exception as e:  # noqa: BLE001
            lens.disable(e)
            return lens.collective_begin(op, nbytes)  # now the disabled path: counts only

    def end(self, tick: int | None) -> None:
        """End a tick begun by :meth:`begin`; never raises."""
        try:
            self.lens.collective_end(tick)
        except Exception as e:  # noqa: BLE001
            self.lens.disable(e)

    def ender(self, tick: int) -> Callable[[], None]:
        """A callback that ends ``tick`` once, however often it is called."""
        fired: list[bool] = []

        def end() -> None:
            if not fired:
                fired.append(True)
                self.end(tick)

        return end

    def call(
        self,
        fn: Callable,
        op: str,
        nbytes: int | Callable[[], int],
        args: tuple,
        kwargs: dict,
        *,
        step_key: Hashable | None = None,
        step_op: str | None = None,
        pending: Callable[[Any, Callable[[], None]], Any] | None = None,
    ) -> Any:
        """Run the framework's collective ``fn`` exactly once, recorded as ``op``.
        ``pending(result, end)`` may return a stand-in for an asynchronous result that calls
        ``end`` on completion; otherwise the tick ends when ``fn`` returns."""
        if self._finder is None or step_key is SKIP:  # begin's common case, inlined: no lock
            if callable(nbytes):
                try:
                    nbytes = int(nbytes())
                except Exception:  # noqa: BLE001 - an argument we cannot size: 0 bytes
                    nbytes = 0
            lens = self.lens
            try:  # self._begin_tick, inlined
                tick = lens.collective_begin(op, nbytes)
            except Exception as e:  # noqa: BLE001
                lens.disable(e)
                tick = lens.collective_begin(op, nbytes)
        else:
            tick = self.begin(op, nbytes, step_key=step_key, step_op=step_op)
        depth = _local.depth
        _local.depth = depth + 1  # quiet(), inlined: the hot path
        try:
            result = fn(*args, **kwargs)
        except BaseException:
            self.end(tick)
            raise
        finally:
            _local.depth = depth
        if pending is not None:
            try:
                proxy = pending(result, self.ender(tick))
            except Exception as e:  # noqa: BLE001 - fail open: hand back the real result
                self.lens.disable(e)
                proxy = None
            if proxy is not None:
                return proxy
        try:  # self.end(tick), inlined: the hot path
            self.lens.collective_end(tick)
        except Exception as e:  # noqa: BLE001
            self.lens.disable(e)
        return result

    def recorder(
        self,
        fn: Callable,
        op: str,
        nbytes_of: Callable[[tuple, dict], int] | None = None,
        *,
        pending: Callable[[Any, Callable[[], None]], Any] | None = None,
    ) -> Callable:
        """``fn`` dressed to run through :meth:`call` as ``op`` while :attr:`recording`, with
        ``nbytes_of(args, kwargs)`` bytes (0 without it)."""

        def wrapper(*args, **kwargs):
            if not self.attached or _local.depth:  # self.recording, inlined
                return fn(*args, **kwargs)
            if nbytes_of is None:
                nbytes = 0
            else:  # sized here, as begin would: no closure per call
                try:
                    nbytes = int(nbytes_of(args, kwargs))
                except Exception:  # noqa: BLE001 - an argument we cannot size: 0 bytes
                    nbytes = 0
            return self.call(fn, op, nbytes, args, kwargs, pending=pending)

        return named_like(wrapper, fn)

    def teardown(self, fn: Callable, ends_run: Callable[..., bool] | None = None) -> Callable:
        """The framework's teardown ``fn`` that first closes the Lens while the ranks can
        still exchange (when ``ends_run(*args, **kwargs)``, default always)."""

        def teardown(*args, **kwargs):
            if self.attached and (ends_run is None or ends_run(*args, **kwargs)):
                self.close()
            return fn(*args, **kwargs)

        return named_like(teardown, fn)

    def notice(self, msg: str, *args: Any, level: int = logging.INFO) -> None:
        """A message about the job as a whole: logged by rank 0 only."""
        if self.lens.rank == 0:
            log.log(level, msg, *args)

    # ------------------------------------------------------------ steps

    def after_step_end(self, fn: Callable[[], None]) -> None:
        """Call ``fn()`` once, after the next step end (an optimizer's state exists then); a
        fault in it disables the Lens (training goes on)."""
        self._after_step += (fn,)

    def _step_end(self) -> None:
        self.lens.step_end()
        self._steps_marked = self.lens.steps
        if self._after_step:
            fns, self._after_step = self._after_step, ()
            try:
                for fn in fns:
                    fn()
            except Exception as e:  # noqa: BLE001 - fail open: training goes on without ailens
                self.lens.disable(e)

    def _observe(self, op: str, key: Hashable) -> None:
        finder = self._finder
        if self.lens.steps != self._steps_marked:  # the script marks steps itself
            finder.stop()
            self._finder = None
            return
        had = finder.period
        if finder.observe(op, key):
            self._step_end()
        if finder.period != had or not finder.active:  # found, withdrawn, or given up
            self._finder_changed(finder)

    def _finder_changed(self, finder: StepFinder) -> None:
        if not finder.active:
            self._finder = None
            if not finder.period:
                self.notice(
                    "ailens: no repeating collective pattern found; call step_end() "
                    "to mark training steps"
                )
            return
        if not finder.period:
            return
        self.notice(
            "ailens: one training step = %d collectives (found at collective %d)",
            finder.period,
            self.lens.ticks,
        )
        total = self.lens.total_steps
        if total and finder.merged > self._merged:  # those iterations are in the first step
            self.lens.set_total_steps(max(1, total - (finder.merged - self._merged)))
        self._merged = finder.merged

    def _before_close(self) -> None:
        """Subclasses: settle what is still open before the last step ends."""

    def _closing(self) -> None:
        # A Lens close hook: runs at close() (every rank at the same point) and at interpreter
        # exit (then the Lens no longer exchanges, and nothing here is collective). The Lens
        # itself then takes the steps done as the total when none was given.
        try:
            self._before_close()
        except Exception as e:  # noqa: BLE001
            self.lens.disable(e)
        if self._finder is not None and self._finder.ends_last_step():
            self._step_end()
        self.detach()
