"""`make gpu-check` skips cleanly without CUDA; its training config is the real one."""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")


def test_skips_without_cuda(capsys: pytest.CaptureFixture[str]) -> None:
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present: the full check runs in `make gpu-check`")
    from pipeline import gpu_check

    assert gpu_check.main([]) == 0
    assert "gpu-check skipped: no CUDA device" in capsys.readouterr().out


def test_gpu_check_config_is_bf16_lora_vllm(tmp_path: Path) -> None:
    from pipeline import gpu_check

    args = gpu_check._parse(["--steps", "3"])
    cfg = gpu_check.training_config(tmp_path / "m", tmp_path / "o", args, use_vllm=True)
    assert cfg.training.bf16 and cfg.training.use_vllm and cfg.training.vllm_mode == "colocate"
    assert cfg.lora.enabled and cfg.lora.r == 32 and cfg.lora.alpha == 64
    assert cfg.model.dtype == "bfloat16" and cfg.training.max_steps == 3
    from pipeline.policy.model import QWEN25_05B_SHAPE

    assert QWEN25_05B_SHAPE["hidden_size"] == 896 and QWEN25_05B_SHAPE["num_hidden_layers"] == 24
