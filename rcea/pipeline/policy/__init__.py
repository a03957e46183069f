"""The tiny base policy: character tokenizer, Qwen2-architecture model, SFT warm start."""

from rcea.pipeline.policy.base import METADATA_FILE, BaseReport, build_base
from rcea.pipeline.policy.model import QWEN25_05B_SHAPE, build_model, model_config, n_parameters
from rcea.pipeline.policy.sampling import EvalSummary, Sample, sample_completions, summarise
from rcea.pipeline.policy.sft import Mixture, sample_example, warm_start
from rcea.pipeline.policy.tokenizer import build_char_tokenizer

__all__ = [
    "METADATA_FILE",
    "QWEN25_05B_SHAPE",
    "BaseReport",
    "EvalSummary",
    "Mixture",
    "Sample",
    "build_base",
    "build_char_tokenizer",
    "build_model",
    "model_config",
    "n_parameters",
    "sample_completions",
    "sample_example",
    "summarise",
    "warm_start",
]
