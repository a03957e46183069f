"""The probe configuration (TOML) and checkpoint resolution.

Tables (all optional except a checkpoint source; unknown tables/keys and wrongly typed
values are :class:`ConfigError` naming the file, the table and the key)::

    [probe]        seed (probe-set seed, 2027), k (8), temperature (1.0), top_p (1.0),
                   max_new_tokens (64), batch_size (256 sequences per generate call),
                   backend ("auto" | "transformers" | "vllm" | "server"), torch_threads,
                   strategy_as_mode (false: also write the toy oracle's strategy as `mode`)
    [questions]    source ("toy" or a .jsonl/.parquet benchmark file), split ("probe"),
                   n (all), prompt_template
    [checkpoints]  run_dirs (training output dirs), milestones ([0, .25, .5, .75, 1] or
                   "all"), model ("tiny": the model label), run (default: the objective in
                   run.json), base_run (unset: each run's base carries the run's label;
                   e.g. "base": one base checkpoint, run "base", shared by the run dirs
                   that start from it), train_seed (the training seed of the run dirs'
                   checkpoints; unset: each run.json's ``train_seed``, written by ``rcea
                   train run --train-seeds``; a value contradicting run.json is an error),
                   list (explicit [[checkpoints.list]] {path, run, model, step, and
                   optionally train_seed})
    [server]       backend = "server" only (docs/probing.md, "Sampling through a server"):
                   base_url (OpenAI-compatible, e.g. "http://gpu-node:8000/v1"), model
                   (served model name template, "{path}": fields path, label, run, model,
                   step), models (per-label overrides: "<label>" = "name" or {model,
                   base_url}), api_key_env (name of the environment variable holding the
                   key; unset: none), logprobs_mode (required: "raw_logprobs" |
                   "processed_logprobs", the server's ``--logprobs-mode``), concurrency (8
                   requests in flight), timeout_s (600), max_retries (5)
    [chat]         template ("auto": the checkpoint tokenizer's chat template when it has
                   one, ``apply_chat_template(..., add_generation_prompt=True)``; "none": raw
                   prompt text, for base models), system (system prompt; unset: the
                   template's default) — see :mod:`rcea.pipeline.chat`
    [verifier]     kind ("toy" | "math" | "python:MODULE:FUNCTION"; unset: "toy" for toy
                   questions, "math" for benchmark files) — see :mod:`rcea.pipeline.judge.verifier`
    [entropy]      chunk_size (128 positions per LM-head chunk), batch_size (64 sequences)
    [covariance]   questions (40), trajectories (4), positions (64), seed (0)
    [bench]        max_new_tokens (64), batch_size (256 sequences), trace (true: greedy accuracy
                   trace over every saved checkpoint), trace_set (first set)
    [[bench.sets]] name, source ("toy" or a file), split ("eval"), n
    [bench.passk]  set (first set), n (16), k ([1, 4, 16]), temperature (0.7),
                   top_p (1.0), seed (0)

Milestones pick, for progress p, the saved ``checkpoint-N`` nearest to p · max_steps
(``final/`` counts as step max_steps when no ``checkpoint-max_steps`` exists); p = 0 is the
base policy (``run.json``'s ``[model] path``, step 0). Relative paths are relative to the
working directory.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from rcea.audits.inputs import InputError, load_toml
from rcea.pipeline.chat import CHAT_MODES
from rcea.pipeline.judge.verifier import VerifierError, make_verifier
from rcea.pipeline.run_meta import RUN_FILE, read_run_meta, recorded_train_seed, train_seed_of
from rcea.pipeline.safety import safe_name


class ConfigError(ValueError):
    """A bad probe configuration; the message names the file, table and key."""


@dataclass
class ProbeSection:
    seed: int = 2027
    k: int = 8
    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int = 64
    batch_size: int = 256
    backend: str = "auto"
    torch_threads: int | None = None
    strategy_as_mode: bool = False


@dataclass
class QuestionsSection:
    source: str = "toy"
    split: str = "probe"
    n: int | None = None
    prompt_template: str | None = None


@dataclass
class CheckpointsSection:
    run_dirs: list[str] = field(default_factory=list)
    milestones: Any = field(default_factory=lambda: [0.0, 0.25, 0.5, 0.75, 1.0])
    model: str = "tiny"
    run: str | None = None
    base_run: str | None = None
    train_seed: int | None = None
    list: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class ServerSection:
    base_url: str | None = None
    model: str = "{path}"
    models: Any = field(default_factory=dict)
    api_key_env: str | None = None
    logprobs_mode: str | None = None
    concurrency: int = 8
    timeout_s: float = 600.0
    max_retries: int = 5
    backoff_base_s: float = 0.5


@dataclass
class ChatSection:
    template: str = "auto"
    system: str | None = None


@dataclass
class VerifierSection:
    kind: str | None = None


@dataclass
class EntropySection:
    chunk_size: int = 128
    batch_size: int = 64


@dataclass
class CovarianceSection:
    questions: int = 40
    trajectories: int = 4
    positions: int = 64
    seed: int = 0


@dataclass
class BenchSet:
    name: str
    source: str = "toy"
    split: str = "eval"
    n: int | None = None


@dataclass
class PasskSection:
    set: str | None = None
    n: int = 16
    k: list[int] = field(default_factory=lambda: [1, 4, 16])
    temperature: float = 0.7
    top_p: float = 1.0
    seed: int = 0


@dataclass
class BenchSection:
    max_new_tokens: int = 64
    batch_size: int = 256
    trace: bool = True
    trace_set: str | None = None
    sets: list[BenchSet] = field(default_factory=list)
    passk: PasskSection = field(default_factory=PasskSection)


@dataclass
class ProbeConfig:
    probe: ProbeSection = field(default_factory=ProbeSection)
    questions: QuestionsSection = field(default_factory=QuestionsSection)
    checkpoints: CheckpointsSection = field(default_factory=CheckpointsSection)
    server: ServerSection = field(default_factory=ServerSection)
    chat: ChatSection = field(default_factory=ChatSection)
    verifier: VerifierSection = field(default_factory=VerifierSection)
    entropy: EntropySection = field(default_factory=EntropySection)
    covariance: CovarianceSection = field(default_factory=CovarianceSection)
    bench: BenchSection = field(default_factory=BenchSection)
    source: str = "<dict>"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Checkpoint:
    """One policy to probe: weights directory and provenance (run, model, step, and the
    training seed: two seeds of one recipe at one step are two checkpoints)."""

    path: str
    run: str
    model: str
    step: int
    progress: float | None = None
    max_steps: int | None = None
    train_seed: int | None = None

    @property
    def label(self) -> str:
        """File-name-safe ``run--model--stepN``, ``run--train-seed-S--model--stepN`` for a
        training seed (``rcea.pipeline.safety.safe_name``): the key of its files and of its
        finished units in the manifest."""
        seed = "" if self.train_seed is None else f"--train-seed-{self.train_seed}"
        return safe_name(f"{self.run}{seed}--{self.model}--step{self.step}")

    @property
    def series(self) -> tuple[str, int | None, str]:
        """(run, training seed, model): the checkpoints of one trajectory of training."""
        return (self.run, self.train_seed, self.model)

    @property
    def key(self) -> tuple[str, int | None, str, int]:
        """(run, training seed, model, step): what tells two checkpoints apart."""
        return (*self.series, self.step)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# --------------------------------------------------------------------------- parsing

_SECTIONS: dict[str, type] = {
    "probe": ProbeSection,
    "questions": QuestionsSection,
    "checkpoints": CheckpointsSection,
    "server": ServerSection,
    "chat": ChatSection,
    "verifier": VerifierSection,
    "entropy": EntropySection,
    "covariance": CovarianceSection,
}
_BACKENDS = ("auto", "transformers", "vllm", "server")
LOGPROBS_MODES = ("raw_logprobs", "processed_logprobs")
"""What the server's sampled-token log-probs are (vLLM ``--logprobs-mode``)."""
_SERVER_FIELDS = ("path", "label", "run", "model", "step")


