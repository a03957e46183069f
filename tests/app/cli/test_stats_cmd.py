"""`rcea stats ...` on files, checked against independent references."""

from __future__ import annotations

import json
from math import comb
from pathlib import Path

import numpy as np
import pytest
from scipy import stats as sps
from sklearn.metrics import f1_score, precision_score, recall_score
from typer.testing import CliRunner

from rcea.app.cli import app
from rcea.audits.covariance import FIT_SUMMARY
from rcea.pipeline.sample_study import write_sample_study

runner = CliRunner()


def _json(args: list[str]) -> dict:
    out = runner.invoke(app, [*args, "--json"])
    assert out.exit_code == 0, out.output
    return json.loads(out.stdout)


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_passk_matches_combinatorial_definition(tmp_path: Path) -> None:
    rows = [("q1", 10, 3), ("q2", 10, 0), ("q3", 12, 12), ("q4", 16, 5)]
    csv = _write(
        tmp_path / "r.csv", "question_id,n,c\n" + "".join(f"{q},{n},{c}\n" for q, n, c in rows)
    )
    data = _json(["stats", "passk", str(csv), "--k", "1,8"])
    for k in (1, 8):
        expected = np.mean([1 - comb(n - c, k) / comb(n, k) for _, n, c in rows])
        assert data["pass_at_k"][f"pass_at_{k}"] == pytest.approx(expected, abs=1e-12)


def test_passk_bad_cell_names_line_and_column(tmp_path: Path) -> None:
    csv = _write(tmp_path / "r.csv", "question_id,n,c\nq1,10,3\nq2,ten,1\n")
    out = runner.invoke(app, ["stats", "passk", str(csv), "--k", "1,8"])
    assert out.exit_code == 1 and f"{csv}:line 3: n: expected an integer" in out.output
    csv2 = _write(tmp_path / "r2.csv", "question_id,n\nq1,10\n")
    out = runner.invoke(app, ["stats", "passk", str(csv2)])
    assert out.exit_code == 1 and "missing column(s) c" in out.output


def _pairs_csv(
    tmp_path: Path, rng: np.random.Generator, n: int = 200, adjudicate: bool = True
) -> tuple[Path, dict[str, list]]:
    truth = rng.choice(["same", "different"], size=n)

    def flip(p: float) -> np.ndarray:
        other = np.where(truth == "same", "different", "same")
        return np.where(rng.random(n) < p, other, truth)

    a, b, auto = flip(0.05), flip(0.05), flip(0.08)
    auto = auto.astype(object)
    auto[rng.random(n) < 0.03] = ""
    adj = np.where((a != b), truth, "").astype(object) if adjudicate else np.full(n, "")
    lines = ["pair_id,annotator_a,annotator_b,adjudicated,automatic"] + [
        f"p{i},{a[i]},{b[i]},{adj[i]},{auto[i]}" for i in range(n)
    ]
    path = _write(tmp_path / "pairs.csv", "\n".join(lines) + "\n")
    return path, {"a": list(a), "b": list(b), "adj": list(adj), "auto": list(auto)}


PASSED_RNG0 = True  # the gate outcome of _pairs_csv(rng 0), pinned


