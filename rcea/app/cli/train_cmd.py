"""``rcea train ...``: the embedded study's tiny base policy and RLVR training (TRL).

* ``rcea train build-base --out DIR``: build + warm-start the tiny base model;
* ``rcea train run --config CONFIG.toml`` (also ``rcea train --config CONFIG.toml``): train
  one objective with the shared GRPOTrainer subclass;
* ``rcea train objectives``: the six objectives and their default hyper-parameters;
* ``rcea train eval --model DIR``: sample the probe/eval split and score it with the oracles.

Torch, Transformers and TRL are imported inside the commands, so ``rcea --help`` works
without the ``train`` extra.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import sys
from pathlib import Path
from typing import Any

import typer

from rcea.app.cli.common import domain_errors, emit, fail, progress_forced, say
from rcea.app.cli.options import JSON_OPTION
from rcea.pipeline import toy
from rcea.pipeline.event_curves import event_dirs
from rcea.pipeline.policy import build_base, sample_completions, summarise
from rcea.pipeline.policy.model import TINY_DEFAULTS
from rcea.pipeline.run_meta import finished_seed, parse_train_seeds, seed_run_dir

train_app = typer.Typer(
    rich_markup_mode=None,
    help="Embedded RLVR study: build the tiny base policy, train objectives (TRL GRPO).",
    invoke_without_command=True,
)


def _need_train_extra(as_json: bool) -> None:

    missing = [m for m in ("torch", "transformers", "trl") if importlib.util.find_spec(m) is None]
    if missing:
        fail(
            f"missing {', '.join(missing)}: install the `train` extra (pip install -e '.[train]')",
            as_json=as_json,
        )


@train_app.callback()
def train_root(
    ctx: typer.Context,
    config: Path = typer.Option(None, "--config", help="run this training config (= train run)"),
    as_json: bool = JSON_OPTION,
) -> None:
    """Without a subcommand, ``--config CONFIG.toml`` runs that config (like ``train run``)."""
    if ctx.invoked_subcommand is not None:
        return
    if config is None:
        typer.echo(ctx.get_help())
        raise typer.Exit(0)
    _run(config, as_json=as_json)


@train_app.command("build-base")
def build_base_cmd(
    out: Path = typer.Option(..., "--out", help="directory for the model and tokenizer"),
    seed: int = typer.Option(0, help="seed of the initialisation, the data and the evaluation"),
    sft_steps: int = typer.Option(1500, help="supervised warm-start steps"),
    batch_size: int = typer.Option(16, help="warm-start batch size"),
    lr: float = typer.Option(3e-3, help="warm-start peak learning rate"),
    eval_questions: int = typer.Option(43, help="probe questions for the base evaluation"),
    eval_k: int = typer.Option(8, help="samples per probe question"),
    threads: int = typer.Option(None, help="torch CPU threads (default: torch's choice)"),
    force: bool = typer.Option(False, help="overwrite a non-empty --out"),
    hidden_size: int = typer.Option(None, help="model width (default 96)"),
    intermediate_size: int = typer.Option(None, help="MLP width (default 256)"),
    layers: int = typer.Option(None, help="transformer layers (default 3)"),
    heads: int = typer.Option(None, help="attention heads (default 4)"),
    kv_heads: int = typer.Option(None, help="key/value heads (default 2)"),
    as_json: bool = JSON_OPTION,
) -> None:
    """Build and warm-start the tiny base policy; report its probe accuracy and modes.

    The shape options change the tiny model's Qwen2 shape (e.g. a second policy scale:
    --hidden-size 128 --intermediate-size 384 --layers 4); the hidden size must be divisible
    by the heads into an even head size, and the heads by the key/value heads.

    Character tokenizer + Qwen2 model (~0.3 M parameters), supervised warm start on the
    strategy mixture with injected errors, saved with save_pretrained (loadable with
    AutoModelForCausalLM.from_pretrained), then sampled on the probe split."""
    _need_train_extra(as_json)
    if sft_steps < 0 or batch_size < 1 or eval_questions < 1 or eval_k < 1:
        fail(
            "--sft-steps must be >= 0; --batch-size, --eval-questions, --eval-k >= 1",
            as_json=as_json,
        )
    if out.exists() and any(out.iterdir()) and not force:
        fail(f"{out}: exists and is not empty (use --force to overwrite)", as_json=as_json)
    shape = {
        k: v
        for k, v in {
            "hidden_size": hidden_size,
            "intermediate_size": intermediate_size,
            "num_hidden_layers": layers,
            "num_attention_heads": heads,
            "num_key_value_heads": kv_heads,
        }.items()
        if v is not None
    }
    _check_shape(shape, as_json)
    import torch  # the `train` extra: only the commands that train pay for it

    if threads:
        torch.set_num_threads(threads)
    report = build_base(
        out,
        seed=seed,
        sft_steps=sft_steps,
        batch_size=batch_size,
        lr=lr,
        eval_questions=eval_questions,
        eval_k=eval_k,
        model_overrides=shape or None,
        progress=not as_json or progress_forced(),
    )
    data = {"ok": True, **report.to_dict()}

    def show() -> None:
        ev = report.evaluation
        typer.echo(f"base model written to {report.path} ({report.n_parameters:,} parameters)")
        typer.echo(
            f"  warm start        {report.sft_steps} steps, {report.seconds:.0f} s, "
            f"loss {report.final_loss:.3f}"
        )
        typer.echo(
            f"  probe accuracy    {ev['accuracy']:.3f} ({ev['n_questions']} questions x {ev['k']})"
        )
        typer.echo(f"  boxed rate        {ev['boxed_rate']:.3f}")
        vgs = ev["valid_given_success"]
        typer.echo(f"  valid | success   {'n/a' if vgs is None else f'{vgs:.3f}'}")
        typer.echo(f"  R=1, V=0 share    {ev['success_invalid_share']:.3f}")
        typer.echo(f"  token entropy     {ev['mean_token_entropy']:.3f} nats")
        typer.echo(f"  correct modes     {ev['modes']}")

    emit(data, as_json, show)


def _check_shape(shape: dict[str, int], as_json: bool) -> None:
    """Refuse a model shape the Qwen2 attention cannot use, naming the option."""
    names = {
        "hidden_size": "--hidden-size",
        "intermediate_size": "--intermediate-size",
        "num_hidden_layers": "--layers",
        "num_attention_heads": "--heads",
        "num_key_value_heads": "--kv-heads",
    }
    for key, value in shape.items():
        if value < 1:
            fail(f"{names[key]} must be >= 1, got {value}", as_json=as_json)
    full = {**TINY_DEFAULTS, **shape}
    hidden, heads, kv = (
        full["hidden_size"],
        full["num_attention_heads"],
        full["num_key_value_heads"],
    )
    if hidden % heads:
        fail(f"--hidden-size {hidden} is not divisible by --heads {heads}", as_json=as_json)
    if heads % kv:
        fail(f"--heads {heads} is not divisible by --kv-heads {kv}", as_json=as_json)
    if (hidden // heads) % 2:
        fail(
            f"head size {hidden // heads} (--hidden-size {hidden} / --heads {heads}) must be "
            "even (rotary position embeddings)",
            as_json=as_json,
        )


@train_app.command("run")
def run_cmd(
    config: Path = typer.Option(..., "--config", help="training config (TOML)"),
    objective: str = typer.Option(None, help="override [objective] name"),
    model: Path = typer.Option(None, help="override [model] path"),
    out: Path = typer.Option(None, "--out", help="override [training] output_dir"),
    max_steps: int = typer.Option(None, help="override [training] max_steps"),
    seed: int = typer.Option(None, help="override [training] seed"),
    train_seeds: str = typer.Option(
        None,
        "--train-seeds",
        help="train these training seeds (replicates) of the recipe, e.g. 0,1,2: each into "
        "OUT/train-seed-N with [training] seed = N, recorded in its run.json for `rcea "
        "probe` and `rcea import trainlog`; finished seeds are skipped. Not a decoding seed",
    ),
    no_chat_template: bool = typer.Option(
        False,
        "--no-chat-template",
        help="raw prompt text even when the tokenizer has a chat template (base models)",
    ),
    system_prompt: str = typer.Option(
        None, "--system-prompt", help="override \\[chat] system (the system prompt)"
    ),
    as_json: bool = JSON_OPTION,
) -> None:
    """Train one objective with the shared TRL GRPOTrainer subclass.

    Works on the tiny toy base and on any local Hugging Face checkpoint ([model] path):
    prompts go through the tokenizer's chat template unless --no-chat-template, and the
    reward is the [verifier] (docs/real-models.md).

    Writes checkpoint-N/ every save_steps, curves.jsonl (progress-normalised), run.json
    and final/ under the output directory.

    Several training seeds of one recipe (--train-seeds 0,1,2): one run per seed, one after
    the other, each into OUT/train-seed-N (OUT: --out or [training] output_dir) with
    [training] seed = N and "train_seed": N in its run.json; a seed whose run.json is there
    is skipped, an unfinished one is trained again from its start (docs/embedded-study.md).

    Multi-GPU: `accelerate launch --config_file CONFIG.yaml $(which rcea) train run ...`
    (DDP or DeepSpeed, rcea/pipeline/training/configs/accelerate/; docs/scaling-out.md): rank 0
    writes the outputs, the other ranks print nothing."""
    overrides: dict[str, Any] = dict(
        objective=objective,
        model_path=model,
        output_dir=out,
        max_steps=max_steps,
        seed=seed,
        chat_template="none" if no_chat_template else None,
        system_prompt=system_prompt,
    )
    if train_seeds is None:
        _run(config, as_json=as_json, **overrides)
        return
    if seed is not None:
        fail("--seed and --train-seeds both set [training] seed: give one", as_json=as_json)
    try:
        seeds = parse_train_seeds(train_seeds)
    except ValueError as exc:
        fail(str(exc), as_json=as_json)
    _run_seeds(config, seeds, as_json=as_json, **overrides)


def _run_seeds(config: Path, seeds: list[int], *, as_json: bool, **overrides: Any) -> None:
    """``train run --train-seeds``: each seed in turn, each reported as it finishes."""
    _need_train_extra(as_json)
    # rcea.pipeline.training imports torch: only `rcea train` pays for it, after the check above
    from rcea.pipeline.training.config import ConfigError, load_config

    try:  # the recipe, checked once before any seed trains (OUT is its output_dir)
        out = Path(load_config(config, **overrides).training.output_dir)
        todo = [s for s in seeds if not finished_seed(seed_run_dir(out, s), s)]
    except (ConfigError, ValueError) as exc:
        fail(str(exc), as_json=as_json)
    # under accelerate launch every rank runs this loop; rank 0 alone says what it does
    rank0 = int(os.environ.get("RANK", "0") or 0) == 0
    quiet = as_json or not rank0
    runs: list[dict[str, Any]] = []
    for i, train_seed in enumerate(seeds, 1):
        run_dir = seed_run_dir(out, train_seed)
        where = f"train seed {train_seed} ({i}/{len(seeds)})"
        if train_seed not in todo:
            say(f"{where}: finished earlier ({run_dir}), skipped", quiet, err=True)
            runs.append({"train_seed": train_seed, "output_dir": str(run_dir), "skipped": True})
            continue
        say(f"{where}: training into {run_dir}", quiet, err=True)
        data = _train(
            config,
            as_json=as_json,
            **{**overrides, "output_dir": run_dir, "train_seed": train_seed},
        )
        if data is None:
            continue  # a rank > 0 of a launch: on to the next seed with rank 0
        say(
            f"{where}: {data['steps']} steps in {data['seconds']:.1f} s → {data['final_dir']}",
            quiet,
            err=True,
        )
        runs.append({"train_seed": train_seed, "skipped": False, **data})
    if not rank0:
        return  # rank 0 reports (one JSON document)
    result = {"ok": True, "output_dir": str(out), "train_seeds": seeds, "runs": runs}

    def show() -> None:
        done = sum(not r["skipped"] for r in runs)
        typer.echo(
            f"{len(seeds)} training seed(s) under {out}: {done} trained, "
            f"{len(seeds) - done} finished earlier"
        )
        typer.echo(
            "next: `rcea probe ...` with [checkpoints] run_dirs = the train-seed-N dirs (each "
            "run.json carries its seed); the report keys them RUN [train seed N]"
        )

    emit(result, as_json, show)


def _train(config: Path, *, as_json: bool, **overrides: Any) -> dict[str, Any] | None:
    """Train one config; its JSON answer (None on the ranks > 0 of a launch)."""
    # rcea.pipeline.training imports torch: only `rcea train` pays for it (_need_train_extra)
    from rcea.pipeline.training.config import ConfigError, load_config

    try:
        cfg = load_config(config, **overrides)
    except ConfigError as exc:
        fail(str(exc), as_json=as_json)
    from rcea.pipeline.training.run import run_training  # imports torch, as above

    try:
        # --json: stdout holds the one JSON document; what the reporting integrations print
        # while training (trackio's "* Trackio project initialized", …) goes to stderr
        with contextlib.redirect_stdout(sys.stderr) if as_json else contextlib.nullcontext():
            result = run_training(cfg, progress=not as_json)
    except (FileNotFoundError, ConfigError) as exc:
        fail(str(exc), as_json=as_json)
    if not result.main_process:
        return None  # under accelerate launch, rank 0 reports (one JSON document)
    events = event_dirs(result.output_dir)
    return {
        "ok": True,
        **result.to_dict(),
        "train_seed": cfg.training.train_seed,
        "events": str(events[-1]) if events else None,
        "objective_preset": cfg.preset,
        "objective_params": cfg.resolved_settings(),
    }


def _run(config: Path, *, as_json: bool, **overrides: Any) -> None:
    _need_train_extra(as_json)
    data = _train(config, as_json=as_json, **overrides)
    if data is None:
        return  # under accelerate launch, rank 0 reports (one JSON document)

    def show() -> None:
        steps, seconds, last = data["steps"], data["seconds"], data["last"]
        typer.echo(
            f"{data['objective']}: {steps} steps in {seconds:.1f} s "
            f"({steps / max(seconds, 1e-9):.2f} steps/s)"
        )
        typer.echo(f"  preset      {data['objective_preset']}")
        for key, setting in data["objective_params"].items():
            typer.echo(f"    {key:<22}{setting['value']!s:<22}{setting['source']}")
        typer.echo(f"  curves      {data['curves']}")
        typer.echo(f"  final model {data['final_dir']}")
        if data["events"]:
            typer.echo(f"  events      {data['events']}")
        for key in ("entropy", "reward", "toy/accuracy", "completions/mean_length"):
            if key in last:
                typer.echo(f"  last {key:<22}{last[key]:.4g}")
        if data["events"]:
            typer.echo(
                f"next: tensorboard --logdir {Path(data['output_dir']) / 'runs'} or `rcea view` "
                "(Training page) for the rcea/ curves; `rcea probe curves` records them for the "
                "report"
            )

    emit(data, as_json, show)


@train_app.command("objectives")
def objectives_cmd(
    preset: str = typer.Option("rcea-supplement", help="rcea-supplement (the default) | authors"),
    as_json: bool = JSON_OPTION,
) -> None:
    """The objectives and every hyper-parameter of a named preset, with its source."""
    _need_train_extra(as_json)
    # rcea.pipeline.training imports torch: only `rcea train` pays for it, after the check above
    from rcea.pipeline.training.objectives import OBJECTIVES
    from rcea.pipeline.training.presets import PRESETS, preset_settings

    if preset not in PRESETS:
        fail(f"unknown preset {preset!r} (choose from {', '.join(PRESETS)})", as_json=as_json)
    data = {
        name: {
            k: {"value": s.value, "source": s.source}
            for k, s in preset_settings(preset, name).items()
        }
        for name in OBJECTIVES
    }

    def show() -> None:
        typer.echo(f"preset {preset}")
        for name, params in data.items():
            typer.echo(f"{name}:")
            for key, setting in params.items():
                typer.echo(f"  {key:<22}{setting['value']!s:<22}{setting['source']}")

    emit({"preset": preset, "objectives": data}, as_json, show)


@train_app.command("eval")
def eval_cmd(
    model: Path = typer.Option(..., "--model", help="a local model directory"),
    split: str = typer.Option("probe", help="probe | eval | train"),
    n: int = typer.Option(None, help="questions (default: the whole split)"),
    k: int = typer.Option(8, help="samples per question"),
    temperature: float = typer.Option(1.0, help="sampling temperature"),
    max_new_tokens: int = typer.Option(64, help="completion budget in tokens"),
    seed: int = typer.Option(0, help="question draw and sampling seed"),
    as_json: bool = JSON_OPTION,
) -> None:
    """Sample k completions per question and report accuracy, validity, modes, entropy."""
    _need_train_extra(as_json)
    if not (model / "config.json").exists():
        fail(f"{model}: not a model directory (no config.json)", as_json=as_json)
    # the `train` extra: only the commands that train pay for it, after the check above
    from transformers import AutoModelForCausalLM, AutoTokenizer

    with domain_errors(as_json):
        questions = toy.generate_questions(split, n, seed=seed)
    tok = AutoTokenizer.from_pretrained(model)
    tok.padding_side = "left"
    lm = AutoModelForCausalLM.from_pretrained(model)
    samples = sample_completions(
        lm, tok, questions, k, max_new_tokens=max_new_tokens, temperature=temperature, seed=seed
    )
    data = {"ok": True, "model": str(model), "split": split, **summarise(samples, k).to_dict()}

    def show() -> None:
        for key, value in data.items():
            if key != "ok":
                typer.echo(f"{key:<34}{value}")

    emit(data, as_json, show)


def register(app: typer.Typer) -> None:
    app.add_typer(train_app, name="train")