def _check_type(where: str, value: Any, annotation: Any) -> Any:
    text = str(annotation)
    if "Any" in text:
        return value
    if value is None and "None" in text:
        return value
    if "bool" in text:
        if isinstance(value, bool):
            return value
    elif "int" in text and "list" not in text and "float" not in text:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif "float" in text:
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
    elif "list" in text:
        if isinstance(value, list):
            return value
    elif "str" in text and isinstance(value, str):
        return value
    raise ConfigError(f"{where}: expected {text.replace('typing.', '')}, got {value!r}")


def _section(src: str, name: str, cls: type, data: Any) -> Any:
    if not isinstance(data, dict):
        raise ConfigError(f"{src}: [{name}] must be a table")
    known = {f.name: f for f in fields(cls)}
    kwargs = {}
    for key, value in data.items():
        if key not in known:
            raise ConfigError(
                f"{src}: [{name}] {key}: unknown key (known: {', '.join(sorted(known))})"
            )
        kwargs[key] = _check_type(f"{src}: [{name}] {key}", value, known[key].type)
    try:
        return cls(**kwargs)
    except TypeError as exc:
        raise ConfigError(f"{src}: [{name}]: {exc}") from None


def parse_config(data: dict[str, Any], source: str = "<dict>") -> ProbeConfig:
    """Build a :class:`ProbeConfig` from a TOML-shaped dict (see the module docstring)."""
    cfg = ProbeConfig(source=source)
    for name, value in data.items():
        if name in _SECTIONS:
            setattr(cfg, name, _section(source, name, _SECTIONS[name], value))
        elif name == "bench":
            cfg.bench = _bench(source, value)
        else:
            raise ConfigError(
                f"{source}: [{name}]: unknown table (known: "
                f"{', '.join(sorted([*_SECTIONS, 'bench']))})"
            )
    validate(cfg)
    return cfg


