"""Tidy frames of training runs' event files for the Training page (docs/training-live.md):
the run directories found under ``<data_dir>/runs`` (where the shipped configs write) and
any others given, each read with :func:`pipeline.event_curves.event_curve` — the
files ``rcea probe curves`` turns into the report's training curves. Pure functions: no
store, no Streamlit."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd

from pipeline.event_curves import event_curve, event_dirs

#: The three entropies the page sets side by side (the paper's Figure 1 argument): TRL's
#: global token entropy and the reward-conditioned split.
SPLIT = {
    "entropy": "global (TRL)",
    "rcea/token_entropy_success": "successful",
    "rcea/token_entropy_failure": "failed",
}


def run_dirs(root: Path) -> list[Path]:
    """The directories under ``root`` (depth ≤ 2) that hold TensorBoard event files."""
    if not root.is_dir():
        return []
    found = {d for d in sorted(root.rglob("runs")) if d.is_dir() and event_dirs(d.parent)}
    return sorted(d.parent for d in found if len(d.parent.relative_to(root).parts) <= 2)


def run_identity(run_dir: Path) -> tuple[str, str]:
    """(objective, model) of a run dir: from ``run.json`` once training has ended, else the
    directory's name and "?" (a run still training)."""
    meta = run_dir / "run.json"
    if meta.exists():
        try:
            config = json.loads(meta.read_text(encoding="utf-8")).get("config", {})
        except json.JSONDecodeError:
            config = {}
        objective = str(config.get("objective") or run_dir.name)
        model = Path(str(config.get("model", {}).get("path", "?"))).name or "?"
        return objective, model
    return run_dir.name, "?"


def live_frame(dirs: list[Path]) -> pd.DataFrame:
    """One row per logged step of every run: ``run`` (objective), ``model``, ``series``
    (``run · model``), ``dir``, ``step``, ``progress`` and every logged key (NaN where
    undefined)."""
    rows: list[dict[str, Any]] = []
    for d in dirs:
        run, model = run_identity(d)
        for point in event_curve(d):
            rows.append({"run": run, "model": model, "series": f"{run} · {model}",
                         "dir": str(d), **point})  # fmt: skip
    return pd.DataFrame(rows)


def split_frame(frame: pd.DataFrame) -> pd.DataFrame:
    """Long frame of :data:`SPLIT`: ``series``, ``step``, ``progress``, ``quantity``,
    ``value`` (undefined steps dropped)."""
    present = [k for k in SPLIT if k in frame.columns]
    if frame.empty or not present:
        return pd.DataFrame(columns=["series", "step", "progress", "quantity", "value"])
    long = frame.melt(
        id_vars=["series", "step", "progress"], value_vars=present, var_name="key",
        value_name="value",
    )  # fmt: skip
    long["quantity"] = long["key"].map(SPLIT)
    return long.drop(columns="key").dropna(subset=["value"]).reset_index(drop=True)


def latest_frame(frame: pd.DataFrame) -> pd.DataFrame:
    """The last logged step of each run with its ``rcea/`` numbers (NaN: undefined)."""
    if frame.empty:
        return frame
    keys = [c for c in frame.columns if c.startswith("rcea/")]
    last = frame.sort_values("step").groupby("series", sort=True).tail(1)
    return last[["run", "model", "step", *keys]].reset_index(drop=True)
