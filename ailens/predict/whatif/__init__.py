"""The run-directory what-if: a recorded run's step time on another layout of ranks,
threads, cores and links (docs/whatif.md has the model and its measured accuracy).

One room per job: ``features`` (what is measured once per run, ``prepare``), ``steps`` (the
per-step compute / exposed-comm split), ``layout``, ``compute`` (thread speed-up, node
sharing), ``calibration`` (reading ``ailens calibrate``'s files), ``links`` (collective
costs on the target's links), ``replay`` (collective groups against the compute, cores
shared), ``terms`` (the step time as a sum of named terms) and ``model`` (``whatif``,
``whatif_source``).
"""

from ..terms import TermValue, expected_max_normal
from .calibration import load_calibration, merge_calibrations
from .compute import ComputeModel
from .features import CommGroup, MeasuredRun, Prepared, RunFeatures, features, prepare
from .layout import Layout
from .links import ScalingModel, scaling_model
from .model import Prediction, WhatIfRow, whatif, whatif_source
from .replay import REPLAY_STEPS, replay_sample
from .steps import measured_step_s
from .terms import TERMS

__all__ = [
    "REPLAY_STEPS",
    "TERMS",
    "CommGroup",
    "ComputeModel",
    "Layout",
    "MeasuredRun",
    "Prediction",
    "Prepared",
    "RunFeatures",
    "ScalingModel",
    "TermValue",
    "WhatIfRow",
    "expected_max_normal",
    "features",
    "load_calibration",
    "measured_step_s",
    "merge_calibrations",
    "prepare",
    "replay_sample",
    "scaling_model",
    "whatif",
    "whatif_source",
]
