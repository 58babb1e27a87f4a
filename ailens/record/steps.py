"""Where training steps end when the framework does not say: inferred from the repeating
sequence of collectives (a plain mpi4py loop, a TensorFlow custom loop).

Framework-free. An adapter feeds every observation (normally one per collective, before it
is recorded) to :meth:`StepFinder.observe` on every rank, in the same order, and calls
``Lens.step_end()`` when it returns True. The rule:

1. **Detect** (per rank). Each observation carries a key (op, bytes and whatever else the
   adapter knows, e.g. the calling line). A candidate iteration is a period ``p`` such that
   the newest keys equal the keys ``p`` observations before them: at least the first key of a
   repetition (``p == 1``: the same key twice in a row) or, for ``p >= 2``, its first two.
   The most keys matched wins, then the shortest period. So a loop body is found in its
   second iteration and a 4-iteration loop records 4 steps (with ``p >= 2`` the first step
   ends one collective late).
2. **Agree**. Until found, every rank votes its candidate through ``agree`` (an int64 sum
   across ranks: the Lens's own exchange) at each of the first 64 observations, then every
   8th; the ranks commit only when all propose the same ``(p, start)``. Without a commit
   after 1024 observations inference stops (call ``step_end`` yourself).
3. **Confirm**. For 8 observations after the commit, and at least up to one step end, an
   op that breaks an iteration or two periods without a step end withdraw the commit, and
   each step end is confirmed by a vote that every rank's step had the pattern's keys; a
   withdrawn commit leaves the steps it marked, and the search goes on. This undoes a false
   start such as "A A" at the start of an iteration "A A A B".
4. **Follow**. Then a step ends before each observation whose op is the pattern's first op
   once the pattern's ops went by; an iteration interrupted by other collectives (an
   evaluation, a broadcast every 10 iterations) keeps them. Ops are the same on every rank,
   so every rank ends the same steps without voting. No step end for 64 observations (or 4
   periods): the loop changed, the search starts again.
5. **Close**: the last step is ended if a whole pattern went by since the last step end.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Hashable

import numpy as np

log = logging.getLogger("ailens")

Agree = Callable[[np.ndarray], np.ndarray]
"""Sums an int64 array elementwise across all ranks (every rank gets the sum)."""

VOTE_ALL = 64  # vote at every observation below this many
VOTE_EVERY = 8  # then at every 8th
GIVE_UP = 1024  # observations searched without a period: stop looking
CONFIRM = 8  # observations after a commit during which step ends are confirmed by vote
SILENCE = 64  # observations without a step end (or 4 periods) after which the search resumes
MAX_PERIOD = 512

_SEARCH, _CONFIRM, _FOLLOW, _OFF = range(4)


class StepFinder:
    """Infers step ends from the keys of the observations of one rank (see module doc)."""

    def __init__(self, agree: Agree | None = None) -> None:
        self._agree = agree
        self._n = 0  # observations so far
        self._broken = False
        self.active = True  # False once inference stopped (gave up, or stop() was called)
        # Whether observe() still uses the keys (finding, confirming the loop); once it
        # follows the loop only the ops matter.
        self.needs_keys = True
        self.period = 0
        self.start = 0  # observation where the first iteration began
        self.merged = 0  # iterations before the commit that went into the first step
        self._search_from(0)

    def stop(self) -> None:
        """Stop inferring (the script marks steps itself). Call it on every rank."""
        self._state, self.active, self.needs_keys = _OFF, False, False
        self._keys, self._ops, self._seen = [], [], {}

    def observe(self, op: str, key: Hashable | None = None) -> bool:
        """Feed the next observation (``key`` defaults to ``op``); True when a step ends
        just before it. Collective through ``agree`` at vote points: call it on every rank."""
        n = self._n
        self._n = n + 1
        if self._state == _OFF:
            return False
        if self._state == _FOLLOW:
            pos = self._pos
            # The common case, inlined. In C too, for mpi4py's compiled wrappers:
            # _recorder.c's follow_observed moves _pos, _n and _last_end as here and as
            # _step_ends_at does at a regular step end, under the attachment's lock.
            if pos < self.period and op == self._pattern_ops[pos]:
                self._pos = pos + 1
                return False
            if self._step_ends_at(op):
                self._last_end = n
                return True
            if n - self._last_end > max(SILENCE, 4 * self.period):  # the loop has changed
                self._search_from(n)
            else:
                return False
        try:
            key = op if key is None else key
            self._seen.setdefault(key, []).append(len(self._keys))
        except Exception:  # noqa: BLE001 - an unhashable key: vote to give up, never hang
            self._broken = True
        self._keys.append(key)
        self._ops.append(op)
        if self._state == _CONFIRM:
            return self._confirm(op, n)
        if n % VOTE_EVERY and n >= VOTE_ALL:
            return False
        return self._search(n)

    def ends_last_step(self) -> bool:
        """At close: whether the steps followed so far leave a whole iteration unended."""
        return self._state in (_CONFIRM, _FOLLOW) and self._pos >= self.period

    # ------------------------------------------------------------ detect + agree

    def _search_from(self, n: int) -> None:
        self._state, self._base, self.period, self.needs_keys = _SEARCH, n, 0, True
        self._keys: list[Hashable] = []  # since observation _base
        self._ops: list[str] = []
        self._seen: dict[Hashable, list[int]] = {}  # key -> its indices in _keys

    def _search(self, n: int) -> bool:
        give_up = self._broken or n - self._base >= GIVE_UP
        try:
            p, s = (0, 0) if give_up else self._candidate()
        except Exception:  # noqa: BLE001 - still join the vote
            p, s, give_up = 0, 0, True
        total = self._vote([1, p, s, p * p, s * s, int(give_up)])
        if total is None or total[5]:
            self.stop()
            return False
        ranks = int(total[0])
        same = ranks * total[3] == total[1] ** 2 and ranks * total[4] == total[2] ** 2
        if not (same and total[1] > 0):
            return False
        return self._commit(p, s, n)

    def _candidate(self) -> tuple[int, int]:
        """(period, start index) of the best-supported repetition ending at the newest key:
        the most keys matched one period back, then the shortest period; or (0, 0)."""
        keys = self._keys
        i = len(keys) - 1
        best = (0, 0, 0)  # (matched, -period, start)
        for prev in reversed(self._seen.get(keys[i], [])[:-1]):
            p = i - prev
            if p > MAX_PERIOD:
                break
            j = i - 1
            while j - p >= 0 and keys[j] == keys[j - p]:
                j -= 1
            matched = i - j  # keys equal to the key one period before, back from the newest
            if matched >= min(p, 2) and (matched, -p) > best[:2]:
                best = (matched, -p, j + 1 - p)
        return (-best[1], best[2]) if best[0] else (0, 0)

    def _commit(self, p: int, s: int, n: int) -> bool:
        i = len(self._keys) - 1
        self.period, self.start = p, self._base + s
        self._pattern = self._keys[s : s + p]
        self._pattern_ops = self._ops[s : s + p]
        r = (i - s) % p  # position of the newest observation in the pattern
        self._pos = r + 1
        self._state = _CONFIRM
        self._confirm_until = n + CONFIRM
        self._last_end = n - r
        due = r <= 1  # the step end is due now, or was due one observation ago
        self.merged = (i - s) // p - (1 if due else 0)
        return due

    # ------------------------------------------------------------ follow + confirm

    def _step_ends_at(self, op: str) -> bool:
        ops, p = self._pattern_ops, self.period
        if self._pos < p and op != ops[self._pos]:
            self._pos = p  # the iteration was interrupted: the next first op starts one
        if self._pos >= p:
            if op == ops[0]:
                self._pos = 1
                return True
            return False
        self._pos += 1
        return False

    def _confirm(self, op: str, n: int) -> bool:
        """Just after a commit: an op that breaks an iteration, or a whole period with no
        step end, withdraws the commit (decided from ops alone: the same on every rank), and
        each step end is confirmed by a vote that every rank's step had the pattern's keys."""
        p = self.period
        if self._pos < p and op != self._pattern_ops[self._pos]:
            return self._withdraw(n)
        if not self._step_ends_at(op):
            if n - self._last_end > 2 * p:
                return self._withdraw(n)
            return False
        step = self._keys[self._last_end - self._base : n - self._base]
        total = self._vote([1, 0, 0, 0, 0, int(self._broken or step != self._pattern)])
        if total is None:
            self.stop()
            return False
        if total[5]:  # some rank's step was not the pattern
            return self._withdraw(n)
        self._last_end = n
        if n >= self._confirm_until:
            self._state, self.needs_keys = _FOLLOW, False
            self._keys, self._ops, self._seen = [], [], {}
        return True

    def _withdraw(self, n: int) -> bool:
        self._state, self.period, self.merged = _SEARCH, 0, 0
        return self._search(n) if n < VOTE_ALL or n % VOTE_EVERY == 0 else False

    def _vote(self, values: list[int]) -> np.ndarray | None:
        mine = np.array(values, dtype=np.int64)
        if self._agree is None:
            return mine
        try:
            return np.asarray(self._agree(mine), dtype=np.int64)
        except Exception as e:  # noqa: BLE001 - the framework's collective failed
            log.warning(
                "ailens: step inference stopped: its vote failed (%s: %s)", type(e).__name__, e
            )
            return None
