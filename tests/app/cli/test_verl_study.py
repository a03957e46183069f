"""A study imported from a verl dump (written by verl's own ``_dump_generations``, scored
by verl's DAPO scorer) reaches its rewards-only numbers: ``rcea report build`` gives every
checkpoint H(R|x), accuracy, coverage and the sequence decomposition's outcome term, says
which token entropies are missing and how to fill them, shows the import's score rule and
prints the "where" column uncut; ``rcea stats entropy`` on ``rcea export`` gives the same
outcome numbers. Expected values are computed here from the scorer's ``acc``."""

from __future__ import annotations

import json
import math
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from rcea.app.cli import app
from tests.support import verl_dumps

QUESTIONS = [("What is 6*7?", "42"), ("What is 10-3?", "7"), ("What is 2^5?", "32")]
N = 8
RUN, MODEL = "dapo", "qwen2.5-math-1.5b-instruct"
STEPS = (0, 100)


def completion(step: int, q: int, s: int) -> str:
    gt = QUESTIONS[q][1]
    right = (s * (q + 1) + step) % 5 < 2 + q  # a different success rate per question
    return f"Reasoning...\nAnswer: {gt if right else int(gt) + 1}"


@pytest.fixture(scope="module")
def dump(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[int, list[Any]]]:
    directory = tmp_path_factory.mktemp("verl") / "validation"
    accs: dict[int, list[Any]] = {}
    for step in STEPS:
        rows = [(q, s) for q in range(len(QUESTIONS)) for s in range(N)]
        texts = [completion(step, q, s) for q, s in rows]
        res = [
            verl_dumps.dapo_score(t, QUESTIONS[q][1]) for (q, _), t in zip(rows, texts, strict=True)
        ]
        verl_dumps.dump_generations(
            directory,
            step,
            [f"system\nBe brief.\nuser\n{QUESTIONS[q][0]}\nassistant\n" for q, _ in rows],
            texts,
            [QUESTIONS[q][1] for q, _ in rows],
            [r["score"] for r in res],
            {k: [r[k] for r in res] for k in ("score", "acc", "pred")},
        )
        accs[step] = [(q, int(r["acc"])) for (q, _), r in zip(rows, res, strict=True)]
    return directory, accs


def expected_outcome(pairs: list[tuple[int, int]], k_min: int) -> dict[str, float]:
    by_q: dict[int, list[int]] = defaultdict(list)
    for q, r in pairs:
        by_q[q].append(r)
    ps = [sum(v) / len(v) for v in by_q.values()]
    h = [0.0 if p in (0, 1) else -(p * math.log(p) + (1 - p) * math.log(1 - p)) for p in ps]
    return {
        "accuracy": sum(r for _, r in pairs) / len(pairs),
        "mean_accuracy": sum(ps) / len(ps),
        "mean_outcome_entropy": sum(h) / len(h),
        "sequence_outcome_term": sum(h) / len(h),
        "coverage_success": sum(sum(v) >= k_min for v in by_q.values()) / len(by_q),
        "coverage_failure": sum(len(v) - sum(v) >= k_min for v in by_q.values()) / len(by_q),
        "share_solved": sum(sum(v) >= 1 for v in by_q.values()) / len(by_q),
        "share_mixed": sum(0 < sum(v) < len(v) for v in by_q.values()) / len(by_q),
    }


