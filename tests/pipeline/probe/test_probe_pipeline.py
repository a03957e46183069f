"""Probe stages on small random policies: records that validate, the covariance prediction
against the observed change on perturbed checkpoints, resumption after a real kill, and
the probe-set seed guard."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from rcea.pipeline.probe import (  # noqa: E402
    ProbeSetMismatch,
    StageOrderError,
    load_config,
    run_covariance,
    run_entropy,
    run_sample,
)
from rcea.pipeline.records import read_records  # noqa: E402
from tests.support.probe import (  # noqa: E402
    EPS,
    run_until_killed,
    save_policy,
    write_config,
)


@pytest.fixture(scope="module")
def policies(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """θ0 (random), θ1 = θ0 + εδ1, θ2 = θ1 + εδ2: three checkpoints a small step apart."""
    root = tmp_path_factory.mktemp("policies")
    p0 = save_policy(root / "s0", seed=3)
    p1 = save_policy(root / "s1", seed=11, perturb=EPS, base=p0)
    p2 = save_policy(root / "s2", seed=12, perturb=EPS, base=p1)
    return [p0, p1, p2]


def _files(out: Path) -> dict[str, bytes]:
    keep = ("records", "samples")
    return {
        str(p.relative_to(out)): p.read_bytes()
        for p in sorted(out.rglob("*.jsonl"))
        if p.parent.name in keep or p.name == "records.jsonl"
    }


def _tokens(out: Path) -> dict[str, Any]:
    import pyarrow.parquet as pq

    return {
        p.name: sorted(pq.read_table(p).to_pylist(), key=lambda r: r["trajectory_id"])
        for p in sorted((out / "tokens").glob("*.parquet"))
    }


def test_sample_entropy_covariance_on_perturbed_checkpoints(
    policies: list[Path], tmp_path: Path
) -> None:
    cfg = load_config(write_config(tmp_path / "c.toml", policies))
    out = tmp_path / "out"
    res = run_sample(cfg, out, progress=False)
    assert res.units_run == 9 and res.units_skipped == 0
    batch = read_records(out / "records.jsonl")  # the interchange schema accepts them
    cols = batch.columns
    assert sorted(set(cols["step"])) == [0, 10, 20] and set(cols["run"]) == {"pert"}
    assert all(t.startswith("p") and "pert" not in t for t in cols["trajectory_id"])
    assert set(cols["split"]) == {"probe"} and set(cols["validity"]) <= {0, 1}
    # each checkpoint's records carry its own decoding seed
    seeds = {(s, sd) for s, sd in zip(cols["step"], cols["seed"], strict=True)}
    assert len(seeds) == 3

    with pytest.raises(StageOrderError, match="rcea probe entropy"):
        run_covariance(cfg, out, progress=False)  # the tail needs the token artifacts
    run_entropy(cfg, out, progress=False)
    cols = read_records(out / "records.jsonl").columns
    assert all(v is not None for v in cols["mean_token_entropy"])
    tokens = _tokens(out)
    for rows in tokens.values():
        for r in rows:
            assert len(r["token_entropies"]) == len(r["token_logprobs"]) > 0
    # truncated samples (no EOS within max_new_tokens) are flagged and have 24 tokens
    flat = [r for rows in tokens.values() for r in rows]
    assert all(len(r["token_entropies"]) == 24 for r in flat if r["truncated"])
    assert all(len(r["token_entropies"]) <= 24 for r in flat)
    # records' n_tokens / ℓ agree with the artifact
    by_tid = {r["trajectory_id"]: r for r in flat}
    for tid, n, lp in zip(
        cols["trajectory_id"], cols["n_tokens"], cols["seq_logprob"], strict=True
    ):
        assert n == len(by_tid[tid]["token_logprobs"])
        assert lp == pytest.approx(float(np.sum(by_tid[tid]["token_logprobs"], dtype=np.float64)))

    res = run_covariance(cfg, out, progress=False)
    with (out / "TRANSITIONS.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    assert [r["transition"] for r in rows] == ["pert/tiny/0->10", "pert/tiny/10->20"]
    positions = [json.loads(x) for x in (out / "covariance" / "positions.jsonl").open()]
    for r in rows:
        pred, obs = float(r["predicted"]), float(r["observed"])
        assert np.sign(pred) == np.sign(obs) != 0
        mine = [p for p in positions if p["transition"] == r["transition"]]
        # 3 questions x 2 trajectories x up to 8 positions (short completions have fewer)
        assert int(r["n_positions"]) == len(mine) and 24 < len(mine) <= 48
        assert np.mean([p["predicted"] for p in mine]) == pytest.approx(pred, rel=1e-12)
        p_pos = np.array([p["predicted"] for p in mine])
        o_pos = np.array([p["observed"] for p in mine])
        # first order, position by position: the residual is small against the change
        assert np.abs(p_pos - o_pos).sum() < 0.05 * np.abs(o_pos).sum()
        assert np.mean(np.sign(p_pos) == np.sign(o_pos)) >= 0.95
    kinds = sorted(m.kind for m in res.measurements)
    assert kinds == ["covariance_transition", "covariance_transition", "tail", "tail_trajectories"]
    # item 16 by group: each transition's positions summed per trajectory sampled under θ
    for m in (m for m in res.measurements if m.kind == "covariance_transition"):
        p = m.payload
        mine = [x for x in positions if x["transition"] == p["transition"]]
        assert p["from_run"] == "pert" and sum(p["trajectories"]["n_positions"]) == len(mine)
        for i, tid in enumerate(p["trajectories"]["trajectory_id"]):
            of = [x for x in mine if x["trajectory_id"] == tid]
            assert p["trajectories"]["question_id"][i] == of[0]["question_id"]
            assert p["trajectories"]["n_positions"][i] == len(of)
            assert p["trajectories"]["predicted_sum"][i] == pytest.approx(
                sum(x["predicted"] for x in of), rel=1e-12
            )
            assert p["trajectories"]["observed_sum"][i] == pytest.approx(
                sum(x["observed"] for x in of), rel=1e-12
            )
    # item 16's per-trajectory sums: the tail parquet's own c, summed per trajectory
    (sums,) = [m.payload for m in res.measurements if m.kind == "tail_trajectories"]
    # the same measurement as a file (`rcea stats mode-tail` reads it without a store)
    sums_file = out / "covariance" / "tail_trajectories.jsonl"
    assert [json.loads(x) for x in sums_file.open()] == [
        json.loads(json.dumps(m.to_dict()))
        for m in res.measurements
        if m.kind == "tail_trajectories"
    ]
    assert str(sums_file) in res.files
    c_tab = pq.read_table(out / "covariance" / "tail-pert--tiny--step20.parquet").to_pydict()
    by_tid: dict[str, list[float]] = {}
    for tid, c in zip(c_tab["trajectory_id"], c_tab["c"], strict=True):
        by_tid.setdefault(tid, []).append(c)
    assert sorted(sums["trajectory_id"]) == sorted(by_tid)
    for i, tid in enumerate(sums["trajectory_id"]):
        assert sums["n_tokens"][i] == len(by_tid[tid])
        want = sum(c for c in by_tid[tid] if c > 0)
        assert sums["positive_mass"][i] == pytest.approx(want, rel=1e-9, abs=1e-12)
    assert (
        sum(sums["tail_tokens"])
        == json.loads((out / "covariance" / "tail-pert--tiny--step20.json").read_text())["success"][
            "n_selected"
        ]
    )
    tail = json.loads((out / "covariance" / "tail-pert--tiny--step20.json").read_text())
    # item 17's failure-stratum share: its tail mass per trajectory sums to item 7's
    assert sum(sums["failure_tail_positive_mass"]) == pytest.approx(
        tail["failure"]["tail_positive_mass"], rel=1e-9, abs=1e-12
    )
    assert tail["n_tokens"] == sum(
        len(r["token_logprobs"]) for r in tokens["pert--tiny--step20.parquet"]
    )


def test_prediction_error_is_second_order(policies: list[Path]) -> None:
    """Halving the step halves the predicted change and quarters |pred − obs|."""
    import copy

    from transformers import AutoModelForCausalLM

    from rcea.audits.covariance import entropy_change_pair
    from rcea.pipeline.policy import build_char_tokenizer
    from rcea.pipeline.probe.covariance import position_logits

    tok = build_char_tokenizer()
    base = AutoModelForCausalLM.from_pretrained(policies[0])
    gen = torch.Generator().manual_seed(1)
    direction = [torch.randn(p.shape, generator=gen) for p in base.parameters()]
    prompt = tok("(3+4)*5\n")["input_ids"]
    comp = tok("3+4=7\n7*5=35\n\\boxed{35}")["input_ids"] + [tok.eos_token_id]
    pos = np.arange(len(comp))
    z0 = position_logits(base, [prompt], [comp], [pos], tok.pad_token_id)
    results = []
    for eps in (2e-4, 1e-4):
        moved = copy.deepcopy(base)
        with torch.no_grad():
            for p, d in zip(moved.parameters(), direction, strict=True):
                p.add_(eps * d)
        ch = entropy_change_pair(z0, position_logits(moved, [prompt], [comp], [pos], 0))
        results.append((ch.predicted, np.abs(ch.predicted - ch.observed).sum()))
    (pred_big, err_big), (pred_small, err_small) = results
    assert np.sum(pred_big) / np.sum(pred_small) == pytest.approx(2.0, rel=0.05)
    assert 3.0 < err_big / err_small < 5.0


@pytest.mark.slow
def test_resume_after_kill_gives_identical_records(policies: list[Path], tmp_path: Path) -> None:
    questions = {"source": "toy", "split": "probe", "n": 4}
    # groups of 2 questions per generate / forward call: kills land between groups
    probe = {"seed": 5, "k": 4, "max_new_tokens": 24, "torch_threads": 1, "batch_size": 8}
    cfg_path = write_config(
        tmp_path / "c.toml", policies, questions=questions, probe=probe, entropy={"batch_size": 8}
    )
    cfg = load_config(cfg_path)
    clean, resumed = tmp_path / "clean", tmp_path / "resumed"
    run_sample(cfg, clean, progress=False)
    run_entropy(cfg, clean, progress=False)

    args = ["probe", "sample", "--config", str(cfg_path), "--out", str(resumed)]
    killed_at = run_until_killed(args, resumed / "manifest.json", "sample", 2)
    assert 2 <= killed_at < 12
    res = run_sample(cfg, resumed, progress=False)
    assert res.units_skipped == killed_at and res.units_run == 12 - killed_at
    args = ["probe", "entropy", "--config", str(cfg_path), "--out", str(resumed)]
    killed_at = run_until_killed(args, resumed / "manifest.json", "entropy", 2)
    assert killed_at < 12
    res = run_entropy(cfg, resumed, progress=False)
    assert res.units_run == 12 - killed_at

    assert _files(resumed) == _files(clean)
    assert _tokens(resumed) == _tokens(clean)
    # a second run repeats nothing
    assert run_sample(cfg, resumed, progress=False).units_run == 0
    assert run_entropy(cfg, resumed, progress=False).units_run == 0
    assert _files(resumed) == _files(clean)


def test_another_probe_set_seed_is_refused(policies: list[Path], tmp_path: Path) -> None:
    out = tmp_path / "out"
    cfg = load_config(write_config(tmp_path / "c.toml", policies[:1]), **{"questions.n": 1})
    run_sample(cfg, out, progress=False)
    other = load_config(
        write_config(tmp_path / "c.toml", policies[:1]), **{"questions.n": 1, "probe.seed": 6}
    )
    with pytest.raises(ProbeSetMismatch, match="seed 5.*seed 6"):
        run_sample(other, out, progress=False)
    with pytest.raises(ProbeSetMismatch):
        run_entropy(other, out, progress=False)
    longer = load_config(
        write_config(tmp_path / "c.toml", policies[:1]),
        **{"questions.n": 1, "probe.max_new_tokens": 30},
    )
    with pytest.raises(ProbeSetMismatch, match=r"max_new_tokens=24 \(now 30\)"):
        run_sample(longer, out, progress=False)
    # more questions with the same settings extend the directory
    more = load_config(write_config(tmp_path / "c.toml", policies[:1]), **{"questions.n": 2})
    assert run_sample(more, out, progress=False).units_run == 1
    assert run_entropy(cfg, out, progress=False).units_run == 2  # both sampled questions


def test_benchmark_file_as_question_source(policies: list[Path], tmp_path: Path) -> None:
    """Records from a local benchmark file: reward by math-verify, no toy-only fields."""
    bench = tmp_path / "mini.jsonl"
    rows = [{"id": f"m{i}", "problem": f"What is {i}+{i}?", "answer": str(2 * i)} for i in (1, 2)]
    bench.write_text("".join(json.dumps(r) + "\n" for r in rows))
    cfg = load_config(
        write_config(tmp_path / "c.toml", policies[:1], questions={"source": str(bench)}),
        **{"probe.k": 2},
    )
    out = tmp_path / "out"
    run_sample(cfg, out, progress=False)
    run_entropy(cfg, out, progress=False)
    cols = read_records(out / "records.jsonl").columns
    assert sorted(set(cols["question_id"])) == ["m1", "m2"]
    # the bare problem statement, without the prompt template around it
    assert {(q, t) for q, t in zip(cols["question_id"], cols["question"], strict=True)} == {
        ("m1", "What is 1+1?"),
        ("m2", "What is 2+2?"),
    }
    assert set(cols["reward"]) <= {0, 1} and all(v is None for v in cols["validity"])
    assert all(v is None for v in cols["split"]) and all(v is not None for v in cols["seq_logprob"])
    samples = [json.loads(x) for x in (out / "samples" / "pert--tiny--step0.jsonl").open()]
    assert all(s["strategy"] is None for s in samples)
    prompt = "What is 1+1?\nPlease reason step by step"
    from rcea.pipeline.policy import build_char_tokenizer

    assert samples[0]["prompt_ids"][: len(prompt)] == build_char_tokenizer()(prompt)["input_ids"]


def test_top_p_sampling_labels_cross_entropy(policies: list[Path], tmp_path: Path) -> None:
    """The probe records its sampling settings and truncation per trajectory; with
    top_p < 1 the ℓ-based numbers are a cross-entropy (docs/estimators.md item 2), and truncated
    samples are counted, in `rcea stats entropy` and in the report."""
    from typer.testing import CliRunner

    from rcea.app.cli import app as cli

    results = {}
    for top_p in (1.0, 0.9):
        cfg = load_config(
            write_config(
                tmp_path / f"c{top_p}.toml",
                policies[:1],
                probe={"seed": 5, "k": 4, "max_new_tokens": 24, "top_p": top_p},
            )
        )
        out = tmp_path / f"out{top_p}"
        run_sample(cfg, out, progress=False)
        run_entropy(cfg, out, progress=False)
        cols = read_records(out / "records.jsonl").columns
        assert set(cols["sampling_top_p"]) == {top_p}
        assert set(cols["sampling_temperature"]) == {1.0}
        assert set(cols["logprob_temperature"]) == {1.0}
        n_trunc = sum(bool(t) for t in cols["truncated"])
        res = CliRunner().invoke(
            cli,
            ["stats", "entropy", str(out / "records.jsonl"), "--k-min", "1", "--n-boot", "50"]
            + ["--json"],
        )
        assert res.exit_code == 0, res.output
        data = json.loads(res.output)
        assert data["n_truncated"] == n_trunc
        results[top_p] = data["quantity"]
    assert results == {1.0: "entropy", 0.9: "cross_entropy"}
