"""`rcea train run` under `accelerate launch`: two CPU processes (gloo) with the shipped DDP
config file train the tiny policy for a few steps and leave one output set.

The launch is the documented one (docs/scaling-out.md): ``accelerate launch --config_file
rcea/pipeline/training/configs/accelerate/ddp.yaml --num_processes 2 $(which rcea) train run``.
On a machine without CUDA rcea switches Transformers to gloo (``use_cpu``) when
``WORLD_SIZE > 1``."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("trl")
pytest.importorskip("accelerate")

from rcea.annotation.file_lock import file_lock  # noqa: E402
from tests.support.helpers import free_port  # noqa: E402
from tests.support.launch import LAUNCH_LOCK  # noqa: E402

ROOT = Path(__file__).resolve().parents[3]
ACCELERATE_CONFIGS = ROOT / "rcea" / "pipeline" / "training" / "configs" / "accelerate"
pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning", "ignore::UserWarning")


@pytest.fixture(scope="module")
def small_base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import torch

    from rcea.pipeline.policy import build_base

    torch.set_num_threads(1)
    out = tmp_path_factory.mktemp("ddp") / "base"
    build_base(out, seed=0, sft_steps=5, eval_questions=2, eval_k=2, progress=False)
    return out


def accelerate_launch(args: list[str], *, processes: int = 2, timeout: int = 300):  # type: ignore[no-untyped-def]
    """``accelerate launch`` of the ``rcea`` console script on ``processes`` CPU ranks."""
    bin_dir = Path(sys.executable).parent
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "PYTHONPATH": str(ROOT),
        "CUDA_VISIBLE_DEVICES": "",
    }
    cmd = [
        str(bin_dir / "accelerate"), "launch",
        "--config_file", str(ACCELERATE_CONFIGS / "ddp.yaml"),
        "--num_processes", str(processes),
        "--main_process_port", str(free_port()),
        str(bin_dir / "rcea"), *args,
    ]  # fmt: skip
    with file_lock(LAUNCH_LOCK):  # one launch at a time on the machine (tests/support/launch)
        return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.mark.slow
@pytest.mark.parametrize("lora", [False, True], ids=["full", "lora"])
def test_two_cpu_ranks_write_one_output_set(small_base: Path, tmp_path: Path, lora: bool) -> None:
    out = tmp_path / "run"
    cfg = tmp_path / "train.toml"
    # GTPO: its entropy term gives a gradient even when no completion is correct (the
    # 5-step base), and it uses both cross-rank paths (H0, rank-averaged metrics)
    lora_table = "\n[lora]\nenabled = true\nr = 4\nalpha = 8\n" if lora else ""
    cfg.write_text(
        f"""
[model]
path = "{small_base}"

[objective]
name = "gtpo"

[training]
output_dir = "{out}"
max_steps = 3
learning_rate = 1e-3
per_device_train_batch_size = 8
num_generations = 4
max_completion_length = 16
save_steps = 2
logging_steps = 1
torch_threads = 1
progress_bar = false
"""
        + lora_table
    )
    res = accelerate_launch(["train", "run", "--config", str(cfg), "--json"])
    assert res.returncode == 0, res.stderr[-4000:]
    # one JSON document on stdout: rank 1 prints nothing
    data = json.loads(res.stdout)
    assert data["ok"] and data["steps"] == 3 and data["processes"] == 2

    # curves: one line per optimizer step, each step once, finite values
    lines = (out / "curves.jsonl").read_text().splitlines()
    assert len(lines) == len(set(lines)) == 3
    curves = [json.loads(line) for line in lines]
    assert [c["step"] for c in curves] == [1, 2, 3]
    assert [c["progress"] for c in curves] == pytest.approx([1 / 3, 2 / 3, 1.0])
    for c in curves:
        assert all(math.isfinite(v) for v in c.values() if isinstance(v, float))
        assert math.isfinite(c["loss"]) and c["grad_norm"] > 0  # the entropy term trains
        assert c["objective/h0"] > 0
    # the global batch: 2 ranks x 8 completions of 16 tokens at most
    assert all(1 <= c["completions/mean_length"] <= 16 for c in curves)

    # checkpoints once, at the declared steps; both ranks took part (one RNG state each)
    assert sorted(p.name for p in out.glob("checkpoint-*")) == ["checkpoint-2", "checkpoint-3"]
    for ck in out.glob("checkpoint-*"):
        assert len(list(ck.glob("*.safetensors"))) == 1
        assert sorted(p.name for p in ck.glob("rng_state*")) == [
            "rng_state_0.pth",
            "rng_state_1.pth",
        ]
        state = json.loads((ck / "trainer_state.json").read_text())
        assert state["global_step"] == int(ck.name.split("-")[1]) and state["max_steps"] == 3
    assert len(list(out.glob("run*.json"))) == 1
    run = json.loads((out / "run.json").read_text())
    assert run["result"]["steps"] == 3 and run["result"]["processes"] == 2
    assert run["distributed"] == {
        "processes": 2,
        "distributed_type": "MULTI_CPU",
        "backend": "gloo",
        "per_device_train_batch_size": 8,
    }
    # final/: a full model (LoRA merged on rank 0), loadable as such
    assert (out / "final" / "config.json").exists()
    assert (out / "final" / "tokenizer_config.json").exists()
    assert not (out / "final" / "adapter_config.json").exists()
    from transformers import AutoModelForCausalLM

    final = AutoModelForCausalLM.from_pretrained(out / "final")
    base = AutoModelForCausalLM.from_pretrained(small_base)
    assert {n for n, _ in final.named_parameters()} == {n for n, _ in base.named_parameters()}


def test_shipped_accelerate_configs_load() -> None:
    """The DDP and DeepSpeed ZeRO-2/3 files parse as accelerate configs with the
    documented settings (DeepSpeed itself is not needed to read them)."""
    from accelerate.commands.config.config_args import load_config_from_file
    from accelerate.utils import DistributedType

    ddp = load_config_from_file(str(ACCELERATE_CONFIGS / "ddp.yaml"))
    assert ddp.distributed_type == DistributedType.MULTI_GPU and ddp.mixed_precision == "no"
    for stage in (2, 3):
        ds = load_config_from_file(str(ACCELERATE_CONFIGS / f"deepspeed-zero{stage}.yaml"))
        assert ds.distributed_type == DistributedType.DEEPSPEED
        assert ds.deepspeed_config["zero_stage"] == stage
        assert ds.mixed_precision == "no" and ds.num_machines == 1
        # batch size, accumulation and clipping stay "auto" (filled from [training])
        assert not {"gradient_accumulation_steps", "gradient_clipping"} & set(ds.deepspeed_config)
    zero3 = load_config_from_file(str(ACCELERATE_CONFIGS / "deepspeed-zero3.yaml"))
    assert zero3.deepspeed_config["zero3_save_16bit_model"] is True
