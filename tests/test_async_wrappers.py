"""The compiled per-tensor wrappers of an asynchronous call and its wait (``AsyncCall``,
``HandleWait`` in ``_recorder.c``; Horovod torch's gradients go through them): the same rows
as the Python wrappers they stand in for, and the same fail-open behaviour. The "framework"
here is a plain function returning handles; the Lens is real."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from ailens.integrations._base import _local

from ailens import Lens
from ailens.record.buffer import ASYNC_WRAPPERS

pytestmark = pytest.mark.skipif(ASYNC_WRAPPERS is None, reason="ailens._recorder not built")


class Owner:
    """What the wrappers read of an adapter's Attachment."""

    def __init__(self, lens: Lens) -> None:
        self.attached, self._finder, self.lens = True, None, lens


def _wrappers(owner, real_call, real_wait, fallback_calls):
    call_cls, wait_cls = ASYNC_WRAPPERS
    handles: dict = {}

    def fallback(*args, **kwargs):
        fallback_calls.append(args)
        return real_call(*args, **kwargs)

    call = call_cls(real=real_call, owner=owner, local=_local, op="allreduce", handles=handles,
                    fallback=fallback)  # fmt: skip
    wait = wait_cls(real=real_wait, owner=owner, handles=handles, fallback=real_wait)
    return call, wait, handles


def test_each_call_is_one_row_with_its_bytes_ended_by_its_wait(tmp_path):
    lens = Lens(run_dir=tmp_path / "r", world_size=1, rank=0)
    counter, seen = itertools.count(), []
    call, wait, handles = _wrappers(Owner(lens), lambda t, *a: next(counter), lambda h: h, seen)
    tensors = [np.zeros(n, np.float32) for n in (1, 10, 100)]
    got = [call(t, "name") for t in tensors]
    got.append(call([tensors[0], tensors[1]]))  # a grouped call: one collective, summed bytes
    assert got == [0, 1, 2, 3] and handles == {0: 0, 1: 1, 2: 2, 3: 3}
    assert [wait(h) for h in got] == got and handles == {}
    cols = lens._buf.columns(0, lens._buf.n)
    assert cols["nbytes"].tolist() == [4, 40, 400, 44]
    assert (cols["t_end"] >= cols["t_begin"]).all()
    assert lens.ticks == 4 and seen == [] and lens.disabled is None
    lens.close()


def test_passes_through_when_detached_inside_ailens_or_inferring_steps(tmp_path):
    lens = Lens(run_dir=tmp_path / "r", world_size=1, rank=0)
    owner, seen = Owner(lens), []

    def real(tensor):
        return "h"

    call, wait, handles = _wrappers(owner, real, lambda h: h, seen)
    owner.attached = False
    assert call(np.zeros(2)) == "h" and lens.ticks == 0
    owner.attached = True
    _local.depth = 1  # inside ailens's own collective
    try:
        assert call(np.zeros(2)) == "h" and lens.ticks == 0
    finally:
        _local.depth = 0
    owner._finder = object()  # steps inferred: the Python wrapper observes each call
    assert call(np.zeros(2)) == "h" and len(seen) == 1 and lens.ticks == 0
    assert call(tensor=np.zeros(2)) == "h" and len(seen) == 2  # no positional payload
    lens.close()


def test_a_framework_error_ends_the_tick_and_passes_unchanged(tmp_path):
    lens = Lens(run_dir=tmp_path / "r", world_size=1, rank=0)

    def broken(t):
        assert _local.depth == 1  # what the framework calls inside is this collective's
        raise ValueError("framework says no")

    call, _, handles = _wrappers(Owner(lens), broken, lambda h: h, [])
    with pytest.raises(ValueError, match="framework says no"):
        call(np.zeros(2))
    assert _local.depth == 0 and handles == {} and lens.ticks == 1
    assert lens._buf.oldest_open == 1  # ended
    assert lens.disabled is None
    lens.close()


def test_faults_of_ailens_disable_it_and_training_goes_on(tmp_path):
    lens = Lens(run_dir=tmp_path / "r", world_size=1, rank=0)
    call, wait, handles = _wrappers(Owner(lens), lambda t: [t.size], lambda h: "done", [])
    handle = call(np.zeros(3))  # an unhashable handle cannot be kept: ailens turns off
    assert handle == [3] and lens.disabled is not None and lens.ticks == 1
    assert wait(handle) == "done"  # and the wait passes it through
    lens.close()


def test_a_payload_that_cannot_be_sized_is_zero_bytes_not_a_fault(tmp_path):
    lens = Lens(run_dir=tmp_path / "r", world_size=1, rank=0)
    call, wait, _ = _wrappers(Owner(lens), lambda t: 5, lambda h: h, [])
    assert wait(call(object())) == 5
    assert lens._buf.columns(0, lens._buf.n)["nbytes"].tolist() == [0]
    assert lens.disabled is None
    lens.close()


def test_a_fault_in_the_lens_begin_disables_it_and_still_counts_the_tick(tmp_path):
    lens = Lens(run_dir=tmp_path / "r", world_size=1, rank=0)

    def begin(op, nbytes):
        raise RuntimeError("buffer broke")

    lens.collective_begin = begin
    call, wait, _ = _wrappers(Owner(lens), lambda t: 7, lambda h: h, [])
    assert call(np.zeros(3)) == 7
    assert lens.disabled is not None and "buffer broke" in lens.disabled
    assert lens.ticks == 1  # the disabled path counted it: ranks stay in step
    assert wait(7) == 7
    lens.close()
