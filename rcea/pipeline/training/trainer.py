"""The shared trainer: a thin ``trl.GRPOTrainer`` subclass that hands the loss to an
:class:`~rcea.pipeline.training.objectives.Objective`.

Only two methods are overridden:

* ``_generate_and_score_completions`` calls TRL's, then runs the objective's ``prepare`` on
  the whole generation batch (before TRL shuffles it): group ids, verifier outcomes and,
  when the objective asks, generation-time entropies/log-probs and reference log-probs;
* ``_compute_loss``: for GRPO and DAPO (``Objective.uses_trl_loss``) it is TRL's own
  ``GRPOTrainer._compute_loss`` (``loss_type`` ``grpo``/``dapo``); DAPO's removed
  zero-variance groups reach it through TRL's loss mask (``tool_mask``), which masks the
  loss and leaves the forward pass alone. For the others (Clip-Cov, KL-Cov, GTPO, EP-GRPO,
  and verl's dual clip) it computes the per-token log-probs and entropies with TRL's own
  helper, builds a :class:`LossBatch` (TRL's normalisers for sequence- and token-level
  aggregation, vLLM's importance-sampling ratio) and returns the objective's loss.

The ``rcea/`` numbers of every step (:mod:`rcea.pipeline.training.live_callback`) are logged
unless ``live_metrics=False``.

Generation, rewards, advantages, logging, checkpoints, LoRA and vLLM are TRL's.

Under ``accelerate launch`` (DDP, DeepSpeed) every rank holds whole groups of its own
prompts (TRL's repeat sampler, per-device batches that are multiples of
``num_generations``): ``prepare`` runs per rank on the rank's groups, ``loss`` on the rank's
micro-batch (Clip-Cov's and KL-Cov's covariance selection is per rank, as in verl), the
token normaliser is the global token count, GTPO's H0 the mean over the ranks' first
micro-batches, and the objective's metrics are averaged over the ranks before logging.
"""

from __future__ import annotations

import copy
from typing import Any

import torch
from trl import GRPOTrainer
from trl.trainer.utils import add_fused_lm_head, use_adapter

from rcea.pipeline.training.live_callback import RceaLiveCallback
from rcea.pipeline.training.live_metrics import LiveSettings
from rcea.pipeline.training.objectives import (
    TRL_ADVANTAGE_EPSILON,
    LossBatch,
    Objective,
    PrepBatch,
    group_advantages,
)


def _is_peft(model: Any) -> bool:
    try:  # PEFT: the model is a PeftModel only when PEFT is installed and LoRA is on
        from peft import PeftModel

    except ImportError:  # pragma: no cover - peft is part of the train extra
        return False
    return isinstance(model, PeftModel)


