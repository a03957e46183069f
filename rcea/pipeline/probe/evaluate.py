"""``probe bench``: greedy accuracy, dense accuracy traces and pass@k.

* **Greedy** (argmax decoding, ``[bench] max_new_tokens``): every ``[[bench.sets]]`` at
  every sampled checkpoint (the milestones); accuracy = mean 0/1 correctness over the
  set's questions.
* **Trace** (``[bench] trace``): the ``trace_set`` (default: the first set), greedy, at
  every saved checkpoint of every run dir (base, each ``checkpoint-N``, ``final``):
  accuracy, boxed rate (an extractable ``\\boxed{}``), mean completion length (tokens) and
  truncated share per step — the failure detector's input (docs/estimators.md items 9 and 13).
* **pass@k** (``[bench.passk]``): at each run/training seed/model's base (step 0) and endpoint, n
  samples per question of the ``passk`` set at ``temperature``/``top_p``, ``batch_size //
  n`` questions per generate call seeded with ``derive_seed(seed, checkpoint label,
  *question_ids)``; c = correct count; macro pass@k
  with ``rcea.audits.passk`` (stable product form).

Outputs::

    DIR/bench/greedy.jsonl          label, run, train_seed, model, step, progress, set,
                                    question_id, correct, boxed, length, truncated
    DIR/bench/passk.jsonl           label, run, train_seed, model, step, set,
                                    question_id, n, c
    DIR/bench/passk/<label>.csv     question_id, n, c       → `rcea stats passk`
    DIR/RESULTS.csv                 the same for the first run's endpoint
    DIR/bench/summary.json          greedy accuracy per checkpoint/set, traces, pass@k

Resume unit: (checkpoint, set, question) for greedy rows, (checkpoint, question) for pass@k.
"""

from __future__ import annotations

import csv
import json
import shutil
from collections import defaultdict
from pathlib import Path
from typing import Any

from rcea.audits.passk import macro_pass_at_k
from rcea.pipeline.probe.common import (
    Generator,
    MeasurementRow,
    StageResult,
    Timer,
    derive_seed,
    groups,
    open_manifest,
    progress_bar,
    prompt_format,
    set_threads,
)
from rcea.pipeline.probe.config import (
    BenchSet,
    Checkpoint,
    ProbeConfig,
    resolve_checkpoints,
    run_checkpoints,
)
from rcea.pipeline.probe.manifest import append_jsonl, keep_done_rows, read_jsonl
from rcea.pipeline.probe.questions import ProbeQuestion, load_questions


def _set_questions(cfg: ProbeConfig, s: BenchSet) -> list[ProbeQuestion]:
    kwargs: dict[str, Any] = {}
    if cfg.questions.prompt_template is not None:
        kwargs["prompt_template"] = cfg.questions.prompt_template
    return load_questions(
        s.source, split=s.split, n=s.n, seed=cfg.probe.seed, verifier=cfg.verifier.kind, **kwargs
    )


def _sets(cfg: ProbeConfig) -> list[BenchSet]:
    return cfg.bench.sets or [BenchSet(name="toy-eval", source="toy", split="eval")]


def _trace_checkpoints(cfg: ProbeConfig) -> list[list[Checkpoint]]:
    """Every saved checkpoint of each run dir (base first), one list per run dir."""
    c = cfg.checkpoints
    return [
        run_checkpoints(
            rd, "all", model=c.model, run=c.run, base_run=c.base_run, train_seed=c.train_seed
        )
        for rd in c.run_dirs
    ]


def _greedy_units(
    cfg: ProbeConfig, checkpoints: list[Checkpoint], sets: dict[str, list[ProbeQuestion]]
) -> dict[str, tuple[Checkpoint, list[str]]]:
    """Checkpoint label → (checkpoint, set names to evaluate), milestones + trace."""
    units: dict[str, tuple[Checkpoint, list[str]]] = {}
    for ck in checkpoints:
        units[ck.label] = (ck, list(sets))
    if cfg.bench.trace:
        trace_set = cfg.bench.trace_set or next(iter(sets))
        for ck in (ck for cks in _trace_checkpoints(cfg) for ck in cks):
            names = units.get(ck.label, (ck, []))[1]
            units[ck.label] = (ck, names if trace_set in names else [*names, trace_set])
    return units