def _bench(src: str, data: Any) -> BenchSection:
    if not isinstance(data, dict):
        raise ConfigError(f"{src}: [bench] must be a table")
    data = dict(data)
    sets = data.pop("sets", [])
    passk = data.pop("passk", {})
    section = _section(src, "bench", BenchSection, data)
    if not isinstance(sets, list):
        raise ConfigError(f"{src}: [bench] sets: expected an array of tables")
    section.sets = [_section(src, f"bench.sets[{i}]", BenchSet, s) for i, s in enumerate(sets)]
    section.passk = _section(src, "bench.passk", PasskSection, passk)
    return section


def validate(cfg: ProbeConfig) -> None:
    """Range checks; raises :class:`ConfigError` naming the key."""
    src = cfg.source
    p = cfg.probe
    positive = {
        "[probe] k": p.k,
        "[probe] max_new_tokens": p.max_new_tokens,
        "[probe] batch_size": p.batch_size,
        "[entropy] chunk_size": cfg.entropy.chunk_size,
        "[entropy] batch_size": cfg.entropy.batch_size,
        "[covariance] questions": cfg.covariance.questions,
        "[covariance] trajectories": cfg.covariance.trajectories,
        "[covariance] positions": cfg.covariance.positions,
        "[bench] max_new_tokens": cfg.bench.max_new_tokens,
        "[bench] batch_size": cfg.bench.batch_size,
        "[bench.passk] n": cfg.bench.passk.n,
    }
    for key, value in positive.items():
        if value < 1:
            raise ConfigError(f"{src}: {key}: must be >= 1, got {value}")
    if p.temperature <= 0 or cfg.bench.passk.temperature <= 0:
        raise ConfigError(f"{src}: temperature must be > 0 (use bench greedy for argmax)")
    if not 0 < p.top_p <= 1 or not 0 < cfg.bench.passk.top_p <= 1:
        raise ConfigError(f"{src}: top_p must be in (0, 1]")
    if p.backend not in _BACKENDS:
        raise ConfigError(f"{src}: [probe] backend: must be one of {', '.join(_BACKENDS)}")
    _check_server(cfg)
    if cfg.questions.n is not None and cfg.questions.n < 1:
        raise ConfigError(f"{src}: [questions] n: must be >= 1")
    if cfg.chat.template not in CHAT_MODES:
        raise ConfigError(
            f"{src}: [chat] template: one of {', '.join(CHAT_MODES)}, got {cfg.chat.template!r}"
        )
    if cfg.chat.system is not None and cfg.chat.template == "none":
        raise ConfigError(f'{src}: [chat] system: needs a chat template (template = "none")')
    _check_verifier(cfg)
    ks = cfg.bench.passk.k
    if not ks or any(not isinstance(k, int) or k < 1 for k in ks):
        raise ConfigError(f"{src}: [bench.passk] k: a non-empty list of integers >= 1")
    if max(ks) > cfg.bench.passk.n:
        raise ConfigError(f"{src}: [bench.passk] k: max k {max(ks)} exceeds n {cfg.bench.passk.n}")
    names = [s.name for s in cfg.bench.sets]
    if len(set(names)) != len(names):
        raise ConfigError(f"{src}: [[bench.sets]] name: duplicate set names {names}")
    for key, ref in (("trace_set", cfg.bench.trace_set), ("passk set", cfg.bench.passk.set)):
        if ref is not None and ref not in names:
            raise ConfigError(f"{src}: [bench] {key}: no [[bench.sets]] named {ref!r}")
    m = cfg.checkpoints.milestones
    if m != "all" and (
        not isinstance(m, list)
        or not m
        or any(not isinstance(x, int | float) or not 0 <= x <= 1 for x in m)
    ):
        raise ConfigError(
            f'{src}: [checkpoints] milestones: a list of progress values in [0, 1] or "all"'
        )
    for i, entry in enumerate(cfg.checkpoints.list):
        where = f"{src}: [[checkpoints.list]] #{i + 1}"
        if not isinstance(entry, dict):
            raise ConfigError(f"{where}: must be a table")
        missing = {"path", "run", "model", "step"} - set(entry)
        extra = set(entry) - {"path", "run", "model", "step", "train_seed"}
        if missing or extra:
            raise ConfigError(
                f"{where}: needs path, run, model, step and optionally train_seed "
                f"(missing {sorted(missing)}, unknown {sorted(extra)})"
            )
        if not isinstance(entry["step"], int) or entry["step"] < 0:
            raise ConfigError(f"{where}: step: must be an integer >= 0")
        _check_train_seed(f"{where}: train_seed", entry.get("train_seed"))
    _check_train_seed(f"{src}: [checkpoints] train_seed", cfg.checkpoints.train_seed)


