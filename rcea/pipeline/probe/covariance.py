"""``probe covariance``: exact covariance fit inputs and the endpoint tail proxy.

**Transitions** (docs/estimators.md item 6). For each run/model, adjacent sampled checkpoints
θ → θ′ (by step). Fixed questions: the first ``[covariance] questions`` (40) probe
questions in probe-set order; per question the first ``trajectories`` (M = 4) non-empty
trajectories sampled under θ (``samples/<θ>.jsonl``); per trajectory up to ``positions``
(P = 64) eligible positions — completion tokens (EOS included), never prompt or padding —
drawn without replacement with ``numpy.random.default_rng(derive_seed(seed, transition,
trajectory_id))``. At each prefix s both checkpoints' full-vocabulary logits z, z′
(temperature 1: the policies themselves) go through ``rcea.audits.covariance.
entropy_change_pair`` (float64): predicted Δh = −Cov_π(log π, z′ − z), observed
Δh = H(softmax z′) − H(softmax z). On CUDA the same sums are folded on the device, tile by
tile over both heads, in float64 (:func:`position_entropy_change`). Outputs::

    DIR/covariance/positions.jsonl  one row per position: transition, run, train_seed,
                                    model, from_step, to_step, question_id,
                                    trajectory_id, position (0-based completion index),
                                    predicted, observed, entropy_old, entropy_new
    DIR/TRANSITIONS.csv             transition, predicted, observed (means over the
                                    transition's positions), run, train_seed (empty:
                                    none), model, from_step, to_step, n_positions
                                    → `rcea stats covfit`

Each transition's ``covariance_transition`` measurement also carries θ's run
(``from_run``) and its positions reduced per trajectory (``trajectories``:
:func:`transition_trajectory_sums`), so the report can fit item 6 per mode group of the
trajectory each prefix belongs to (docs/estimators.md item 16) on the gated partition.

**Tail** (docs/estimators.md item 7). At each run/model's endpoint (its largest sampled step), from
the entropy artifact: group = question, A_i from the rewards, per eligible token the
chosen-token log-prob; ``rcea.audits.tail.reward_stratified_tail`` gives the q99 report, and the
per-token proxy c_{i,t} = (log π − L̄)(A_i − Ā) is written with its stratum::

    DIR/covariance/tail-<label>.json     the tail report (rcea.audits.tail TailResult.to_dict)
    DIR/covariance/tail-<label>.parquet  trajectory_id, question_id, position, logprob,
                                         advantage, c, stratum (success | failure)

Resume unit: (transition, question); the tail is recomputed from the artifacts each run.

Sharded (``accelerate launch --num_processes N ... rcea probe covariance``,
:mod:`rcea.pipeline.probe.shard`): the open (transition, question) units are split into N
contiguous blocks; each rank appends its rows to ``covariance/positions.rank<R>.jsonl`` and
logs its units in ``shards/covariance-rank<R>.jsonl``; rank 0 folds the logs, appends the
rank files to ``positions.jsonl`` in rank order (the single-process order) and writes
TRANSITIONS.csv, the tails and the measurements once. Each unit is computed from the same
inputs as in one process, so every file equals the single-process one.
"""

from __future__ import annotations

import csv
import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from rcea.audits.covariance import EntropyChange, aggregate_transitions, entropy_change_pair
from rcea.audits.mode_tail import trajectory_sums
from rcea.audits.tail import reward_stratified_tail, trajectory_advantages
from rcea.pipeline.probe.common import (
    MeasurementRow,
    StageResult,
    Timer,
    derive_seed,
    load_policy,
    open_manifest,
    progress_bar,
    sampled_question_ids,
    set_threads,
)
from rcea.pipeline.probe.config import Checkpoint, ProbeConfig, resolve_checkpoints
from rcea.pipeline.probe.entropy_kernel import decoder_and_head, hidden_states, padded_batch
from rcea.pipeline.probe.entropy_run import (
    StageOrderError,
    read_tokens,
    require_samples,
    tokens_path,
)
from rcea.pipeline.probe.manifest import append_jsonl, keep_done_rows, read_jsonl, write_jsonl
from rcea.pipeline.probe.sampling import records_path, samples_path
from rcea.pipeline.probe.shard import current_shard, fold_logs, log_units, rank_files