def test_agreement_final_gate_matches_sklearn(tmp_path: Path) -> None:
    path, cols = _pairs_csv(tmp_path, np.random.default_rng(0))
    data = _json(["stats", "agreement", str(path), "--automatic-coverage", "0.97"])
    assert data["stage"] == "final"
    labels = ["same", "different"]
    keep = [i for i, x in enumerate(cols["auto"]) if x]
    # F1_HH over every pair both annotators labelled; uncertain pairs are excluded from
    # the automatic F1s only (the subset value is reported for information).
    hh_all = f1_score(cols["a"], cols["b"], average="macro", labels=labels, zero_division=0)
    assert data["human_human_macro_f1"] == pytest.approx(hh_all)
    hh = f1_score(
        [cols["a"][i] for i in keep],
        [cols["b"][i] for i in keep],
        average="macro",
        labels=labels,
        zero_division=0,
    )
    assert data["human_human_macro_f1_evaluated"] == pytest.approx(hh)
    ref = [j or x for x, j in zip(cols["a"], cols["adj"], strict=True)]
    r = [ref[i] for i in keep]
    au = [cols["auto"][i] for i in keep]
    auto_f1 = f1_score(r, au, average="macro", labels=labels, zero_division=0)
    prec = precision_score(r, au, pos_label="different", zero_division=0)
    rec = recall_score(r, au, pos_label="different", zero_division=0)
    assert data["automatic_macro_f1"] == pytest.approx(auto_f1)
    assert data["different_precision"] == pytest.approx(prec)
    assert data["different_recall"] == pytest.approx(rec)
    assert data["gap"] == pytest.approx(data["human_human_macro_f1"] - data["automatic_macro_f1"])
    assert data["n_excluded_uncertain"] == len(cols["auto"]) - len(keep)
    assert data["automatic_coverage"] == 0.97
    # the default thresholds, applied by hand
    expected = [hh >= 0.85, auto_f1 >= 0.85, hh - auto_f1 <= 0.05, prec >= 0.80, rec >= 0.80,
                0.97 >= 0.95]  # fmt: skip
    assert [r["passed"] for r in data["requirements"]] == expected
    assert data["passed"] is all(expected)
    assert data["passed"] is PASSED_RNG0


def test_agreement_preliminary_when_unadjudicated(tmp_path: Path) -> None:
    path, _ = _pairs_csv(tmp_path, np.random.default_rng(1), adjudicate=False)
    data = _json(["stats", "agreement", str(path)])
    assert data["stage"] == "preliminary" and data["passed"] is None
    assert data["automatic_coverage_source"].startswith("pairs: share of audit pairs")


def test_agreement_without_partition_coverage_is_not_final(tmp_path: Path) -> None:
    # every disagreement adjudicated, but no coverage over the locked partition: the
    # output names where the coverage came from and does not call the gate final
    path, cols = _pairs_csv(tmp_path, np.random.default_rng(0))
    data = _json(["stats", "agreement", str(path)])
    assert data["stage"] == "provisional" and data["passed"] is None
    assert isinstance(data["provisional_passed"], bool)
    share = sum(bool(x) for x in cols["auto"]) / len(cols["auto"])
    assert data["automatic_coverage"] == pytest.approx(share)
    assert "not trajectories over the locked partition" in data["automatic_coverage_source"]
    out = runner.invoke(app, ["stats", "agreement", str(path)])
    assert out.exit_code == 0
    assert "gate (provisional): NOT FINAL" in out.output and "PASSED" not in out.output
    assert "automatic coverage source: pairs" in out.output
    # a partition file gives the coverage over trajectories, and a final gate
    lines = (
        ["trajectory_id,mode"]
        + [f"t{i},m{i % 3}" for i in range(97)]
        + [
            "t97,uncertain",
            "t98,",
            "t99,uncertain",
        ]
    )
    part = _write(tmp_path / "partition.csv", "\n".join(lines) + "\n")
    final = _json(["stats", "agreement", str(path), "--partition", str(part)])
    assert final["stage"] == "final" and isinstance(final["passed"], bool)
    assert final["automatic_coverage"] == pytest.approx(0.97)
    assert final["automatic_coverage_source"] == f"--partition {part} (100 trajectories)"
    same = _json(["stats", "agreement", str(path), "--automatic-coverage", "0.97"])
    assert {k: v for k, v in same.items() if k != "automatic_coverage_source"} == {
        k: v for k, v in final.items() if k != "automatic_coverage_source"
    }
    dup = _write(tmp_path / "dup.csv", "trajectory_id,mode\nt1,m\nt1,m\n")
    out = runner.invoke(app, ["stats", "agreement", str(path), "--partition", str(dup)])
    assert out.exit_code == 1 and f"{dup}:line 3: trajectory_id: duplicate" in out.output


