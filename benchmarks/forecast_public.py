"""Public training scripts, written by others, run live with only the documented ailens line
(``bench_forecast.py live --public``), and the live goal of issue 30 scored on them.

Each script lies under ``public_scripts/<name>/`` with a README giving its source (repository,
path, commit), its licence and every line changed (the one ailens line, its import, and the
smallest CPU change a user without a GPU makes). The run directory comes from
``AILENS_RUN_DIR`` (the one line names none); each run starts in an empty working folder (the
DDP tutorial resumes from a ``snapshot.pt`` it finds there).

Scoring is ``forecast_replay.replay`` on the run's traces, as ``live`` scores the examples:
the forecast the user saw at 1-50 % of the steps against the progress bar, and the step of
the first forecast. A run whose length nothing said gets no total forecast; it is scored by
its epoch-level forecast (``epoch_error_pct``: when the running epoch ends, against that
epoch's progress bar), and replayed once more told the length from the start
(``length_given``: what the user gets after following the length hint).
"""

from __future__ import annotations

import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import _harness as harness
from forecast_replay import replay

SCRIPTS = Path(__file__).resolve().parent / "public_scripts"
# The goal's "from the first steps after warm-up": the first forecast (or epoch-level
# forecast) at most this many steps after LensConfig.warmup_steps.
FIRST_AFTER_WARMUP = 3
# The goal's "at 10 % of the steps no worse than the progress bar + 1 point".
TEN_PCT_MARGIN = 1.0


@dataclass(frozen=True)
class PublicScript:
    """One vendored script and how a user launches it: ``args`` sized for a 20-60 s run on
    2 CPU cores, ``smoke_args`` for a few seconds (the test)."""

    folder: str
    script: str
    launcher: str
    ranks: int
    args: tuple[str, ...]
    smoke_args: tuple[str, ...]
    env: dict[str, str] = field(default_factory=dict)
    needs: tuple[str, ...] = ()


# Horovod's Keras and TF examples need tf-keras (TF_USE_LEGACY_KERAS=1): under Keras 3 the
# custom loop's ``opt.variables()`` and DistributedGradientTape fail before ailens is reached.
_TF = {"TF_USE_LEGACY_KERAS": "1"}
_MOBILENET = ("--no-cuda", "--model", "MobileNetV3Small", "--batch-size", "1")

PUBLIC_SCRIPTS = {
    # pytorch/examples DDP tutorial: epochs in the script's own range(), nothing says the
    # length (the epoch-level forecast case). 2048 samples / 2 ranks / batch 2 = 512 steps an
    # epoch; args: total_epochs save_every.
    "ddp-tutorial": PublicScript(
        folder="ddp-tutorial",
        script="multigpu_torchrun.py",
        launcher="torchrun",
        ranks=2,
        args=("20", "5", "--batch_size", "2"),
        smoke_args=("2", "1", "--batch_size", "16"),
        needs=("torch",),
    ),
    # Horovod's TF2 custom loop (tf.function, DistributedGradientTape): steps inferred from
    # the collectives, no epochs, nothing says the length. 1 + 4 + 15 x 10 = 155 steps.
    "horovod-tf2-synthetic": PublicScript(
        folder="horovod-tf2-synthetic",
        script="tensorflow2_synthetic_benchmark.py",
        launcher="horovodrun",
        ranks=2,
        args=(
            *_MOBILENET,
            "--num-warmup-batches",
            "4",
            "--num-batches-per-iter",
            "10",
            "--num-iters",
            "15",
        ),  # fmt: skip
        smoke_args=(
            *_MOBILENET,
            "--num-warmup-batches",
            "1",
            "--num-batches-per-iter",
            "3",
            "--num-iters",
            "2",
        ),  # fmt: skip
        env=_TF,
        needs=("tensorflow", "horovod.tensorflow"),
    ),
    # Horovod's Keras benchmark: model.fit with epochs and steps_per_epoch (the length is
    # known to Keras). 15 epochs x 10 steps = 150 steps.
    "horovod-keras-synthetic": PublicScript(
        folder="horovod-keras-synthetic",
        script="tensorflow2_keras_synthetic_benchmark.py",
        launcher="horovodrun",
        ranks=2,
        args=(*_MOBILENET, "--num-batches-per-iter", "10", "--num-iters", "15"),
        smoke_args=(*_MOBILENET, "--num-batches-per-iter", "3", "--num-iters", "2"),
        env=_TF,
        needs=("tensorflow", "horovod.tensorflow.keras", "tf_keras"),
    ),
}


