"""A five-step base policy (``rcea train build-base``): enough for a training run to have
weights, curves and metrics to log, not for its numbers to mean anything (the live-metric
tests; tests/pipeline/conftest.py has the session's real warm start)."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from rcea.app.cli import app


def build_small_base(out: Path) -> Path:
    """Build the base into ``out`` through the CLI; returns ``out``."""
    res = CliRunner().invoke(
        app,
        [
            "train", "build-base", "--out", str(out), "--sft-steps", "5",
            "--eval-questions", "2", "--eval-k", "2", "--threads", "1", "--json",
        ],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    return out
