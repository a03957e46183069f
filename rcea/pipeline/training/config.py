"""Training configuration: a TOML file with ``[model]``, ``[objective]``, ``[objectives.NAME]``,
``[data]``, ``[chat]``, ``[verifier]``, ``[training]`` and ``[lora]`` tables.

``[data] source`` is ``"toy"`` (the embedded domain's ``split``) or a local JSONL/Parquet
question file with problem/question and answer/solution columns (as ``[questions] source``
of a probe config; ``prompt_template`` as there); ``n_train`` questions are drawn with
``seed``. ``[chat]`` (``template = "auto" | "none"``, ``system``) says how prompts reach the
model (:mod:`rcea.pipeline.chat`: conversational prompts that TRL renders with the tokenizer's
chat template, or raw text). ``[verifier] kind`` (``"toy"``, ``"math"`` or
``"python:MODULE:FUNCTION"``; unset: ``"toy"`` for the toy source, ``"math"`` for a file)
computes the reward R (:func:`rcea.pipeline.judge.verifier.make_verifier`).

Every table is optional except ``[model]`` (its ``path``) and ``[objective]`` (its ``name``).
Unknown tables or keys, and values of the wrong type, are errors that name the file, the
table and the key. Objective hyper-parameters come from a named preset (``[objective] preset``:
``"rcea-supplement"``, the default — the supplement's "Objective-Specific Settings" — or
``"authors"``, each method's published recipe; :mod:`rcea.pipeline.training.presets`);
``[objective.params]`` or ``[objectives.NAME]`` override them (the latter lets one file hold
the settings of all six objectives while ``--objective`` switches between them).
"""

from __future__ import annotations

import types
import typing
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from rcea.audits.inputs import InputError, load_toml
from rcea.pipeline.judge.verifier import VerifierError, make_verifier
from rcea.pipeline.training.objectives import OBJECTIVES, default_params, make_objective
from rcea.pipeline.training.presets import DEFAULT_PRESET, PRESETS, preset_settings


class ConfigError(ValueError):
    """A bad configuration: the message names the file, the table and the key."""


TRAIN_SEED_MAX = 2**31 - 1  # the store's integer column


@dataclass
class ModelSection:
    path: str = ""
    dtype: str = "float32"  # float32 | bfloat16 | float16 | auto


@dataclass
class DataSection:
    source: str = "toy"  # "toy" or a local .jsonl/.parquet question file
    split: str = "train"  # toy only
    n_train: int | None = None  # None: the whole split / file
    seed: int = 42
    prompt_template: str | None = None  # question files only; default: the probe's


@dataclass
class ChatSection:
    template: str = "auto"  # auto | none
    system: str | None = None


@dataclass
class VerifierSection:
    kind: str | None = None  # toy | math | python:MODULE:FUNCTION (None: by data source)

    def resolved(self, source: str) -> str:
        return self.kind or ("toy" if source == "toy" else "math")


@dataclass
class TrainingSection:
    output_dir: str = "rcea-data/runs/run"
    max_steps: int = 100
    learning_rate: float = 1e-6
    lr_scheduler_type: str = "constant"
    warmup_steps: float = 0.0  # < 1: a fraction of max_steps
    weight_decay: float = 0.0
    max_grad_norm: float = 1.0
    optim: str = "adamw_torch"
    per_device_train_batch_size: int = 16
    gradient_accumulation_steps: int = 1
    num_generations: int = 8
    num_iterations: int = 1
    max_completion_length: int = 64
    temperature: float = 1.0
    top_p: float = 1.0
    scale_rewards: str = "group"
    mask_truncated_completions: bool = False
    save_steps: int = 50
    save_total_limit: int | None = None
    logging_steps: int = 1
    seed: int = 42
    # the replicate this run is (``rcea train run --train-seeds``): written to run.json, where
    # probing and ``rcea import trainlog`` read it (docs/estimators.md item 17); it is `seed`
    train_seed: int | None = None
    bf16: bool = False
    gradient_checkpointing: bool = False
    use_vllm: bool = False
    vllm_mode: str = "colocate"
    vllm_gpu_memory_utilization: float = 0.3
    vllm_enable_sleep_mode: bool = False
    vllm_max_model_length: int | None = None
    progress_bar: bool = True
    torch_threads: int | None = None
    # TRL's report_to; TensorBoard writes OUTPUT_DIR/runs/<stamp>/events.out.tfevents.*
    report_to: list[str] = field(default_factory=lambda: ["tensorboard"])
    # TRL's OUTPUT_DIR/completions/completions_{step:05d}.parquet, which `rcea import trl`
    # reads (docs/how-to-trl.md): a parquet file per logging step, no console table
    log_completions: bool = True
    live_metrics: bool = True  # the rcea/ numbers of every step (docs/training-live.md)
    live_k_min: int = 1  # completions per outcome for a group to enter the split
    live_min_groups: int = 1  # groups with both outcomes before the split is reported


