"""Shared test support (moved from tests/pipeline/probe/test_probe_entropy.py)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")


def save_policy(out: Path, seed: int = 0, perturb: float = 0.0, base: Path | None = None) -> Path:
    """A random tiny Qwen2 policy with the character tokenizer, saved like real weights
    (init std 0.2, so that its next-token distributions are far from uniform); with
    ``base``: that policy plus ``perturb`` × a seeded Gaussian direction on every
    parameter."""
    from transformers import AutoModelForCausalLM

    from rcea.pipeline.policy import build_char_tokenizer, build_model

    tok = build_char_tokenizer()
    if base is None:
        model = build_model(tok, seed=seed, initializer_range=0.2)
    else:
        model = AutoModelForCausalLM.from_pretrained(base)
        gen = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for p in model.parameters():
                p.add_(perturb * torch.randn(p.shape, generator=gen))
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return out


EPS = 2e-5  # per-parameter perturbation between adjacent checkpoints


def write_config(path: Path, policies: list[Path], **sections: dict[str, Any]) -> Path:
    body = {
        "probe": {"seed": 5, "k": 4, "max_new_tokens": 24, "torch_threads": 1},
        "questions": {"source": "toy", "split": "probe", "n": 3},
        "covariance": {"questions": 3, "trajectories": 2, "positions": 8},
        **sections,
    }
    lines = []
    for table, values in body.items():
        lines.append(f"[{table}]")
        lines += [f"{k} = {json.dumps(v)}" for k, v in values.items()]
    for step, p in zip((0, 10, 20), policies, strict=False):
        lines += [
            "[[checkpoints.list]]",
            f'path = "{p}"',
            'run = "pert"',
            'model = "tiny"',
            f"step = {step}",
        ]
    path.write_text("\n".join(lines) + "\n")
    return path


def run_until_killed(args: list[str], manifest: Path, stage: str, min_units: int) -> int:
    """Start ``rcea probe ...`` in a subprocess and SIGKILL it once ``min_units`` units of
    ``stage`` are marked done; returns how many were done at the kill."""
    env = {**os.environ}
    rcea = str(Path(sys.executable).parent / "rcea")
    proc = subprocess.Popen(
        [rcea, *args], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    done = 0
    deadline = time.monotonic() + 120
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            if manifest.exists():
                try:
                    data = json.loads(manifest.read_text())
                except json.JSONDecodeError:
                    data = {}
                done = sum(len(v) for v in data.get("done", {}).get(stage, {}).values())
                if done >= min_units:
                    proc.send_signal(signal.SIGKILL)
                    break
            time.sleep(0.005)
    finally:
        proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL, proc.stderr.read().decode() if proc.stderr else ""
    return done
