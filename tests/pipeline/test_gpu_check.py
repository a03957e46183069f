"""`make gpu-check` skips cleanly without CUDA; its training config is the real one; `--tiny`
runs every section on CPU and writes the JSON, a failing section recorded, the rest run."""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")


def test_skips_without_cuda(capsys: pytest.CaptureFixture[str]) -> None:
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present: the full check runs in `make gpu-check`")
    from rcea.pipeline import gpu_check

    assert gpu_check.main([]) == 0
    assert "gpu-check skipped: no CUDA device" in capsys.readouterr().out


def test_gpu_check_config_is_bf16_lora_vllm(tmp_path: Path) -> None:
    from rcea.pipeline import gpu_check

    args = gpu_check._parse(["--steps", "3"])
    cfg = gpu_check.training_config(tmp_path / "m", tmp_path / "o", args, use_vllm=True)
    assert cfg.training.bf16 and cfg.training.use_vllm and cfg.training.vllm_mode == "colocate"
    assert cfg.lora.enabled and cfg.lora.r == 32 and cfg.lora.alpha == 64
    assert cfg.model.dtype == "bfloat16" and cfg.training.max_steps == 3
    from rcea.pipeline.policy.model import QWEN25_05B_SHAPE

    assert QWEN25_05B_SHAPE["hidden_size"] == 896 and QWEN25_05B_SHAPE["num_hidden_layers"] == 24


def test_tiny_run_writes_every_section(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`--tiny` runs the whole script on CPU (tiny shapes); the JSON holds every section,
    none failed, each objective trained with finite loss and gradients."""
    pytest.importorskip("trl")
    import json

    from rcea.pipeline import gpu_check
    from rcea.pipeline.training.objectives import OBJECTIVES

    out = tmp_path / "gpu_check.json"
    assert gpu_check.main(["--tiny", "--json-out", str(out)]) == 0
    data = json.loads(out.read_text())
    for key in (*gpu_check.SECTIONS, "imported_trajectory_scoring", "section_seconds"):
        assert key in data, key
    assert data["status"] == "done" and data["failed_sections"] == []
    assert data["imported_trajectory_scoring"] == "not implemented yet"
    entropy = data["entropy"]
    assert set(entropy["methods"]) == {
        "forward",
        "chunked_16",
        "chunked_64",
        "device_torch",  # no CUDA: the Triton fold is not timed
        "trl_fused",
        "trl_utils",
    }
    for fig in entropy["methods"].values():
        assert fig["tokens_per_s"] > 0 and len(fig["rounds_tokens_per_s"]) == 2
    agree = entropy["agreement_vs_float64"]
    assert agree["chunked_entropy_max_abs_diff"] < 1e-4
    assert agree["trl_fused_entropy_max_abs_diff"] < 1e-4
    assert agree["device_torch_entropy_max_abs_diff"] < 1e-4
    assert agree["device_torch_logprob_max_abs_diff"] < 1e-4
    kernels = data["covariance"]["kernels"]
    assert set(kernels) == {"pair", "predicted", "observed", "device_torch"}
    assert all(k["finite"] for k in kernels.values())
    for q in ("predicted", "observed", "entropy_old", "entropy_new"):
        assert kernels["device_torch"][f"{q}_max_rel_diff_vs_host"] < 1e-9
    score = data["score"]
    assert set(score["methods"]) == {"scorer", "chunked_128"} and score["scored_tokens"] == 96
    assert all(m["tokens_per_s"] > 0 for m in score["methods"].values())
    grpo = data["grpo"]
    assert grpo["steps"] == 2 and grpo["loss_finite"] and grpo["grads_finite"]
    assert grpo["rollouts"].startswith("Transformers generate")
    results = data["objectives"]["results"]
    assert set(results) == set(OBJECTIVES)
    for name, res in results.items():
        assert res["ok"], (name, res.get("error"))
        assert res["steps"] == 2 and "step_time_vs_grpo" in res
    assert data["objectives"]["all_ok"]
    assert '"status": "done"' in capsys.readouterr().out


def test_a_failing_section_is_recorded_and_the_rest_still_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import json

    from rcea.pipeline import gpu_check

    def boom(*a: object, **k: object) -> dict:
        raise RuntimeError("CUDA error: planted")

    monkeypatch.setattr(gpu_check, "entropy_throughput", boom)
    out = tmp_path / "g.json"
    argv = ["--tiny", "--json-out", str(out), "--only", "env,entropy,covariance"]
    assert gpu_check.main(argv) == 0
    data = json.loads(out.read_text())
    assert data["entropy"]["error"] == "RuntimeError: CUDA error: planted"
    assert data["failed_sections"] == ["entropy"] and data["status"] == "done with errors"
    assert data["covariance"]["kernels"]["pair"]["finite"]
    assert "grpo" not in data


def test_budget_skips_later_sections(tmp_path: Path) -> None:
    import json

    from rcea.pipeline import gpu_check

    out = tmp_path / "g.json"
    argv = ["--tiny", "--json-out", str(out), "--only", "env,matmul", "--budget-s", "1e-9"]
    assert gpu_check.main(argv) == 0
    data = json.loads(out.read_text())
    assert "device" in data["env"] and data["matmul"] == {"skipped": "time budget"}


def test_coin_reward_gives_every_group_a_success_and_a_failure() -> None:
    from rcea.pipeline import gpu_check

    coin = gpu_check.CoinReward(group=4, seed=3)
    for _ in range(20):
        r = coin([None] * 8, [""] * 8)
        assert len(r) == 8 and set(r) <= {0.0, 1.0}
        assert len(set(r[:4])) == 2 and len(set(r[4:])) == 2
    assert len(coin.pop_outcomes()) == 160 and coin.pop_outcomes() == []


def test_entropy_only_and_no_entropy_select_the_sections() -> None:
    from rcea.pipeline import gpu_check

    assert gpu_check._parse(["--entropy-only"]).only == "env,matmul,entropy"
    assert gpu_check._parse(["--probe-only"]).only == "env,matmul,entropy,covariance,score"
    assert "entropy" not in gpu_check._parse(["--no-entropy"]).only.split(",")
    assert gpu_check._parse([]).only.split(",") == list(gpu_check.SECTIONS)
