"""The shared TRL trainer: parity with TRL's own loss types, short CPU runs of every
objective (checkpoints, curves, changed weights, seeds), LoRA, and the entropy check."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("trl")

from rcea.pipeline import toy  # noqa: E402
from rcea.pipeline.training.config import parse_config  # noqa: E402
from rcea.pipeline.training.objectives import OBJECTIVES  # noqa: E402
from rcea.pipeline.training.run import build_trainer, run_training  # noqa: E402
from tests.support.product_helpers import read_curves  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning", "ignore::UserWarning")


def toy_config(base: Path, out: Path, objective: str, **training: Any):  # type: ignore[no-untyped-def]
    t = {
        "output_dir": str(out),
        "max_steps": 20,
        "learning_rate": 5e-4,
        "per_device_train_batch_size": 16,
        "num_generations": 8,
        "num_iterations": 4,
        "max_completion_length": 48,
        "save_steps": 10,
        "seed": 7,
        "torch_threads": 1,
        **training,
    }
    return parse_config(
        {
            "model": {"path": str(base)},
            "objective": {"name": objective},
            # toy-scale selections so that Clip-Cov/KL-Cov touch tokens in a 16-sample batch
            "objectives": {"clip_cov": {"clip_ratio": 0.05}, "kl_cov": {"k_ratio": 0.2}},
            "training": t,
        }
    )


def _hand_batch(trainer: Any, tokenizer: Any) -> dict[str, Any]:
    """Two prompts x two completions of different lengths, off-policy old log-probs."""
    qs = [toy.Question("sum_times", 3, 4, 5), toy.Question("diff_products", 2, 6, 1)]
    rows = []
    for q in qs:
        rows.append((q, toy.render_trajectory(q, q.strategies[0])))
        rows.append((q, toy.render_trajectory(q, q.strategies[1], toy.Variant(spaced=True))))
    pad, eos = tokenizer.pad_token_id, tokenizer.eos_token_id
    p_ids = [tokenizer(q.prompt)["input_ids"] for q, _ in rows]
    c_ids = [tokenizer(c)["input_ids"] + [eos] for _, c in rows]
    pw, cw = max(map(len, p_ids)), max(map(len, c_ids))
    prompt_ids = torch.tensor([[pad] * (pw - len(p)) + p for p in p_ids])
    prompt_mask = torch.tensor([[0] * (pw - len(p)) + [1] * len(p) for p in p_ids])
    completion_ids = torch.tensor([c + [pad] * (cw - len(c)) for c in c_ids])
    completion_mask = torch.tensor([[1] * len(c) + [0] * (cw - len(c)) for c in c_ids])
    with torch.no_grad():
        logps, _, _ = trainer._get_per_token_logps_and_entropies(
            trainer.model,
            torch.cat([prompt_ids, completion_ids], 1),
            torch.cat([prompt_mask, completion_mask], 1),
            cw,
        )
    gen = torch.Generator().manual_seed(0)
    old = logps + (torch.rand(logps.shape, generator=gen) - 0.5) * 0.8  # ratios ~0.67..1.5
    return {
        "prompt_ids": prompt_ids,
        "prompt_mask": prompt_mask,
        "completion_ids": completion_ids,
        "completion_mask": completion_mask,
        "advantages": torch.tensor([1.0, -1.0, 0.7, -0.7]),
        "old_per_token_logps": old,
        "num_items_in_batch": completion_mask.sum(),
    }


def _loss_and_grads(fn: Any, trainer: Any, inputs: dict[str, Any]) -> tuple[float, list]:
    trainer.model.zero_grad(set_to_none=True)
    loss = fn(trainer.model, inputs)
    loss.backward()
    grads = [p.grad.clone() for p in trainer.model.parameters() if p.grad is not None]
    return float(loss.detach()), grads


@pytest.mark.parametrize(("name", "other"), [("grpo", "dapo"), ("dapo", "grpo")])
def test_normalisation_matches_trl_loss_type_on_the_same_batch(
    tiny_base: Path, tmp_path: Path, name: str, other: str
) -> None:
    from trl import GRPOTrainer

    trainer, tokenizer, _ = build_trainer(toy_config(tiny_base, tmp_path, name), progress=False)
    trainer.model.train()
    trainer.current_gradient_accumulation_steps = 1
    inputs = _hand_batch(trainer, tokenizer)
    ours, g_ours = _loss_and_grads(trainer._compute_loss, trainer, inputs)
    assert trainer.loss_type == name  # TRL's own loss_type, set from the objective
    trl_fn = lambda m, x: GRPOTrainer._compute_loss(trainer, m, x)  # noqa: E731
    theirs, g_theirs = _loss_and_grads(trl_fn, trainer, inputs)
    assert ours == pytest.approx(theirs, rel=1e-5, abs=1e-7)
    assert len(g_ours) == len(g_theirs) > 0
    for a, b in zip(g_ours, g_theirs, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-7)
    # the comparison can fail: the other aggregation gives another value on this batch
    # (completions of different lengths), and clipping is active
    trainer.loss_type = other
    different, _ = _loss_and_grads(trl_fn, trainer, inputs)
    assert abs(different - ours) > 1e-4
    assert trainer._metrics["train"]["clip_ratio/region_mean"][-1] > 0


@pytest.mark.parametrize("name", ["grpo", "dapo", "clip_cov"])
def test_grpo_and_dapo_losses_are_trls_own_code(
    tiny_base: Path, tmp_path: Path, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """GRPO and DAPO run TRL's ``GRPOTrainer._compute_loss`` itself (the override keeps
    only what TRL lacks); DAPO's zero-variance removal reaches it as TRL's loss mask and
    gives the objective's own value (tested against verl in test_objectives_verl.py)."""
    from trl import GRPOTrainer

    calls: list[int] = []
    trl_loss = GRPOTrainer._compute_loss

    def spy(self: Any, model: Any, inputs: dict[str, Any]) -> Any:
        calls.append(1)
        return trl_loss(self, model, inputs)

    monkeypatch.setattr(GRPOTrainer, "_compute_loss", spy)
    trainer, tokenizer, _ = build_trainer(toy_config(tiny_base, tmp_path, name), progress=False)
    trainer.model.train()
    trainer.current_gradient_accumulation_steps = 1
    inputs = _hand_batch(trainer, tokenizer)
    if name == "dapo":
        keep = torch.tensor([1.0, 1.0, 0.0, 0.0])  # the second group removed
        inputs["rcea_keep"] = keep
        inputs["num_items_in_batch"] = (inputs["completion_mask"] * keep.unsqueeze(1)).sum()
    via_trl, g_trl = _loss_and_grads(trainer._compute_loss, trainer, inputs)
    assert len(calls) == (0 if name == "clip_cov" else 1)
    if name == "clip_cov":
        return
    monkeypatch.setattr(type(trainer.objective), "trl_loss", False)  # the objective's own loss
    own, g_own = _loss_and_grads(trainer._compute_loss, trainer, inputs)
    assert len(calls) == 1
    assert via_trl == pytest.approx(own, rel=1e-5, abs=1e-7)
    for a, b in zip(g_trl, g_own, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-7)
    if name == "dapo":  # without the removal the value differs
        del inputs["rcea_keep"]
        other, _ = _loss_and_grads(trainer._compute_loss, trainer, inputs)
        assert abs(other - own) > 1e-4


