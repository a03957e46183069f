"""Pure RCEA statistics: estimators, agreement metrics, gates, rubrics.

numpy/scipy in, typed results out; no database, HTTP or Label Studio. The estimators are
numbered as in docs/estimators.md ("The estimators by number"); item numbers refer to it.

The package imports nothing itself: each name below loads its module on first use (PEP
562), so that importing one module (``audits.partition``, say) does not import scipy
through the others — every ``rcea`` command starts without the statistics it does not
compute.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

#: public name → the module that defines it
EXPORTS: dict[str, str] = {
    "GateReport": "audits.gates",
    "GateThresholds": "audits.thresholds",
    "Rubric": "audits.rubric",
    "accepted_set_precision": "audits.calibration",
    "automatic_pair_label": "audits.sampling",
    "binary_entropy": "audits.entropy",
    "broad_token_entropy_ratio": "audits.entropy",
    "covariance_fit": "audits.covariance",
    "covariance_fit_by_group": "audits.covariance",
    "default_rubric": "audits.rubric",
    "detect_training_failure": "audits.failure",
    "direction_counts": "audits.tail",
    "entropy_change_pair": "audits.covariance",
    "entropy_report": "audits.entropy",
    "evaluate_gate": "audits.gates",
    "final_reference": "audits.agreement",
    "judge_calibration": "audits.calibration",
    "last_milestone_before_failure": "audits.failure",
    "load_rubric": "audits.rubric",
    "macro_benchmark_accuracy": "audits.passk",
    "macro_pass_at_k": "audits.passk",
    "mode_entropy": "audits.modes",
    "observed_entropy_change": "audits.covariance",
    "outcome_entropy": "audits.entropy",
    "pair_agreement": "audits.agreement",
    "paired_token_entropy_ratio": "audits.entropy",
    "parse_rubric": "audits.rubric",
    "partition_hash": "audits.partition",
    "pass_at_k": "audits.passk",
    "predicted_entropy_change": "audits.covariance",
    "rarefied_retention": "audits.modes",
    "retention_passk_spearman": "audits.association",
    "reward_stratified_tail": "audits.tail",
    "sample_pairs": "audits.sampling",
    "sequence_decomposition": "audits.entropy",
    "sign_test_greater": "audits.entropy",
    "spearman_correlation": "audits.association",
    "validity_rate": "audits.validity",
}
__all__ = [
    "GateReport",
    "GateThresholds",
    "Rubric",
    "accepted_set_precision",
    "automatic_pair_label",
    "binary_entropy",
    "broad_token_entropy_ratio",
    "covariance_fit",
    "covariance_fit_by_group",
    "default_rubric",
    "detect_training_failure",
    "direction_counts",
    "entropy_change_pair",
    "entropy_report",
    "evaluate_gate",
    "final_reference",
    "judge_calibration",
    "last_milestone_before_failure",
    "load_rubric",
    "macro_benchmark_accuracy",
    "macro_pass_at_k",
    "mode_entropy",
    "observed_entropy_change",
    "outcome_entropy",
    "pair_agreement",
    "paired_token_entropy_ratio",
    "parse_rubric",
    "partition_hash",
    "pass_at_k",
    "predicted_entropy_change",
    "rarefied_retention",
    "retention_passk_spearman",
    "reward_stratified_tail",
    "sample_pairs",
    "sequence_decomposition",
    "sign_test_greater",
    "spearman_correlation",
    "validity_rate",
]

if TYPE_CHECKING:
    from audits.agreement import final_reference, pair_agreement
    from audits.association import retention_passk_spearman, spearman_correlation
    from audits.calibration import accepted_set_precision, judge_calibration
    from audits.covariance import (
        covariance_fit,
        covariance_fit_by_group,
        entropy_change_pair,
        observed_entropy_change,
        predicted_entropy_change,
    )
    from audits.entropy import (
        binary_entropy,
        broad_token_entropy_ratio,
        entropy_report,
        outcome_entropy,
        paired_token_entropy_ratio,
        sequence_decomposition,
        sign_test_greater,
    )
    from audits.failure import detect_training_failure, last_milestone_before_failure
    from audits.gates import GateReport, evaluate_gate
    from audits.modes import mode_entropy, rarefied_retention
    from audits.partition import partition_hash
    from audits.passk import macro_benchmark_accuracy, macro_pass_at_k, pass_at_k
    from audits.rubric import Rubric, default_rubric, load_rubric, parse_rubric
    from audits.sampling import automatic_pair_label, sample_pairs
    from audits.tail import direction_counts, reward_stratified_tail
    from audits.thresholds import GateThresholds
    from audits.validity import validity_rate


def __getattr__(name: str) -> Any:
    module = EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'audits' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *EXPORTS})
