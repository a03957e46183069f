"""Pure RCEA statistics: estimators, agreement metrics, gates, rubrics.

numpy/scipy in, typed results out; no database, HTTP or Label Studio. The estimators are
numbered as in docs/estimators.md ("The estimators by number"); item numbers refer to it.

The package imports nothing itself: each name below loads its module on first use (PEP
562), so that importing one module (``rcea.audits.partition``, say) does not import scipy
through the others — every ``rcea`` command starts without the statistics it does not
compute.
"""

from __future__ import annotations

import importlib
from typing import Any

#: public name → the module that defines it
EXPORTS: dict[str, str] = {
    "GateReport": "rcea.audits.gates",
    "GateThresholds": "rcea.audits.thresholds",
    "Rubric": "rcea.audits.rubric",
    "accepted_set_precision": "rcea.audits.calibration",
    "automatic_pair_label": "rcea.audits.sampling",
    "binary_entropy": "rcea.audits.entropy",
    "broad_token_entropy_ratio": "rcea.audits.entropy",
    "across_seeds": "rcea.audits.replicates",
    "covariance_fit": "rcea.audits.covariance",
    "covariance_fit_by_group": "rcea.audits.covariance",
    "default_rubric": "rcea.audits.rubric",
    "detect_training_failure": "rcea.audits.failure",
    "direction_counts": "rcea.audits.tail",
    "entropy_change_pair": "rcea.audits.covariance",
    "entropy_order": "rcea.audits.entropy_law",
    "entropy_report": "rcea.audits.entropy",
    "evaluate_gate": "rcea.audits.gates",
    "final_reference": "rcea.audits.agreement",
    "fit_entropy_law": "rcea.audits.entropy_law",
    "judge_calibration": "rcea.audits.calibration",
    "population_calibration": "rcea.audits.calibration",
    "last_milestone_before_failure": "rcea.audits.failure",
    "load_rubric": "rcea.audits.rubric",
    "macro_benchmark_accuracy": "rcea.audits.passk",
    "macro_pass_at_k": "rcea.audits.passk",
    "mode_covariance_fit": "rcea.audits.mode_covariance",
    "mode_entropy": "rcea.audits.modes",
    "mode_stratified_tail": "rcea.audits.mode_tail",
    "observed_entropy_change": "rcea.audits.covariance",
    "outcome_entropy": "rcea.audits.entropy",
    "pair_agreement": "rcea.audits.agreement",
    "paired_token_entropy_ratio": "rcea.audits.entropy",
    "parse_rubric": "rcea.audits.rubric",
    "partition_hash": "rcea.audits.partition",
    "pass_at_k": "rcea.audits.passk",
    "run_law": "rcea.audits.entropy_law",
    "predicted_entropy_change": "rcea.audits.covariance",
    "rarefied_retention": "rcea.audits.modes",
    "realization_retention": "rcea.audits.realization",
    "retention_passk_spearman": "rcea.audits.association",
    "reward_stratified_tail": "rcea.audits.tail",
    "sample_pairs": "rcea.audits.sampling",
    "sequence_decomposition": "rcea.audits.entropy",
    "sign_test_greater": "rcea.audits.entropy",
    "token_covariances": "rcea.audits.tail",
    "spearman_correlation": "rcea.audits.association",
    "validity_rate": "rcea.audits.validity",
    "within_mode_entropy": "rcea.audits.realization",
}
__all__ = sorted(EXPORTS)


def __getattr__(name: str) -> Any:
    module = EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'rcea.audits' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *EXPORTS})
