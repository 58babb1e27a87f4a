"""Analysis: the one reader of a saved run's traces (``run_analysis``) and the readers of
other timelines (``logs``: MLPerf logs, CSVs)."""