def _greedy(
    cfg: ProbeConfig,
    out: Path,
    manifest: Any,
    units: dict[str, tuple[Checkpoint, list[str]]],
    sets: dict[str, list[ProbeQuestion]],
    result: StageResult,
    progress: bool,
) -> Path:
    path = out / "bench" / "greedy.jsonl"
    keep_done_rows(
        path, lambda r: r["question_id"] in manifest.done("greedy", f"{r['label']}/{r['set']}")
    )
    total = sum(len(sets[n]) for _, names in units.values() for n in names)
    bar = progress_bar(total, "bench greedy", progress)
    b = cfg.bench
    for label, (ck, names) in units.items():
        gen = None
        for name in names:
            group = f"{label}/{name}"
            done = manifest.done("greedy", group)
            todo = [q for q in sets[name] if q.question_id not in done]
            result.units_skipped += len(sets[name]) - len(todo)
            bar.update(len(sets[name]) - len(todo))
            for start in range(0, len(todo), b.batch_size):
                batch = todo[start : start + b.batch_size]
                if gen is None:
                    gen = Generator(
                        ck.path,
                        backend=cfg.probe.backend,
                        max_new_tokens=b.max_new_tokens,
                        prompt_format=prompt_format(cfg),
                    )
                outs = gen.generate(
                    [gen.prompt_ids(q.prompt) for q in batch], 1, seed=0, greedy=True
                )
                rows = []
                for q, (g,) in zip(batch, outs, strict=True):
                    sc = q.score(g.text)
                    rows.append(
                        {
                            "label": label,
                            "run": ck.run,
                            "train_seed": ck.train_seed,
                            "model": ck.model,
                            "step": ck.step,
                            "progress": ck.progress,
                            "set": name,
                            "question_id": q.question_id,
                            "correct": int(sc.reward),
                            "boxed": int(sc.answer is not None),
                            "length": len(g.completion_ids),
                            "truncated": int(g.truncated),
                        }
                    )
                append_jsonl(path, rows)
                manifest.mark("greedy", group, [q.question_id for q in batch])
                result.units_run += len(batch)
                bar.update(len(batch))
        if gen is not None:
            gen.close()
    bar.close()
    return path


def passk_checkpoints(checkpoints: list[Checkpoint]) -> list[Checkpoint]:
    """Every base (step 0) and each (run, training seed, model)'s endpoint (its largest
    step)."""
    ends: dict[tuple[str, int | None, str], Checkpoint] = {}
    for ck in checkpoints:
        cur = ends.get(ck.series)
        if cur is None or ck.step > cur.step:
            ends[ck.series] = ck
    chosen = [ck for ck in checkpoints if ck.step == 0] + list(ends.values())
    return list({ck.label: ck for ck in chosen}.values())