@dataclass
class LoraSection:
    enabled: bool = False
    r: int = 32
    alpha: int = 64
    dropout: float = 0.0
    target_modules: list[str] = field(
        default_factory=lambda: [
            "q_proj",
            "k_proj",
            "v_proj",
            "o_proj",
            "gate_proj",
            "up_proj",
            "down_proj",
        ]
    )


@dataclass
class TrainConfig:
    model: ModelSection
    objective: str
    objective_params: dict[str, Any]
    data: DataSection = field(default_factory=DataSection)
    chat: ChatSection = field(default_factory=ChatSection)
    verifier: VerifierSection = field(default_factory=VerifierSection)
    training: TrainingSection = field(default_factory=TrainingSection)
    lora: LoraSection = field(default_factory=LoraSection)
    objectives: dict[str, dict[str, Any]] = field(default_factory=dict)
    source: str | None = None
    preset: str = DEFAULT_PRESET

    def resolved_params(self) -> dict[str, Any]:
        """The preset's values, then ``[objectives.NAME]``, then ``[objective.params]``."""
        return {k: v["value"] for k, v in self.resolved_settings().items()}

    def resolved_settings(self) -> dict[str, dict[str, Any]]:
        """Every resolved parameter with its source (the preset's, or the table that
        overrides it)."""
        out = {
            k: {"value": s.value, "source": f"preset {self.preset}: {s.source}"}
            for k, s in preset_settings(self.preset, self.objective).items()
        }
        for where, table in (
            (f"[objectives.{self.objective}]", self.objectives.get(self.objective, {})),
            ("[objective.params]", self.objective_params),
        ):
            for k, v in table.items():
                out[k] = {"value": v, "source": where}
        return out

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["objective_preset"] = self.preset
        d["objective_params_resolved"] = self.resolved_params()
        d["objective_params_sources"] = {
            k: v["source"] for k, v in self.resolved_settings().items()
        }
        return d


_SECTIONS: dict[str, type] = {
    "model": ModelSection,
    "data": DataSection,
    "chat": ChatSection,
    "verifier": VerifierSection,
    "training": TrainingSection,
    "lora": LoraSection,
}


def _type_ok(value: Any, tp: Any) -> bool:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        return any(_type_ok(value, a) for a in typing.get_args(tp))
    if tp is type(None):
        return value is None
    if tp is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    if tp is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if origin is list:
        (inner,) = typing.get_args(tp)
        return isinstance(value, list) and all(_type_ok(v, inner) for v in value)
    if isinstance(tp, type):
        return isinstance(value, tp)
    return True


def _fill(cls: type, table: Any, where: str) -> Any:
    if not isinstance(table, dict):
        raise ConfigError(f"{where}: must be a table")
    hints = typing.get_type_hints(cls)
    known = {f.name for f in fields(cls)}
    unknown = sorted(set(table) - known)
    if unknown:
        raise ConfigError(
            f"{where}: unknown key(s) {', '.join(unknown)} (known: {', '.join(sorted(known))})"
        )
    for key, value in table.items():
        if not _type_ok(value, hints[key]):
            raise ConfigError(f"{where}.{key}: expected {_type_name(hints[key])}, got {value!r}")
    values = {k: (float(v) if hints[k] is float else v) for k, v in table.items()}
    return cls(**values)


def _type_name(tp: Any) -> str:
    return getattr(tp, "__name__", str(tp)).replace("typing.", "")


