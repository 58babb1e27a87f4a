"""Parallel tier: ailens.integrations.torch on 2 real torchrun ranks (gloo, CPU).

Each run prints one ``RESULT {json}`` line per rank (tests/parallel/torch_ddp_script.py);
the tests compare them across ranks and across runs with and without ailens.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from conftest import rank_results

from ailens import load_run

torch = pytest.importorskip("torch")
pytest.importorskip("torch.distributed")

SCRIPT = Path(__file__).parent / "parallel" / "torch_ddp_script.py"
TORCHRUN = Path(sys.executable).parent / "torchrun"
TIMEOUT = 90


def run_ddp(tmp_path: Path, *args: str, env: dict | None = None, ranks: int = 2) -> list[dict]:
    """Launch the script on ``ranks`` ranks; return each rank's RESULT, sorted by rank."""
    if not TORCHRUN.exists():
        pytest.skip("torchrun not found next to the interpreter")
    # --standalone: a free rendezvous port, so concurrent runs never collide.
    cmd = [
        str(TORCHRUN),
        "--standalone",
        f"--nproc_per_node={ranks}",
        str(SCRIPT),
        "--run-dir",
        str(tmp_path / "run"),
        *args,
    ]
    return rank_results(
        cmd, cwd=tmp_path, env={"OMP_NUM_THREADS": "1", **(env or {})}, timeout=TIMEOUT, ranks=ranks
    )


@pytest.fixture(scope="module")
def baseline(tmp_path_factory) -> list[dict]:
    return run_ddp(tmp_path_factory.mktemp("nolens"))


def check_recorded(results: list[dict]) -> None:
    for r in results:
        assert r["disabled"] is None, r["disabled"]
        assert r["recorded_bytes"] == r["expected_bytes"], r["rank"]
        assert r["open_events"] == 0
        assert r["lens_steps"] == r["steps"]
        assert r["restored"], "detach() must restore torch.distributed"
        counts = r["recorded_counts"]
        direct = r["direct_counts"]
        # One buffer broadcast per forward (BatchNorm stats) plus the script's own.
        assert counts["broadcast"] == direct["broadcast"] + r["steps"]
        assert counts["allgather"] == direct["allgather"]
        assert counts["barrier"] == direct["barrier"]
        assert r["events"] == r["ticks"] == sum(counts.values())
    a, b = results
    assert a["ticks"] == b["ticks"]
    assert a["recorded_counts"] == b["recorded_counts"]
    assert a["table"] == b["table"] and a["table"]["phases"], "ranks must hold one phase table"


@pytest.mark.parallel
def test_ddp_default_hook_records_each_collective_once(tmp_path, baseline):
    results = run_ddp(tmp_path, "--lens")
    check_recorded(results)
    # Same trained weights as without ailens, on every rank.
    assert {r["checksum"] for r in results} == {baseline[0]["checksum"]}
    assert baseline[0]["checksum"] == baseline[1]["checksum"]
    online = json.loads((tmp_path / "run" / "phases-online.json").read_text())
    assert online["table"] == results[0]["table"]
    # What the adapter knows of the run: threads, model size, the batch of the first forward,
    # the schedule given to attach().
    for rank in load_run(tmp_path / "run").ranks:
        facts = rank.meta["run"]
        assert facts["threads"] == 1 and facts["interop_threads"] >= 1
        assert facts["param_count"] == results[0]["param_count"] > 0
        assert facts["framework_version"] == f"torch {torch.__version__}"
        kinds = {m["kind"]: m for m in rank.marks}
        assert kinds["info"]["batch_size"] == 32
        said = [m for m in rank.marks if m["kind"] == "schedule"]
        assert [m for m in said if "total_steps" in m][-1]["total_steps"] == results[0]["steps"]
        # What a checkpoint writes, learned after the first step: the parameters at least.
        (learned,) = [m for m in said if "checkpoint_bytes" in m]
        assert learned["step"] == 1 and learned["checkpoint_bytes"] >= 4 * facts["param_count"]


@pytest.mark.parallel
def test_ddp_weights_bit_identical_at_a_world_size_not_a_power_of_two(tmp_path):
    """DDP's built-in reduction multiplies by 1/3 at 3 ranks; a hook that divides by 3 (as
    torch's allreduce_hook does) trains other weights in the last bit."""
    for d in ("plain", "lens"):
        (tmp_path / d).mkdir()
    plain = run_ddp(tmp_path / "plain", ranks=3)
    lensed = run_ddp(tmp_path / "lens", "--lens", ranks=3)
    assert len({r["checksum"] for r in plain}) == 1
    assert {r["checksum"] for r in lensed} == {plain[0]["checksum"]}


