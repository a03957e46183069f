"""Shared pieces of the probe stages: seeds, policy loading, generation backends, results.

Seeds: ``derive_seed(*parts)`` = the first 31 bits of SHA-256 of ``"|".join(parts)``, so
every seed is a pure function of the probe-set seed and the unit's names (checkpoint
decoding seed = ``derive_seed(probe_seed, run, model, step)``; the generator of one
checkpoint × question unit is seeded with ``derive_seed(checkpoint_seed, question_id)``,
which makes a unit's samples independent of batching, order and resumption).
"""

from __future__ import annotations

import gc
import hashlib
import importlib.util
import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from rcea.pipeline.chat import PromptFormat, completion_end, encode_prompt, stop_token_ids
from rcea.pipeline.policy.sampling import sample_completions
from rcea.pipeline.probe.config import Checkpoint, ConfigError, ProbeConfig
from rcea.pipeline.probe.manifest import Manifest
from rcea.pipeline.probe.questions import ProbeQuestion, load_questions


def derive_seed(*parts: Any) -> int:
    """Deterministic 31-bit seed from the parts' string forms."""
    digest = hashlib.sha256("|".join(str(p) for p in parts).encode()).hexdigest()
    return int(digest[:8], 16) & 0x7FFFFFFF


def groups(items: list[Any], size: int) -> list[list[Any]]:
    """Consecutive groups of at most ``size`` items (one generate/forward call each)."""
    size = max(1, size)
    return [items[i : i + size] for i in range(0, len(items), size)]


def checkpoint_seed(probe_seed: int, ck: Checkpoint) -> int:
    """The decoding seed recorded in the records' ``seed`` field."""
    return derive_seed(probe_seed, ck.run, ck.model, ck.step)


def trajectory_id(probe_seed: int, ck: Checkpoint, question_id: str, index: int) -> str:
    """Opaque, stable id (no provenance readable from it): ``p`` + 16 hex digits. A training
    seed enters the hash (two seeds' samples are two trajectories); without one the id is
    what it was before training seeds existed."""
    replicate = "" if ck.train_seed is None else f"|train_seed={ck.train_seed}"
    return (
        "p"
        + hashlib.sha256(
            f"{probe_seed}|{ck.run}|{ck.model}|{ck.step}|{question_id}|{index}{replicate}".encode()
        ).hexdigest()[:16]
    )


def question_source(cfg: ProbeConfig) -> str:
    q = cfg.questions
    return f"toy:{q.split}" if q.source == "toy" else str(Path(q.source))


def probe_questions(cfg: ProbeConfig) -> list[ProbeQuestion]:
    """The fixed probe questions, drawn with the probe-set seed (order = draw order)."""
    q = cfg.questions
    kwargs: dict[str, Any] = {}
    if q.prompt_template is not None:
        kwargs["prompt_template"] = q.prompt_template
    return load_questions(
        q.source, split=q.split, n=q.n, seed=cfg.probe.seed, verifier=cfg.verifier.kind, **kwargs
    )


def sampled_question_ids(cfg: ProbeConfig, manifest: Manifest) -> list[str]:
    """Every question id ``sample`` has used in this directory, in first-use order (so later
    stages need not repeat ``--questions``), else those of the config."""
    return manifest.data.get("questions") or [q.question_id for q in probe_questions(cfg)]


def sampling_temperature(cfg: ProbeConfig, manifest: Manifest) -> float:
    """The temperature the samples were drawn at (recorded by ``sample``)."""
    recorded = manifest.data.get("sample_settings", {})
    return float(recorded.get("temperature", cfg.probe.temperature))


def prompt_format(cfg: ProbeConfig) -> PromptFormat:
    """The ``[chat]`` settings as a :class:`rcea.pipeline.chat.PromptFormat`."""
    return PromptFormat(cfg.chat.template, cfg.chat.system)


def open_manifest(cfg: ProbeConfig, out_dir: str | Path) -> Manifest:
    return Manifest(out_dir, probe_seed=cfg.probe.seed, question_source=question_source(cfg))


def set_threads(cfg: ProbeConfig) -> None:
    if cfg.probe.torch_threads:
        import torch  # the `train` extra: only a run that sets torch_threads needs it

        torch.set_num_threads(cfg.probe.torch_threads)


