"""``rcea train run``: load a local model (the tiny toy base or any local Hugging Face
checkpoint), build the dataset (toy or a question file; chat template per ``[chat]``), train
one objective with the shared TRL trainer and the ``[verifier]`` reward, write checkpoints
and a progress-normalised JSONL curve.

Output directory layout::

    OUTPUT_DIR/
      checkpoint-N/      every save_steps (TRL/Transformers checkpoints, save_pretrained)
      final/             the trained model (LoRA merged) + tokenizer, loadable with
                         AutoModelForCausalLM.from_pretrained
      curves.jsonl       one line per logged step: step, progress = step / max_steps, ...
      runs/<stamp>/      TensorBoard event files (report_to = ["tensorboard"], the default):
                         every logged number, the rcea/ ones included (docs/training-live.md);
                         report_to = [..., "trackio"] logs the same numbers to trackio's
                         project "rcea" in $TRACKIO_DIR (default ~/.cache/huggingface/trackio)
      run.json           resolved config, objective parameters, versions, summary, and
                         "prompt": whether the chat template was applied, the verifier;
                         "distributed": processes, distributed type, backend;
                         "train_seed": the replicate (``--train-seeds``; null: none),
                         which ``rcea probe`` and ``rcea import trainlog`` read. Written
                         last: a run dir with run.json is a finished run

Under ``accelerate launch`` (DDP or DeepSpeed, docs/scaling-out.md) the same command runs
on every rank; Transformers' Trainer shards the batches and saves checkpoints from the main
process, and only the main process (rank 0) writes ``curves.jsonl``, ``final/`` and
``run.json``. ``per_device_train_batch_size`` stays per rank, so N processes train on N
times the prompts per optimizer step; ``max_steps`` counts optimizer steps either way.
"""

from __future__ import annotations

import importlib.metadata as md
import json
import logging
import math
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch  # the `train` extra, which rcea.pipeline.training needs throughout (objectives)

from rcea.pipeline import toy
from rcea.pipeline.chat import PromptFormat, training_prompt
from rcea.pipeline.event_curves import is_curve_key
from rcea.pipeline.launch import close_process_group_at_exit, world_size
from rcea.pipeline.probe.questions import DatasetError, read_benchmark
from rcea.pipeline.run_meta import RUN_FILE
from rcea.pipeline.training.config import ConfigError, TrainConfig
from rcea.pipeline.training.live_metrics import LiveSettings
from rcea.pipeline.training.objectives import ClipCovParams, KLCovParams, make_objective
from rcea.pipeline.training.reporting import TRACKIO_PROJECT, ensure_report_to
from rcea.pipeline.training.rewards import ToyReward, VerifierReward, overlong_shaping

CURVES_FILE = "curves.jsonl"


@dataclass
class TrainResult:
    output_dir: str
    final_dir: str
    curves: str
    objective: str
    steps: int
    seconds: float
    last: dict[str, float]
    processes: int = 1  # data-parallel ranks of the launch
    main_process: bool = True  # False on the other ranks (they write nothing)

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def _curve_callback(path: Path):
    # transformers, TRL, datasets and PEFT load only when a trainer is built: reading a
    # config or the training questions does not pay for them
    from transformers import TrainerCallback

    class CurveLogger(TrainerCallback):
        """Append every training log as one JSON line with normalised progress."""

        def __init__(self) -> None:
            self.last: dict[str, float] = {}

        def on_log(self, args, state, control, logs=None, **kwargs):
            # on_log runs on every rank; the metrics TRL logs are already gathered
            if not logs or "train_runtime" in logs:
                return
            rec: dict[str, Any] = {
                "step": state.global_step,
                "progress": state.global_step / state.max_steps if state.max_steps else None,
                "epoch": logs.get("epoch", state.epoch),
            }
            for key, value in logs.items():
                if (
                    is_curve_key(key)
                    and isinstance(value, int | float)
                    and math.isfinite(float(value))
                ):
                    rec[key] = float(value)
            self.last = rec
            if not state.is_world_process_zero:
                return  # one curve: rank 0 writes it
            with path.open("a", encoding="utf-8") as fh:
                fh.write(json.dumps(rec) + "\n")

    return CurveLogger()