def transitions(
    checkpoints: list[Checkpoint], base_run: str | None = None
) -> list[tuple[Checkpoint, Checkpoint]]:
    """Adjacent (θ, θ′) pairs within each (run, training seed, model), ordered by step; with
    a shared base (run ``base_run``), every run of that model without its own step 0 starts
    from it."""
    groups: dict[tuple[str, int | None, str], list[Checkpoint]] = defaultdict(list)
    shared: dict[str, Checkpoint] = {}
    for ck in checkpoints:
        if base_run and ck.run == base_run and ck.step == 0:
            shared[ck.model] = ck
        else:
            groups[ck.series].append(ck)
    out = []
    for (_, _, model), cks in groups.items():
        cks = sorted(cks, key=lambda c: c.step)
        if cks[0].step != 0 and model in shared:
            cks = [shared[model], *cks]
        out += list(zip(cks[:-1], cks[1:], strict=True))
    return out


def transition_label(old: Checkpoint, new: Checkpoint) -> str:
    """``run/model/from->to``, named after θ′'s run (a shared base starts every run);
    ``run/train-seed-S/model/from->to`` for θ′ of training seed S."""
    seed = "" if new.train_seed is None else f"/train-seed-{new.train_seed}"
    return f"{new.run}{seed}/{new.model}/{old.step}->{new.step}"


def choose_positions(n_tokens: int, p: int, seed: int) -> np.ndarray[Any, Any]:
    """Up to ``p`` distinct completion positions in [0, n_tokens), sorted (seeded)."""
    if n_tokens <= p:
        return np.arange(n_tokens)
    rng = np.random.default_rng(seed)
    return np.sort(rng.choice(n_tokens, size=p, replace=False))


def position_logits(
    model: Any,
    prompts: list[list[int]],
    completions: list[list[int]],
    positions: list[np.ndarray[Any, Any]],
    pad_id: int,
) -> Any:
    """Full-vocabulary logits [Σ len(pos), V] (float32, on CPU) at the prefixes predicting
    completion tokens ``positions[i]`` of sequence i, in order — one decoder pass for the
    right-padded batch, the LM head only at those rows."""
    import torch  # the `train` extra: only scoring a loaded checkpoint needs it

    ids, mask, plen = padded_batch(prompts, completions, pad_id)
    device = next(model.parameters()).device
    hid = hidden_states(model, ids.to(device), mask.to(device))
    rows_b = np.concatenate([np.full(len(p), i) for i, p in enumerate(positions)])
    rows_t = np.concatenate([plen[i] - 1 + p for i, p in enumerate(positions)])
    _, head = decoder_and_head(model)
    with torch.no_grad():
        picked = hid[torch.as_tensor(rows_b, device=device), torch.as_tensor(rows_t, device=device)]
        return head(picked).float().cpu()


def position_entropy_change(
    m_old: Any,
    m_new: Any,
    prompts: list[list[int]],
    completions: list[list[int]],
    positions: list[np.ndarray],
    pad_id: int,
) -> EntropyChange:
    """Predicted/observed Δh at the given positions: on CUDA in one pass over both heads on
    the device (:func:`rcea.pipeline.probe.device_stats.device_entropy_change`, float64
    folds, nothing [positions × vocab] copied to the host); elsewhere both checkpoints'
    logits through the float64 host kernel. Equal to 1e-9 relative (docs/probing.md)."""
    if next(m_old.parameters()).device.type == "cuda":
        # imported here: the device path (torch, Triton where present) loads only on CUDA
        from rcea.pipeline.probe.device_stats import device_entropy_change

        return device_entropy_change(m_old, m_new, prompts, completions, positions, pad_id)
    z_old = position_logits(m_old, prompts, completions, positions, pad_id)
    z_new = position_logits(m_new, prompts, completions, positions, pad_id)
    return entropy_change_pair(z_old, z_new)


