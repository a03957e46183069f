"""``probe sample``: K samples per fixed-probe question at every checkpoint → records.

Per checkpoint (label ``run--model--stepN``) and question (one resumable unit), K
completions are drawn at ``[probe] temperature``/``top_p`` with ``max_new_tokens``; one
generate call serves a group of ``batch_size // K`` consecutive unfinished questions, seeded
with ``derive_seed(checkpoint_seed, *question_ids)`` (see :mod:`pipeline.probe.common`).
Outputs::

    DIR/records/<label>.jsonl   interchange records (DESIGN.md): trajectory_id (opaque),
                                question_id, text, reward, run, model, step,
                                seed (= checkpoint decoding seed), answer, split (toy),
                                validity (toy oracle), mode (toy oracle, only with
                                strategy_as_mode), sampling_temperature, sampling_top_p
                                (the [probe] settings), truncated
    DIR/samples/<label>.jsonl   per trajectory: trajectory_id, question_id, index,
                                prompt_ids (the conditioning ids: the checkpoint's chat
                                template applied with add_generation_prompt=True unless
                                [chat] template = "none" or it has none; pipeline.chat),
                                completion_ids (stop id included when it ended),
                                truncated (no stop id within max_new_tokens), strategy (toy
                                oracle or null) — the input of `entropy` and `covariance`
    DIR/records.jsonl           every checkpoint's records, concatenated (for `rcea ingest`)

A completion whose text is empty (EOS first) cannot be a record (the schema needs text):
it is kept in ``samples`` with ``empty: true`` and counted, not written as a record.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pipeline.probe.common import (
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
from pipeline.probe.config import Checkpoint, ProbeConfig, resolve_checkpoints
from pipeline.probe.manifest import (
    append_jsonl,
    keep_done_rows,
    read_jsonl,
    write_jsonl,
)

SAMPLE_SETTINGS = ("k", "temperature", "top_p", "max_new_tokens", "chat_template", "system_prompt")
"""Settings every sample of one output directory shares (recorded in the manifest)."""
LEGACY_SETTINGS = {"chat_template": "auto", "system_prompt": None}
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
        # (DESIGN.md item 2), and the truncation flag (counted, never silently kept)
        "sampling_temperature": cfg.probe.temperature,
        "sampling_top_p": cfg.probe.top_p,
        "truncated": bool(truncated),
    }
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
        n_empty = n_trunc = 0
        chat: bool | None = None
        if todo:
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
                recs, smps = [], []
                for q, completions in zip(group, outs, strict=True):
                    for i, g in enumerate(completions):
                        tid = trajectory_id(p.seed, ck, q.question_id, i)
                        empty = not g.text.strip()
                        strategy = None
                        if not empty:
                            rec, strategy = _record(
                                cfg, ck, seed, q, tid, g.text, truncated=g.truncated
                            )
                            recs.append(rec)
                        n_empty += empty
                        n_trunc += g.truncated
                        smps.append(
                            {
                                "trajectory_id": tid,
                                "question_id": q.question_id,
                                "index": i,
                                "prompt_ids": prompt_ids[q.question_id],
                                "completion_ids": g.completion_ids,
                                "truncated": g.truncated,
                                "strategy": strategy,
                                "empty": empty,
                            }
                        )
                append_jsonl(smp_path, smps)
                append_jsonl(rec_path, recs)
                manifest.mark("sample", ck.label, [q.question_id for q in group])
                result.units_run += len(group)
                bar.update(len(group))
            gen.close()
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