class RceaGRPOTrainer(GRPOTrainer):
    """``GRPOTrainer`` with the loss delegated to ``objective``."""

    def __init__(
        self,
        *args: Any,
        objective: Objective,
        live_metrics: LiveSettings | bool = True,
        **kwargs: Any,
    ) -> None:
        self.objective = objective  # type: ignore[has-type]  # TRL's GRPOTrainer attributes, typed loosely by Transformers (set in its __init__)
        #: verifier outcomes of the latest generation batch (this process's rows)
        self.rcea_outcomes: list[float] | None = None
        model = kwargs.get("model", args[0] if args else None)
        if isinstance(model, str):
            raise TypeError("pass a loaded model (AutoModelForCausalLM.from_pretrained(path))")
        train_args = kwargs.get("args", args[2] if len(args) > 2 else None)
        if train_args is not None and getattr(train_args, "beta", 0.0) != 0.0:
            raise ValueError("the RCEA objectives use no reference-KL term: set beta = 0")
        uses_peft = kwargs.get("peft_config") is not None or _is_peft(model)
        ref = None
        if objective.needs_reference and not uses_peft:
            ref = copy.deepcopy(model).eval()  # type: ignore[union-attr]  # TRL's GRPOTrainer attributes, typed loosely by Transformers (set in its __init__)
            for p in ref.parameters():
                p.requires_grad_(False)
        super().__init__(*args, **kwargs)
        reward_funcs = self.reward_funcs
        recorders = [f for f in reward_funcs if hasattr(f, "pop_outcomes")]
        if objective.uses_groups and not recorders:
            raise ValueError(
                f"objective {objective.name!r} needs verifier outcomes: include a reward "
                "function with pop_outcomes() (rcea.pipeline.training.rewards.ToyReward)"
            )
        self._rcea_recorder = recorders[0] if recorders else None
        self._rcea_ref = None
        if ref is not None:
            add_fused_lm_head(ref, temperature=self.temperature)
            self._rcea_ref = ref.to(self.accelerator.device)
        # one random stream per rank (rank 0 = the single-process stream)
        seed = int(self.args.seed) + self.accelerator.process_index
        self._rcea_generator = torch.Generator().manual_seed(seed)
        # the rcea/ numbers of every step (docs/training-live.md); False turns them off
        self.rcea_live: RceaLiveCallback | None = None
        if live_metrics is not False:
            settings = None if live_metrics is True else live_metrics
            self.rcea_live = RceaLiveCallback(settings).install(self)

    def _rank_mean(self, metrics: dict[str, float]) -> dict[str, float]:
        """``metrics`` averaged over the data-parallel ranks (same keys on every rank)."""
        if self.accelerator.num_processes == 1 or not metrics:
            return metrics
        names = sorted(metrics)
        local = torch.tensor(
            [float(metrics[n]) for n in names], dtype=torch.float64, device=self.accelerator.device
        )
        total = self.accelerator.reduce(local, reduction="mean")
        return dict(zip(names, total.tolist(), strict=True))

    def _all_mean(self, value: torch.Tensor) -> torch.Tensor:
        return self.accelerator.reduce(value.detach().reshape(1).float(), reduction="mean")[0]

    # ------------------------------------------------------------------ generation side

    def _calculate_rewards(self, *args: Any, **kwargs: Any) -> torch.Tensor:
        rewards_per_func = super()._calculate_rewards(*args, **kwargs)
        self._rcea_rewards_per_func = rewards_per_func  # all processes' rows (TRL gathers)
        return rewards_per_func

    def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        out = super()._generate_and_score_completions(inputs)
        out = self.rcea_advantages(out)
        outcomes = self._rcea_recorder.pop_outcomes() if self._rcea_recorder else []  # type: ignore[operator]  # TRL's GRPOTrainer attributes, typed loosely by Transformers (set in its __init__)
        self.rcea_outcomes = outcomes or None
        return self.rcea_prepare(out, outcomes)

    def rcea_advantages(self, out: dict[str, Any]) -> dict[str, Any]:
        """TRL's advantages with the objective's ``advantage_epsilon`` instead of TRL's fixed
        1e-4 (e.g. verl's 1e-6): recomputed from the same rewards, per group, then this
        process's rows (as TRL slices them)."""
        eps = self.objective.params.advantage_epsilon  # type: ignore[has-type]  # TRL's GRPOTrainer attributes, typed loosely by Transformers (set in its __init__)
        if eps == TRL_ADVANTAGE_EPSILON:
            return out
        if self.scale_rewards != "group" or self.multi_objective_aggregation != (
            "sum_then_normalize"
        ):
            raise ValueError(
                "advantage_epsilon other than TRL's 1e-4 needs scale_rewards = 'group' and "
                "TRL's sum_then_normalize aggregation"
            )
        rpf = self._rcea_rewards_per_func
        weights = self.reward_weights.to(rpf.device).unsqueeze(0)
        rewards = (rpf * weights).nansum(dim=1)
        rewards[torch.isnan(rpf).all(dim=1)] = torch.nan
        mode = "train" if self.model.training else "eval"  # type: ignore[union-attr]  # TRL's GRPOTrainer attributes, typed loosely by Transformers (set in its __init__)
        n_gen = self.num_generations if mode == "train" else self.num_generations_eval
        adv = group_advantages(rewards, n_gen, eps)  # type: ignore[arg-type]  # a stored row's id is set: SQLModel types every primary key Optional
        local = out["advantages"].size(0)
        start = self.accelerator.process_index * local
        return {**out, "advantages": adv[start : start + local].to(out["advantages"])}

    def rcea_prepare(self, out: dict[str, Any], outcomes: list[float]) -> dict[str, Any]:
        """Run the objective's ``prepare`` on one scored generation batch (TRL's output dict,
        generation order) and add its ``rcea_*`` tensors to it."""
        obj = self.objective  # type: ignore[has-type]  # TRL's GRPOTrainer attributes, typed loosely by Transformers (set in its __init__)
        if not (obj.uses_groups or obj.needs_generation_stats or obj.needs_reference):
            return out
        mode = "train" if self.model.training else "eval"  # type: ignore[union-attr]  # TRL's GRPOTrainer attributes, typed loosely by Transformers (set in its __init__)
        device = self.accelerator.device
        completion_ids = out["completion_ids"]
        batch_size = completion_ids.size(0)
        n_gen = self.num_generations if mode == "train" else self.num_generations_eval
        if batch_size % n_gen != 0:
            raise ValueError(
                f"objective {obj.name!r} needs whole groups per process: local batch "
                f"{batch_size} is not a multiple of num_generations={n_gen}"
            )
        if len(outcomes) != batch_size:
            raise ValueError(
                f"expected {batch_size} verifier outcomes, the reward recorder holds "
                f"{len(outcomes)}"
            )
        mask = out["completion_mask"]
        if "tool_mask" in out:
            mask = mask * out["tool_mask"]
        mask = mask.float()
        group = torch.arange(batch_size, device=device) // n_gen  # type: ignore[operator]  # TRL's GRPOTrainer attributes, typed loosely by Transformers (set in its __init__)
        old_logp = entropy = ref_logp = None
        input_ids = torch.cat([out["prompt_ids"], completion_ids], dim=1)
        attention_mask = torch.cat([out["prompt_mask"], out["completion_mask"]], dim=1)
        keep = completion_ids.size(1)
        with torch.no_grad():
            if obj.needs_generation_stats:
                old_logp, entropy, _ = self._get_per_token_logps_and_entropies(
                    self.model, input_ids, attention_mask, keep, compute_entropy=True
                )
                if out.get("old_per_token_logps") is not None:
                    old_logp = out["old_per_token_logps"]
            if obj.needs_reference:
                ref_logp = self._reference_logps(input_ids, attention_mask, keep)
        prep = PrepBatch(
            completion_ids=completion_ids,
            mask=mask,
            advantages=out["advantages"],
            correct=torch.tensor(outcomes, dtype=torch.float32, device=device),
            group=group,
            old_logp=old_logp,
            entropy=entropy,
            ref_logp=ref_logp,
        )
        extras, metrics = obj.prepare(prep)
        out = {**out, **extras}
        if "rcea_keep" in extras:
            kept = (mask * extras["rcea_keep"].unsqueeze(1)).sum()
            out["num_items_in_batch"] = self.accelerator.gather(kept).sum()
        for name, value in self._rank_mean(metrics).items():
            self._metrics[mode][name].append(value)
        return out

    def _reference_logps(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, keep: int):
        if self._rcea_ref is not None:
            logps, _, _ = self._get_per_token_logps_and_entropies(
                self._rcea_ref, input_ids, attention_mask, keep
            )
            return logps
        model = self.accelerator.unwrap_model(self.model)
        with use_adapter(model, adapter_name=None):
            logps, _, _ = self._get_per_token_logps_and_entropies(
                self.model, input_ids, attention_mask, keep
            )
        return logps

    # ------------------------------------------------------------------ loss side

    def _compute_loss(self, model: Any, inputs: dict[str, Any]) -> torch.Tensor:
        if self.objective.uses_trl_loss:  # type: ignore[has-type]  # TRL's GRPOTrainer attributes, typed loosely by Transformers (set in its __init__)
            keep = inputs.get("rcea_keep")
            if keep is not None:
                loss_mask = inputs.get("tool_mask", torch.ones_like(inputs["completion_mask"]))
                inputs = {**inputs, "tool_mask": loss_mask * keep.unsqueeze(1).to(loss_mask.dtype)}
            return super()._compute_loss(model, inputs)
        prompt_ids, prompt_mask = inputs["prompt_ids"], inputs["prompt_mask"]
        completion_ids, completion_mask = inputs["completion_ids"], inputs["completion_mask"]
        input_ids = torch.cat([prompt_ids, completion_ids], dim=1)
        attention_mask = torch.cat([prompt_mask, completion_mask], dim=1)
        keep = completion_ids.size(1)
        mask = (
            completion_mask if "tool_mask" not in inputs else completion_mask * inputs["tool_mask"]
        )
        logps, entropies, _ = self._get_per_token_logps_and_entropies(
            model, input_ids, attention_mask, keep, compute_entropy=True
        )
        old = inputs.get("old_per_token_logps")
        old = logps.detach() if old is None else old
        mode = "train" if self.model.training else "eval"  # type: ignore[union-attr]  # TRL's GRPOTrainer attributes, typed loosely by Transformers (set in its __init__)
        ga = self.current_gradient_accumulation_steps if mode == "train" else 1
        token_norm = inputs["num_items_in_batch"].clamp(min=1.0) / self.accelerator.num_processes
        if mode == "train":
            token_norm = token_norm * ga / self.args.steps_per_generation  # type: ignore[attr-defined]  # TRL's GRPOTrainer attributes, typed loosely by Transformers (set in its __init__)
        is_ratio = None
        if self.use_vllm and self.vllm_importance_sampling_correction:
            is_ratio = inputs["importance_sampling_ratio"]
        batch = LossBatch(
            logp=logps,
            old_logp=old,
            entropy=entropies,
            mask=mask.float(),
            advantages=inputs["advantages"],
            extras={k: v for k, v in inputs.items() if k.startswith("rcea_")},
            token_normalizer=token_norm,
            seq_scale=1.0 / ga,
            is_ratio=is_ratio,
            generator=self._rcea_generator,
            all_mean=self._all_mean if self.accelerator.num_processes > 1 else None,
        )
        result = self.objective.loss(batch)  # type: ignore[has-type]  # TRL's GRPOTrainer attributes, typed loosely by Transformers (set in its __init__)
        fmask = mask.float()
        local = torch.stack([(entropies.detach() * fmask).sum(), fmask.sum()])
        totals = self.accelerator.reduce(local, reduction="sum")
        self._metrics[mode]["entropy"].append((totals[0] / totals[1].clamp(min=1.0)).item())
        for name, value in self._rank_mean(result.metrics).items():
            self._metrics[mode][name].append(value)
        return result.loss