@pytest.mark.parallel
def test_ddp_user_comm_hook_is_composed(tmp_path, baseline):
    results = run_ddp(tmp_path, "--lens", "--user-hook")
    check_recorded(results)
    for r in results:
        # Every bucket went through the user's hook and was recorded once as an allreduce.
        assert r["hook_calls"] > r["steps"]
        direct = r["direct_counts"]["allreduce"]
        assert r["recorded_counts"]["allreduce"] == direct + r["hook_calls"]
    assert {r["checksum"] for r in results} == {baseline[0]["checksum"]}


@pytest.mark.parallel
def test_fault_in_ailens_leaves_training_intact(tmp_path, baseline):
    results = run_ddp(tmp_path, "--lens", "--fault", "1:5")
    assert results[0]["disabled"] is None
    assert "injected fault" in results[1]["disabled"]
    # The disabled rank still counts ticks and steps, so both ranks agree.
    assert results[0]["ticks"] == results[1]["ticks"]
    assert results[0]["lens_steps"] == results[1]["lens_steps"] == results[0]["steps"]
    assert {r["checksum"] for r in results} == {baseline[0]["checksum"]}


def test_without_process_group_steps_come_from_the_optimizer(tmp_path):
    from ailens.integrations.torch import attach

    model = torch.nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(TypeError):
        attach(model, opt, comm_hook=lambda state, bucket: None, run_dir=tmp_path / "bad")
    handle = attach(model, opt, run_dir=tmp_path / "run", steps_per_epoch=2, epochs=3)
    assert handle.lens.config.total_steps == 6
    for _ in range(3):
        model(torch.ones(1, 4)).sum().backward()
        opt.step()
    assert handle.lens.steps == 3 and not handle.should_stop
    handle.close()
    opt.step()  # detached: no more steps recorded
    assert handle.lens.closed and handle.lens.steps == 3


@pytest.mark.parallel
def test_attach_learns_what_a_checkpoint_writes_after_the_first_step(tmp_path):
    """Issue 30: the forecast priced an announced checkpoint it had not seen at nothing.
    After the optimizer's first step (AdamW's moments exist then) the schedule knows the
    bytes a checkpoint of the model and optimizer writes; the trace keeps it for the
    replay; a value the script stated is kept."""
    from ailens.integrations.torch import attach

    import ailens

    model = torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.BatchNorm1d(32))
    opt = torch.optim.AdamW(model.parameters())
    handle = attach(model, opt, run_dir=tmp_path / "run", total_steps=4)
    handle.lens.set_schedule(checkpoint_every_steps=2)
    # The script's own step hook after ailens's: a one-shot hook removing itself inside
    # torch's loop over them would break optimizer.step() ("OrderedDict mutated").
    stepped = []
    opt.register_step_post_hook(lambda *_: stepped.append(1))
    params = sum(p.nbytes for p in model.parameters())
    buffers = sum(b.nbytes for b in model.buffers())
    for step in range(4):
        model(torch.ones(8, 64)).sum().backward()
        opt.step()
        if step == 0:
            steps = sum(st["step"].nbytes for st in opt.state.values())
            expected = params + buffers + 2 * params + steps
            assert handle.lens.schedule.checkpoint_bytes == expected
    handle.close()
    assert len(stepped) == 4 and handle.lens.disabled is None
    assert ailens.read_timeline(tmp_path / "run").schedule["checkpoint_bytes"] == expected

    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    handle = attach(model, opt, run_dir=tmp_path / "stated")
    handle.lens.set_schedule(checkpoint_bytes=123)
    model(torch.ones(8, 64)).sum().backward()
    opt.step()
    assert handle.lens.schedule.checkpoint_bytes == 123
    handle.close()


TUTORIAL = Path(__file__).parent / "parallel" / "torch_tutorial.py"


def run_tutorial(tmp_path: Path, *args: str) -> list[dict]:
    if not TORCHRUN.exists():
        pytest.skip("torchrun not found next to the interpreter")
    cmd = [str(TORCHRUN), "--standalone", "--nproc_per_node=2", str(TUTORIAL),
           "--run-dir", str(tmp_path / "run"), *args]  # fmt: skip
    return rank_results(cmd, cwd=tmp_path, env={"OMP_NUM_THREADS": "1"}, timeout=TIMEOUT)


