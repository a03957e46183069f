"""Sizes of the embedded-study demo: the default (``make demo``, < 15 min on 2 cores) and
``--quick`` (< 5 min, the CI smoke test), the policy scales each one trains, and the rubric
each one freezes.

The default trains **two policy scales** of the tiny model (``tiny-s``, ~0.31 M parameters,
and ``tiny-m``, ~0.8 M: wider and one layer deeper), each from its own warm-started base
with the same six objectives, so the multi-model path (checkpoint = (run, model, step),
retention against each model's own base, the association per scale; docs/multi-model.md)
runs end to end. ``--quick`` trains ``tiny-s`` only, to keep the CI smoke test short.

Where the time goes (2 shared CPU cores, see docs/tutorial.md "Timings" for the measured runs):
the warm start ≈ 40–50 ms per step for tiny-s (tiny-m costs more), the two scales' bases
built side by side; training ≈ 10 s of start-up per (scale, objective) plus ≈ 0.3 s per
step, two runs at a time; ``rcea probe sample`` makes one generate call per checkpoint ×
question (≈ 0.2–0.4 s each, nearly independent of k), the scales probed side by side;
each scale's shared base is probed once (run "base"), so the probe costs
≈ scales × (1 + 6 × milestones) × questions calls; ``rcea probe bench``'s accuracy trace
(the entropy law's R, docs/embedded-study.md) one batched greedy call per checkpoint saved
every ``eval_steps`` — 1 + 6 × 20 per scale at the default size; the Label Studio start
(≈ 30–70 s) unless a running server is reused.

Why the simulated pair gate passes: the codebook runs with the toy domain's oracle, so the
automatic partition equals the true strategies; each simulated annotator flips a label
with probability ``annotator_error`` (2 %; 0.5 % in the quick size), which keeps
human–human macro-F1 near 0.95 (0.97); the oracle adjudicator settles every disagreement
(and every agreed label that differs from the automatic one) with the truth, so the
automatic labels match the final reference.

When the quick simulated gate settles: its rubric predeclares a sequential plan
(looks at half, three quarters and all of its 144 pairs, Pocock spending); the
annotators label in task order (question by question) and the adjudicator settles
disagreements look by look. On the quick demo's data the first look (72 pairs, three
questions with few ``different`` pairs) is undecided and the second (108 pairs) or the
last is settled (``settled_pass``; which one depends on the trained policies' samples,
i.e. on the CPU's float kernels): a ``gate.interim`` event, a SIMULATED line of the demo
and the view's Audit page show it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any

OBJECTIVES: tuple[str, ...] = ("grpo", "dapo", "clip_cov", "kl_cov", "gtpo", "ep_grpo")
PROBE_SPLIT = "probe"  # the 43 fixed probe questions of the toy domain
ORACLE = "rcea.pipeline.toy:strategy_by_id"


@dataclass(frozen=True)
class PolicyScale:
    """One policy scale of the tiny model: its model label (the ``model`` of every record,
    measurement and checkpoint of that scale) and its Qwen2 shape (``rcea train build-base``
    options; the other fields keep ``rcea.pipeline.policy.model.TINY_DEFAULTS``)."""

    label: str
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int = 4
    num_key_value_heads: int = 2

    def build_args(self) -> list[str]:
        """The ``rcea train build-base`` options that give this shape."""
        return [
            "--hidden-size",
            str(self.hidden_size),
            "--intermediate-size",
            str(self.intermediate_size),
            "--layers",
            str(self.num_hidden_layers),
            "--heads",
            str(self.num_attention_heads),
            "--kv-heads",
            str(self.num_key_value_heads),
        ]


# The small scale is the tiny model's default shape (rcea.pipeline.policy.model.TINY_DEFAULTS).
TINY_S = PolicyScale("tiny-s", hidden_size=96, intermediate_size=256, num_hidden_layers=3)
TINY_M = PolicyScale("tiny-m", hidden_size=128, intermediate_size=384, num_hidden_layers=4)


@dataclass(frozen=True)
class DemoSizes:
    """Everything a demo size decides. ``study`` is the store study (``-sim`` is appended
    for simulated runs, so simulated labels never share a study with real ones)."""

    name: str
    study: str
    seed: int
    sft_steps: int  # warm-start steps of the tiny base policy
    train_steps: int  # optimizer steps per objective
    save_steps: int  # milestone spacing: probes at step 0 and every save_steps
    # checkpoint spacing of training (its save_steps): greedy accuracy on the eval split at
    # every saved checkpoint is each run's accuracy trace, the entropy law's R (item 18);
    # a divisor of save_steps, so every milestone is a saved checkpoint
    eval_steps: int
    probe_k: int  # samples per probe question and checkpoint
    probe_questions: int | None  # probe questions (None: all 43)
    bench_questions: int  # eval-split questions for greedy accuracy and pass@k
    passk_n: int  # samples per question for pass@k (eval split)
    passk_k: tuple[int, ...]
    pairs_per_question: int
    n_pair_questions: int
    calibration_size: int
    calibration_held_out: int
    annotator_error: float  # label-flip rate of each simulated annotator
    validity_error: float  # label-flip rate of simulated validity annotators
    scales: tuple[PolicyScale, ...] = (TINY_S,)  # policy scales, each with the six objectives
    # predeclared sequential plan ([sequential] looks; () = none) and hidden repeats
    # ([annotators] repeat_share) of the pair audit
    looks: tuple[float, ...] = ()
    repeat_share: float = 0.0
    n_min: int = 8  # retention eligibility (rubric [estimators] n_min)
    # the accepted-set check: 60 items clear the default lower 95% bound 0.80 with up to
    # 3 disagreements per annotator (docs/validity-audit.md "Acceptance")
    accepted_size: int = 60
    torch_threads: int = 1  # per training/probing process
    train_workers: int = 2  # objectives trained at the same time (2 cores)
    # training seeds of the replicated run (the first scale's first objective, trained with
    # `rcea train run --train-seeds`): 1 = none, every run unseeded (the default and quick
    # demos); N >= 2 = seeds 0..N-1, so the report's replicates section aggregates across
    # seeds (`rcea demo --train-seeds N`, docs/tutorial.md)
    train_seeds: int = 1

    def __post_init__(self) -> None:
        if self.eval_steps <= 0 or self.save_steps % self.eval_steps:
            raise ValueError(
                f"eval_steps {self.eval_steps} must divide save_steps {self.save_steps}"
            )
        if self.train_seeds < 1:
            raise ValueError(f"train_seeds must be >= 1, got {self.train_seeds}")

    @property
    def replicated(self) -> tuple[PolicyScale, str] | None:
        """(scale, objective) trained at several training seeds, or None (one seed)."""
        return (self.scales[0], OBJECTIVES[0]) if self.train_seeds > 1 else None

    def training_seeds(self, scale: PolicyScale, objective: str) -> list[int | None]:
        """The training seeds of one (scale, objective): ``[None]`` (one unseeded run)
        but for the replicated run, which has ``0 .. train_seeds - 1``."""
        if self.replicated == (scale, objective):
            return list(range(self.train_seeds))
        return [None]

    @property
    def milestones(self) -> list[int]:
        """Checkpoint steps probed per objective (step 0 is the shared base)."""
        steps = list(range(self.save_steps, self.train_steps + 1, self.save_steps))
        if not steps or steps[-1] != self.train_steps:
            steps.append(self.train_steps)
        return steps

    @property
    def rubric_name(self) -> str:
        return f"rcea-toy-{self.name}"

    @property
    def models(self) -> list[str]:
        """The model labels of the scales, in training order."""
        return [sc.label for sc in self.scales]

    def study_name(self, *, simulate: bool) -> str:
        return f"{self.study}-sim" if simulate else self.study

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["passk_k"] = list(self.passk_k)
        out["looks"] = list(self.looks)
        out["scales"] = [asdict(sc) for sc in self.scales]
        out["milestones"] = self.milestones
        if self.train_seeds == 1:
            # one seed, as before the option existed: a state saved then still matches
            del out["train_seeds"]
        return out


DEFAULT = DemoSizes(
    name="default",
    study="toy",
    seed=0,
    sft_steps=1500,
    train_steps=100,
    save_steps=50,
    # 20 accuracy points per run; the law's early window (the first 15 % of training,
    # steps ≤ 15) holds 5, 10 and 15: the three points the early fit needs
    eval_steps=5,
    probe_k=32,
    probe_questions=None,
    bench_questions=24,
    passk_n=16,
    passk_k=(1, 4, 16),
    pairs_per_question=12,
    n_pair_questions=8,
    calibration_size=80,
    calibration_held_out=40,
    annotator_error=0.02,
    validity_error=0.02,
    scales=(TINY_S, TINY_M),
)

QUICK = DemoSizes(
    name="quick",
    study="toy-quick",
    seed=0,
    sft_steps=1200,
    train_steps=16,
    save_steps=16,
    # 4 accuracy points per run: the law's fit has its three, the early window (steps
    # ≤ 2.4) none, so the quick demo's early fit is undefined (said in its reason)
    eval_steps=4,
    probe_k=32,
    probe_questions=24,
    bench_questions=12,
    passk_n=8,
    passk_k=(1, 4, 8),
    pairs_per_question=24,  # 144 pairs: enough for the sequential plan to settle early
    n_pair_questions=6,
    calibration_size=40,
    calibration_held_out=20,
    annotator_error=0.005,  # the sequential gate settles at the first look
    validity_error=0.02,
    scales=(TINY_S,),
    n_min=4,
    looks=(0.5, 0.75, 1.0),
    repeat_share=0.1,
)

SIZES: dict[str, DemoSizes] = {s.name: s for s in (DEFAULT, QUICK)}


def with_train_seeds(sizes: DemoSizes, n: int) -> DemoSizes:
    """``sizes`` with ``n`` training seeds of the replicated run (``rcea demo
    --train-seeds N``), in a study of its own (``<study>-seeds<N>``, so it never resumes
    a one-seed demo's state); ``n`` = 1 is ``sizes`` itself."""
    if n == 1:
        return sizes
    return replace(sizes, train_seeds=n, study=f"{sizes.study}-seeds{n}")


def rubric_toml(sizes: DemoSizes) -> str:
    """The rubric the demo freezes: the paper's gate thresholds and estimator settings,
    with a pair plan and a calibration plan small enough to label in minutes; the quick
    size also predeclares a sequential plan (three looks, Pocock spending: the SIMULATED
    annotators' gate settles before the last) and hidden repeats
    (docs/sequential-gate.md)."""
    return (
        f"# Frozen by `rcea demo` ({sizes.name} size) for the embedded toy study.\n"
        "[rubric]\n"
        f'name = "{sizes.rubric_name}"\n'
        'version = "1"\n'
        f'description = "Embedded toy study, demo {sizes.name} size: paper thresholds, '
        'small pair and calibration plans."\n\n'
        "[estimators]\n"
        f"n_min = {sizes.n_min}\n\n"
        "[pairs]\n"
        f"seed = {sizes.seed}\n"
        f"pairs_per_question = {sizes.pairs_per_question}\n"
        f"n_questions = {sizes.n_pair_questions}\n\n"
        "[calibration]\n"
        f"size = {sizes.calibration_size}\n"
        f"held_out = {sizes.calibration_held_out}\n"
        f"seed = {sizes.seed}\n"
        + (
            "\n[sequential]  # predeclared looks: the gate may settle before every pair\n"
            f"looks = [{', '.join(str(t) for t in sizes.looks)}]\n"
            'spending = "pocock"\n'
            if sizes.looks
            else ""
        )
        + (
            "\n[annotators]  # hidden repeats: each annotator's self-consistency\n"
            f"repeat_share = {sizes.repeat_share}\n"
            if sizes.repeat_share
            else ""
        )
    )