def _tokenizer_dir(path: Path) -> Path:
    """The checkpoint itself, else the run's ``final/``, else the run's base model."""
    candidates = [path, path.parent / "final"]
    run_json = path.parent / "run.json"
    if run_json.exists():
        candidates.append(Path(json.loads(run_json.read_text())["config"]["model"]["path"]))
    for c in candidates:
        if (c / "tokenizer_config.json").exists():
            return c
    raise FileNotFoundError(f"{path}: no tokenizer (tokenizer_config.json) here or in its run")


def load_policy(path: str | Path) -> tuple[Any, Any]:
    """(model in eval mode on CUDA if available, tokenizer with left padding)."""
    # torch and transformers are the `train` extra: only loading a checkpoint pays for them
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # our own tqdm bars say what is happening
    path = Path(path)
    tok = AutoTokenizer.from_pretrained(_tokenizer_dir(path))
    tok.padding_side = "left"
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    model = AutoModelForCausalLM.from_pretrained(path)
    if torch.cuda.is_available():
        model = model.to("cuda")  # type: ignore[arg-type]  # transformers types .to() through a decorator mypy reads as taking the model
    model.eval()
    return model, tok


def use_vllm(backend: str) -> bool:
    """``vllm`` → True (error if missing); ``auto`` → True iff CUDA and vLLM are present."""
    if backend == "transformers":
        return False
    has = importlib.util.find_spec("vllm") is not None
    if backend == "vllm":
        if not has:
            raise RuntimeError("backend 'vllm' needs the gpu extra (pip install -e '.[gpu]')")
        return True
    import torch  # the `train` extra: only the `auto` backend asks for CUDA

    return has and torch.cuda.is_available()


@dataclass
class Generated:
    """One completion: ids (EOS included when it ended), decoded text, truncation flag."""

    completion_ids: list[int]
    text: str
    truncated: bool