def training_questions(cfg: TrainConfig) -> list[tuple[str, str, str]]:
    """(question_id, prompt text, gold answer) of the ``[data]`` source."""
    d = cfg.data
    if d.source == "toy":
        qs = toy.generate_questions(d.split, d.n_train, seed=d.seed)
        return [(q.question_id, q.prompt, str(toy.true_answer(q))) for q in qs]
    kwargs: dict[str, Any] = {}
    if d.prompt_template is not None:
        kwargs["prompt_template"] = d.prompt_template
    qs = read_benchmark(d.source, n=d.n_train, seed=d.seed, **kwargs)  # type: ignore[assignment]  # read_benchmark gives ProbeQuestion, a Question with its reference answer
    return [(q.question_id, q.prompt, q.reference or "") for q in qs]  # type: ignore[attr-defined]  # read_benchmark gives ProbeQuestion, a Question with its reference answer


def build_dataset(cfg: TrainConfig, tokenizer: Any = None):
    """The TRL dataset: ``prompt`` (a conversation when the chat template applies, see
    :func:`rcea.pipeline.chat.training_prompt`; raw text otherwise or without a tokenizer),
    ``question_id`` and, for a verifier other than the toy's, ``answer`` (the gold)."""
    from datasets import Dataset  # loaded only when a trainer is built (_curve_callback)

    try:
        rows = training_questions(cfg)
    except DatasetError as exc:
        raise ConfigError(f"{cfg.source}: [data] source: {exc}") from None
    fmt = PromptFormat(cfg.chat.template, cfg.chat.system)
    try:
        prompts = [
            p if tokenizer is None else training_prompt(tokenizer, p, fmt) for _, p, _ in rows
        ]
    except ValueError as exc:
        raise ConfigError(f"{cfg.source}: [chat] {cfg.model.path}: {exc}") from None
    data: dict[str, Any] = {"prompt": prompts, "question_id": [q for q, _, _ in rows]}
    if cfg.verifier.resolved(cfg.data.source) != "toy":
        data["answer"] = [a for _, _, a in rows]
    return Dataset.from_dict(data)


def reward_function(cfg: TrainConfig) -> Any:
    """The verifier reward: :class:`ToyReward` for the toy verifier, else
    :class:`VerifierReward` of ``[verifier] kind``."""
    kind = cfg.verifier.resolved(cfg.data.source)
    return ToyReward() if kind == "toy" else VerifierReward(kind)


def grpo_args(cfg: TrainConfig, objective: Any, *, progress: bool = True):
    from trl import GRPOConfig  # loaded only when a trainer is built (_curve_callback)

    t = cfg.training
    p = objective.params
    ensure_report_to(t.report_to, cfg.source)  # trackio from .trackio-site
    kwargs: dict[str, Any] = dict(
        output_dir=t.output_dir,
        max_steps=t.max_steps,
        learning_rate=t.learning_rate,
        lr_scheduler_type=t.lr_scheduler_type,
        warmup_steps=t.warmup_steps,
        weight_decay=t.weight_decay,
        max_grad_norm=t.max_grad_norm,
        optim=t.optim,
        per_device_train_batch_size=t.per_device_train_batch_size,
        gradient_accumulation_steps=t.gradient_accumulation_steps,
        num_generations=t.num_generations,
        num_iterations=t.num_iterations,
        max_completion_length=t.max_completion_length,
        temperature=t.temperature,
        top_p=t.top_p,
        top_k=0,
        scale_rewards=t.scale_rewards,
        mask_truncated_completions=t.mask_truncated_completions,
        loss_type=objective.trl_loss_type,
        epsilon=p.epsilon,
        epsilon_high=p.epsilon_high,
        beta=0.0,
        save_strategy="steps",
        save_steps=t.save_steps,
        save_total_limit=t.save_total_limit,
        logging_steps=t.logging_steps,
        seed=t.seed,
        data_seed=cfg.data.seed,
        bf16=t.bf16,
        fp16=False,
        gradient_checkpointing=t.gradient_checkpointing,
        use_vllm=t.use_vllm,
        vllm_mode=t.vllm_mode,
        vllm_gpu_memory_utilization=t.vllm_gpu_memory_utilization,
        vllm_enable_sleep_mode=t.vllm_enable_sleep_mode,
        vllm_max_model_length=t.vllm_max_model_length,
        report_to=list(t.report_to) or "none",
        project=TRACKIO_PROJECT,  # trackio's project (only trackio reads it)
        disable_tqdm=not (progress and t.progress_bar),
        remove_unused_columns=False,
        dataloader_num_workers=0,
        log_completions=t.log_completions,
        num_completions_to_print=0,  # the parquet files only: no rich table on the console
        shuffle_dataset=True,
    )
    if world_size() > 1 and not torch.cuda.is_available():
        # several CPU processes (tests, CPU clusters): gloo; without this flag
        # Transformers would not initialise torch.distributed and every rank would train alone
        kwargs["use_cpu"] = True
    return GRPOConfig(**kwargs)


