"""Prediction: what a run's steps would take elsewhere.

* ``whatif``: the run-directory what-if (other ranks, threads, cores, links) from a
  recorded run's analysis (a package with its own ``__all__``: ``ailens.predict.whatif``);
* ``cluster`` + ``job``: the cluster what-if of a data-parallel job (a description, a
  signature record or a run's features) on GPUs of a described platform (``predict``);
  ``measured``: the same from several measured scales of the job (``predict_measured``);
* ``collectives`` (alpha-beta-gamma cost models and their fit), ``nccl`` (NCCL's cost
  model on a platform), ``nccl_table`` (one nccl-tests table as data), ``nccl_tests``
  (nccl-tests output read as tables), ``nccl_fit`` (a platform fitted on those tables),
  ``platforms`` (platforms as data, packaged fits in ``platform_data/``), ``terms`` (a
  predicted time as named terms), ``device_speed`` (a job's compute on another device type,
  learned on public measurements, ``device_speed.json``, and moved by the user's own jobs
  measured on two device types).

The names below are this package's public API (imported on first use, so importing
``ailens.predict`` costs nothing). Imports only the layers below it (analysis, model,
record) and never renders.
"""

from .. import _lazy

# This package's modules and the public names each defines.
_EXPORTS = {
    "cluster": ("FLOOR_BAND", "FLOOR_SHARE", "UNEXPLAINED_PER_DOUBLING",
                "UNMEASURED_BANDWIDTH_RANGE", "ClusterPrediction", "ClusterTarget", "compute_at",
                "measured_links", "predict", "scale_bandwidth", "unexplained_band",
                "widen_unexplained"),
    "collectives": ("CANONICAL_OPS", "DEFAULT_INTER", "DEFAULT_INTRA", "CostParams", "Fit",
                    "canonical_op", "collective_time", "cost_coefficients", "fit_cost_params",
                    "nonnegative_least_squares", "transport_of"),
    "device_speed": ("DEVICE_SPEED_FILE", "HISTORY_PRIOR_JOBS", "PRECISION_PEAK_KEY",
                     "REFERENCE_BATCH", "DeviceRatio", "DeviceSpeedModel", "MeasuredRatio",
                     "batch_term", "device_key", "fit_device_speed", "linked_groups",
                     "load_device_speed", "pooled_ratio", "precision_class"),
    "job": ("JOB_FORMAT", "JobDescription", "JobError", "ddp_buckets", "job_from_dict",
            "job_from_features", "job_from_signature", "load_job"),
    "measured": ("MeasuredFit", "fit_measured", "predict_measured"),
    "nccl": ("BUSBW_FACTOR", "SATURATION_MIN_BYTES", "CollectiveEstimate", "busbw_factor",
             "nccl_collective_s"),
    "nccl_fit": ("fit_platform",),
    "nccl_table": ("NcclTestsTable",),
    "nccl_tests": ("parse_nccl_tests", "platform_from_nccl_tests"),
    "platforms": ("DEFAULT_PLATFORMS", "PLATFORM_VERSION", "Link", "Platform", "load_platform",
                  "platform_labels", "platform_from_dict", "platform_to_dict", "ring_links"),
    "terms": ("Term", "TermValue", "expected_max_normal"),
}  # fmt: skip
_LAZY = {name: module for module, names in _EXPORTS.items() for name in names}

__all__ = sorted(_LAZY)


__getattr__ = _lazy.lazy_getattr(__name__, _LAZY, globals())
