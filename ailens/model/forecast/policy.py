"""The policy that picks the run's forecast and says when the signature is reached."""

from __future__ import annotations

# The first point a forecast is asked for: 5 % of the steps (a run of tens of steps has one).
EARLY_SHARE = 0.05