def _check_params(name: str, params: Any, where: str) -> dict[str, Any]:
    if not isinstance(params, dict):
        raise ConfigError(f"{where}: must be a table")
    defaults = default_params(name)
    unknown = sorted(set(params) - set(defaults))
    if unknown:
        raise ConfigError(
            f"{where}: unknown parameter(s) {', '.join(unknown)} for objective {name!r} "
            f"(known: {', '.join(sorted(defaults))})"
        )
    for key, value in params.items():
        default = defaults[key]
        ok = (
            isinstance(value, bool)
            if isinstance(default, bool)
            else isinstance(value, int | float) and not isinstance(value, bool)
            if isinstance(default, int | float)
            else isinstance(value, type(default))
        )
        if not ok:
            raise ConfigError(f"{where}.{key}: expected {type(default).__name__}, got {value!r}")
    return dict(params)


def parse_config(data: dict[str, Any], source: str = "<config>") -> TrainConfig:
    """Build and validate a :class:`TrainConfig` from parsed TOML."""
    allowed = {"model", "objective", "objectives", "data", "chat", "verifier", "training", "lora"}
    unknown = sorted(set(data) - allowed)
    if unknown:
        raise ConfigError(
            f"{source}: unknown table(s) {', '.join(unknown)} (known: {', '.join(sorted(allowed))})"
        )
    if "model" not in data:
        raise ConfigError(f"{source}: missing [model] table (with path = MODEL_DIR)")
    model = _fill(ModelSection, data["model"], f"{source}: [model]")
    if not model.path:
        raise ConfigError(f"{source}: [model] path: required (a local model directory)")
    obj = data.get("objective")
    if not isinstance(obj, dict) or "name" not in obj:
        raise ConfigError(f"{source}: missing [objective] name (one of {', '.join(OBJECTIVES)})")
    extra = sorted(set(obj) - {"name", "params", "preset"})
    if extra:
        raise ConfigError(
            f"{source}: [objective]: unknown key(s) {', '.join(extra)} (known: name, params, "
            "preset)"
        )
    preset = obj.get("preset", DEFAULT_PRESET)
    if preset not in PRESETS:
        raise ConfigError(
            f"{source}: [objective] preset: unknown preset {preset!r} "
            f"(choose from {', '.join(PRESETS)})"
        )
    name = obj["name"]
    if name not in OBJECTIVES:
        raise ConfigError(
            f"{source}: [objective] name: unknown objective {name!r} "
            f"(choose from {', '.join(OBJECTIVES)})"
        )
    params = _check_params(name, obj.get("params", {}), f"{source}: [objective.params]")
    per_obj: dict[str, dict[str, Any]] = {}
    table = data.get("objectives", {})
    if not isinstance(table, dict):
        raise ConfigError(f"{source}: [objectives] must be a table of tables")
    for oname, oparams in table.items():
        if oname not in OBJECTIVES:
            raise ConfigError(
                f"{source}: [objectives.{oname}]: unknown objective "
                f"(choose from {', '.join(OBJECTIVES)})"
            )
        per_obj[oname] = _check_params(oname, oparams, f"{source}: [objectives.{oname}]")
    sections = {
        key: _fill(cls, data.get(key, {}), f"{source}: [{key}]")
        for key, cls in _SECTIONS.items()
        if key != "model"
    }
    cfg = TrainConfig(
        model=model,
        objective=name,
        objective_params=params,
        objectives=per_obj,
        source=source,
        preset=preset,
        **sections,
    )
    validate(cfg)
    return cfg