def _fixed_trajectories(out: Path, ck: Checkpoint, qids: list[str], m: int) -> dict[str, list]:
    by_q: dict[str, list[dict[str, Any]]] = defaultdict(list)
    wanted = set(qids)
    for s in read_jsonl(samples_path(out, ck)):
        if s["question_id"] in wanted and not s["empty"] and len(by_q[s["question_id"]]) < m:
            by_q[s["question_id"]].append(s)
    return by_q


TRAJECTORY_SUMS = ("n_positions", "predicted_sum", "observed_sum")


def transition_trajectory_sums(rows: list[dict[str, Any]]) -> dict[str, dict[str, list[Any]]]:
    """Per transition, its positions reduced per trajectory sampled under θ (parallel
    lists in first-appearance order): ``trajectory_id``, ``question_id``, ``n_positions``
    and the sums of ``predicted`` / ``observed`` Δh over them — what item 16's fit by mode
    group needs (``rcea.audits.mode_covariance``), the partition applied by the report."""
    sums: dict[str, dict[str, list[Any]]] = {}
    index: dict[str, dict[str, int]] = {}  # transition → trajectory id → list index
    for r in rows:
        t, tid = r["transition"], r["trajectory_id"]
        at = index.setdefault(t, {})
        cur = sums.setdefault(
            t, {k: [] for k in ("trajectory_id", "question_id", *TRAJECTORY_SUMS)}
        )
        if tid not in at:
            at[tid] = len(at)
            cur["trajectory_id"].append(tid)
            cur["question_id"].append(r["question_id"])
            for key in TRAJECTORY_SUMS:
                cur[key].append(0 if key == "n_positions" else 0.0)
        i = at[tid]
        cur["n_positions"][i] += 1
        cur["predicted_sum"][i] += float(r["predicted"])
        cur["observed_sum"][i] += float(r["observed"])
    return sums


def _write_transitions(out: Path, rows: list[dict[str, Any]]) -> tuple[Path, list[dict]]:
    path = out / "TRANSITIONS.csv"
    table = []
    if rows:
        agg = aggregate_transitions(
            [r["transition"] for r in rows],
            [r["predicted"] for r in rows],
            [r["observed"] for r in rows],
        )
        meta = {r["transition"]: r for r in rows}
        for t, pr, ob, n in zip(
            agg.transitions, agg.predicted, agg.observed, agg.n_positions, strict=True
        ):
            m = meta[t]
            table.append(
                {
                    "transition": t,
                    "predicted": pr,
                    "observed": ob,
                    "run": m["run"],
                    "train_seed": m.get("train_seed"),
                    "model": m["model"],
                    "from_step": m["from_step"],
                    "to_step": m["to_step"],
                    "n_positions": n,
                }
            )
    cols = [
        "transition",
        "predicted",
        "observed",
        "run",
        "train_seed",
        "model",
        "from_step",
        "to_step",
        "n_positions",
    ]
    with path.open("w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=cols)
        w.writeheader()
        for row in table:
            w.writerow({k: (repr(v) if isinstance(v, float) else v) for k, v in row.items()})
    return path, table


def endpoint_tail(out: Path, ck: Checkpoint) -> tuple[dict[str, Any], Path]:
    """The reward-stratified tail at endpoint ``ck`` (module docstring); writes its files."""
    tpath = tokens_path(out, ck)
    if not tpath.exists():
        raise StageOrderError(f"{tpath}: missing; run `rcea probe entropy` first")
    recs = {r["trajectory_id"]: r for r in read_jsonl(records_path(out, ck))}
    toks = [t for t in read_tokens(tpath) if t["trajectory_id"] in recs]
    if not toks:
        raise StageOrderError(f"{tpath}: no scored trajectories at endpoint {ck.label}")
    groups = [t["question_id"] for t in toks]
    rewards = [recs[t["trajectory_id"]]["reward"] for t in toks]
    tok_traj = np.concatenate([np.full(len(t["token_logprobs"]), i) for i, t in enumerate(toks)])
    logp = np.concatenate([np.asarray(t["token_logprobs"], dtype=np.float64) for t in toks])
    report = reward_stratified_tail(groups, rewards, tok_traj, logp, endpoint=ck.label)
    adv = np.asarray(trajectory_advantages(groups, rewards), dtype=np.float64)
    a_tok = adv[tok_traj]
    c = (logp - logp.mean()) * (a_tok - a_tok.mean())
    positions = np.concatenate([np.arange(len(t["token_logprobs"])) for t in toks])
    table = pa.table(
        {
            "trajectory_id": [toks[i]["trajectory_id"] for i in tok_traj],
            "question_id": [groups[i] for i in tok_traj],
            "position": positions,
            "logprob": logp,
            "advantage": a_tok,
            "c": c,
            "stratum": ["success" if rewards[i] == 1 else "failure" for i in tok_traj],
        }
    )
    base = out / "covariance" / f"tail-{ck.label}"
    base.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, base.with_suffix(".parquet"))
    data = report.to_dict()
    base.with_suffix(".json").write_text(json.dumps(data, indent=1), encoding="utf-8")
    return data, base.with_suffix(".json")


