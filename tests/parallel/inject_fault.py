"""Test helper for the rank scripts: make ailens fail inside on one rank, to check that the
adapters fail open. ``inject(lens, "1:5")`` makes that Lens's ``collective_end`` (and
``record_collectives``, which TF graph collectives go through) raise on rank 1 once 5 ticks
were recorded: the adapter calling it must disable ailens on that rank (one
warning, what was recorded kept) while training goes on."""

from __future__ import annotations


def inject(lens, spec: str | None) -> None:
    """``spec``: ``"<rank>:<tick>"``, or empty/None for no fault."""
    if not spec:
        return
    rank, _, tick = spec.partition(":")
    if int(rank) != lens.rank:
        return
    at, real_end = int(tick or 0), lens.collective_end

    def faulty_end(tick=None):
        if lens.ticks > at:
            raise RuntimeError(
                f"injected fault at tick {lens.ticks} (tests/parallel/inject_fault.py)"
            )
        real_end(tick)

    lens.collective_end = faulty_end
    real_record = lens.record_collectives

    def faulty_record(*args):
        if lens.ticks > at:
            raise RuntimeError(
                f"injected fault at tick {lens.ticks} (tests/parallel/inject_fault.py)"
            )
        real_record(*args)

    lens.record_collectives = faulty_record
