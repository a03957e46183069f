"""The report's one parameter object: keyword overrides apply on top of a given object,
unknown names are refused, and the estimator settings are the six the rubric can set."""

from __future__ import annotations

import pytest

from rcea.study.report.parameters import ReportParameters


def test_overrides_apply_on_top() -> None:
    base = ReportParameters(seed=3, n_boot=100)
    got = ReportParameters.of(base, n_boot=50, partition="latest")
    assert (got.seed, got.n_boot, got.partition) == (3, 50, "latest")
    assert ReportParameters.of(None) == ReportParameters()


def test_unknown_parameter_is_refused() -> None:
    with pytest.raises(TypeError, match="n_bootstrap"):
        ReportParameters.of(None, n_bootstrap=10)


def test_estimator_settings() -> None:
    assert set(ReportParameters().estimator_settings()) == {
        "seed", "n_boot", "k_min", "n_min", "n_draws", "confidence"
    }  # fmt: skip
