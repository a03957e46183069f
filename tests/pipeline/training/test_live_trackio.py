"""``report_to = ["tensorboard", "trackio"]``: a short CPU ``rcea train run`` logs every
``rcea/`` number of every step to trackio too, and trackio's own local storage gives them
back — the same values as the TensorBoard event files (docs/training-live.md#trackio).

trackio comes from ``.trackio-site`` (``make install``; tests/support/trackio_env.py). It
reads ``TRACKIO_DIR`` when it is imported, so the run and the read-back are subprocesses with
``TRACKIO_DIR`` under ``tmp_path``; no ``TRACKIO_*`` variable names a Space, a bucket or a
server, so nothing leaves the machine."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

pytest.importorskip("trl")
pytest.importorskip("tensorboard")

from tensorboard.backend.event_processing.event_accumulator import (  # noqa: E402
    EventAccumulator,
)

from rcea.app.cli import app  # noqa: E402
from rcea.pipeline.event_curves import event_dirs  # noqa: E402
from rcea.pipeline.training import reporting  # noqa: E402
from rcea.pipeline.training.live_metrics import METRICS  # noqa: E402
from tests.support.small_base import build_small_base  # noqa: E402
from tests.support.trackio_env import require_trackio  # noqa: E402

ROOT = Path(__file__).resolve().parents[3]
BIN = Path(sys.executable).parent
STEPS = 3

#: trackio's own reader of its local storage, as JSON: {project: {run: {"rows": the logged
#: rows, "output_dir": of the run's config (TRL's arguments)}}}
READBACK = """
import json
from rcea.pipeline.training.reporting import trackio_importable
assert trackio_importable()
from trackio.sqlite_storage import SQLiteStorage as S
def run(p, r):
    config = S.get_run_config(p, r) or {}
    return {"rows": S.get_logs(p, r), "output_dir": config.get("output_dir")}
print(json.dumps({p: {r: run(p, r) for r in S.get_runs(p)} for p in S.get_projects()}, default=str))
"""


def _env(tmp: Path) -> dict[str, str]:
    keep = {k: v for k, v in os.environ.items() if not k.startswith(("RCEA_", "TRACKIO_"))}
    return {
        **keep,
        "TRACKIO_DIR": str(tmp / "trackio-store"),  # not trackio/: python -c imports from cwd
        "HF_HOME": str(tmp / "hf"),
        "HF_HUB_OFFLINE": "1",
        "RCEA_DATA_DIR": str(tmp / "data"),
        "PYTHONPATH": str(ROOT),
        "CUDA_VISIBLE_DEVICES": "",
        "OMP_NUM_THREADS": "1",
    }


def _config(path: Path, base: Path, out: Path) -> Path:
    training: dict[str, Any] = {
        "output_dir": str(out), "max_steps": STEPS, "learning_rate": 5e-4,
        "per_device_train_batch_size": 8, "num_generations": 4, "max_completion_length": 16,
        "save_steps": STEPS, "seed": 3, "torch_threads": 1, "progress_bar": False,
        "report_to": ["tensorboard", "trackio"],
    }  # fmt: skip
    lines = ["[model]", f"path = {json.dumps(str(base))}", "[objective]", 'name = "grpo"']
    lines += ["[training]", *(f"{k} = {json.dumps(v)}" for k, v in training.items())]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _same(a: float, b: float) -> bool:
    """Equal as TensorBoard's float32 keeps them; NaN (undefined) equals NaN."""
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-7)


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::FutureWarning", "ignore::UserWarning")
def test_trackio_storage_holds_every_rcea_metric_at_every_step(tmp_path: Path) -> None:
    require_trackio()
    base = build_small_base(tmp_path / "base")
    out = tmp_path / "run"
    cfg = _config(tmp_path / "train.toml", base, out)
    env = _env(tmp_path)
    run = subprocess.run(
        [str(BIN / "rcea"), "train", "run", "--config", str(cfg), "--json"],
        env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-4000:]
    doc = json.loads(run.stdout)  # trackio's prints went to stderr: one JSON document
    assert doc["ok"] and doc["steps"] == STEPS
    assert "Trackio" in run.stderr

    back = subprocess.run(
        [sys.executable, "-c", READBACK], env=env, capture_output=True, text=True, timeout=120
    )
    assert back.returncode == 0, back.stderr[-4000:]
    stored = json.loads(back.stdout)
    assert list(stored) == [reporting.TRACKIO_PROJECT]
    ((run_name, stored_run),) = stored[reporting.TRACKIO_PROJECT].items()
    assert stored_run["output_dir"] == str(out)  # which trackio run is which output directory
    rows = stored_run["rows"]
    steps = [r for r in rows if "train/loss" in r]  # the last row: the run's epoch only
    assert [r["train/global_step"] for r in steps] == list(range(1, STEPS + 1)), run_name
    for row in steps:
        missing = [m for m in METRICS if f"train/{m}" not in row]
        assert not missing, (row["train/global_step"], missing)
        assert math.isfinite(row["train/rcea/outcome_entropy"])  # always defined

    # the same numbers as the TensorBoard event files of the same run (NaN where undefined)
    (events,) = event_dirs(out)
    acc = EventAccumulator(str(events), size_guidance={"scalars": 0})
    acc.Reload()
    for name in METRICS:
        tb = {e.step: e.value for e in acc.Scalars(f"train/{name}")}
        tr = {r["train/global_step"]: float(r[f"train/{name}"]) for r in steps}
        assert tb.keys() == tr.keys(), name
        assert all(_same(tb[s], tr[s]) for s in tb), (name, tb, tr)


def test_report_to_trackio_without_trackio_fails_before_training(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No trackio anywhere: ``rcea train run`` stops with the fix, before loading a model."""
    real = reporting.importlib.util.find_spec
    monkeypatch.setattr(reporting, "TRACKIO_SITE", tmp_path / "no-site")
    monkeypatch.setattr(
        reporting.importlib.util,
        "find_spec",
        lambda name, *a: None if name == "trackio" else real(name, *a),
    )
    cfg = _config(tmp_path / "train.toml", tmp_path / "no-model", tmp_path / "run")
    res = CliRunner().invoke(app, ["train", "run", "--config", str(cfg), "--json"])
    assert res.exit_code == 1, res.output
    doc = json.loads(res.stdout)
    assert not doc["ok"]
    assert "[training] report_to: trackio is not installed" in doc["error"]
    assert "make install" in doc["error"] and "no-model" not in doc["error"]
