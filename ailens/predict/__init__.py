"""Prediction: what a run's steps would take elsewhere.

* ``whatif``: the run-directory what-if (other ranks, threads, cores, links) from a
  recorded run's analysis;
* ``cluster`` + ``job``: the cluster what-if of a data-parallel job (a description, a
  signature record or a run's features) on GPUs of a described platform;
* ``collectives`` (alpha-beta-gamma cost models and their fit), ``nccl`` (NCCL's cost
  model on a platform and its fit), ``platforms`` (platforms as data, packaged fits in
  ``platform_data/``).

Imports only the layers below it (analysis, model, record) and never renders.
"""
