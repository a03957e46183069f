"""Tests for rcea.audits.failure (items 9 and 14)."""

from __future__ import annotations

import json

import pytest

from rcea.audits.failure import detect_training_failure, last_milestone_before_failure

STEPS = list(range(0, 8001, 500))
COLLAPSE = [
    0.2,
    0.35,
    0.42,
    0.48,
    0.51,
    0.55,
    0.57,
    0.56,
    0.50,
    0.30,
    0.10,
    0.04,
    0.02,
    0.01,
    0.01,
    0.0,
    0.0,
]
HEALTHY = [
    0.2,
    0.3,
    0.4,
    0.45,
    0.5,
    0.52,
    0.55,
    0.56,
    0.57,
    0.57,
    0.58,
    0.58,
    0.59,
    0.6,
    0.6,
    0.61,
    0.6,
]


def test_collapsed_run_is_flagged():
    res = detect_training_failure(STEPS, COLLAPSE)
    assert res.failed and res.peak_ok and res.endpoint_ok and res.drop_ok
    assert res.peak == 0.57 and res.peak_step == 3000
    assert res.endpoint == 0.0 and res.endpoint_step == 8000
    assert res.drop == pytest.approx(0.57)
    assert res.collapse_step == 5500
    json.dumps(res.to_dict())


def test_healthy_run_is_not_flagged():
    res = detect_training_failure(STEPS, HEALTHY)
    assert not res.failed and res.collapse_step is None
    assert res.peak_ok and not res.endpoint_ok


def test_each_criterion_is_required_and_boundaries_inclusive():
    # low peak: never learned
    assert not detect_training_failure([0, 1, 2], [0.1, 0.2, 0.0]).failed
    # exact boundaries count as met
    res = detect_training_failure([0, 1, 2], [0.0, 0.35, 0.05])
    assert res.failed
    # drop too small with a custom drop_min
    res = detect_training_failure([0, 1, 2], [0.0, 0.35, 0.05], drop_min=0.31)
    assert not res.failed and not res.drop_ok
    # configurable thresholds
    res = detect_training_failure(
        [0, 1, 2], [0.1, 0.2, 0.1], peak_min=0.15, endpoint_max=0.1, drop_min=0.1
    )
    assert res.failed


def test_first_peak_is_used_on_ties():
    res = detect_training_failure([0, 10, 20, 30], [0.5, 0.2, 0.5, 0.0])
    assert res.peak_step == 0 and res.last_peak_step == 20


# The supplement's dense MATH500 trace of Clip-Cov-7B (Table A9 and the failure diagnosis):
# 76.6 % at raw steps 1,000 and 2,400 (the last maximum), 60.8 % at 3,600, 0.2 % at 4,000
# and at 8,000. Milestones every 2,000 steps.
CLIP_COV_7B = {1000: 0.766, 2400: 0.766, 3600: 0.608, 4000: 0.002, 8000: 0.002}


def test_clip_cov_7b_milestone_is_2000():
    steps = sorted(CLIP_COV_7B)
    res = detect_training_failure(steps, [CLIP_COV_7B[s] for s in steps])
    assert res.failed and res.peak == 0.766
    assert (res.peak_step, res.last_peak_step) == (1000, 2400)
    assert res.collapse_step == 4000
    # the latest milestone at or before the LAST peak (the earliest peak would give none)
    assert last_milestone_before_failure([2000, 4000, 6000, 8000], res) == 2000


def test_last_milestone_before_failure():
    res = detect_training_failure(STEPS, COLLAPSE)
    assert last_milestone_before_failure([1000, 2000, 4000, 8000], res) == 2000
    assert last_milestone_before_failure([3000, 6000], res) == 3000  # at the peak is fine
    assert last_milestone_before_failure([4000, 6000], res) is None
    healthy = detect_training_failure(STEPS, HEALTHY)
    with pytest.raises(ValueError, match="did not fail"):
        last_milestone_before_failure([1000], healthy)


@pytest.mark.parametrize(
    ("steps", "acc", "kwargs", "match"),
    [
        ([0, 2, 1], [0.1, 0.2, 0.3], {}, "strictly increasing"),
        ([0, 1], [0.1, 1.2], {}, r"\[0, 1\]"),
        ([0, 1], [0.1], {}, "length mismatch"),
        ([], [], {}, "empty"),
        ([0, 1.5], [0.1, 0.2], {}, "integers"),
        ([0, 1], [0.1, float("nan")], {}, "non-finite"),
        ([0, 1], [0.1, 0.2], {"peak_min": 1.5}, "peak_min"),
    ],
)
def test_bad_inputs(steps, acc, kwargs, match):
    with pytest.raises(ValueError, match=match):
        detect_training_failure(steps, acc, **kwargs)