def run_public(
    name: str, run_dir: Path, *, smoke: bool = False, timeout: float = 1800
) -> tuple[int, str, float]:
    """Launch one public script as its user would (its launcher, 2 ranks, one thread per
    rank) with ``AILENS_RUN_DIR=run_dir``, in an empty working folder: (exit status, its
    output, wall seconds)."""
    case = PUBLIC_SCRIPTS[name]
    argv = [str(SCRIPTS / case.folder / case.script), *(case.smoke_args if smoke else case.args)]
    cmd = harness.launcher_command(case.launcher, case.ranks, argv)
    env = harness.rank_env(1, {**case.env, "AILENS_RUN_DIR": str(run_dir)})
    with tempfile.TemporaryDirectory() as work:
        t0 = time.time()
        code, out, _ = harness.launch(cmd, env, timeout, merge_output=True, cwd=work)
        return code, out, time.time() - t0


def score_public(run_dir: Path) -> dict:
    """A public script's run scored: ``replay`` as the user saw it (the epoch-level forecast
    included), ``length_given`` when no total forecast came during the run, and ``goal``."""
    row = replay(run_dir, epochs=True)
    if row["first_forecast_step"] is None:
        given = replay(run_dir, total_steps=row["steps"])
        row["length_given"] = {
            "first_forecast_step": given["first_forecast_step"],
            "error_pct": given["error_pct"],
            "covered": given["covered"],
        }
    row["goal"] = live_goal(row)
    return row


def live_goal(row: dict) -> dict:
    """Issue 30's live goal on one scored run: a forecast (the total, or where nothing said
    the length the epoch-level one) from the first steps after warm-up, and at 10 % of the
    steps an |error| no more than the progress bar's + 1 point."""
    total = row["first_forecast_step"] is not None
    epoch = not total and row.get("first_epoch_forecast_step") is not None
    errors = row["error_pct"] if total else row.get("epoch_error_pct") if epoch else None
    first = row["first_forecast_step"] if total else row.get("first_epoch_forecast_step")
    ailens_10 = errors["ailens"]["10"] if errors else None
    naive_10 = errors["naive"]["10"] if errors else None
    first_ok = first is not None and first <= row["warmup_steps"] + FIRST_AFTER_WARMUP
    ten_ok = (
        ailens_10 is not None
        and naive_10 is not None
        and abs(ailens_10) <= abs(naive_10) + TEN_PCT_MARGIN
    )
    return {
        "forecast": "total" if total else "epoch" if epoch else "none",
        "first_step": first,
        "ailens_error_10_pct": ailens_10,
        "naive_error_10_pct": naive_10,
        "first_after_warmup": first_ok,
        "no_worse_at_10_pct": ten_ok,
        "holds": first_ok and ten_ok,
    }


def goal_line(name: str, row: dict) -> str:
    """One line per script: which forecast, its first step, the 10 % errors, the verdict."""
    g = row["goal"]

    def f(x):
        return "n/a" if x is None else f"{x:+.2f}%"

    seen = (
        "no forecast during the run"
        if g["forecast"] == "none"
        else f"{g['forecast']} forecast from step {g['first_step']}"
    )
    line = (
        f"{name}: {seen} (warm-up {row['warmup_steps']}), "
        f"at 10 %: ailens {f(g['ailens_error_10_pct'])}, "
        f"progress bar {f(g['naive_error_10_pct'])} -> goal "
        f"{'holds' if g['holds'] else 'not reached'}"
    )
    given = row.get("length_given")
    if given:
        e = given["error_pct"]
        line += (
            f"; told the length: first forecast at step {given['first_forecast_step']}, at 10 % "
            f"ailens {f(e['ailens']['10'])}, progress bar {f(e['naive']['10'])}"
        )
    return line
