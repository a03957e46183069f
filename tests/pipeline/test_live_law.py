"""The live callback's running entropy-law ceiling (``rcea/entropy_law_ceiling``,
docs/training-live.md): checked against scipy's OLS on the same points, through the
callback's own ``on_log``."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest
from scipy import stats

from rcea.pipeline.training.live_callback import RceaLiveCallback
from rcea.pipeline.training.live_metrics import LAW_CEILING, METRICS, law_ceiling


def _ceiling(h: list[float], r: list[float]) -> float:
    ref = stats.linregress(np.exp(h), r)
    return float(ref.intercept + ref.slope)  # b − a with a = −slope


def test_law_ceiling_matches_scipy_and_waits_for_enough_points() -> None:
    h = [1.2, 1.0, 0.8, 0.7, 0.6, 0.5]
    r = [0.20, 0.30, 0.37, 0.41, 0.44, 0.47]
    pts_h = list(zip(range(1, 7), h, strict=True))
    pts_r = list(zip(range(1, 7), r, strict=True))
    assert law_ceiling(pts_h, pts_r[:4]) is None
    assert law_ceiling(pts_h, pts_r) == pytest.approx(_ceiling(h, r), rel=1e-10)
    assert law_ceiling(pts_h, [(s, 3.0 * v) for s, v in pts_r]) is None  # not an accuracy


def _log(cb: RceaLiveCallback, step: int, logs: dict) -> dict:
    for name in METRICS:  # one optimizer step's numbers in the window, as on_step_end leaves
        cb._window[name].append(0.5 if name == "rcea/token_entropy" else math.nan)
    cb._window["rcea/success_rate"][-1] = logs.pop("success", math.nan)
    cb.on_log(None, SimpleNamespace(global_step=step), None, logs=logs)
    return logs


def test_callback_logs_the_ceiling_once_it_has_five_points() -> None:
    cb = RceaLiveCallback()
    h = [1.2, 1.0, 0.85, 0.7, 0.6, 0.55]
    r = [0.20, 0.30, 0.35, 0.41, 0.44, 0.45]
    logged = [_log(cb, i + 1, {"entropy": h[i], "success": r[i]}) for i in range(6)]
    assert all(LAW_CEILING not in x for x in logged[:4])
    assert logged[4][LAW_CEILING] == pytest.approx(_ceiling(h[:5], r[:5]), rel=1e-10)
    assert logged[5][LAW_CEILING] == pytest.approx(_ceiling(h, r), rel=1e-10)
    assert cb.law_accuracy_source == "rcea/success_rate"


def test_validation_reward_replaces_the_batch_success_rate() -> None:
    cb = RceaLiveCallback()
    h = [1.2, 1.0, 0.85, 0.7, 0.6, 0.55]
    val = [0.1, 0.2, 0.26, 0.33, 0.36, 0.38]
    for i in range(6):
        logs = _log(cb, i + 1, {"entropy": h[i], "success": 0.9})
        cb.on_log(None, SimpleNamespace(global_step=i + 1), None, logs={"eval_reward": val[i]})
    assert cb.law_accuracy_source == "eval_reward"
    # each validation point pairs with the entropy logged at its step
    logs = _log(cb, 7, {"entropy": 0.5, "success": 0.9})
    assert logs[LAW_CEILING] == pytest.approx(_ceiling(h, val), rel=1e-10)