def test_rewards_only_study_reaches_its_outcome_numbers(
    dump: tuple[Path, dict[int, list[Any]]],
    store_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from rcea.study.settings import get_settings

    directory, accs = dump
    monkeypatch.setenv("RCEA_DATABASE_URL", store_url)
    monkeypatch.setenv("RCEA_DATA_DIR", str(tmp_path / "data"))
    get_settings.cache_clear()
    runner = CliRunner()
    imp = runner.invoke(
        app,
        ["import", "verl", str(directory), "--study", "s", "--run", RUN, "--model", MODEL]
        + ["--reward-key", "acc"],
    )
    assert imp.exit_code == 0, imp.output
    res = runner.invoke(app, ["report", "build", "--study", "s", "--k-min", "2", "--json"])
    assert res.exit_code == 0, res.output
    rep = json.loads(res.stdout)
    assert [c["step"] for c in rep["checkpoints"]] == list(STEPS)
    for c in rep["checkpoints"]:
        want = expected_outcome(accs[c["step"]], k_min=2)
        got = c["outcome"]
        assert {k: got[k] for k in want} == pytest.approx(want)
        assert got["n_questions"] == len(QUESTIONS) and got["n_trajectories"] == N * 3
        assert c["entropy"] is None
        assert "lack mean_token_entropy" in c["entropy_error"]
        assert "rcea probe score --study S --run RUN" in c["entropy_error"]
    (imported,) = rep["imports"]
    assert imported["run"] == RUN and imported["model"] == MODEL
    assert imported["score_rule"] == "R = `acc` (0/1); score values seen: -1.0, 1.0"
    names = {(q["section"], q["name"], q["step"]) for q in rep["quantities"]}
    assert ("outcome", "mean_outcome_entropy", 100) in names
    assert ("outcome", "sequence_outcome_term", 0) in names

    from rcea.app.view.report_frames import decomposition_frame
    from rcea.study.report.schema import StudyReport

    frame = decomposition_frame(StudyReport.model_validate(rep))
    assert list(frame["H(R|x)"]) == pytest.approx(
        [expected_outcome(accs[s], k_min=2)["mean_outcome_entropy"] for s in STEPS]
    )
    assert frame["H(Y|x)"].isna().all()

    from rcea.study.report.html import render_html

    page = render_html(rep, scope="entropy-only", figures={}, hashes={})
    assert "<h3>Outcome numbers (rewards only)</h3>" in page
    assert "score rule R = `acc` (0/1)" in page

    text = runner.invoke(app, ["report", "build", "--study", "s", "--k-min", "2"])
    assert text.exit_code == 0, text.output
    assert f"{RUN} {MODEL} 100" in text.output  # the where column is not cut
    assert "score rule R = `acc` (0/1)" in text.output
    assert f"token and sequence entropies missing at: {RUN} {MODEL} 0, {RUN} {MODEL} 100" in (
        text.output
    )

    # dumps only, no checkpoint ever scored: the rewards-only and audited numbers need no
    # probe, so `rcea status` never blocks on one (docs/commands.md "rcea status")
    status = runner.invoke(app, ["status", "--study", "s"])
    assert status.exit_code == 0, status.output
    assert "token entropies" not in status.output and "probe score" not in status.output
    assert "    NEXT: rcea judge run --study s --judge NAME" in status.output

    out = tmp_path / "s.jsonl"
    exp = runner.invoke(app, ["export", "s", "--out", str(out)])
    assert exp.exit_code == 0, exp.output
    st = runner.invoke(
        app, ["stats", "entropy", str(out), "--step", "100", "--k-min", "2", "--json"]
    )
    assert st.exit_code == 0, st.output
    data = json.loads(st.stdout)
    assert data["outcome_only"] is True and data["n_missing_token_entropies"] == N * 3
    want = expected_outcome(accs[100], k_min=2)
    assert {k: data[k] for k in want} == pytest.approx(want)
    plain = runner.invoke(app, ["stats", "entropy", str(out), "--step", "0", "--k-min", "2"])
    assert plain.exit_code == 0, plain.output
    assert "outcome report (rewards only)" in plain.output
    assert "lack token entropies" in plain.output


def test_rubric_sized_to_the_study_and_shipped_rubric_by_name(
    dump: tuple[Path, dict[int, list[Any]]],
    store_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from rcea.audits.rubric import default_rubric, load_rubric
    from rcea.study.settings import get_settings

    directory, accs = dump
    monkeypatch.setenv("RCEA_DATABASE_URL", store_url)
    monkeypatch.setenv("RCEA_DATA_DIR", str(tmp_path / "data"))
    get_settings.cache_clear()
    runner = CliRunner()
    imp = runner.invoke(
        app,
        ["import", "verl", str(directory), "--study", "s", "--run", RUN, "--model", MODEL]
        + ["--reward-key", "acc"],
    )
    assert imp.exit_code == 0, imp.output
    succ: dict[int, int] = defaultdict(int)
    for pairs in accs.values():
        for q, r in pairs:
            succ[q] += r
    pair_counts = {q: k * (k - 1) // 2 for q, k in succ.items()}
    qualifying = [c for c in pair_counts.values() if c >= 3]  # the default floor
    out = tmp_path / "rubric.toml"
    res = runner.invoke(app, ["audit", "rubric", "init", "--study", "s", "--out", str(out)])
    assert res.exit_code == 0, res.output
    rubric = load_rubric(out)
    assert rubric.name == "s-rubric"
    assert rubric.pairs.n_questions == len(qualifying)
    assert rubric.pairs.min_pairs_per_question == 3
    assert rubric.pairs.pairs_per_question == min(156, max(qualifying))
    assert rubric.calibration.size == min(600, sum(succ.values()))
    assert rubric.gate == default_rubric().gate  # every other default kept
    planned = sum(min(c, rubric.pairs.pairs_per_question) for c in qualifying)
    assert f"wrote {out}: {planned} pairs planned" in res.output
    assert "rcea audit rubric freeze" in res.output
    again = runner.invoke(app, ["audit", "rubric", "init", "--study", "s", "--out", str(out)])
    assert again.exit_code != 0 and "--force" in again.output
    frozen = runner.invoke(app, ["audit", "rubric", "freeze", str(out)])
    assert frozen.exit_code == 0, frozen.output
    by_name = runner.invoke(app, ["audit", "rubric", "freeze", "default"])
    assert by_name.exit_code == 0 and "rubric rcea-default v1" in by_name.output
    unknown = runner.invoke(app, ["audit", "rubric", "freeze", "nope"])
    assert unknown.exit_code != 0 and "shipped rubric: default, demo" in unknown.output


def test_judge_verify_uses_the_records_ground_truth(tmp_path: Path) -> None:
    """An exported study carries each question's ``ground_truth`` (verl's ``gts``):
    ``rcea judge verify`` checks math records against it without a --gold file."""
    recs = [
        {"trajectory_id": "t1", "question_id": "q1", "text": "so \\boxed{42}", "reward": 1,
         "ground_truth": "42"},
        {"trajectory_id": "t2", "question_id": "q1", "text": "so \\boxed{41}", "reward": 1,
         "ground_truth": "42"},
        {"trajectory_id": "t3", "question_id": "q2", "text": "\\boxed{7}", "reward": 1,
         "ground_truth": "7"},
    ]  # fmt: skip
    path = tmp_path / "r.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in recs), encoding="utf-8")
    res = CliRunner().invoke(app, ["judge", "verify", str(path), "--json"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    assert data["n_checked"] == 3
    assert [d["trajectory_id"] for d in data["disagreements"]] == ["t2"]
    path.write_text(json.dumps({**recs[0], "ground_truth": None}) + "\n", encoding="utf-8")
    bad = CliRunner().invoke(app, ["judge", "verify", str(path)])
    assert bad.exit_code != 0
    assert "needs --gold GOLD.jsonl or records with ground_truth" in bad.output
