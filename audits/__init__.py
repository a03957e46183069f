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
from typing import Any

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
__all__ = sorted(EXPORTS)


def __getattr__(name: str) -> Any:
    module = EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'audits' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *EXPORTS})
