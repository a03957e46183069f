"""``probe sample``: K samples per fixed-probe question at every checkpoint → records.

Per checkpoint (label ``run--model--stepN``) and question (one resumable unit), K
completions are drawn at ``[probe] temperature``/``top_p`` with ``max_new_tokens``; one
generate call serves a group of ``batch_size // K`` consecutive unfinished questions, seeded
with ``derive_seed(checkpoint_seed, *question_ids)`` (see :mod:`rcea.pipeline.probe.common`).
Outputs::

    DIR/records/<label>.jsonl   interchange records (docs/record-schema.md): trajectory_id (opaque),
                                question_id, text, reward, run, model, step,
                                seed (= checkpoint decoding seed), answer, split (toy),
                                validity (toy oracle), mode (toy oracle, only with
                                strategy_as_mode), sampling_temperature, sampling_top_p
                                (the [probe] settings), truncated
    DIR/samples/<label>.jsonl   per trajectory: trajectory_id, question_id, index,
                                prompt_ids (the conditioning ids: the checkpoint's chat
                                template applied with add_generation_prompt=True unless
                                [chat] template = "none" or it has none; rcea.pipeline.chat),
                                completion_ids (stop id included when it ended),
                                truncated (no stop id within max_new_tokens), strategy (toy
                                oracle or null) — the input of `entropy` and `covariance`
    DIR/records.jsonl           every checkpoint's records, concatenated (for `rcea ingest`)

With ``[probe] backend = "server"`` (:mod:`rcea.pipeline.probe.server`) one completions request
per unit draws the K samples; ``samples`` rows add ``server_logprobs`` (the server's log-prob
of every completion id, EOS included) and records add ``seq_logprob``/``logprob_temperature``
from them where the record schema can say what they are (:func:`server_logprob_fields`);
``probe entropy`` later replaces both with the teacher-forced values.

A completion whose text is empty (EOS first) cannot be a record (the schema needs text):
it is kept in ``samples`` with ``empty: true`` and counted, not written as a record.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from rcea.pipeline.probe.common import (
    Generator,
    StageResult,
    Timer,
    checkpoint_seed,
    derive_seed,
    groups,
    open_manifest,
    probe_questions,
    progress_bar,
    prompt_format,
    set_threads,
    trajectory_id,
)
from rcea.pipeline.probe.config import Checkpoint, ProbeConfig, resolve_checkpoints
from rcea.pipeline.probe.manifest import (
    append_jsonl,
    keep_done_rows,
    read_jsonl,
    write_jsonl,
)
from rcea.pipeline.probe.server import ServerSampler

SAMPLE_SETTINGS = (
    "k",
    "temperature",
    "top_p",
    "max_new_tokens",
    "chat_template",
    "system_prompt",
    "server_logprobs_mode",
)
"""Settings every sample of one output directory shares (recorded in the manifest);
``server_logprobs_mode`` is None for the local backends (no ℓ at sampling time) and the
server's ``logprobs_mode`` for ``backend = "server"`` (records carry the server's ℓ)."""
LEGACY_SETTINGS = {"chat_template": "auto", "system_prompt": None, "server_logprobs_mode": None}
"""What directories sampled before the ``[chat]`` settings existed used."""


def records_path(out: Path, ck: Checkpoint) -> Path:
    return out / "records" / f"{ck.label}.jsonl"


def samples_path(out: Path, ck: Checkpoint) -> Path:
    return out / "samples" / f"{ck.label}.jsonl"


def write_combined_records(out: Path, checkpoints: list[Checkpoint]) -> Path:
    """``DIR/records.jsonl`` = the per-checkpoint record files in checkpoint order."""
    rows: list[dict[str, Any]] = []
    for ck in checkpoints:
        rows += read_jsonl(records_path(out, ck))
    path = out / "records.jsonl"
    write_jsonl(path, rows)
    return path


def _record(
    cfg: ProbeConfig,
    ck: Checkpoint,
    seed: int,
    q: Any,
    tid: str,
    text: str,
    truncated: bool = False,
) -> tuple[dict[str, Any], str | None]:
    scores = q.score(text)
    rec: dict[str, Any] = {
        "trajectory_id": tid,
        "question_id": q.question_id,
        "text": text,
        "reward": int(scores.reward),
        "run": ck.run,
        "model": ck.model,
        "step": ck.step,
        "seed": seed,
        # the sampling settings, so ℓ-based numbers can say entropy or cross-entropy
        # (docs/estimators.md item 2), and the truncation flag (counted, never silently kept)
        "sampling_temperature": cfg.probe.temperature,
        "sampling_top_p": cfg.probe.top_p,
        "truncated": bool(truncated),
    }
    if ck.train_seed is not None:  # the replicate: ingested, the report keys it apart
        rec["train_seed"] = ck.train_seed
    problem = (q.problem or q.prompt).strip()  # the statement, without a prompt wrapper
    if problem:
        rec["question"] = problem
    if scores.answer is not None:
        rec["answer"] = scores.answer
    if scores.validity is not None:
        rec["validity"] = int(scores.validity)
    if cfg.questions.source == "toy" and cfg.questions.split in ("probe", "eval"):
        rec["split"] = cfg.questions.split
    if cfg.probe.strategy_as_mode and scores.strategy is not None:
        rec["mode"] = scores.strategy
    return rec, scores.strategy


def _unit_rows(
    cfg: ProbeConfig,
    ck: Checkpoint,
    seed: int,
    group: list[Any],
    prompt_ids: dict[str, list[int]],
    outs: list[list[Any]],
    counts: dict[str, int],
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Records and samples rows of a group of finished units (``outs``: per question, its
    K completions; a completion with ``logprobs`` came from the server backend)."""
    p = cfg.probe
    recs, smps = [], []
    for q, completions in zip(group, outs, strict=True):
        for i, g in enumerate(completions):
            tid = trajectory_id(p.seed, ck, q.question_id, i)
            empty = not g.text.strip()
            strategy = None
            server_lp = getattr(g, "logprobs", None)
            if not empty:
                rec, strategy = _record(cfg, ck, seed, q, tid, g.text, truncated=g.truncated)
                if server_lp is not None:
                    rec.update(server_logprob_fields(cfg, server_lp))
                recs.append(rec)
            counts["empty"] += empty
            counts["truncated"] += g.truncated
            row = {
                "trajectory_id": tid,
                "question_id": q.question_id,
                "index": i,
                "prompt_ids": prompt_ids[q.question_id],
                "completion_ids": g.completion_ids,
                "truncated": g.truncated,
                "strategy": strategy,
                "empty": empty,
            }
            if server_lp is not None:
                row["server_logprobs"] = list(server_lp)
            smps.append(row)
    return recs, smps