@pytest.mark.parallel
def test_tutorial_script_told_nothing_shows_the_epoch_end_and_how_to_give_the_length(tmp_path):
    """Issue 30, 9: the DDP tutorial's shape with only ``attach(model, optimizer)`` (epochs in
    the script's own range) ended with "no early forecast" and showed nothing live: the steps
    per epoch come from len(loader) of the loader that trains, the epoch's end is forecast
    from the first steps after warm-up, and one line says how to give the length. Its epochs
    counted in a ``while`` loop: nothing says them."""
    results = run_tutorial(tmp_path, "--epochs", "3", "--eval", "--while")
    for r in results:
        assert r["disabled"] is None
        spe = r["batches"]  # 640 samples / 2 ranks / batch 8 = 40
        assert spe == 40 and r["steps"] == 3 * spe and r["steps_per_epoch"] == spe
        seen = r["seen"]
        assert all(s["total_steps"] is None for s in seen)  # nobody said the length
        # The epoch-level forecast from the first steps after warm-up (2), every step on,
        # for the epoch running at the step it was made.
        shown = [s for s in seen if s["epoch"] is not None]
        assert shown and shown[0]["steps"] <= 3, seen[:5]
        for s in shown:
            assert s["epoch"] == s["at"] // spe + 1
            assert s["epoch_end_step"] == s["epoch"] * spe
    hints = [n for n in results[0]["notices"] if "total_steps=N" in n]
    assert len(hints) == 1 and "epoch 1 ends in" in hints[0], results[0]["notices"]
    assert not any("total_steps=N" in n for n in results[1]["notices"])  # rank 0 only
    run = load_run(tmp_path / "run")
    for rank in run.ranks:
        said = [m for m in rank.marks if m["kind"] == "schedule"]
        assert [m.get("steps_per_epoch") for m in said if "checkpoint_bytes" not in m] == [40]
    doc = json.loads((tmp_path / "run" / "forecast.json").read_text())
    assert doc["total_steps"] == 120  # learned at the close: the steps done


@pytest.mark.parallel
def test_tutorial_scripts_epoch_loop_gives_the_total_from_the_first_step(tmp_path):
    """Issue 30, 9: "the total as soon as anything says the length". The tutorial's own
    ``for epoch in range(args.epochs)`` (its body in a function per epoch, as the tutorial's
    ``_run_epoch``) says the epochs: with the loader's length, the total from the first step
    on, no line asking for the length; rank 0 says which loop, as the run's info does."""
    results = run_tutorial(tmp_path, "--epochs", "3", "--eval")
    for r in results:
        assert r["disabled"] is None and r["steps"] == 120
        assert [s["total_steps"] for s in r["seen"]] == [120] * 120
        shown = [s for s in r["seen"] if s["at"] is not None]
        assert shown and shown[0]["steps"] <= 3, r["seen"][:5]
    loop = (
        "the script's loop for epoch in range(3) in main() (torch_tutorial.py:"
        f"{_line_of(TUTORIAL, 'the tutorial' + chr(39) + 's loop')})"
    )
    assert [n for n in results[0]["notices"] if "epochs to run" in n] == [
        f"ailens: 3 epochs to run, from {loop} (not the run's length? pass total_steps=N to "
        "the attach line)"
    ]
    assert not any("epochs to run" in n for n in results[1]["notices"])  # rank 0 only
    assert not any("are not known" in n for r in results for n in r["notices"])  # no hint
    run = load_run(tmp_path / "run")
    for rank in run.ranks:
        said = [m for m in rank.marks if m["kind"] == "info" and "epochs_from" in m]
        assert [m["epochs_from"] for m in said] == [loop]
        assert [m["epochs"] for m in rank.marks if m["kind"] == "schedule" and "epochs" in m] == [3]
    doc = json.loads((tmp_path / "run" / "forecast.json").read_text())
    assert doc["total_steps"] == 120


def _line_of(path: Path, text: str) -> int:
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1) if text in line)


@pytest.mark.parallel
def test_accumulating_tutorial_learns_the_steps_per_epoch_at_the_first_boundary(tmp_path):
    """One optimizer step per 2 batches: len(loader) says 40, the first epoch had 20 steps.
    The loader says it handed out 2 batches a step, so from the third step on the running
    epoch ends at step 20, not 40 (before: from the first epoch boundary)."""
    results = run_tutorial(tmp_path, "--epochs", "2", "--accumulate", "2")
    for r in results:
        assert r["disabled"] is None and r["steps"] == 40
        assert r["steps_per_epoch"] == 20
        first = [s for s in r["seen"] if s["at"] is not None and 3 <= s["at"] <= 20]
        assert first and all(s["epoch"] == 1 and s["epoch_end_step"] == 20 for s in first), first
        second = [s for s in r["seen"] if s["at"] is not None and s["at"] > 20]
        # as the other tutorial: after k whole epochs the running epoch is k + 1 (at step 40,
        # the end of the second, a run whose length is not known yet goes on into a third)
        assert second and all(
            s["epoch"] == s["at"] // 20 + 1 and s["epoch_end_step"] == 20 * s["epoch"]
            for s in second
        )
        assert any(s["epoch"] == 2 and s["epoch_end_step"] == 40 for s in second)