def _passk(
    cfg: ProbeConfig,
    out: Path,
    manifest: Any,
    checkpoints: list[Checkpoint],
    questions: list[ProbeQuestion],
    set_name: str,
    result: StageResult,
    progress: bool,
) -> Path:
    pk = cfg.bench.passk
    path = out / "bench" / "passk.jsonl"
    keep_done_rows(
        path, lambda r: r["question_id"] in manifest.done("passk", f"{r['label']}/{r['set']}")
    )
    bar = progress_bar(len(checkpoints) * len(questions), "bench pass@k", progress)
    for ck in checkpoints:
        group = f"{ck.label}/{set_name}"
        done = manifest.done("passk", group)
        todo = [q for q in questions if q.question_id not in done]
        result.units_skipped += len(questions) - len(todo)
        bar.update(len(questions) - len(todo))
        gen = None
        for batch in groups(todo, cfg.bench.batch_size // pk.n):
            if gen is None:
                gen = Generator(
                    ck.path,
                    backend=cfg.probe.backend,
                    max_new_tokens=cfg.bench.max_new_tokens,
                    prompt_format=prompt_format(cfg),
                )
            outs = gen.generate(
                [gen.prompt_ids(q.prompt) for q in batch],
                pk.n,
                seed=derive_seed(pk.seed, ck.label, *(q.question_id for q in batch)),
                temperature=pk.temperature,
                top_p=pk.top_p,
            )
            rows = [
                {
                    "label": ck.label,
                    "run": ck.run,
                    "train_seed": ck.train_seed,
                    "model": ck.model,
                    "step": ck.step,
                    "set": set_name,
                    "question_id": q.question_id,
                    "n": len(samples),
                    "c": sum(int(q.score(g.text).reward) for g in samples),
                }
                for q, samples in zip(batch, outs, strict=True)
            ]
            append_jsonl(path, rows)
            manifest.mark("passk", group, [q.question_id for q in batch])
            result.units_run += len(batch)
            bar.update(len(batch))
        if gen is not None:
            gen.close()
    bar.close()
    return path


def _write_csv(path: Path, rows: list[dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(["question_id", "n", "c"])
        for r in rows:
            w.writerow([r["question_id"], r["n"], r["c"]])


def run_bench(cfg: ProbeConfig, out_dir: str | Path, *, progress: bool = True) -> StageResult:
    """Greedy accuracy, accuracy traces and pass@k (module docstring); resumable."""

    out = Path(out_dir)
    timer = Timer()
    checkpoints = resolve_checkpoints(cfg)
    sets = {s.name: _set_questions(cfg, s) for s in _sets(cfg)}
    manifest = open_manifest(cfg, out)
    set_threads(cfg)
    pk = cfg.bench.passk
    manifest.require_settings(
        "bench",
        {
            "max_new_tokens": cfg.bench.max_new_tokens,
            "passk_n": pk.n,
            "passk_temperature": pk.temperature,
            "passk_top_p": pk.top_p,
            "passk_seed": pk.seed,
            "chat_template": cfg.chat.template,
            "system_prompt": cfg.chat.system,
        },
        {"chat_template": "auto", "system_prompt": None},
    )
    result = StageResult("bench", str(out), cfg.probe.seed)
    units = _greedy_units(cfg, checkpoints, sets)
    greedy_path = _greedy(cfg, out, manifest, units, sets, result, progress)
    pk_set = pk.set or next(iter(sets))
    pk_cks = passk_checkpoints(checkpoints)
    passk_path = _passk(cfg, out, manifest, pk_cks, sets[pk_set], pk_set, result, progress)

    milestone_labels = {ck.label for ck in checkpoints}
    greedy: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for r in read_jsonl(greedy_path):
        greedy[(r["label"], r["set"])].append(r)
    summary: dict[str, Any] = {"greedy": [], "traces": [], "passk": []}
    for (label, name), rows in sorted(greedy.items()):
        if label not in milestone_labels or name not in sets:
            continue
        r0 = rows[0]
        acc = sum(r["correct"] for r in rows) / len(rows)
        summary["greedy"].append(
            {
                "label": label,
                "run": r0["run"],
                "train_seed": r0.get("train_seed"),
                "model": r0["model"],
                "step": r0["step"],
                "set": name,
                "accuracy": acc,
                "n": len(rows),
            }
        )
        result.measurements.append(
            MeasurementRow(
                "greedy_accuracy",
                {"accuracy": acc, "n": len(rows)},
                run=r0["run"],
                model=r0["model"],
                step=r0["step"],
                key=name,
                train_seed=r0.get("train_seed"),
            )
        )
    if cfg.bench.trace:
        trace_set = cfg.bench.trace_set or next(iter(sets))
        for cks in _trace_checkpoints(cfg):
            points = []
            for ck in cks:
                rows = greedy.get((ck.label, trace_set), [])
                n = len(rows)
                if n:
                    points.append(
                        {
                            "step": ck.step,
                            "progress": ck.progress,
                            "accuracy": sum(r["correct"] for r in rows) / n,
                            "boxed_rate": sum(r["boxed"] for r in rows) / n,
                            "mean_length": sum(r["length"] for r in rows) / n,
                            "truncated_share": sum(r["truncated"] for r in rows) / n,
                        }
                    )
            run, model, seed = cks[-1].run, cks[-1].model, cks[-1].train_seed
            summary["traces"].append(
                {"run": run, "train_seed": seed, "model": model, "set": trace_set,
                 "points": points}
            )  # fmt: skip
            result.measurements.append(
                MeasurementRow(
                    "accuracy_trace",
                    {"points": points},
                    run=run,
                    model=model,
                    key=trace_set,
                    train_seed=seed,
                )
            )
    pk_rows: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in read_jsonl(passk_path):
        if r["set"] == pk_set:
            pk_rows[r["label"]].append(r)
    for ck in pk_cks:
        rows = pk_rows.get(ck.label, [])
        if not rows:
            continue
        csv_path = out / "bench" / "passk" / f"{ck.label}.csv"
        _write_csv(csv_path, rows)
        result.files.append(str(csv_path))
        ks = [k for k in pk.k if all(r["n"] >= k for r in rows)]
        macro = macro_pass_at_k([r["n"] for r in rows], [r["c"] for r in rows], ks)
        values = {str(k): v for k, v in macro.values.items()}
        questions = [{"question_id": r["question_id"], "n": r["n"], "c": r["c"]} for r in rows]
        summary["passk"].append(
            {
                "label": ck.label,
                "run": ck.run,
                "train_seed": ck.train_seed,
                "model": ck.model,
                "step": ck.step,
                "set": pk_set,
                "n": pk.n,
                "pass_at_k": values,
            }
        )
        result.measurements.append(
            MeasurementRow(
                "passk",
                {"n": pk.n, "k": ks, "pass_at_k": values, "questions": questions},
                run=ck.run,
                model=ck.model,
                step=ck.step,
                key=pk_set,
                train_seed=ck.train_seed,
            )
        )
    endpoints = [ck for ck in pk_cks if ck.step > 0] or pk_cks
    first = out / "bench" / "passk" / f"{endpoints[0].label}.csv" if endpoints else None
    if first is not None and first.exists():
        shutil.copyfile(first, out / "RESULTS.csv")
        result.files.append(str(out / "RESULTS.csv"))
    summary_path = out / "bench" / "summary.json"
    summary_path.write_text(json.dumps(summary, indent=1), encoding="utf-8")
    result.files += [str(greedy_path), str(passk_path), str(summary_path)]
    result.info = summary
    result.seconds = timer()
    return result