def validate(cfg: TrainConfig) -> None:
    """Cross-field checks (the ones TRL would otherwise report less clearly)."""
    src = cfg.source or "<config>"
    t = cfg.training
    if t.max_steps <= 0:
        raise ConfigError(f"{src}: [training] max_steps: must be > 0, got {t.max_steps}")
    if t.num_generations < 2:
        raise ConfigError(f"{src}: [training] num_generations: must be >= 2")
    if t.per_device_train_batch_size % t.num_generations != 0:
        raise ConfigError(
            f"{src}: [training] per_device_train_batch_size ({t.per_device_train_batch_size}) "
            f"must be a multiple of num_generations ({t.num_generations}): every group of "
            "completions of one prompt must sit in one batch"
        )
    if t.save_steps <= 0:
        raise ConfigError(f"{src}: [training] save_steps: must be > 0")
    if t.train_seed is not None and not 0 <= t.train_seed <= TRAIN_SEED_MAX:
        raise ConfigError(
            f"{src}: [training] train_seed: must be in [0, {TRAIN_SEED_MAX}], got {t.train_seed}"
        )
    if t.train_seed is not None and t.seed != t.train_seed:
        raise ConfigError(
            f"{src}: [training] train_seed ({t.train_seed}) is the run's seed, but seed is "
            f"{t.seed}: set one of them"
        )
    if cfg.model.dtype not in ("float32", "bfloat16", "float16", "auto"):
        raise ConfigError(
            f"{src}: [model] dtype: one of float32, bfloat16, float16, auto; "
            f"got {cfg.model.dtype!r}"
        )
    if cfg.data.source == "toy" and cfg.data.split not in ("train", "probe", "eval"):
        raise ConfigError(f"{src}: [data] split: one of train, probe, eval")
    if cfg.data.n_train is not None and cfg.data.n_train < 1:
        raise ConfigError(f"{src}: [data] n_train: must be >= 1")
    if cfg.chat.template not in ("auto", "none"):
        raise ConfigError(f"{src}: [chat] template: one of auto, none; got {cfg.chat.template!r}")
    if cfg.chat.system is not None and cfg.chat.template == "none":
        raise ConfigError(f'{src}: [chat] system: needs a chat template (template = "none")')
    _check_verifier(cfg, src)
    try:
        make_objective(cfg.objective, **cfg.resolved_params())
    except ValueError as exc:
        raise ConfigError(f"{src}: {exc}") from None


def _check_verifier(cfg: TrainConfig, src: str) -> None:

    kind = cfg.verifier.resolved(cfg.data.source)
    if kind == "toy" and cfg.data.source != "toy":
        raise ConfigError(
            f'{src}: [verifier] kind: "toy" verifies toy questions only; [data] source '
            f'{cfg.data.source!r} needs "math" or "python:MODULE:FUNCTION"'
        )
    try:
        make_verifier(kind)
    except VerifierError as exc:
        raise ConfigError(f"{src}: [verifier] kind: {exc}") from None


def load_config(path: str | Path, **overrides: Any) -> TrainConfig:
    """Read a TOML config. ``overrides``: ``objective``, ``model_path``, ``output_dir``,
    ``max_steps``, ``seed``, ``train_seed`` (also sets ``seed``), ``chat_template``,
    ``system_prompt`` (the CLI's options), applied before validation."""
    p = Path(path)
    if not p.exists():
        raise ConfigError(f"{p}: no such file")
    try:
        data = load_toml(p)  # a regular UTF-8 file, bounded depth and integers
    except InputError as exc:
        raise ConfigError(str(exc)) from None
    data = apply_overrides(data, **overrides)
    return parse_config(data, source=str(p))


def apply_overrides(data: dict[str, Any], **overrides: Any) -> dict[str, Any]:
    data = {k: (dict(v) if isinstance(v, dict) else v) for k, v in data.items()}
    if overrides.get("objective") is not None:
        obj = dict(data.get("objective", {}))
        if obj.get("name") != overrides["objective"]:
            obj.pop("params", None)  # [objective.params] belong to the file's objective
        obj["name"] = overrides["objective"]
        data["objective"] = obj
    if overrides.get("model_path") is not None:
        data.setdefault("model", {})["path"] = str(overrides["model_path"])
    if overrides.get("chat_template") is not None:
        data.setdefault("chat", {})["template"] = overrides["chat_template"]
    if overrides.get("system_prompt") is not None:
        data.setdefault("chat", {})["system"] = overrides["system_prompt"]
    for key in ("output_dir", "max_steps", "seed"):
        if overrides.get(key) is not None:
            value = overrides[key]
            data.setdefault("training", {})[key] = str(value) if key == "output_dir" else value
    if overrides.get("train_seed") is not None:  # one replicate: its seed is the run's seed
        training = data.setdefault("training", {})
        training["train_seed"] = training["seed"] = overrides["train_seed"]
    return data
