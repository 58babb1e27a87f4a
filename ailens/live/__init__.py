"""The live side: the :class:`~ailens.live.lens.Lens` front integrations call, which composes
the recorder (``ailens.record``) with the run model (``OnlineAnalysis``) during training;
``failopen`` (one warning, then off) and ``output`` (``LiveOutput``: rank 0's progress lines
and live ``forecast.json``, a subscriber of the model)."""