def test_agreement_bad_label(tmp_path: Path) -> None:
    path = _write(
        tmp_path / "p.csv",
        "pair_id,annotator_a,annotator_b,adjudicated,automatic\n"
        "p1,same,same,,same\np2,same,maybe,,same\n",
    )
    out = runner.invoke(app, ["stats", "agreement", str(path)])
    assert out.exit_code == 1 and "line 3: annotator_b: must be same or different" in out.output


def test_covfit_matches_scipy(tmp_path: Path) -> None:
    rng = np.random.default_rng(2)
    pred = rng.normal(0, 0.01, 30)
    obs = 0.9 * pred + rng.normal(0, 0.002, 30)
    path = _write(
        tmp_path / "t.csv",
        "transition,predicted,observed\n"
        + "".join(
            f"t{i},{float(p)!r},{float(o)!r}\n"
            for i, (p, o) in enumerate(zip(pred, obs, strict=True))
        ),
    )
    data = _json(["stats", "covfit", str(path)])
    lr = sps.linregress(pred, obs)
    assert data["slope"] == pytest.approx(lr.slope)
    assert data["intercept"] == pytest.approx(lr.intercept, abs=1e-12)
    assert data["r_squared"] == pytest.approx(lr.rvalue**2)
    assert data["spearman_rho"] == pytest.approx(sps.spearmanr(pred, obs).statistic)
    assert data["sign_agreement"] == pytest.approx(np.mean(np.sign(pred) == np.sign(obs)))
    text = runner.invoke(app, ["stats", "covfit", str(path)]).output
    shown = [line.split()[0] for line in text.splitlines()[1:]]
    assert shown == ["n", *FIT_SUMMARY, "excluded_runs"]


def test_entropy_and_retention_on_sample_study(tmp_path: Path) -> None:
    path = write_sample_study(tmp_path / "s.jsonl", seed=3)
    out = runner.invoke(app, ["stats", "entropy", str(path)])
    assert out.exit_code == 1 and "choose one" in out.output
    data = _json(["stats", "entropy", str(path), "--run", "grpo", "--step", "0", "--n-boot", "500"])
    for key in (
        "paired_ratio",
        "paired_ci_low",
        "paired_ci_high",
        "broad_ratio",
        "coverage_success",
        "coverage_failure",
        "sign_test_p",
        "seed",
    ):
        assert key in data
    assert data["max_abs_residual"] < 1e-9
    ret = _json(["stats", "retention", str(path), "--n-boot", "200"])
    assert {(r["run"], r["step"]) for r in ret["results"]} == {
        ("grpo", 50),
        ("grpo", 100),
        ("clip_cov", 50),
        ("clip_cov", 100),
    }
    for r in ret["results"]:
        assert r["n_eligible"] <= r["n_denominator"]


# --------------------------------------------------------------------------- sequential


_SEQ_RUBRIC = """[rubric]
name = "seq"
version = "1"

[sequential]
looks = [0.25, 0.5, 0.75, 1.0]
alpha = 0.05
spending = "obrien_fleming"
"""


def _seq_csv(tmp_path: Path, labelled: int, e_auto: float, seed: int = 0) -> Path:
    """A simulated audit (12 questions x 40 pairs) written as the offline CSV with a
    question_id column; rows past ``labelled`` have empty annotator cells."""
    from rcea.audits.sequential_sim import World, simulate_audit

    w = World(e_human=0.02, e_sd=e_auto, e_ds=e_auto, n_questions=12, pairs_per_question=40)
    s = simulate_audit(w, np.random.default_rng(seed))
    lab = ["same", "different"]
    lines = ["pair_id,question_id,annotator_a,annotator_b,adjudicated,automatic"]
    for i in range(len(s.a)):
        done = i < labelled
        a = lab[s.a[i]] if done else ""
        b = lab[s.b[i]] if done else ""
        j = lab[s.adjudicated[i]] if done and s.adjudicated[i] >= 0 else ""
        lines.append(f"p{i},q{s.q_index[i]},{a},{b},{j},{lab[s.automatic[i]]}")
    return _write(tmp_path / "seq.csv", "\n".join(lines) + "\n")


