"""``probe curves``: training curves of run dirs as ``training_curve`` measurements.

Each run dir's training curve — its TensorBoard event files when it has them (``rcea train
run`` writes them by default, :mod:`rcea.pipeline.event_curves`, the files the view's
Training page reads), else its ``curves.jsonl`` (one line per optimizer step; ``progress``
= step / max_steps) — becomes one measurement: run = the objective in ``run.json`` (or the dir
name), model = the given label, step = −1, payload ``points`` = the curve lines with
``step``, ``progress`` and the logged keys (``entropy``, ``reward``, ``loss``,
``completions/mean_length``, the ``rcea/`` numbers, ...; an undefined value is
omitted), and from ``run.json`` the objective preset and every
resolved objective value with its source (``objective_preset``, ``objective_params``),
and the non-embedding parameters of the run's base model (``n_params``, read from its
safetensors headers: the entropy law's N across model sizes, docs/estimators.md item 18;
omitted when the base in ``run.json`` is gone or holds no safetensors). The
measurement carries ``run.json``'s training seed (``rcea train run --train-seeds``), so two
seeds' curves are two runs' (docs/estimators.md item 17).
"""

from __future__ import annotations

import json
from pathlib import Path

from rcea.pipeline.event_curves import event_curve, finite_point
from rcea.pipeline.jsonl import iter_json_objects
from rcea.pipeline.policy.model import non_embedding_parameters
from rcea.pipeline.probe.common import MeasurementRow
from rcea.pipeline.probe.config import ConfigError
from rcea.pipeline.run_meta import train_seed_of


def training_curve(
    run_dir: str | Path, *, model: str, run: str | None = None, train_seed: int | None = None
) -> MeasurementRow:
    """The ``training_curve`` measurement of one training run dir; its training seed is
    ``run.json``'s, else ``train_seed`` (``--train-seed``); both and different: an error."""
    run_dir = Path(run_dir)
    curves = run_dir / "curves.jsonl"
    events = [finite_point(p) for p in event_curve(run_dir)]
    if not events and not curves.exists():
        raise ConfigError(
            f"{run_dir}: no event files and no curves.jsonl (not a training run dir?)"
        )
    meta_path = run_dir / "run.json"
    meta = json.loads(meta_path.read_text(encoding="utf-8")) if meta_path.exists() else {}
    name = run or meta.get("config", {}).get("objective") or run_dir.name
    points = events
    for lineno, point in [] if events else iter_json_objects(curves, error=ConfigError):
        if "step" not in point or "progress" not in point:
            raise ConfigError(f"{curves}:line {lineno}: needs step and progress")
        points.append(point)
    if not points:
        raise ConfigError(f"{curves}: empty")
    payload: dict = {"points": points}
    config = meta.get("config", {})
    if "objective_preset" in config:  # the preset and every resolved value with its source
        payload["objective_preset"] = config["objective_preset"]
        sources = config.get("objective_params_sources", {})
        payload["objective_params"] = {
            k: {"value": v, "source": sources.get(k, "")}
            for k, v in config.get("objective_params_resolved", {}).items()
        }
    base = config.get("model", {}).get("path")
    n_params = non_embedding_parameters(base) if base and Path(base).is_dir() else None
    if n_params:  # the trained weights have the base's shape (LoRA is merged into it)
        payload["n_params"] = n_params
    recorded = train_seed_of(meta)
    if recorded is not None and train_seed is not None and recorded != train_seed:
        raise ConfigError(
            f"{meta_path}: training seed {recorded}, but --train-seed is {train_seed}"
        )
    seed = recorded if recorded is not None else train_seed
    return MeasurementRow("training_curve", payload, run=name, model=model, train_seed=seed)
