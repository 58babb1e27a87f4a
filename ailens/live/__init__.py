"""The live side: the :class:`~ailens.live.lens.Lens` front integrations call, which composes
the recorder (``ailens.record``) with the run model (``OnlineAnalysis``) during training."""