@pytest.mark.parametrize(
    "steps_after, spe",
    [
        (lambda i: (i + 1) % 3 == 0, 8),  # every third batch: 24 / 3
        (lambda i: i != 1, 24),  # every batch but the second (a skipped step): still 24
    ],
    ids=["accumulating", "one-skipped"],
)
def test_the_batches_a_step_takes_divide_the_loaders_length(tmp_path, steps_after, spe):
    """Gradient accumulation (the optimizer stepped once every k batches) gives len / k
    steps per epoch from the third step, before any epoch boundary; one step the optimizer
    skipped (a mixed-precision scaler after an overflow) takes two batches once, not twice
    alike, and leaves the loader's length."""
    from ailens.integrations.torch import attach
    from torch.utils.data import DataLoader, TensorDataset

    model = torch.nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(TensorDataset(torch.ones(96, 4)), batch_size=4)  # 24 batches
    handle = attach(model, opt, run_dir=tmp_path / "run")
    for i, (x,) in enumerate(loader):
        model(x).sum().backward()
        if steps_after(i):
            opt.step()
            opt.zero_grad()
        if i == 15:  # inside the first epoch
            assert handle.lens.steps_per_epoch == spe
    handle.close()


def test_epochs_given_without_steps_per_epoch_give_the_total_from_the_loader(tmp_path):
    """Issue 30, 9: "the total as soon as anything says the length": ``epochs=`` on the
    attach line and the training loader's length make the run's total from its first step."""
    from ailens.integrations.torch import attach
    from torch.utils.data import DataLoader, TensorDataset

    model = torch.nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(TensorDataset(torch.ones(20, 4)), batch_size=4)  # 5 batches
    handle = attach(model, opt, run_dir=tmp_path / "run", epochs=2)
    assert handle.lens.total_steps is None
    totals = []
    for _ in range(2):
        for (x,) in loader:
            model(x).sum().backward()
            opt.step()
            totals.append(handle.lens.total_steps)
    handle.close()
    assert totals == [10] * 10
    assert handle.lens.steps == 10
    # Detached: the loader is the framework's own again.
    from torch.utils.data import DataLoader as Plain

    assert Plain.__iter__.__name__ == "__iter__" and not hasattr(Plain.__iter__, "__wrapped__")


@pytest.mark.parametrize(
    "batches_a_step, total", [(1, 30), (2, None)], ids=["a-step-an-element", "accumulating"]
)
def test_a_loop_of_steps_gives_the_total_once_it_moves_one_element_a_step(
    tmp_path, capsys, batches_a_step, total
):
    """Issue 30, 9: a script that loops over its steps (``for step in range(...)``, its data
    drawn with ``next``) says its length. The loop moved one element a step at three step
    ends in a row: the elements left are the steps to come, from the third step on. A loop
    of batches that steps the optimizer every second one (gradient accumulation) is not the
    steps' loop: nothing is taken from it, and the line asking for the length comes."""
    from ailens.integrations.torch import attach
    from torch.utils.data import DataLoader, TensorDataset

    model = torch.nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    data = iter(DataLoader(TensorDataset(torch.ones(240, 4)), batch_size=4))
    handle = attach(model, opt, run_dir=tmp_path / "run")
    totals = []
    start = 5  # a resumed run: 25 of the loop's 30 steps to come
    for batch in range(start * batches_a_step, 30 * batches_a_step):
        (x,) = next(data)
        model(x).sum().backward()
        if (batch + 1) % batches_a_step == 0:
            opt.step()
            opt.zero_grad()
            totals.append(handle.lens.total_steps)
    handle.close()
    assert handle.lens.disabled is None
    expected = None if total is None else total - start
    assert totals == [None, None] + [expected] * (len(totals) - 2)
    # Known before the step time is: no line asking for the length (it still comes where
    # the loop said nothing).
    assert ("are not known" in capsys.readouterr().err) is (total is None)


def test_a_loop_of_steps_inside_the_epochs_loop_says_nothing(tmp_path):
    """``for epoch in range(E): for step in range(S)``: the loop of steps moves one element a
    step, but its elements left are the epoch's, not the run's: nothing is taken from it."""
    from ailens.integrations.torch import attach

    model = torch.nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    handle = attach(model, opt, run_dir=tmp_path / "run")
    totals = []
    for _epoch in range(2):
        for _step in range(6):
            model(torch.ones(4, 4)).sum().backward()
            opt.step()
            opt.zero_grad()
            totals.append(handle.lens.total_steps)
    handle.close()
    assert handle.lens.disabled is None and totals == [None] * 12
