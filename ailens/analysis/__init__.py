"""Analysis: the one reader of a saved run's traces (``run_analysis``: ``ailens.analyze`` →
``RunAnalysis``, with the per-step table of ``steps``), op names (``ops``), and the readers
of other timelines (``logs``: MLPerf logs, CSVs)."""
