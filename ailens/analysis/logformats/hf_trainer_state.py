"""The Hugging Face Trainer's ``trainer_state.json`` (the run's state, saved in every
``checkpoint-N/`` and at the end). Its ``log_history`` has each logged step's ``step`` and
``epoch`` and the schedule is there (``max_steps``, ``num_train_epochs``, ``eval_steps``,
``save_steps``), but no entry carries a clock: only evaluations (``eval_runtime``) and the
end (``train_runtime``) say how long something took, never when a step ended. A timeline
cannot be made from it without inventing step times, so this format names the file and what
to give instead (the console the run printed, or LLaMA-Factory's ``trainer_log.jsonl``,
which the same run writes beside it)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from ...model.timeline import Timeline
from ._base import LogError, LogFormat

__all__ = ["FORMAT", "read_trainer_state"]


def read_trainer_state(path: Path, text: str) -> Timeline:
    try:
        doc = json.loads(text)
    except ValueError as e:
        raise LogError(f"{path}: a trainer_state.json that is not JSON ({e}); re-copy it") from None
    history = doc.get("log_history") if isinstance(doc, dict) else None
    if not isinstance(history, list):
        raise LogError(f"{path}: no log_history list; not a Hugging Face trainer_state.json")
    steps = [h.get("step") for h in history if isinstance(h, dict) and "step" in h]
    evals = sum(1 for h in history if isinstance(h, dict) and _has_runtime(h, "eval_"))
    said = (
        f"{len(steps)} log_history entries up to step {max(steps) if steps else 0} of "
        f"max_steps {doc.get('max_steps')}, {evals} evaluation(s)"
    )
    raise LogError(
        f"{path}: a Hugging Face trainer_state.json ({said}) has no times: its entries carry "
        "step and epoch but no clock, so when each step ended is not in it; give the console "
        "the run printed (the tqdm bar, with 2>&1) or, for LLaMA-Factory, trainer_log.jsonl "
        "from the same output directory"
    )


def _has_runtime(entry: dict, prefix: str) -> bool:
    return any(k.startswith(prefix) and k.endswith("runtime") for k in entry)


_KEYS = re.compile(r'"(?:log_history|global_step|max_steps)"\s*:')


def _detect(head: str) -> bool:
    """A JSON object naming log_history and global_step or max_steps."""
    return (
        head.lstrip().startswith("{")
        and '"log_history"' in head
        and len(set(_KEYS.findall(head))) >= 2
    )


FORMAT = LogFormat(
    name="hf-trainer-state",
    title="Hugging Face trainer_state.json (log_history; has no step times: refused with the fix)",
    detect=_detect,
    read=read_trainer_state,
    example='{"global_step": 8660, "log_history": [{"epoch": 0.0046, "loss": 2.49, "step": 10}]}',
)
