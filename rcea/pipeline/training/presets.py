"""Named objective presets: every hyper-parameter of the six objectives, with where its value
comes from (docs/objectives.md#presets).

* ``rcea-supplement`` (the default): the RCEA supplement's "Objective-Specific Settings".
  Values the supplement leaves blank (illegible or unstated) are marked ``blank`` with the
  value chosen and why.
* ``authors``: each method's published recipe — Clip-Cov and KL-Cov as the
  Entropy-Mechanism recipes (PRIME-RL/Entropy-Mechanism-of-RL @ 88505792,
  ``recipe/dapo/7b_clip_cov.sh`` and ``7b_kl_cov.sh``), GTPO as its repository
  (winstonsmith1897/GTPO @ 5d33811e, ``config.yaml``), DAPO as verl's DAPO recipe.

A run resolves its parameters as: preset, then ``[objectives.NAME]``, then
``[objective.params]``; the preset's name and every resolved value with its source are
recorded in the run file (:meth:`rcea.pipeline.training.config.TrainConfig.to_dict`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rcea.pipeline.training.objectives import SEQ_MEAN, TOKEN_MEAN, default_params

DEFAULT_PRESET = "rcea-supplement"


@dataclass(frozen=True)
class Setting:
    value: Any
    source: str  # where the value comes from; "blank: ..." when the source leaves it open


S = Setting
SUPP = "RCEA supplement"
EM = "Entropy-Mechanism recipe 7b (PRIME-RL/Entropy-Mechanism-of-RL @ 88505792)"
EM_CC = f"{EM}, recipe/dapo/7b_clip_cov.sh"
EM_KL = f"{EM}, recipe/dapo/7b_kl_cov.sh"
GT = "GTPO code (winstonsmith1897/GTPO @ 5d33811e, gtpo/gtpo_training.py, config.yaml)"
VERL_DAPO = "verl DAPO recipe (volcengine/verl @ e2e729f4, recipe/dapo/run_dapo_qwen2.5_32b.sh)"
SHARED = "blank: the supplement's shared GRPO setting (symmetric clip 0.2, sequence mean)"

PRESETS: dict[str, dict[str, dict[str, Setting]]] = {
    "rcea-supplement": {
        "grpo": {
            "epsilon": S(0.2, f"{SUPP}: symmetric clip 0.2"),
            "epsilon_high": S(0.2, f"{SUPP}: symmetric clip 0.2"),
            "loss_agg": S(
                SEQ_MEAN,
                f"blank: GRPO's sequence mean of token means ({SUPP} "
                "names token-level normalisation for DAPO only)",
            ),
            "clip_ratio_c": S(0.0, "blank: no dual clip (TRL's surrogate)"),
        },
        "dapo": {
            "epsilon": S(
                0.2, f"blank: {SUPP} says asymmetric clip, values illegible; DAPO paper's 0.2"
            ),
            "epsilon_high": S(0.28, "blank: DAPO paper's 0.28"),
            "loss_agg": S(TOKEN_MEAN, f"{SUPP}: token-level normalisation"),
            "remove_zero_variance": S(True, f"{SUPP}: dynamic removal of zero-variance groups"),
            "overlong_buffer_frac": S(0.2, f"{SUPP}: soft overlong shaping over the final 20%"),
            "overlong_penalty": S(1.0, "blank: DAPO paper's penalty 1"),
            "clip_ratio_c": S(0.0, "blank: no dual clip (TRL's surrogate)"),
        },
        "clip_cov": {
            "clip_ratio": S(2e-4, "blank: tail ratio value unstated; Cui et al. / verl 2e-4"),
            "lb": S(1.0, f"{SUPP}: lower factor 1"),
            "ub": S(5.0, f"{SUPP}: upper factor 5"),
            "epsilon": S(0.2, SHARED),
            "epsilon_high": S(0.2, SHARED),
            "loss_agg": S(SEQ_MEAN, SHARED),
            "clip_ratio_c": S(0.0, "blank: no dual clip"),
            "remove_zero_variance": S(
                False, "blank: the supplement names group removal for DAPO only"
            ),
        },
        "kl_cov": {
            "k_ratio": S(2e-3, "blank: selection ratio value unstated; Cui et al. 7B 2e-3"),
            "kl_coef": S(0.5, f"{SUPP}: coefficient 0.5"),
            "epsilon": S(0.2, f"{SHARED} (unused: KL-Cov has no ratio clip)"),
            "epsilon_high": S(0.2, f"{SHARED} (unused)"),
            "loss_agg": S(SEQ_MEAN, SHARED),
            "clip_ratio_c": S(0.0, "unused (no ratio clip)"),
            "remove_zero_variance": S(
                False, "blank: the supplement names group removal for DAPO only"
            ),
        },
        "gtpo": {
            "entropy_coef": S(0.1, f"{SUPP}: entropy coefficient 0.1"),
            "threshold_rule": S(
                "calibrated", f"{SUPP}: threshold calibrated from the first on-policy batch"
            ),
            "entropy_threshold": S(
                1.5,
                "blank: the supplement's multiple of H0 is illegible; "
                "1.5 chosen (keeps typical completions, drops the "
                "high-entropy tail)",
            ),
            "conflict_weight": S(2.0, f"blank: {GT} W_RAW"),
            "conflict": S(True, f"blank: {GT}"),
            "on_policy": S(True, f"blank: {GT} (ratio 1, no clip)"),
            "epsilon": S(0.2, f"{SHARED} (used only with on_policy false)"),
            "epsilon_high": S(0.2, f"{SHARED} (used only with on_policy false)"),
            "loss_agg": S(SEQ_MEAN, "unused: GTPO sums per-completion losses"),
            "clip_ratio_c": S(0.0, "blank: no dual clip"),
        },
        "ep_grpo": {
            "n_buckets": S(10, f"{SUPP}: 10 buckets"),
            "bucket_rule": S("position", f"{SUPP}: relative-position buckets"),
            "gate_coef": S(3.0, f"{SUPP}: gate coefficient 3.0"),
            "progress_weight": S(0.2, f"{SUPP}: progress weight 0.2"),
            "process_scale": S(1.0, f"{SUPP}: process scale 1.0"),
            "epsilon": S(0.2, SHARED),
            "epsilon_high": S(0.2, SHARED),
            "loss_agg": S(SEQ_MEAN, SHARED),
            "clip_ratio_c": S(0.0, "blank: no dual clip"),
        },
    },
    "authors": {
        "grpo": {
            "epsilon": S(0.2, "GRPO (Shao et al. 2024): clip 0.2"),
            "epsilon_high": S(0.2, "GRPO (Shao et al. 2024): clip 0.2"),
            "loss_agg": S(SEQ_MEAN, "GRPO (Shao et al. 2024): mean over sequences of token means"),
            "clip_ratio_c": S(0.0, "GRPO (Shao et al. 2024): no dual clip"),
        },
        "dapo": {
            "epsilon": S(0.2, f"{VERL_DAPO}: clip_ratio_low 0.2"),
            "epsilon_high": S(0.28, f"{VERL_DAPO}: clip_ratio_high 0.28"),
            "loss_agg": S(TOKEN_MEAN, f"{VERL_DAPO}: loss_agg_mode token-mean"),
            "remove_zero_variance": S(
                True,
                f"{VERL_DAPO}: filter_groups on acc (verl "
                "re-samples to refill; the project removes)",
            ),
            "overlong_buffer_frac": S(0.2, f"{VERL_DAPO}: overlong buffer 4096 of 20480"),
            "overlong_penalty": S(1.0, f"{VERL_DAPO}: penalty_factor 1.0"),
            "clip_ratio_c": S(10.0, f"{VERL_DAPO}: clip_ratio_c 10.0"),
        },
        "clip_cov": {
            "clip_ratio": S(2e-4, f"{EM_CC}: clip_cov_ratio 0.0002"),
            "lb": S(1.0, f"{EM_CC}: clip_cov_lb 1.0"),
            "ub": S(5.0, f"{EM_CC}: clip_cov_ub 5.0"),
            "epsilon": S(1.0, f"{EM_CC}: clip_ratio_low 1"),
            "epsilon_high": S(1.0, f"{EM_CC}: clip_ratio_high 1"),
            "loss_agg": S(TOKEN_MEAN, f"{EM_CC}: loss_agg_mode token-mean"),
            "clip_ratio_c": S(
                0.0, f"{EM_CC}: clip_ratio_c 10.0 is not read by verl's clip_cov loss"
            ),
            "remove_zero_variance": S(
                True,
                f"{EM_CC}: filter_groups on acc (verl re-samples to refill; the project removes)",
            ),
        },
        "kl_cov": {
            "k_ratio": S(2e-3, f"{EM_KL}: k_percent 0.2 (%)"),
            "kl_coef": S(1.0, f"{EM_KL}: ppo_kl_coef 1"),
            "epsilon": S(0.2, f"{EM_KL}: clip_ratio 0.2 (not read by the kl_cov loss)"),
            "epsilon_high": S(0.2, f"{EM_KL}: clip_ratio 0.2 (not read by the kl_cov loss)"),
            "loss_agg": S(TOKEN_MEAN, f"{EM_KL}: loss_agg_mode token-mean"),
            "clip_ratio_c": S(0.0, f"{EM_KL}: clip_ratio_c not read by the kl_cov loss"),
            "remove_zero_variance": S(
                True,
                f"{EM_KL}: filter_groups on acc (verl re-samples to refill; the project removes)",
            ),
        },
        "gtpo": {
            "entropy_coef": S(0.1, f"{GT}: ent_scale 0.1"),
            "threshold_rule": S(
                "absolute", f"{GT}: ent_threshold (README equation: ln 2, threshold_rule readme)"
            ),
            "entropy_threshold": S(0.7, f"{GT}: ent_threshold 0.7"),
            "conflict_weight": S(2.0, f"{GT}: w_raw 2.0"),
            "conflict": S(True, GT),
            "on_policy": S(True, f"{GT}: num_iterations 1, ratio exp(logp - sg(logp))"),
            "epsilon": S(0.2, "unused on-policy"),
            "epsilon_high": S(0.2, "unused on-policy"),
            "loss_agg": S(SEQ_MEAN, "unused: GTPO sums per-completion losses"),
            "clip_ratio_c": S(0.0, "unused on-policy"),
        },
        "ep_grpo": {
            "n_buckets": S(10, "no public code: the RCEA supplement's 10"),
            "bucket_rule": S(
                "position", "no public code: the RCEA supplement's relative positions"
            ),
            "gate_coef": S(3.0, "no public code: the RCEA supplement's 3.0"),
            "progress_weight": S(0.2, "no public code: the RCEA supplement's 0.2"),
            "process_scale": S(1.0, "no public code: the RCEA supplement's 1.0"),
            "epsilon": S(0.2, "no public code: GRPO's 0.2"),
            "epsilon_high": S(0.2, "no public code: GRPO's 0.2"),
            "loss_agg": S(SEQ_MEAN, "no public code: GRPO's sequence mean"),
            "clip_ratio_c": S(0.0, "no public code: no dual clip"),
        },
    },
}


#: settings every objective of a preset shares unless it names its own
COMMON: dict[str, dict[str, Setting]] = {
    "rcea-supplement": {
        "advantage_epsilon": S(1e-4, "blank: TRL's (R - mean) / (std + 1e-4)"),
    },
    "authors": {
        "advantage_epsilon": S(
            1e-6, "verl compute_grpo_outcome_advantage epsilon 1e-6 (the recipes run on verl)"
        ),
    },
}
COMMON_OVERRIDES: dict[str, dict[str, dict[str, Setting]]] = {
    "authors": {
        "gtpo": {
            "advantage_epsilon": S(
                1e-4,
                "the GTPO code uses R - group mean without std "
                '(set [training] scale_rewards = "none" for that); '
                "TRL's 1e-4 kept",
            ),
        },
        "ep_grpo": {"advantage_epsilon": S(1e-4, "no public code: TRL's 1e-4")},
    },
}


def preset_settings(preset: str, objective: str) -> dict[str, Setting]:
    """Every parameter of ``objective`` under ``preset`` (value and source)."""
    if preset not in PRESETS:
        raise ValueError(f"unknown preset {preset!r} (choose from {', '.join(PRESETS)})")
    settings = {
        **PRESETS[preset][objective],
        **COMMON[preset],
        **COMMON_OVERRIDES.get(preset, {}).get(objective, {}),
    }
    missing = sorted(set(default_params(objective)) - set(settings))
    if missing:  # pragma: no cover - guarded by tests
        raise ValueError(f"preset {preset!r} leaves {objective} {', '.join(missing)} unset")
    return settings


def preset_params(preset: str, objective: str) -> dict[str, Any]:
    return {k: s.value for k, s in preset_settings(preset, objective).items()}


__all__ = ["DEFAULT_PRESET", "PRESETS", "Setting", "preset_params", "preset_settings"]