def live_settings(cfg: TrainConfig, objective: Any) -> LiveSettings | bool:
    """The ``rcea/`` settings of ``[training]`` (``False`` when ``live_metrics = false``)."""
    t = cfg.training
    if not t.live_metrics:
        return False
    params = objective.params
    extra: dict[str, Any] = {}
    if isinstance(params, ClipCovParams):
        extra["clip_cov"] = params
    if isinstance(params, KLCovParams):
        extra["kl_cov"] = params
    return LiveSettings(k_min=t.live_k_min, min_groups=t.live_min_groups, **extra)


def _dtype(name: str):
    return {
        "float32": torch.float32,
        "bfloat16": torch.bfloat16,
        "float16": torch.float16,
        "auto": "auto",
    }[name]


def build_trainer(
    cfg: TrainConfig, *, progress: bool = True, callbacks: list[Any] | None = None
) -> tuple[Any, Any, Any]:
    """(trainer, tokenizer, curve logger) for ``cfg``, ready to ``train()``."""
    # transformers and TRL (trainer imports TRL) load only here (_curve_callback)
    from transformers import AutoModelForCausalLM, AutoTokenizer, set_seed

    from rcea.pipeline.training.trainer import RceaGRPOTrainer  # imports TRL, as above

    t = cfg.training
    ensure_report_to(t.report_to, cfg.source)  # before the model loads: a missing trackio
    if t.torch_threads:
        torch.set_num_threads(t.torch_threads)
    model_dir = Path(cfg.model.path)
    if not (model_dir / "config.json").exists():
        raise FileNotFoundError(
            f"{model_dir}: not a model directory (no config.json); build one with "
            "`rcea train build-base --out DIR` or point [model] path at local weights"
        )
    out = Path(t.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    curves = out / CURVES_FILE
    set_seed(t.seed)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    tokenizer.padding_side = "left"
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=_dtype(cfg.model.dtype))
    objective = make_objective(cfg.objective, **cfg.resolved_params())
    args = grpo_args(cfg, objective, progress=progress)  # initialises torch.distributed
    close_process_group_at_exit()  # see rcea.pipeline.launch
    if t.torch_threads:
        torch.set_num_threads(t.torch_threads)  # accelerate may have set its own per rank
    if args.process_index == 0:
        curves.write_text("")
    rewards: list[Any] = [reward_function(cfg)]
    weights = [1.0]
    overlong = getattr(objective.params, "overlong_buffer_frac", 0.0)
    if overlong > 0:
        # TRL's soft overlong punishment (values in [-1, 0]) scaled by its reward weight
        rewards.append(overlong_shaping(t.max_completion_length, overlong))
        weights.append(float(objective.params.overlong_penalty))  # type: ignore[attr-defined]  # self.params is this objective's own Params subclass (its ClassVar)
    args.reward_weights = weights
    peft_config = None
    if cfg.lora.enabled:
        from peft import LoraConfig  # loaded only when a trainer is built (_curve_callback)

        peft_config = LoraConfig(
            r=cfg.lora.r,
            lora_alpha=cfg.lora.alpha,
            lora_dropout=cfg.lora.dropout,
            target_modules=list(cfg.lora.target_modules),
            task_type="CAUSAL_LM",
        )
    logger = _curve_callback(curves)
    trainer = RceaGRPOTrainer(
        model=model,
        reward_funcs=rewards,
        args=args,
        train_dataset=build_dataset(cfg, tokenizer),
        processing_class=tokenizer,
        peft_config=peft_config,
        callbacks=[logger, *(callbacks or [])],
        objective=objective,
        live_metrics=live_settings(cfg, objective),
    )
    # TRL logs some of its own metrics as None (no value this step, e.g. clip_ratio/low_min);
    # Transformers' TensorBoard callback warns on each of them at every step: noise, the
    # values are undefined (docs/training-live.md)
    logging.getLogger("transformers.integrations.integration_utils").setLevel(logging.ERROR)
    if not (progress and t.progress_bar):
        from transformers.trainer_callback import PrinterCallback  # as _curve_callback

        trainer.remove_callback(PrinterCallback)  # the curve file has the numbers
    return trainer, tokenizer, logger