def server_logprob_fields(cfg: ProbeConfig, logprobs: list[float]) -> dict[str, Any]:
    """``seq_logprob`` (ℓ = the float64 sum of the server's sampled-token log-probs, EOS
    included) and ``logprob_temperature`` for a record, where the record schema can say
    what ℓ is (docs/probing.md, "Sampling through a server"):

    * ``raw_logprobs``: log-softmax of the unmodified logits, i.e. the policy at
      temperature 1 over the full vocabulary → ``logprob_temperature`` = 1;
    * ``processed_logprobs`` with top_p = 1: log-softmax of logits / τ → the probe's own
      ℓ at τ (what ``probe entropy`` computes teacher-forced) → ``logprob_temperature`` = τ;
    * ``processed_logprobs`` with top_p < 1: the log-prob under the nucleus-truncated,
      renormalised distribution, which no ``logprob_temperature`` describes → nothing
      (the values stay in ``samples/``; ``probe entropy`` gives the record its ℓ).
    """
    p, mode = cfg.probe, cfg.server.logprobs_mode
    if mode == "raw_logprobs":
        temperature = 1.0
    elif mode == "processed_logprobs" and p.top_p == 1.0:
        temperature = p.temperature
    else:
        return {}
    return {"seq_logprob": math.fsum(logprobs), "logprob_temperature": temperature}