def endpoint_trajectory_sums(out: Path, ck: Checkpoint, quantile: float) -> dict[str, Any]:
    """The ``tail_trajectories`` measurement of endpoint ``ck``: item 7's tokens reduced to
    five sums per trajectory (``rcea.audits.mode_tail.trajectory_sums``: tokens, positive
    covariance mass, positive mass and tokens in the success-stratum tail, positive mass in
    the failure-stratum tail) with each
    trajectory's id, question and reward, so that item 16 can be computed later on the
    study's gated mode partition (the store never holds per-token arrays)."""
    recs = {r["trajectory_id"]: r for r in read_jsonl(records_path(out, ck))}
    toks = [t for t in read_tokens(tokens_path(out, ck)) if t["trajectory_id"] in recs]
    groups = [t["question_id"] for t in toks]
    rewards = [recs[t["trajectory_id"]]["reward"] for t in toks]
    tok_traj = np.concatenate([np.full(len(t["token_logprobs"]), i) for i, t in enumerate(toks)])
    logp = np.concatenate([np.asarray(t["token_logprobs"], dtype=np.float64) for t in toks])
    sums = trajectory_sums(groups, rewards, tok_traj, logp, quantile=quantile)
    return {
        "quantile": sums.quantile,
        "trajectory_id": [t["trajectory_id"] for t in toks],
        "question_id": groups,
        "reward": [int(r) for r in rewards],
        "n_tokens": sums.n_tokens.tolist(),
        "positive_mass": sums.positive_mass.tolist(),
        "tail_positive_mass": sums.tail_positive_mass.tolist(),
        "tail_tokens": sums.tail_tokens.tolist(),
        "failure_tail_positive_mass": (
            None if (ftail := sums.failure_tail_positive_mass) is None else ftail.tolist()
        ),
    }


def _rank_positions(out: Path, rank: int) -> Path:
    return out / "covariance" / f"positions.rank{rank}.jsonl"