def run_training(
    cfg: TrainConfig, *, progress: bool = True, callbacks: list[Any] | None = None
) -> TrainResult:
    """Train ``cfg.objective`` on the toy task; returns where everything was written."""
    with warnings.catch_warnings():
        # Transformers 5 deprecation notices about `gradient_checkpointing` (set by TRL's
        # config) and pin_memory on CPU: noise for every run, nothing to act on here.
        warnings.filterwarnings("ignore", message=".*gradient_checkpointing.*")
        warnings.filterwarnings("ignore", message=".*pin_memory.*")
        trainer, tokenizer, logger = build_trainer(cfg, progress=progress, callbacks=callbacks)
        out = Path(cfg.training.output_dir)
        t0 = time.perf_counter()
        trainer.train()
        seconds = time.perf_counter() - t0
    final = out / "final"
    save_final(trainer, cfg, tokenizer, final)
    acc = trainer.accelerator
    result = TrainResult(
        output_dir=str(out),
        final_dir=str(final),
        curves=str(out / CURVES_FILE),
        objective=cfg.objective,
        steps=trainer.state.global_step,
        seconds=seconds,
        last=logger.last,
        processes=acc.num_processes,
        main_process=acc.is_main_process,
    )
    if acc.is_main_process:
        prompt = {
            "chat_template_applied": PromptFormat(cfg.chat.template, cfg.chat.system).uses_chat(
                tokenizer
            ),
            "verifier": cfg.verifier.resolved(cfg.data.source),
        }
        distributed = {
            "processes": acc.num_processes,
            "distributed_type": str(acc.distributed_type.value),
            "backend": acc.state.backend,
            "per_device_train_batch_size": cfg.training.per_device_train_batch_size,
        }
        (out / RUN_FILE).write_text(
            json.dumps(
                {
                    # the replicate (None: none): rcea.pipeline.run_meta reads it for probing
                    "train_seed": cfg.training.train_seed,
                    "config": cfg.to_dict(),
                    "result": result.to_dict(),
                    "prompt": prompt,
                    "distributed": distributed,
                    "versions": versions(),
                },
                indent=2,
                default=str,
            )
        )
    acc.wait_for_everyone()  # every rank returns after rank 0 has written everything
    return result


def save_final(trainer: Any, cfg: TrainConfig, tokenizer: Any, final: Path) -> None:
    """Write the trained model (LoRA merged) + tokenizer to ``final`` from the main process.

    Without LoRA, ``Trainer.save_model`` (main process only; gathers DeepSpeed ZeRO-3
    shards when ``zero3_save_16bit_model`` is on). With LoRA the adapter is merged into the
    base: in memory on rank 0 (single process, DDP, ZeRO-2: every rank holds the full
    weights); under ZeRO-3 the gathered adapter is saved first and merged from disk."""
    acc = trainer.accelerator
    if not cfg.lora.enabled:
        trainer.save_model(str(final))
        if acc.is_main_process:
            tokenizer.save_pretrained(final)
        return
    zero3 = bool(
        getattr(trainer, "is_deepspeed_enabled", False)
        and acc.state.deepspeed_plugin is not None
        and acc.state.deepspeed_plugin.zero_stage == 3
    )
    if zero3:
        adapter = final.parent / "final-adapter"
        trainer.save_model(str(adapter))
        if acc.is_main_process:
            # PEFT and transformers load only when a trainer is built (_curve_callback)
            from peft import PeftModel
            from transformers import AutoModelForCausalLM

            base = AutoModelForCausalLM.from_pretrained(
                cfg.model.path, dtype=_dtype(cfg.model.dtype)
            )
            merged = PeftModel.from_pretrained(base, adapter).merge_and_unload()
            merged.save_pretrained(final)
            tokenizer.save_pretrained(final)
    elif acc.is_main_process:
        trainer.model.merge_and_unload().save_pretrained(final)
        tokenizer.save_pretrained(final)
    acc.wait_for_everyone()


def versions() -> dict[str, str]:

    out = {}
    for pkg in ("torch", "transformers", "trl", "peft", "datasets", "accelerate", "deepspeed"):
        try:
            out[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            out[pkg] = "missing"
    return out