TRAIN_SEED_MAX = 2**31 - 1  # the store's integer column


def _check_train_seed(where: str, value: Any) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= TRAIN_SEED_MAX:
        raise ConfigError(f"{where}: must be an integer in [0, {TRAIN_SEED_MAX}], got {value!r}")


def _check_server(cfg: ProbeConfig) -> None:
    src, sv = cfg.source, cfg.server
    if not isinstance(sv.models, dict):
        raise ConfigError(f"{src}: [server] models: a table of checkpoint label = served name")
    for label, entry in sv.models.items():
        if isinstance(entry, str) and entry:
            continue
        if (
            not isinstance(entry, dict)
            or not entry
            or set(entry) - {"model", "base_url"}
            or not all(isinstance(v, str) and v for v in entry.values())
        ):
            raise ConfigError(
                f"{src}: [server.models] {label}: a served model name, or a table with "
                "model and/or base_url (strings)"
            )
    try:
        sv.model.format(**{f: "" for f in _SERVER_FIELDS})
    except (KeyError, IndexError, ValueError) as exc:
        raise ConfigError(
            f"{src}: [server] model: bad template {sv.model!r} ({exc!r}; fields: "
            f"{', '.join('{' + f + '}' for f in _SERVER_FIELDS)})"
        ) from None
    for key, value in (("concurrency", sv.concurrency), ("timeout_s", sv.timeout_s)):
        if value <= 0:
            raise ConfigError(f"{src}: [server] {key}: must be > 0, got {value}")
    if sv.max_retries < 0 or sv.backoff_base_s < 0:
        raise ConfigError(f"{src}: [server] max_retries and backoff_base_s: must be >= 0")
    if cfg.probe.backend != "server":
        return
    if sv.logprobs_mode not in LOGPROBS_MODES:
        raise ConfigError(
            f'{src}: [server] logprobs_mode: backend = "server" needs it, one of '
            f"{', '.join(LOGPROBS_MODES)} (the server's --logprobs-mode; vLLM's default is "
            f"raw_logprobs), got {sv.logprobs_mode!r}"
        )
    if not sv.base_url and not (
        sv.models and all(isinstance(e, dict) and e.get("base_url") for e in sv.models.values())
    ):
        raise ConfigError(
            f'{src}: [server] base_url: backend = "server" needs the endpoint '
            '(e.g. "http://gpu-node:8000/v1")'
        )