def _fold(out: Path, manifest: Any, pos_path: Path) -> None:
    """Rank 0: fold the ranks' logs into the manifest, append the ranks' position rows of
    finished units to ``positions.jsonl`` (rank order = single-process order; rows of a
    unit a killed rank wrote but never logged are dropped) and delete the rank files;
    then drop rows of unfinished units from ``positions.jsonl`` itself."""
    fold_logs(out, manifest, "covariance")
    recorded = manifest.data["done"].get("covariance", {})
    done_sets = {label: set(units) for label, units in recorded.items()}

    def done(r: dict[str, Any]) -> bool:
        return r["question_id"] in done_sets.get(r["transition"], set())

    files = rank_files(out, "covariance/positions.rank{rank}.jsonl")
    if files:
        have = {(r["transition"], r["question_id"]) for r in read_jsonl(pos_path) if done(r)}
        for path in files:
            rows = [r for r in read_jsonl(path) if done(r)]
            # defensive: a unit already merged is never appended twice
            rows = [r for r in rows if (r["transition"], r["question_id"]) not in have]
            append_jsonl(pos_path, rows)
            have |= {(r["transition"], r["question_id"]) for r in rows}
        for path in files:
            path.unlink()
    keep_done_rows(pos_path, done)


def run_covariance(cfg: ProbeConfig, out_dir: str | Path, *, progress: bool = True) -> StageResult:
    """Per-position predicted/observed Δh for every transition × question unit not yet
    done, TRANSITIONS.csv, and the endpoint tails."""
    out = Path(out_dir)
    timer = Timer()
    require_samples(out)
    shard = current_shard()
    manifest = open_manifest(cfg, out)
    cv = cfg.covariance
    qids = sampled_question_ids(cfg, manifest)[: cv.questions]
    checkpoints = resolve_checkpoints(cfg)
    set_threads(cfg)
    pairs = transitions(checkpoints, cfg.checkpoints.base_run)
    result = StageResult(
        "covariance", str(out), cfg.probe.seed, processes=shard.world, main_process=shard.is_main
    )
    result.info.update(
        questions=len(qids),
        trajectories=cv.trajectories,
        positions=cv.positions,
        seed=cv.seed,
        n_transitions=len(pairs),
    )
    if cv.trajectories > cfg.probe.k:
        raise StageOrderError(
            f"[covariance] trajectories = {cv.trajectories} exceeds [probe] k = {cfg.probe.k}"
        )
    settings = {"trajectories": cv.trajectories, "positions": cv.positions, "seed": cv.seed}
    pos_path = out / "covariance" / "positions.jsonl"
    if shard.is_main:
        manifest.require_settings("covariance", settings)
        _fold(out, manifest, pos_path)  # an interrupted sharded run, and half-written units
    shard.barrier()
    if not shard.is_main:
        manifest = open_manifest(cfg, out)
        manifest.require_settings("covariance", settings)  # recorded by rank 0: checks only
    recorded = manifest.data["done"].get("covariance", {})
    done_sets = {label: set(units) for label, units in recorded.items()}
    plan: list[tuple[int, str]] = []
    for i, (old, new) in enumerate(pairs):
        label = transition_label(old, new)
        missing = set(qids) - manifest.done("sample", old.label)
        if missing:
            raise StageOrderError(
                f"{old.label}: {len(missing)} question(s) not sampled; run `rcea probe sample`"
            )
        todo = [q for q in qids if q not in done_sets.get(label, set())]
        result.units_skipped += len(qids) - len(todo)
        plan += [(i, q) for q in todo]
    mine = shard.split(plan)
    my_path = pos_path if shard.world == 1 else _rank_positions(out, shard.rank)
    bar = progress_bar(len(mine), "covariance", progress and shard.is_main)
    units_run = 0
    for i in sorted({p for p, _ in mine}):
        old, new = pairs[i]
        label = transition_label(old, new)
        todo = [q for p, q in mine if p == i]

        m_old, tok = load_policy(old.path)
        m_new, _ = load_policy(new.path)
        fixed = _fixed_trajectories(out, old, todo, cv.trajectories)
        for qid in todo:
            rows = []
            trajs = fixed.get(qid, [])
            if trajs:
                prompts = [t["prompt_ids"] for t in trajs]
                comps = [t["completion_ids"] for t in trajs]
                poss = [
                    choose_positions(
                        len(c), cv.positions, derive_seed(cv.seed, label, t["trajectory_id"])
                    )
                    for t, c in zip(trajs, comps, strict=True)
                ]
                ch = position_entropy_change(m_old, m_new, prompts, comps, poss, tok.pad_token_id)
                j = 0
                for t, pos in zip(trajs, poss, strict=True):
                    for p in pos.tolist():
                        rows.append(
                            {
                                "transition": label,
                                "run": new.run,
                                "train_seed": new.train_seed,
                                "model": new.model,
                                "from_step": old.step,
                                "to_step": new.step,
                                "question_id": qid,
                                "trajectory_id": t["trajectory_id"],
                                "position": p,
                                "predicted": float(ch.predicted[j]),
                                "observed": float(ch.observed[j]),
                                "entropy_old": float(ch.entropy_old[j]),
                                "entropy_new": float(ch.entropy_new[j]),
                            }
                        )
                        j += 1
            append_jsonl(my_path, rows)
            if shard.world == 1:
                manifest.mark("covariance", label, [qid])
            else:
                log_units(out, "covariance", shard.rank, label, [qid])
            units_run += 1
            bar.update(1)
        del m_old, m_new
    bar.close()
    shard.barrier()
    result.units_run = shard.total(units_run)
    if not shard.is_main:
        result.units_run = units_run  # this rank's share; rank 0 reports the total
        result.seconds = timer()
        return result
    _fold(out, manifest, pos_path)
    current = {transition_label(a, b) for a, b in pairs}
    rows_now = [r for r in read_jsonl(pos_path) if r["transition"] in current]
    csv_path, table = _write_transitions(out, rows_now)
    result.files += [str(pos_path), str(csv_path)]
    from_run = {transition_label(a, b): a.run for a, b in pairs}
    per_trajectory = transition_trajectory_sums(rows_now)
    for row in table:
        result.measurements.append(
            MeasurementRow(
                "covariance_transition",
                {
                    "from_step": row["from_step"],
                    "to_step": row["to_step"],
                    "from_run": from_run.get(row["transition"]),
                    "transition": row["transition"],
                    "predicted": row["predicted"],
                    "observed": row["observed"],
                    "n_positions": row["n_positions"],
                    "trajectories": per_trajectory[row["transition"]],
                },
                run=row["run"],
                model=row["model"],
                step=row["to_step"],
                train_seed=row["train_seed"],
            )
        )
    result.info["transitions"] = table
    endpoints: dict[tuple[str, int | None, str], Checkpoint] = {}
    for ck in checkpoints:
        cur = endpoints.get(ck.series)
        if cur is None or ck.step > cur.step:
            endpoints[ck.series] = ck
    tails = {}
    sums_rows: list[dict[str, Any]] = []
    for ck in endpoints.values():
        data, path = endpoint_tail(out, ck)
        tails[ck.label] = {
            "gap_failure_minus_success_pp": data["gap_failure_minus_success_pp"],
            "success_share": data["success"]["share"],
            "failure_share": data["failure"]["share"],
            "n_tokens": data["n_tokens"],
        }
        result.files.append(str(path))
        result.measurements.append(
            MeasurementRow(
                "tail", data, run=ck.run, model=ck.model, step=ck.step, train_seed=ck.train_seed
            )
        )
        sums = MeasurementRow(
            "tail_trajectories",
            endpoint_trajectory_sums(out, ck, data["quantile"]),
            run=ck.run,
            model=ck.model,
            step=ck.step,
            train_seed=ck.train_seed,
        )
        result.measurements.append(sums)
        sums_rows.append(sums.to_dict())
    # the same measurements as a file: `rcea stats mode-tail` (item 16) without a store
    sums_path = out / "covariance" / "tail_trajectories.jsonl"
    write_jsonl(sums_path, sums_rows)
    result.files.append(str(sums_path))
    result.info["tails"] = tails
    result.seconds = timer()
    return result
