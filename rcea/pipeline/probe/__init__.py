"""Probing: checkpoints → records, token artifacts and measurements.

Stages (each takes a :class:`ProbeConfig` and an output dir, resumes finished
checkpoint × question units and returns a :class:`StageResult`):

* :func:`run_sample` — K samples per fixed-probe question per checkpoint → records;
* :func:`run_entropy` — teacher-forced token entropies / log-probs → Parquet + records;
* :func:`run_covariance` — predicted vs observed Δh per transition → TRANSITIONS.csv,
  and the endpoint reward-stratified tail;
* :func:`run_bench` — greedy accuracy, accuracy traces, pass@k → RESULTS.csv;
* :func:`training_curve` — a run dir's curves.jsonl as a measurement.

Torch/Transformers/vLLM are imported inside the functions that need them.
"""

from rcea.pipeline.probe.common import MeasurementRow, StageResult, derive_seed
from rcea.pipeline.probe.config import (
    Checkpoint,
    ConfigError,
    ProbeConfig,
    load_config,
    parse_config,
    resolve_checkpoints,
)
from rcea.pipeline.probe.covariance import run_covariance
from rcea.pipeline.probe.curves import training_curve
from rcea.pipeline.probe.entropy_kernel import TokenStats, naive_token_stats, token_stats
from rcea.pipeline.probe.entropy_run import StageOrderError, run_entropy
from rcea.pipeline.probe.evaluate import run_bench
from rcea.pipeline.probe.manifest import ProbeSetMismatch
from rcea.pipeline.probe.questions import (
    DatasetError,
    ProbeQuestion,
    load_questions,
    read_benchmark,
)
from rcea.pipeline.probe.sampling import run_sample

__all__ = [
    "Checkpoint",
    "ConfigError",
    "DatasetError",
    "MeasurementRow",
    "ProbeConfig",
    "ProbeQuestion",
    "ProbeSetMismatch",
    "StageOrderError",
    "StageResult",
    "TokenStats",
    "derive_seed",
    "load_config",
    "load_questions",
    "naive_token_stats",
    "parse_config",
    "read_benchmark",
    "resolve_checkpoints",
    "run_bench",
    "run_covariance",
    "run_entropy",
    "run_sample",
    "token_stats",
    "training_curve",
]
