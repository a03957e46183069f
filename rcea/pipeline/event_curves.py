"""Training curves from a run's TensorBoard event files (docs/training-live.md).

``rcea train run`` reports to TensorBoard by default (``[training] report_to``), which
writes ``OUTPUT_DIR/runs/<stamp>/events.out.tfevents.*`` beside the checkpoints, with every
logged number under ``train/<key>`` (the ``rcea/`` ones included). The Training page of the
view and ``rcea probe curves`` (hence the report's training curves) read them here, with
TensorBoard's own reader, into the points of a curve: ``step``, ``progress`` (step /
max_steps) and one value per logged key (NaN where a step's value was undefined).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

# Logged keys copied into the curve (when present), besides step/progress/epoch.
CURVE_KEYS: tuple[str, ...] = (
    "loss",
    "learning_rate",
    "grad_norm",
    "entropy",
    "reward",
    "reward_std",
    "frac_reward_zero_std",
    "toy/accuracy",
    "toy/boxed_rate",
    "toy/success_invalid_rate",
    "completions/mean_length",
    "completions/min_length",
    "completions/max_length",
    "completions/clipped_ratio",
    "completions/mean_terminated_length",
    "clip_ratio/low_mean",
    "clip_ratio/high_mean",
    "clip_ratio/region_mean",
    "step_time",
)
CURVE_PREFIXES: tuple[str, ...] = ("objective/", "rewards/", "verifier/", "rcea/")
EVENTS_GLOB = "events.out.tfevents.*"
TAG_PREFIX = "train/"


def is_curve_key(key: str) -> bool:
    """Whether a logged key belongs in a training curve (the curve file and the report)."""
    return key in CURVE_KEYS or key.startswith(CURVE_PREFIXES)


def event_dirs(run_dir: str | Path) -> list[Path]:
    """The folders under ``run_dir`` holding event files, newest last."""
    run = Path(run_dir)
    files = sorted(run.rglob(EVENTS_GLOB), key=lambda p: p.stat().st_mtime)
    dirs: list[Path] = []
    for f in files:
        if f.parent in dirs:
            dirs.remove(f.parent)
        dirs.append(f.parent)
    return dirs


def max_steps_of(run_dir: str | Path) -> int | None:
    """``max_steps`` recorded in the run's ``run.json`` (written when training ends), else
    ``None`` (a run still training: progress is then step / last step)."""
    meta = Path(run_dir) / "run.json"
    if not meta.exists():
        return None
    try:
        data = json.loads(meta.read_text(encoding="utf-8"))
    except json.JSONDecodeError:
        return None
    value = data.get("config", {}).get("training", {}).get("max_steps")
    return int(value) if isinstance(value, int) and value > 0 else None


def read_scalars(event_dir: str | Path) -> dict[str, list[tuple[int, float]]]:
    """Every scalar tag of one event folder: tag → [(step, value)], as TensorBoard reads it."""
    try:  # tensorboard is part of the train extra; the view imports this module without it
        from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    except ImportError:
        raise RuntimeError(
            f"{event_dir}: reading TensorBoard event files needs tensorboard "
            "(pip install 'rcea-audit[train]' or pip install tensorboard)"
        ) from None

    acc = EventAccumulator(str(event_dir), size_guidance={"scalars": 0})
    acc.Reload()
    return {
        tag: [(int(e.step), float(e.value)) for e in acc.Scalars(tag)]
        for tag in acc.Tags().get("scalars", [])
    }


def event_curve(run_dir: str | Path) -> list[dict[str, Any]]:
    """The points of ``run_dir``'s newest event folder, one per logged step (empty without
    event files). Keys lose TensorBoard's ``train/`` prefix (``rcea/outcome_entropy``)."""
    dirs = event_dirs(run_dir)
    if not dirs:
        return []
    by_step: dict[int, dict[str, Any]] = {}
    for tag, values in read_scalars(dirs[-1]).items():
        if not tag.startswith(TAG_PREFIX):
            continue
        key = tag[len(TAG_PREFIX) :]
        if not is_curve_key(key):
            continue
        for step, value in values:
            by_step.setdefault(step, {"step": step})[key] = value
    if not by_step:
        return []
    total = max_steps_of(run_dir) or max(by_step)
    points = []
    for step in sorted(by_step):
        point = by_step[step]
        point["progress"] = step / total if total else None
        points.append(point)
    return points


def finite_point(point: dict[str, Any]) -> dict[str, Any]:
    """``point`` without its undefined (NaN) values, as the curve file omits them (JSON has
    no NaN; a missing key reads as undefined)."""
    return {k: v for k, v in point.items() if not (isinstance(v, float) and not math.isfinite(v))}
