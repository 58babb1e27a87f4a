"""The tools wing: commands that measure or learn around runs, on top of the core.

``calibrate`` (collective and compute costs on the job's own transport), ``probe`` (a node's
platform descriptor), ``signature_record`` (a run's ``signature.json``), ``history`` (runs'
records in SQLite), ``learn`` (step-time predictors fitted on a history; the learners in
``learners``). They import the core; nothing in the
core imports them (tests/test_cli.py checks it). Calibrate's transports belong to the
framework integrations (``ailens.integrations._transport``); the command line picks one.
"""
