"""Training: six RLVR objectives as small losses on one shared TRL ``GRPOTrainer`` subclass."""

from rcea.pipeline.training.config import ConfigError, TrainConfig, load_config, parse_config
from rcea.pipeline.training.objectives import OBJECTIVES, default_params, make_objective

__all__ = [
    "OBJECTIVES",
    "ConfigError",
    "TrainConfig",
    "default_params",
    "load_config",
    "make_objective",
    "parse_config",
]
