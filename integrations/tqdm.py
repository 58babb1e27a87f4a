"""The ailens forecast in the tqdm bar a plain training loop already draws (no second bar).

::

    from ailens.integrations.tqdm import forecast_postfix

    with ailens.lens(run_dir="runs/x", total_steps=len(loader) * epochs) as lens:
        bar = tqdm(total=len(loader) * epochs)
        for x, y in batches():
            ...; lens.step_end()
            bar.update()
            bar.set_postfix(loss=f"{loss:.3f}", **forecast_postfix(lens), refresh=False)

``forecast_postfix`` returns ``{}`` until the forecast exists (two step times after warm-up),
then ``{"ailens_eta": "12:03±0:25"}``: the time still to go for the whole run, ± half its 95 %
interval (``h:mm:ss``). Until the run's total steps are known it shows the mean step time
instead, ``{"ailens_step": "41.2ms"}``, and, once the steps per epoch are known, the time to
the end of the running epoch, ``{"ailens_epoch": "2:0:41"}`` (epoch 2, 41 s to go).
``refresh=False`` leaves redrawing to tqdm's own ``mininterval``; reading ``lens.forecast``
costs some tens of microseconds.

This module does not import tqdm: it only builds the dict, so any bar with ``set_postfix``
takes it. Plain loops can also read ``lens.forecast`` directly (a ``LiveForecast``: ``step``,
``total_steps``, ``predicted_total_s``, ``interval_s``, ``eta_s``, ``elapsed_s``,
``step_time_s``, ``signature_ready``; None before the first forecast).
"""

from __future__ import annotations

from typing import Any

from ailens._io import fmt_s

__all__ = ["forecast_postfix", "forecast_numbers", "forecast_metrics", "format_duration"]


def forecast_postfix(lens: Any) -> dict[str, str]:
    """The current ailens forecast of ``lens`` (a Lens, an integration's handle with
    ``.lens``, or a ``LiveForecast``) as tqdm postfix items; ``{}`` while there is none."""
    forecast = _forecast(lens)
    if forecast is None:
        return {}
    if forecast.eta_s is not None:
        text = format_duration(forecast.eta_s)
        if forecast.interval_s is not None:
            lo, hi = forecast.interval_s
            text += "±" + format_duration((hi - lo) / 2)
        return {"ailens_eta": text}
    if forecast.step_time_s is None:
        return {}
    out = {"ailens_step": format_duration(forecast.step_time_s)}
    epoch = getattr(forecast, "epoch", None)
    if epoch is not None:  # the steps per epoch known: when the running epoch ends
        out["ailens_epoch"] = f"{epoch.epoch}:" + format_duration(epoch.eta_s)
    return out


def forecast_numbers(lens: Any, *, total: bool = False) -> dict[str, float]:
    """The same forecast as numbers, for bars and logs that take numbers only (Lightning's
    ``self.log``, the Hugging Face Trainer's logs): ``ailens_eta_s`` (seconds still to go) and
    ``ailens_eta_pm_s`` (± half the 95 % interval), with ``total``: ``ailens_total_s`` (the
    predicted total, seconds from the Lens start) first; ``{}`` until the run's total is
    known. Three significant digits, whole seconds from 100 s on (bars print ``1234.0``, not
    ``1.23e+03``)."""
    forecast = _forecast(lens)
    if forecast is None or forecast.eta_s is None:
        return {}
    out = {"ailens_total_s": _short(forecast.predicted_total_s)} if total else {}
    out["ailens_eta_s"] = _short(forecast.eta_s)
    if forecast.interval_s is not None:
        lo, hi = forecast.interval_s
        out["ailens_eta_pm_s"] = _short((hi - lo) / 2)
    return out


def forecast_metrics(lens: Any) -> dict[str, float]:
    """The forecast as metrics for the framework's own logging (Lightning's loggers, the
    Hugging Face Trainer's logs, Keras' epoch logs: TensorBoard, W&B, MLflow, CSV):
    ``ailens_total_s`` (the predicted total, seconds from the Lens start), ``ailens_eta_s``
    (seconds still to go) and ``ailens_eta_pm_s`` (± half the 95 % interval), unrounded;
    ``{}`` until the run's total is known."""
    forecast = _forecast(lens)
    if forecast is None or forecast.eta_s is None or forecast.predicted_total_s is None:
        return {}
    out = {"ailens_total_s": forecast.predicted_total_s, "ailens_eta_s": forecast.eta_s}
    if forecast.interval_s is not None:
        lo, hi = forecast.interval_s
        out["ailens_eta_pm_s"] = (hi - lo) / 2
    return out


def _forecast(obj: Any):
    lens = getattr(obj, "lens", obj)  # an integration's handle or callback
    return lens.forecast if hasattr(lens, "forecast") else lens


def _short(seconds: float) -> float:
    return float(round(seconds)) if seconds >= 100 else float(f"{seconds:.3g}")


def format_duration(seconds: float) -> str:
    """``h:mm:ss`` / ``m:ss`` like tqdm's own times; under 10 s with a unit (``41.2ms``)."""
    return fmt_s(seconds, "clock")