def _sample_server(
    cfg: ProbeConfig,
    ck: Checkpoint,
    out: Path,
    seed: int,
    todo: list[Any],
    write: Any,
    result: StageResult,
) -> bool:
    """The server backend for one checkpoint (:mod:`rcea.pipeline.probe.server`); returns
    whether prompts went through the chat template."""

    sampler = ServerSampler(cfg, ck, out, prompt_format=prompt_format(cfg))
    units = [(q, sampler.prompt_ids(q.prompt), derive_seed(seed, q.question_id)) for q in todo]
    ids = {q.question_id: pids for q, pids, _ in units}
    try:
        sampler.run(
            units, lambda q, comps: write([q], {q.question_id: ids[q.question_id]}, [comps])
        )
    finally:
        sampler.close()
        info = result.info.setdefault("server", {"calls": 0, "cache_hits": 0})
        info["calls"] += sampler.calls
        info["cache_hits"] += sampler.cache_hits
    return sampler.uses_chat


def run_sample(cfg: ProbeConfig, out_dir: str | Path, *, progress: bool = True) -> StageResult:
    """Sample every checkpoint × question unit not yet done; returns a summary."""
    out = Path(out_dir)
    timer = Timer()
    questions = probe_questions(cfg)
    checkpoints = resolve_checkpoints(cfg)
    manifest = open_manifest(cfg, out)
    set_threads(cfg)
    p = cfg.probe
    result = StageResult("sample", str(out), p.seed)
    result.info.update(
        k=p.k,
        temperature=p.temperature,
        top_p=p.top_p,
        max_new_tokens=p.max_new_tokens,
        chat_template=cfg.chat.template,
        system_prompt=cfg.chat.system,
        server_logprobs_mode=cfg.server.logprobs_mode if p.backend == "server" else None,
        n_questions=len(questions),
    )
    manifest.require_settings(
        "sample", {key: result.info[key] for key in SAMPLE_SETTINGS}, LEGACY_SETTINGS
    )
    sampled = list(manifest.data.get("questions", []))
    known = set(sampled)
    sampled += [q.question_id for q in questions if q.question_id not in known]
    manifest.set_info("questions", sampled)
    bar = progress_bar(len(checkpoints) * len(questions), "sample", progress)
    for ck in checkpoints:
        seed = checkpoint_seed(p.seed, ck)
        done = manifest.done("sample", ck.label)
        rec_path, smp_path = records_path(out, ck), samples_path(out, ck)
        keep_done_rows(rec_path, lambda r, d=done: r["question_id"] in d)
        keep_done_rows(smp_path, lambda r, d=done: r["question_id"] in d)
        todo = [q for q in questions if q.question_id not in done]
        result.units_skipped += len(questions) - len(todo)
        bar.update(len(questions) - len(todo))
        counts = {"empty": 0, "truncated": 0}
        chat: bool | None = None

        def write(
            group: list[Any],
            prompt_ids: dict[str, list[int]],
            outs: list[list[Any]],
            ck: Checkpoint = ck,
            seed: int = seed,
            rec_path: Path = rec_path,
            smp_path: Path = smp_path,
            counts: dict[str, int] = counts,
        ) -> None:
            recs, smps = _unit_rows(cfg, ck, seed, group, prompt_ids, outs, counts)
            append_jsonl(smp_path, smps)
            append_jsonl(rec_path, recs)
            manifest.mark("sample", ck.label, [q.question_id for q in group])
            result.units_run += len(group)
            bar.update(len(group))

        if todo and p.backend == "server":
            chat = _sample_server(cfg, ck, out, seed, todo, write, result)
        elif todo:
            gen = Generator(
                ck.path,
                backend=p.backend,
                max_new_tokens=p.max_new_tokens,
                prompt_format=prompt_format(cfg),
            )
            chat = gen.uses_chat
            for group in groups(todo, p.batch_size // p.k):
                prompt_ids = {q.question_id: gen.prompt_ids(q.prompt) for q in group}
                outs = gen.generate(
                    [prompt_ids[q.question_id] for q in group],
                    p.k,
                    seed=derive_seed(seed, *(q.question_id for q in group)),
                    temperature=p.temperature,
                    top_p=p.top_p,
                )
                write(group, prompt_ids, outs)
            gen.close()
        n_empty, n_trunc = counts["empty"], counts["truncated"]
        result.checkpoints.append(
            {
                **ck.to_dict(),
                "label": ck.label,
                "seed": seed,
                "units_run": len(todo),
                "empty": n_empty,
                "truncated": n_trunc,
                "chat_template": chat,  # None: nothing sampled in this run
            }
        )
        result.files.append(str(rec_path))
    bar.close()
    result.files.append(str(write_combined_records(out, checkpoints)))
    result.seconds = timer()
    return result