def served_model(cfg: ProbeConfig, ck: Checkpoint) -> tuple[str, str]:
    """(base URL, served model name) of checkpoint ``ck`` under ``[server]``: its
    ``[server.models]`` entry, else the ``model`` template and ``base_url``."""
    sv = cfg.server
    entry = sv.models.get(ck.label)
    if isinstance(entry, str):
        entry = {"model": entry}
    entry = entry or {}
    base_url = entry.get("base_url") or sv.base_url
    if not base_url:
        raise ConfigError(f"{cfg.source}: [server] base_url: none for checkpoint {ck.label}")
    name = entry.get("model") or sv.model.format(
        path=ck.path, label=ck.label, run=ck.run, model=ck.model, step=ck.step
    )
    return base_url, name


def _check_verifier(cfg: ProbeConfig) -> None:

    kind = cfg.verifier.kind
    if kind is None:
        return
    try:
        make_verifier(kind)
    except VerifierError as exc:
        raise ConfigError(f"{cfg.source}: [verifier] kind: {exc}") from None
    sources = [cfg.questions.source, *(s.source for s in cfg.bench.sets)]
    if kind == "toy" and any(src != "toy" for src in sources):
        raise ConfigError(
            f'{cfg.source}: [verifier] kind: "toy" verifies toy questions only; '
            f"question source(s) {sorted({s for s in sources if s != 'toy'})} need "
            '"math" or "python:MODULE:FUNCTION"'
        )


def load_config(path: str | Path, **overrides: Any) -> ProbeConfig:
    """Read a probe config file; ``overrides`` are dotted keys (``"probe.k": 4``) whose
    ``None`` values are ignored (CLI options that were not given)."""
    path = Path(path)
    if not path.exists():
        raise ConfigError(f"{path}: no such config file")
    try:
        data = load_toml(path)  # a regular UTF-8 file, bounded depth and integers
    except InputError as exc:
        raise ConfigError(str(exc)) from None
    for dotted, value in overrides.items():
        if value is None:
            continue
        table, _, key = dotted.partition(".")
        if table == "bench" and key.startswith("passk."):
            data.setdefault("bench", {}).setdefault("passk", {})[key[6:]] = value
        else:
            data.setdefault(table, {})[key] = value
    return parse_config(data, str(path))


# --------------------------------------------------------------------------- checkpoints


def _saved_steps(run_dir: Path) -> dict[int, Path]:
    out: dict[int, Path] = {}
    for child in run_dir.glob("checkpoint-*"):
        m = re.fullmatch(r"checkpoint-(\d+)", child.name)
        if m and (child / "config.json").exists():
            out[int(m.group(1))] = child
    return out


def run_checkpoints(
    run_dir: str | Path,
    milestones: Any,
    *,
    model: str,
    run: str | None = None,
    base_run: str | None = None,
    train_seed: int | None = None,
) -> list[Checkpoint]:
    """Checkpoints of one training run dir at the given progress milestones (or "all").

    The base (step 0) carries the run's label and training seed, or ``base_run`` and no
    training seed when given (one base shared by every run dir that starts from it). The
    training seed is ``run.json``'s (:func:`rcea.pipeline.run_meta.train_seed_of`), else
    ``train_seed``; both given and different is an error."""
    run_dir = Path(run_dir)
    meta_path = run_dir / "run.json"
    if not meta_path.exists():
        raise ConfigError(f"{run_dir}: not a training run dir (no run.json; train it first)")
    meta = json.loads(meta_path.read_text(encoding="utf-8"))
    seed = _resolved_train_seed(meta_path, meta, train_seed)
    cfg = meta.get("config", {})
    run = run or cfg.get("objective") or run_dir.name
    max_steps = int(meta.get("result", {}).get("steps") or cfg["training"]["max_steps"])
    base = Path(cfg["model"]["path"])
    if not (base / "config.json").exists():
        raise ConfigError(f"{run_dir}/run.json: base model {base} is missing (no config.json)")
    saved = _saved_steps(run_dir)
    final = run_dir / "final"
    if max_steps not in saved and (final / "config.json").exists():
        saved[max_steps] = final
    if not saved:
        raise ConfigError(f"{run_dir}: no saved checkpoint-N/ or final/")
    chosen: dict[int, Path] = {0: base}
    if milestones == "all":
        chosen.update(saved)
    else:
        for p in milestones:
            if float(p) == 0.0:
                continue
            target = float(p) * max_steps
            step = min(saved, key=lambda s: (abs(s - target), s))
            chosen[step] = saved[step]
    return [
        Checkpoint(
            str(path),
            base_run if step == 0 and base_run else run,
            model,
            step,
            step / max_steps,
            max_steps,
            None if step == 0 and base_run else seed,
        )
        for step, path in sorted(chosen.items())
    ]


