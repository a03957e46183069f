"""Inputs that would change a number silently are refused, each with how to fix it
(docs/security.md "Hostile and broken input files")."""

from __future__ import annotations

import json
import random
import time
from math import comb
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rcea.app.cli import app
from rcea.audits.passk import pass_at_k
from rcea.pipeline.importers.chat import (
    QUESTION_REGEX_TIMEOUT_S,
    QuestionRegexTimeout,
    compile_question_regex,
    extract_question,
)
from rcea.pipeline.judge.prompts import JudgeTemplate
from rcea.pipeline.judge.verifier import extract_boxed
from rcea.study.store.repository import StoreError, check_study_name

runner = CliRunner()


def _refused(args: list[str]) -> dict:  # type: ignore[type-arg]
    out = runner.invoke(app, [*args, "--json"])
    assert out.exit_code == 1, out.output
    doc = json.loads(out.stdout)
    assert doc["ok"] is False
    return doc


def test_passk_refuses_a_question_on_two_rows(tmp_path: Path) -> None:
    path = tmp_path / "r.csv"
    path.write_text("question_id,n,c\nq1,8,3\nq2,8,1\nq1,8,5\n")
    doc = _refused(["stats", "passk", str(path), "--k", "1"])
    assert doc["error"] == (
        f"{path}:line 4: question_id: 'q1' is also on line 2; one row per question "
        "(add up n and c first)"
    )


def test_pass_at_k_of_a_huge_n_needs_no_huge_memory() -> None:
    """n = 10¹⁰: k factors, not c of them (a MemoryError before); the same value as the
    combinatorial definition where that is computable."""
    assert pass_at_k(10**10, 5 * 10**9, 8) == pytest.approx(1 - 0.5**8, rel=1e-6)
    for n, c, k in [(40, 30, 3), (40, 2, 3), (64, 40, 8)]:
        assert pass_at_k(n, c, k) == pytest.approx(1 - comb(n - c, k) / comb(n, k), rel=1e-12)
    with pytest.raises(ValueError, match="both above"):
        pass_at_k(10**9 * 4, 2 * 10**9, 10**9)


def test_covfit_refuses_an_exclusion_that_names_no_run(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text(
        "transition,predicted,observed,run\na,0.1,0.2,grpo\nb,0.3,0.1,grpo\n"
        "c,-0.2,-0.1,clipcov\nd,0.5,0.4,clipcov\ne,0.2,0.2,grpo\n"
    )
    doc = _refused(["stats", "covfit", str(path), "--exclude-run", "clipcvo"])
    assert "clipcvo are not among the runs (clipcov, grpo); check the spelling" in doc["error"]
    ok = runner.invoke(app, ["stats", "covfit", str(path), "--exclude-run", "clipcov", "--json"])
    assert ok.exit_code == 0 and json.loads(ok.stdout)["excluded_runs"] == ["clipcov"]


def test_agreement_refuses_cells_beyond_its_header(tmp_path: Path) -> None:
    path = tmp_path / "pairs.csv"
    path.write_text("pair_id,annotator_a,annotator_b\np1,same,same\np2,same,different,same\n")
    doc = _refused(["stats", "agreement", str(path)])
    assert doc["error"].startswith(f"{path}:line 3: 4 cells but the header names 3 columns")


@pytest.mark.parametrize("name", ["   ", " s", "s\u200b", "x" * 201, "a\x07b"])
def test_a_new_study_needs_a_plain_name(name: str) -> None:
    with pytest.raises(StoreError, match="--study"):
        check_study_name(name)
    assert check_study_name("rlvr-study 2") == "rlvr-study 2"


def test_blank_study_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    path.write_text(
        json.dumps(
            {"trajectory_id": "t", "question_id": "q", "text": "x", "reward": 1, "run": "r",
             "model": "m", "step": 0, "seed": 0}
        ) + "\n"
    )  # fmt: skip
    doc = _refused(["ingest", str(path), "--study", "   "])
    assert "--study must be a non-empty name" in doc["error"]
    studies = runner.invoke(app, ["studies", "--json"])
    assert "   " not in studies.stdout


def test_a_bare_dollar_in_a_judge_template_is_refused_when_it_is_loaded() -> None:
    with pytest.raises(ValueError, match=r"bare `\$` at line 2, column 10 .* write `\$\$`"):
        JudgeTemplate(name="t", version=1, system="s", user="$problem\nit costs $ 5 $solution")
    ok = JudgeTemplate(name="t", version=1, system="s", user="$problem costs $$5 $solution")
    assert "costs $5" in ok.render(problem="p", solution="s")[1]["content"]


def test_question_regex_has_a_time_limit() -> None:
    rx = compile_question_regex(r"(?P<q>(a|aa)+)$")  # backtracks without end on a…a!
    started = time.monotonic()
    with pytest.raises(QuestionRegexTimeout, match="simplify it"):
        extract_question("a" * 60 + "!", regex=rx)
    assert time.monotonic() - started < QUESTION_REGEX_TIMEOUT_S + 10  # a loaded machine
    assert (
        extract_question("user\nQ?\nassistant\n", regex=compile_question_regex(r"user\n(.*?)\n"))
        == "Q?"
    )


def _scan_from_every_opener(text: str) -> str | None:
    """The definition: the last ``\\boxed{``/``\\fbox{`` whose braces close (quadratic)."""
    found = None
    starts = sorted(
        i for op in ("\\boxed{", "\\fbox{") for i in range(len(text)) if text.startswith(op, i)
    )
    for i in starts:
        j = text.index("{", i) + 1
        depth, k = 1, j
        while k < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[k], 0)
            k += 1
        if depth == 0:
            found = text[j : k - 1].strip()
    return found


def test_boxed_scan_is_linear_and_agrees_with_the_definition() -> None:
    rng = random.Random(7)
    atoms = ["\\boxed{", "\\fbox{", "{", "}", "x", " 1 ", "\\frac", "ed{", "\\box"]
    for _ in range(3000):
        text = "".join(rng.choice(atoms) for _ in range(rng.randint(0, 16)))
        assert extract_boxed(text) == _scan_from_every_opener(text), text
    started = time.monotonic()
    assert extract_boxed("\\boxed{" * 150_000) is None  # 1 MB of unclosed openers
    assert extract_boxed("\\boxed{" * 100_000 + "}" * 100_000) == ""  # the innermost
    assert time.monotonic() - started < 10  # quadratic: hours
