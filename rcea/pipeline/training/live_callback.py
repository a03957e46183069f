"""The TRL callback that logs the ``rcea/`` numbers of every optimizer step
(:mod:`rcea.pipeline.training.live_metrics`, docs/training-live.md) through TRL's ``report_to``.

``RceaLiveCallback().install(trainer)`` works on the project's
:class:`~rcea.pipeline.training.trainer.RceaGRPOTrainer` (which installs it itself) and on a plain
``trl.GRPOTrainer``. It wraps four of the trainer's methods on the instance:

* ``_calculate_rewards``: keeps the rewards of the generation batch (TRL gathers them over
  the processes);
* ``_generate_and_score_completions``: adds two per-completion tensors to TRL's batch,
  ``rcea_live_group`` (the prompt group) and ``rcea_live_success`` (the verifier outcome:
  the project trainer's recorded outcomes, else the first reward function's value >
  ``success_threshold``); TRL shuffles and splits them with the rest of the batch;
* ``_compute_loss`` and ``_get_per_token_logps_and_entropies``: keep, per micro-batch, the
  per-token entropies and chosen-token log-probs TRL's loss pass computes anyway (no extra
  forward pass, no full-vocabulary tensor), with the mask and the advantages.

At each optimizer step (``on_step_end``) the micro-batches of the step become one dict of
numbers; at each log (``on_log``, called before the reporting callbacks) the mean of the
window's defined values goes into TRL's ``logs`` — NaN when every step of the window was
undefined, so TensorBoard keeps a point for every tag at every logged step. Under several
processes each rank measures its own groups and rank 0's numbers are logged.

At each log the callback also keeps (step, H) — TRL's ``entropy``, else
``rcea/token_entropy`` — and (step, R) — the validation ``eval_reward`` when the trainer
evaluates, else the batch's ``rcea/success_rate`` (``law_accuracy_source`` says which) —
and, once it has enough points, logs ``rcea/entropy_law_ceiling``: the running fit's
ceiling b − a, a prediction (docs/training-live.md).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from transformers import TrainerCallback

from rcea.pipeline.training.live_metrics import (
    LAW_CEILING,
    METRICS,
    LiveSettings,
    RolloutRows,
    batch_metrics,
    law_ceiling,
    nan_mean,
)
from rcea.pipeline.training.objectives import ClipCovParams, KLCovParams

GROUP_KEY = "rcea_live_group"
SUCCESS_KEY = "rcea_live_success"


def settings_for(trainer: Any, **overrides: Any) -> LiveSettings:
    """:class:`LiveSettings` whose Clip-Cov / KL-Cov parameters are the trainer's objective's
    when it trains one of them (so the logged fraction is the one its loss used)."""
    objective = getattr(trainer, "objective", None)
    params = getattr(objective, "params", None)
    if isinstance(params, ClipCovParams):
        overrides.setdefault("clip_cov", params)
    if isinstance(params, KLCovParams):
        overrides.setdefault("kl_cov", params)
    return LiveSettings(**overrides)


class RceaLiveCallback(TrainerCallback):
    """Logs :data:`~rcea.pipeline.training.live_metrics.METRICS` every step (module docstring)."""

    def __init__(self, settings: LiveSettings | None = None) -> None:
        self.settings = settings
        self.trainer: Any = None
        self._rewards: torch.Tensor | None = None
        self._inputs: dict[str, Any] | None = None
        self._parts: list[RolloutRows] = []
        self._window: dict[str, list[float]] = {m: [] for m in METRICS}
        self._group_offset = 0
        # the running entropy law: (step, H) and (step, R) of every log so far
        self._law_h: list[tuple[int, float]] = []
        self._law_r: list[tuple[int, float]] = []
        self.law_accuracy_source = "rcea/success_rate"
        #: the numbers of the latest optimizer step (tests, benchmarks)
        self.last: dict[str, float] = {}
        #: seconds spent computing the numbers (benchmarks/bench_training.py)
        self.seconds = 0.0

    # ------------------------------------------------------------------ installation

    def install(self, trainer: Any) -> RceaLiveCallback:
        """Wrap ``trainer``'s methods and register the callback ahead of the reporters."""
        if self.trainer is not None:
            raise ValueError("this RceaLiveCallback is already installed on a trainer")
        self.trainer = trainer
        if self.settings is None:
            self.settings = settings_for(trainer)
        self._wrap(trainer, "_calculate_rewards", self._wrap_rewards)
        self._wrap(trainer, "_generate_and_score_completions", self._wrap_generate)
        self._wrap(trainer, "_compute_loss", self._wrap_loss)
        self._wrap(trainer, "_get_per_token_logps_and_entropies", self._wrap_logps)
        # first, so TensorBoard / trackio / the curve file see the numbers in the same logs
        trainer.callback_handler.callbacks.insert(0, self)
        return self

    @staticmethod
    def _wrap(trainer: Any, name: str, make: Callable[[Callable[..., Any]], Any]) -> None:
        setattr(trainer, name, make(getattr(trainer, name)))

    def _wrap_rewards(self, original: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
        def wrapped(*args: Any, **kwargs: Any) -> torch.Tensor:
            rewards = original(*args, **kwargs)
            self._rewards = rewards.detach()
            return rewards

        return wrapped

    def _wrap_generate(self, original: Callable[..., dict[str, Any]]) -> Any:
        def wrapped(inputs: Any) -> dict[str, Any]:
            out = original(inputs)
            if not self.trainer.model.training:
                return out
            return self._tag(out)

        return wrapped

    def _tag(self, out: dict[str, Any]) -> dict[str, Any]:
        trainer = self.trainer
        n = out["completion_ids"].size(0)
        device = out["completion_ids"].device
        n_gen = trainer.num_generations
        group = self._group_offset + torch.arange(n, device=device) // n_gen
        self._group_offset += -(-n // n_gen)
        outcomes = getattr(trainer, "rcea_outcomes", None)
        if outcomes is not None and len(outcomes) == n:
            success = torch.as_tensor(outcomes, dtype=torch.float32, device=device) > 0.5
        else:
            if self._rewards is None:
                raise RuntimeError("no rewards recorded for this generation batch")
            start = trainer.accelerator.process_index * n
            first = self._rewards[start : start + n, 0]
            success = torch.nan_to_num(first, nan=0.0) > self.settings.success_threshold  # type: ignore[union-attr]  # not checked by hand yet: the settings are expected to be set before batches arrive
        return {**out, GROUP_KEY: group, SUCCESS_KEY: success.to(device)}

    def _wrap_loss(self, original: Callable[..., torch.Tensor]) -> Any:
        def wrapped(model: Any, inputs: dict[str, Any]) -> torch.Tensor:
            self._inputs = inputs if GROUP_KEY in inputs and self.trainer.model.training else None
            try:
                return original(model, inputs)
            finally:
                self._inputs = None

        return wrapped

    def _wrap_logps(self, original: Callable[..., Any]) -> Any:
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            result = original(*args, **kwargs)
            inputs = self._inputs
            if inputs is not None and result[1] is not None:
                self._inputs = None  # the loss pass's first call is the policy's
                self._keep(inputs, result[0], result[1])
            return result

        return wrapped

    def _keep(self, inputs: dict[str, Any], logp: torch.Tensor, entropy: torch.Tensor) -> None:
        mask = inputs["completion_mask"]
        if "tool_mask" in inputs:
            mask = mask * inputs["tool_mask"]
        old = inputs.get("old_per_token_logps")
        self._parts.append(
            RolloutRows(
                group=inputs[GROUP_KEY].cpu().numpy().astype(np.int64),
                success=inputs[SUCCESS_KEY].cpu().numpy().astype(np.int8),
                mask=mask.detach(),
                entropy=entropy.detach(),
                logp=logp.detach(),
                old_logp=logp.detach() if old is None else old.detach(),
                advantages=inputs["advantages"].detach(),
            )
        )

    # ------------------------------------------------------------------ callback events

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if not self._parts:
            return
        assert self.settings is not None
        t0 = time.perf_counter()
        self.last = batch_metrics(self._parts, self.settings)
        self.seconds += time.perf_counter() - t0
        self._parts = []
        for name, value in self.last.items():
            self._window[name].append(value)

    def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kwargs: Any) -> None:
        if logs is None or "train_runtime" in logs:
            return
        step = int(getattr(state, "global_step", 0))
        if _finite(logs.get("eval_reward")):  # a validation point: R from here on
            if self.law_accuracy_source != "eval_reward":
                self._law_r = []
            self.law_accuracy_source = "eval_reward"
            self._law_r.append((step, float(logs["eval_reward"])))
        if not self._window[METRICS[0]]:
            return
        for name, values in self._window.items():
            logs[name] = nan_mean(values)
            values.clear()
        h = logs.get("entropy") if _finite(logs.get("entropy")) else logs["rcea/token_entropy"]
        if _finite(h):
            self._law_h.append((step, float(h)))
        if self.law_accuracy_source == "rcea/success_rate" and _finite(logs["rcea/success_rate"]):
            self._law_r = [p for p in self._law_r if p[0] != step]
            self._law_r.append((step, float(logs["rcea/success_rate"])))
        ceiling = law_ceiling(self._law_h, self._law_r)
        if ceiling is not None:
            logs[LAW_CEILING] = ceiling


def _finite(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and np.isfinite(value)