def test_agreement_sequential_interim_decisions(tmp_path: Path) -> None:
    from rcea.audits.rubric import parse_rubric
    from rcea.audits.sequential import interim_decisions

    rubric = _write(tmp_path / "r.toml", _SEQ_RUBRIC)
    path = _seq_csv(tmp_path, labelled=150, e_auto=0.02)
    data = _json(["stats", "agreement", str(path), "--rubric", str(rubric),
                  "--automatic-coverage", "0.97"])  # fmt: skip
    seq = data["sequential"]
    assert (seq["look"], seq["n_labelled"], seq["n_planned"]) == (1, 150, 480)
    assert seq["n_questions"] == 12 and data["resampling_unit"] == "question_id"
    assert data["decision"] == seq["decision"]
    assert {r["decision"] for r in data["requirements"]} <= {
        "settled_pass", "settled_fail", "undecided"}  # fmt: skip
    assert all("decision" in r for r in data["requirements"])
    # the fixed-sample values are over the labelled rows only (sklearn)
    import csv

    rows = list(csv.DictReader(path.open()))[:150]
    a, b = [r["annotator_a"] for r in rows], [r["annotator_b"] for r in rows]
    hh = f1_score(a, b, average="macro", labels=["same", "different"], zero_division=0)
    assert data["human_human_macro_f1"] == pytest.approx(hh)
    # the same decisions as the library on the same rows
    ref = interim_decisions(
        [r["question_id"] for r in rows], a, b, [r["adjudicated"] or None for r in rows],
        [r["automatic"] for r in rows], 0.97, parse_rubric(_SEQ_RUBRIC).gate,
        parse_rubric(_SEQ_RUBRIC).sequential, 480, pair_ids=[r["pair_id"] for r in rows],
    )  # fmt: skip
    assert [r["decision"] for r in seq["requirements"]] == [r.decision for r in ref.requirements]
    if seq["decision"] == "undecided":
        assert data["stage"] == "interim" and data["passed"] is None
    out = runner.invoke(app, ["stats", "agreement", str(path), "--rubric", str(rubric),
                              "--automatic-coverage", "0.97"])  # fmt: skip
    assert out.exit_code == 0 and "look 1/4 at 150/480 pairs" in out.output


def test_agreement_sequential_far_below_settles_fail(tmp_path: Path) -> None:
    rubric = _write(tmp_path / "r.toml", _SEQ_RUBRIC)
    path = _seq_csv(tmp_path, labelled=240, e_auto=0.3)
    out = runner.invoke(app, ["stats", "agreement", str(path), "--rubric", str(rubric),
                              "--automatic-coverage", "0.97", "--json"])  # fmt: skip
    assert out.exit_code == 5, out.output  # a settled failure is a failed final gate
    data = json.loads(out.stdout)
    assert data["sequential"]["look"] == 2 and data["outcome"] == "failed"
    assert data["decision"] == "settled_fail" and data["passed"] is False
    assert data["stage"] == "final" and "fixed_sample_passed" in data


def test_agreement_sequential_final_look_uses_the_boundary(tmp_path: Path) -> None:
    rubric = _write(tmp_path / "r.toml", _SEQ_RUBRIC)
    path = _seq_csv(tmp_path, labelled=480, e_auto=0.02)
    data = _json(["stats", "agreement", str(path), "--rubric", str(rubric),
                  "--automatic-coverage", "0.97"])  # fmt: skip
    seq = data["sequential"]
    assert seq["final_look"] and seq["look"] == 4
    assert data["passed"] is (data["decision"] == "settled_pass")
    assert data["fixed_sample_passed"] is True


def test_agreement_empty_annotator_cells_need_a_sequential_plan(tmp_path: Path) -> None:
    path = _seq_csv(tmp_path, labelled=100, e_auto=0.02)
    out = runner.invoke(app, ["stats", "agreement", str(path)])
    assert out.exit_code == 1
    assert f"{path}:line 102: annotator_a" in out.output and "[sequential]" in out.output