class Generator:
    """Draws completions for one checkpoint with Transformers ``generate`` (CPU path, via
    :func:`rcea.pipeline.policy.sample_completions`) or vLLM (GPU path, imported lazily)."""

    def __init__(
        self,
        path: str,
        *,
        backend: str,
        max_new_tokens: int,
        prompt_format: PromptFormat | None = None,
    ) -> None:
        self.path = path
        self.max_new_tokens = max_new_tokens
        self.prompt_format = prompt_format or PromptFormat()
        self.vllm = use_vllm(backend)
        self._llm: Any = None
        if self.vllm:
            from transformers import AutoTokenizer  # the `train` extra, as load_policy

            self.tokenizer = AutoTokenizer.from_pretrained(_tokenizer_dir(Path(path)))
            self.model = None
        else:
            self.model, self.tokenizer = load_policy(path)

    def close(self) -> None:
        """Release the model (and vLLM's GPU memory) before the next checkpoint loads."""
        self.model = self._llm = None
        gc.collect()
        import torch  # the `train` extra: a loaded checkpoint imported it already

        if torch.cuda.is_available():
            torch.cuda.empty_cache()

    @property
    def uses_chat(self) -> bool:
        """Whether prompts go through this checkpoint's chat template."""
        return self.prompt_format.uses_chat(self.tokenizer)

    def prompt_ids(self, prompt: str) -> list[int]:
        """The ids the policy is conditioned on (:func:`rcea.pipeline.chat.encode_prompt`)."""
        try:
            return encode_prompt(self.tokenizer, prompt, self.prompt_format)
        except ValueError as exc:
            raise ConfigError(f"{self.path}: [chat] {exc}") from None

    def stop_ids(self) -> list[int]:
        from transformers import GenerationConfig  # the `train` extra, as load_policy

        gen_config = getattr(self.model, "generation_config", None)
        if gen_config is None:
            try:
                gen_config = GenerationConfig.from_pretrained(self.path)
            except OSError:  # no generation_config.json: the tokenizer's EOS only
                gen_config = None
        return stop_token_ids(self.tokenizer, gen_config)

    def generate(
        self,
        prompts: list[list[int]],
        n: int,
        *,
        seed: int,
        temperature: float = 1.0,
        top_p: float = 1.0,
        greedy: bool = False,
    ) -> list[list[Generated]]:
        """``n`` completions per prompt (token ids, :meth:`prompt_ids`); the whole call is
        seeded with ``seed``."""
        if self.vllm:
            return self._vllm(
                prompts, n, seed=seed, temperature=temperature, top_p=top_p, greedy=greedy
            )
        items = [_Prompt(str(i), "", list(p)) for i, p in enumerate(prompts)]
        samples = sample_completions(
            self.model,
            self.tokenizer,
            items,  # type: ignore[arg-type]  # sample_completions reads only the fields _Prompt carries
            n,
            max_new_tokens=self.max_new_tokens,
            temperature=temperature,
            top_p=top_p,
            greedy=greedy,
            seed=seed,
            batch_size=max(n, 1) * len(items),
            scorer=_no_score,
            token_scores=False,
        )
        out: list[list[Generated]] = [[] for _ in prompts]
        for s in samples:
            out[int(s.question_id)].append(Generated(s.completion_ids, s.text, s.truncated))
        return out

    def _vllm(
        self,
        prompts: list[list[int]],
        n: int,
        *,
        seed: int,
        temperature: float,
        top_p: float,
        greedy: bool,
    ) -> list[list[Generated]]:
        from vllm import LLM, SamplingParams  # the `gpu` extra: only the vLLM backend needs it

        if self._llm is None:
            self._llm = LLM(
                model=self.path,
                tokenizer=str(_tokenizer_dir(Path(self.path))),
                seed=seed,
                enable_prefix_caching=True,
            )
        stops = self.stop_ids()
        params = SamplingParams(
            n=n,
            temperature=0.0 if greedy else temperature,
            top_p=1.0 if greedy else top_p,
            top_k=-1,
            max_tokens=self.max_new_tokens,
            seed=seed,
            stop_token_ids=stops,
        )
        inputs = [{"prompt_token_ids": list(p)} for p in prompts]
        out = []
        for res in self._llm.generate(inputs, params, use_tqdm=False):
            row = []
            for o in res.outputs:
                ids = list(o.token_ids)
                end = completion_end(ids, stops)
                text = self.tokenizer.decode(ids[:end], skip_special_tokens=True)
                row.append(Generated(ids[:end], text, not (end and ids[end - 1] in stops)))  # type: ignore[arg-type]  # the OpenAI-compatible reply's text is a str for a single prompt
            out.append(row)
        return out


@dataclass(frozen=True)
class _Prompt:
    question_id: str
    prompt: str
    prompt_ids: list[int]


def _no_score(_q: Any, _text: str) -> tuple[int, None, None, None]:
    return 0, None, None, None


@dataclass
class MeasurementRow:
    """A measurement for the store (``rcea.study.store.measurements`` kinds and payloads)."""

    kind: str
    payload: dict[str, Any]
    run: str = ""
    model: str = ""
    step: int = -1
    key: str = ""
    train_seed: int | None = None  # the checkpoint's training seed (replicate), if any

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class StageResult:
    """Summary of one probe stage run."""

    stage: str
    out_dir: str
    probe_seed: int
    units_run: int = 0
    units_skipped: int = 0
    seconds: float = 0.0
    files: list[str] = field(default_factory=list)
    checkpoints: list[dict[str, Any]] = field(default_factory=list)
    measurements: list[MeasurementRow] = field(default_factory=list)
    info: dict[str, Any] = field(default_factory=dict)
    processes: int = 1  # ranks of an accelerate launch (rcea.pipeline.probe.shard)
    main_process: bool = True  # False on ranks > 0: their files are merged by rank 0

    def to_dict(self, *, with_measurements: bool = False) -> dict[str, Any]:
        d = asdict(self)
        if not with_measurements:
            d["measurements"] = len(self.measurements)
        return d


class Timer:
    def __init__(self) -> None:
        self.t0 = time.perf_counter()

    def __call__(self) -> float:
        return time.perf_counter() - self.t0


def progress_bar(total: int, desc: str, enabled: bool) -> Any:
    return tqdm(total=total, desc=desc, disable=not enabled, leave=False)
