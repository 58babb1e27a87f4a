"""Recording: what one rank does during training, written to its trace.

The lowest layer: it imports nothing from the run model, the analysis or the predictors.
``config`` (settings), ``counters`` (work counters), ``buffer`` (the hot path's event columns,
compiled twin ``ailens._recorder``), ``writer`` (the writer thread), ``trace`` (the trace
format), ``ticks`` (per-tick summaries), ``exchange`` (the cross-rank payload and cadence),
``steps`` (step ends inferred from collectives), ``node`` (the node descriptor).
"""
