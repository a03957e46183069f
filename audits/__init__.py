"""Pure RCEA statistics: estimators, agreement metrics, gates, rubrics.

numpy/scipy in, typed results out; no database, HTTP or Label Studio. The estimators are
numbered as in docs/estimators.md ("The estimators by number"); item numbers refer to it.
"""

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
