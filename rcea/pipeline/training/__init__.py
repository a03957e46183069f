"""Training: six RLVR objectives as small losses on one shared TRL ``GRPOTrainer`` subclass.

The names below load on first use (PEP 562), so that the live metrics and callback
(``rcea.pipeline.training.live_metrics`` / ``live_callback``, which run inside a verl or TRL
environment with only ``rcea-audit[live]``) import no config, judge or LLM-client modules."""

from __future__ import annotations

import importlib
from typing import Any

_NAMES = {
    "ConfigError": "config",
    "TrainConfig": "config",
    "load_config": "config",
    "parse_config": "config",
    "OBJECTIVES": "objectives",
    "default_params": "objectives",
    "make_objective": "objectives",
}

__all__ = sorted(_NAMES)


def __getattr__(name: str) -> Any:
    if name not in _NAMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_NAMES[name]}"), name)