def _resolved_train_seed(where: Path, meta: dict[str, Any], given: int | None) -> int | None:
    recorded = train_seed_of(meta)
    if given is not None and recorded is not None and given != recorded:
        raise ConfigError(
            f"{where}: training seed {recorded}, but --train-seed / [checkpoints] train_seed "
            f"is {given}"
        )
    return recorded if recorded is not None else given


def resolve_checkpoints(cfg: ProbeConfig) -> list[Checkpoint]:
    """Explicit ``[[checkpoints.list]]`` entries plus the milestones of every run dir,
    ordered by (run, model, step); duplicates are an error."""
    c = cfg.checkpoints
    out = [_listed(cfg, e) for e in c.list]
    for rd in c.run_dirs:
        for ck in run_checkpoints(
            rd, c.milestones, model=c.model, run=c.run, base_run=c.base_run, train_seed=c.train_seed
        ):
            same = [x for x in out if x.key == ck.key]
            if not (ck.step == 0 and c.base_run and same and same[0].path == ck.path):
                out.append(ck)  # a shared base is listed once
    if not out:
        raise ConfigError(
            f"{cfg.source}: [checkpoints]: give run_dirs or [[checkpoints.list]] entries"
        )
    keys = [x.key for x in out]
    dup = sorted({k for k in keys if keys.count(k) > 1}, key=str)
    if dup:
        raise ConfigError(
            f"{cfg.source}: [checkpoints]: duplicate (run, train seed, model, step) {dup}"
        )
    for x in out:
        if not (Path(x.path) / "config.json").exists():
            raise ConfigError(
                f"{cfg.source}: checkpoint {x.path}: not a model dir (no config.json)"
            )
    return sorted(out, key=lambda x: (x.run, -1 if x.train_seed is None else x.train_seed,
                                      x.model, x.step))  # fmt: skip


def checkpoint_train_seed(path: Path, given: int | None) -> int | None:
    """The training seed of the checkpoint at ``path``: what the ``run.json`` of its run
    records (``path`` a run dir or its ``checkpoint-N/`` / ``final/``), else ``given``;
    both and different, or ``given`` < 0: :class:`ConfigError`."""
    _check_train_seed("--train-seed", given)
    recorded = recorded_train_seed(path, levels=1)
    if recorded is not None and given is not None and recorded != given:
        raise ConfigError(
            f"{path}: its run.json records training seed {recorded}, but --train-seed is {given}"
        )
    return recorded if recorded is not None else given


def _listed(cfg: ProbeConfig, entry: dict[str, Any]) -> Checkpoint:
    """A ``[[checkpoints.list]]`` entry; its training seed is its own ``train_seed``, else
    ``[checkpoints] train_seed`` (``--train-seed``), else the ``run.json`` of the run dir
    holding it (``DIR/checkpoint-N``, ``DIR/final``); two of them that differ are an error."""
    path = Path(str(entry["path"]))
    seed = entry.get("train_seed")
    given = cfg.checkpoints.train_seed
    if seed is not None and given is not None and seed != given:
        raise ConfigError(
            f"{cfg.source}: [[checkpoints.list]] {path}: train_seed {seed}, but --train-seed / "
            f"[checkpoints] train_seed is {given}"
        )
    seed = seed if seed is not None else given
    meta = read_run_meta(path.parent)
    if meta is not None:
        seed = _resolved_train_seed(path.parent / RUN_FILE, meta, seed)
    return Checkpoint(
        str(path), str(entry["run"]), str(entry["model"]), int(entry["step"]), train_seed=seed
    )
