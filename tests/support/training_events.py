"""TensorBoard event files of a training run, written as TRL's TensorBoard callback writes
them (``train/<key>`` scalars under ``RUN_DIR/runs/<stamp>``) with a ``run.json``, for the
tests of the view's Training page (docs/training-live.md)."""

from __future__ import annotations

import json
from pathlib import Path

NAN = float("nan")
#: step → (global entropy, successful, failed, outcome entropy); step 2 has one outcome only
VALUES = {1: (1.5, 1.2, 1.8, 0.6), 2: (1.4, NAN, NAN, 0.0), 3: (1.1, 0.7, 1.6, 0.4)}
MAX_STEPS = 4


def write_run(run_dir: Path, objective: str, model_path: str = "/x/base-tiny") -> None:
    """Event files of :data:`VALUES` and the ``run.json`` of a finished run."""
    # torch's SummaryWriter is the one TRL's TensorBoard callback uses
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(log_dir=str(run_dir / "runs" / "stamp"))
    for step, (g, s, f, o) in VALUES.items():
        row = {"entropy": g, "rcea/token_entropy_success": s,
               "rcea/token_entropy_failure": f, "rcea/outcome_entropy": o}  # fmt: skip
        for key, value in row.items():
            writer.add_scalar(f"train/{key}", value, step)
    writer.close()
    config = {"objective": objective, "model": {"path": model_path},
              "training": {"max_steps": MAX_STEPS}}  # fmt: skip
    (run_dir / "run.json").write_text(json.dumps({"config": config}), encoding="utf-8")
