"""Tidy frames of training runs' event files for the Training page (docs/training-live.md):
the run directories found under the data directory (the shipped configs write to
``<data_dir>/runs/``, the demo to ``<data_dir>/demo/<scale>/runs/``) and any others
given, each read with :func:`rcea.pipeline.event_curves.event_curve` — the files
``rcea probe curves`` turns into the report's training curves. Pure functions: no
store, no Streamlit."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pandas as pd

from rcea.pipeline.event_curves import EVENTS_GLOB, event_curve

#: The three entropies the page sets side by side (the paper's Figure 1 argument): TRL's
#: global token entropy and the reward-conditioned split.
SPLIT = {
    "entropy": "global (TRL)",
    "rcea/token_entropy_success": "successful",
    "rcea/token_entropy_failure": "failed",
}


def run_dirs(root: Path) -> list[Path]:
    """The training run directories under ``root``: those with TensorBoard event files in
    ``RUN/runs/<stamp>/`` (where TRL's TensorBoard callback writes), sorted."""
    if not root.is_dir():
        return []
    found = {f.parents[2] for f in root.rglob(EVENTS_GLOB) if f.parent.parent.name == "runs"}
    return sorted(found)


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


def short_path(d: Path, others: list[Path]) -> str:
    """The shortest trailing part of ``d`` that tells it from ``others``."""
    for k in range(1, len(d.parts) + 1):
        tail = d.parts[-k:]
        if sum(o.parts[-k:] == tail for o in others) == 1:
            return "/".join(tail)
    return str(d)


def live_frame(dirs: list[Path]) -> pd.DataFrame:
    """One row per logged step of every run: ``run`` (objective), ``model``, ``series``
    (``run · model``), ``dir``, ``step``, ``progress`` and every logged key (NaN where
    undefined)."""
    rows: list[dict[str, Any]] = []
    names = {d: run_identity(d) for d in dirs}
    taken = Counter(f"{run} · {model}" for run, model in names.values())
    for d, (run, model) in names.items():
        series = f"{run} · {model}"
        if taken[series] > 1:  # e.g. the demo's scales: same objective and base name
            same = [o for o, ident in names.items() if f"{ident[0]} · {ident[1]}" == series]
            series = f"{series} ({short_path(d, same)})"
        for point in event_curve(d):
            rows.append({"run": run, "model": model, "series": series, "dir": str(d), **point})
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