@pytest.mark.slow
@pytest.mark.parametrize("name", list(OBJECTIVES))
def test_twenty_cpu_steps_checkpoint_log_and_change_weights(
    tiny_base: Path, tmp_path: Path, name: str
) -> None:
    from transformers import AutoModelForCausalLM

    result = run_training(toy_config(tiny_base, tmp_path / name, name), progress=False)
    assert result.steps == 20
    curves = read_curves(result.curves)
    assert [c["step"] for c in curves] == list(range(1, 21))
    assert [c["progress"] for c in curves] == pytest.approx([s / 20 for s in range(1, 21)])
    generation_steps = [c for c in curves if "reward" in c]
    assert len(generation_steps) == 5  # one rollout per 4 optimizer iterations
    for c in generation_steps:
        for key in ("entropy", "reward_std", "completions/mean_length", "toy/boxed_rate"):
            assert key in c and math.isfinite(c[key]), key
    assert all("entropy" in c and "loss" in c for c in curves)
    expected_metric = {
        "dapo": "objective/removed_frac",
        "clip_cov": "objective/clip_cov_frac",
        "kl_cov": "objective/kl_cov_frac",
        "gtpo": "objective/filtered_frac",
        "ep_grpo": "objective/gate_mean",
        "grpo": "clip_ratio/region_mean",
    }[name]
    assert any(expected_metric in c for c in curves)
    if name in ("clip_cov", "kl_cov"):
        # docs/estimators.md item 13: the share of updates whose covariance mask selected nothing
        empty = [c["objective/cov_mask_empty"] for c in curves if "objective/cov_mask_empty" in c]
        assert empty and all(0.0 <= v <= 1.0 for v in empty)
    base = AutoModelForCausalLM.from_pretrained(tiny_base)
    for ckpt in ("checkpoint-10", "checkpoint-20", "final"):
        trained = AutoModelForCausalLM.from_pretrained(tmp_path / name / ckpt)
        diff = max(
            float((a - b).abs().max())
            for a, b in zip(base.parameters(), trained.parameters(), strict=True)
        )
        assert diff > 0, f"{name}: {ckpt} equals the base model"


