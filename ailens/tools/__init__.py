"""The tools wing: commands that measure or learn around runs, on top of the core.

``calibrate`` (collective and compute costs on the job's own transport), ``probe`` (a node's
platform descriptor), ``signature_record`` (a run's ``signature.json``), ``history`` (runs'
records in SQLite), ``learn`` (step-time predictors fitted on a history; the learners in
``learners``). They import the core; nothing in the
core imports them (tests/test_layout.py checks it). Calibrate's transports belong to the
framework integrations (``ailens.integrations._transport``); the command line picks one.

The names below are the wing's public API. The commands' own entry points stay in their
modules (``tools.calibrate.calibrate``, ``tools.probe.probe``: a name here would hide the
module of the same name); ``signature_record`` here is the function.
"""

from .history import (
    DEFAULT_HISTORY,
    SCHEMA_VERSION,
    History,
    HistoryError,
    format_rows,
    measured_ratios,
)
from .learn import (
    MODEL_VERSION,
    config_key,
    configs,
    fit_model,
    format_fit,
    learned_step_times,
    load_model,
    mape,
    pairs,
    save_model,
    split_configs,
)
from .learners import LEARNERS, LearnError, fit_learner, predict_residual, torch_available
from .probe import PROBE_VERSION, check_platform, launched_ranks, usable_cores
from .signature_record import (
    GRID_CORES,
    GRID_RANKS,
    GRID_THREADS,
    RECORD_FILE,
    RECORD_VERSION,
    RecordError,
    check_record,
    read_record,
    record_refusal,
    run_record,
    signature_record,
    write_record,
)

__all__ = [
    # signature records (signature.json)
    "GRID_CORES",
    "GRID_RANKS",
    "GRID_THREADS",
    "RECORD_FILE",
    "RECORD_VERSION",
    "RecordError",
    "check_record",
    "read_record",
    "record_refusal",
    "run_record",
    "signature_record",
    "write_record",
    # the history of records
    "DEFAULT_HISTORY",
    "SCHEMA_VERSION",
    "History",
    "HistoryError",
    "format_rows",
    "measured_ratios",
    # learned step-time models
    "LEARNERS",
    "MODEL_VERSION",
    "LearnError",
    "config_key",
    "configs",
    "fit_learner",
    "fit_model",
    "format_fit",
    "learned_step_times",
    "load_model",
    "mape",
    "pairs",
    "predict_residual",
    "save_model",
    "split_configs",
    "torch_available",
    # node probes
    "PROBE_VERSION",
    "check_platform",
    "launched_ranks",
    "usable_cores",
]