def test_same_seed_same_run(tiny_base: Path, tmp_path: Path) -> None:
    runs = []
    for i in range(2):
        cfg = toy_config(tiny_base, tmp_path / f"r{i}", "grpo", max_steps=3, save_steps=100)
        runs.append(read_curves(run_training(cfg, progress=False).curves))
    keys = ("loss", "entropy", "reward", "completions/mean_length")
    for a, b in zip(*runs, strict=True):
        for key in keys:
            assert a.get(key) == b.get(key), key
    other = toy_config(tiny_base, tmp_path / "r2", "grpo", max_steps=3, save_steps=100, seed=8)
    changed = read_curves(run_training(other, progress=False).curves)
    assert any(a.get("loss") != c.get("loss") for a, c in zip(runs[0], changed, strict=True))


def test_lora_switch_trains_an_adapter_and_saves_a_merged_model(
    tiny_base: Path, tmp_path: Path
) -> None:
    from transformers import AutoModelForCausalLM

    cfg = toy_config(tiny_base, tmp_path / "lora", "grpo", max_steps=2, save_steps=100)
    cfg.lora.enabled = True
    cfg.lora.r = 4
    cfg.lora.alpha = 8
    result = run_training(cfg, progress=False)
    merged = AutoModelForCausalLM.from_pretrained(result.final_dir)
    base = AutoModelForCausalLM.from_pretrained(tiny_base)
    sd_m, sd_b = merged.state_dict(), base.state_dict()
    assert set(sd_m) == set(sd_b)  # a plain model: no adapter weights left
    changed = [k for k in sd_b if not torch.equal(sd_m[k], sd_b[k])]
    # only the LoRA-targeted projections can change (embeddings and norms stay frozen)
    assert changed and all("proj" in k for k in changed)


@pytest.mark.slow
def test_kl_cov_keeps_entropy_higher_than_grpo(tiny_base: Path, tmp_path: Path) -> None:
    """Same base, seed, prompts and hyper-parameters; 40 steps (10 rollouts x 4 iterations).
    GRPO's updates sharpen the policy on every rollout; KL-Cov (top 20% covariance tokens,
    coefficient 1 as in Cui et al.) holds entropy up. Compared on the mean training token
    entropy over the second half of the run, with a margin of 0.01 nats."""
    runs, drift = {}, {}
    for name in ("grpo", "kl_cov"):
        cfg = toy_config(
            tiny_base,
            tmp_path / name,
            name,
            max_steps=40,
            learning_rate=3e-4,
            per_device_train_batch_size=32,
            save_steps=1000,
        )
        cfg.objectives["kl_cov"] = {"k_ratio": 0.2, "kl_coef": 1.0}
        curves = read_curves(run_training(cfg, progress=False).curves)
        entropies = [c["entropy"] for c in curves]
        runs[name] = sum(entropies[20:]) / 20
        # Within a rollout the batch is fixed, so the 4 iterations show what the updates
        # themselves do to entropy (across rollouts the sampled batch changes it too).
        per_rollout = [entropies[i + 3] - entropies[i] for i in range(0, 40, 4)]
        drift[name] = sum(per_rollout) / len(per_rollout)
    assert runs["kl_cov"] > runs["grpo"] + 0.01, runs
    # The entropy-collapse regime: GRPO's updates lower entropy, clearly more than KL-Cov's.
    assert drift["grpo"] < -0.005 and drift["grpo"] < drift["kl_cov"] - 0.003, drift


@pytest.mark.gpu
def test_real_model_path_needs_cuda() -> None:
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device: the bf16 + LoRA + vLLM path runs in `make gpu-check`")
    from rcea.pipeline import gpu_check

    assert gpu_check.main(["--steps", "2"]) == 0
