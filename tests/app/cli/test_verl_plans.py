"""Plans the data can meet, and imports that say what they did (issue: a real study gets
to its audited numbers on the documented path), on a verl-shaped study written by verl's
own dump writer (tests/support/verl_study.py: ±1 scores, uneven successes per question,
8 samples per question, one empty completion) and judged by an oracle that rejects
guessed successes. Expected values are computed here from what the generator wrote."""

from __future__ import annotations

import json
import re
import shutil
from math import comb
from pathlib import Path
from typing import Any

import pytest
from sqlmodel import select
from typer.testing import CliRunner

from rcea.app.cli import app
from rcea.audits.rubric import load_rubric
from rcea.study.settings import get_settings
from rcea.study.store import list_events, make_engine, session_scope
from rcea.study.store.models import AuditPair
from tests.support import verl_study as vs


@pytest.fixture(scope="module")
def dump(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return vs.write_validation_dump(tmp_path_factory.mktemp("verl") / "validation")


class Cli:
    def __init__(self, store_url: str, data: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setenv("RCEA_DATABASE_URL", store_url)
        monkeypatch.setenv("RCEA_DATA_DIR", str(data))
        get_settings.cache_clear()
        self.runner = CliRunner()
        self.url, self.data = store_url, data

    def __call__(self, *args: str) -> Any:
        return self.runner.invoke(app, list(args))

    def json(self, *args: str, code: int = 0) -> Any:
        res = self(*args, "--json")
        assert res.exit_code == code, res.output
        return json.loads(res.stdout)


@pytest.fixture
def judged(dump: Path, store_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Cli:
    """The dump imported as the how-to says, then judged."""
    cli = Cli(store_url, tmp_path / "data", monkeypatch)
    res = cli("import", "verl", str(dump), "--study", "s", *vs.IMPORT_ARGS)
    assert res.exit_code == 0, res.output
    eng = make_engine(store_url)
    vs.judge_study(eng, "s", tmp_path / "data")
    eng.dispose()
    return cli


def expected_pairs(step_index: int, floor: int = 3) -> tuple[dict[int, int], dict[int, int]]:
    """question → pairs of judge-accepted successes at one step: those at or above the
    floor, and those with some success below it."""
    pairs = {q: comb(vs.accepted(step_index, q), 2) for q in range(vs.N_QUESTIONS)}
    with_any = {q: p for q, p in pairs.items() if vs.accepted(step_index, q) > 0}
    return (
        {q: p for q, p in with_any.items() if p >= floor},
        {q: p for q, p in with_any.items() if p < floor},
    )


def test_init_sizes_pairs_from_each_question_at_the_audited_checkpoint(
    judged: Cli, tmp_path: Path
) -> None:
    out = tmp_path / "rubric.toml"
    size = judged.json("audit", "rubric", "init", "--study", "s", "--out", str(out), "--step", "0")
    keep, below = expected_pairs(0)
    # the judge's rejections count: verifier successes would give other numbers
    assert sum(keep.values()) != sum(comb(vs.successes(0, q), 2) for q in keep), (
        "the generator must make accepted and verifier successes differ"
    )
    cap = max(keep.values())
    flow = size["flow"]
    assert flow["n_qualifying"] == flow["n_questions_drawn"] == len(keep)
    assert flow["n_below_floor"] == len(below)
    assert sorted(b["pairs"] for b in flow["below_floor"]) == sorted(below.values())
    assert size["planned_pairs"] == sum(min(p, cap) for p in keep.values())
    assert size["pairs"]["steps"] == [0]
    rubric = load_rubric(out)
    assert rubric.pairs.steps == (0,) and rubric.pairs.min_pairs_per_question == 3
    assert rubric.pairs.pairs_per_question == cap
    # 8 samples per question: K_min = 8 needs every sample to succeed; lowered, with words
    assert rubric.estimators.k_min < 8 and rubric.estimators.k_min == size["k_min"]
    assert size["most_samples_per_question"] == vs.N_SAMPLES
    assert any(w.startswith(f"k_min = {size['k_min']} (default 8)") for w in size["warnings"])
    assert any("The trade-off" in w for w in size["warnings"])

    text = judged("audit", "rubric", "init", "--study", "s", "--out", str(out), "--step", "0",
                  "--force")  # fmt: skip
    assert text.exit_code == 0, text.output
    assert re.search(rf"below the floor of 3 pair\(s\), left out +{len(below)}\n", text.output)
    assert "warning: k_min" in text.output

    # sample accepts the plan init wrote, and draws exactly what check said it would
    check = judged.json("audit", "rubric", "check", str(out), "--study", "s")
    assert check["meets_plan"] and check["pairs"]["n_pairs"] == size["planned_pairs"]
    frozen = judged.json("audit", "rubric", "freeze", str(out), "--study", "s")
    assert frozen["check"]["meets_plan"]
    judged.json("audit", "partition", "freeze", "--study", "s")
    drawn = judged.json("audit", "sample", "--study", "s", "--rubric", "s-rubric")
    assert drawn["n_pairs"] == size["planned_pairs"]
    assert drawn["n_questions"] == len(keep) and len(drawn["below_floor"]) == len(below)
    eng = make_engine(judged.url)
    with session_scope(eng) as s:
        (ev,) = list_events(s, kind="audit.sample")
        assert ev.payload["scope"] == {"steps": [0]}
        assert len(ev.payload["below_floor"]) == len(below)
    eng.dispose()


def test_unknown_checkpoint_and_nothing_to_draw_are_named(judged: Cli, tmp_path: Path) -> None:
    out = tmp_path / "r.toml"
    res = judged("audit", "rubric", "init", "--study", "s", "--out", str(out), "--step", "7")
    assert res.exit_code == 1 and "study s has no step 7 (its steps: 0, 20, 40)" in res.output
    res = judged("audit", "rubric", "init", "--study", "s", "--out", str(out), "--step", "0",
                 "--min-pairs", "500")  # fmt: skip
    assert res.exit_code == 1 and "no question has 500 pair(s)" in res.output
    assert not out.exists()


def test_check_and_freeze_refuse_a_plan_the_study_cannot_meet(judged: Cli) -> None:
    check = judged.json("audit", "rubric", "check", "default", "--study", "s", code=2)
    assert not check["meets_plan"] and check["ok"] is False
    assert "asks for 29 question(s) with at least 156 pairs" in check["problems"][0]
    assert check["pairs"]["n_questions_drawn"] == 0
    assert check["calibration"]["population"] == sum(
        vs.successes(i, q) for i in range(len(vs.STEPS)) for q in range(vs.N_QUESTIONS)
    )
    assert any("insufficient evidence" in w for w in check["warnings"])  # k_min 8 on 8 samples

    refused = judged("audit", "rubric", "freeze", "default", "--study", "s")
    assert refused.exit_code == 1
    assert "study s cannot meet its plan" in refused.output
    assert "--force --reason TEXT" in refused.output
    no_reason = judged("audit", "rubric", "freeze", "default", "--study", "s", "--force")
    assert no_reason.exit_code == 1 and "--force needs --reason" in no_reason.output
    assert judged.json("audit", "rubric", "list") == []
    forced = judged.json("audit", "rubric", "freeze", "default", "--study", "s", "--force",
                         "--reason", "the paper's plan, for comparison")  # fmt: skip
    assert forced["created"]
    eng = make_engine(judged.url)
    with session_scope(eng) as s:
        (ev,) = list_events(s, kind="rubric.freeze")
        rec = ev.payload["check"]
        assert rec["forced"] and rec["reason"] == "the paper's plan, for comparison"
        assert rec["study"] == "s" and not rec["meets_plan"] and rec["problems"]
    eng.dispose()


def test_calibration_is_sized_from_the_rubric(judged: Cli, tmp_path: Path) -> None:
    refused = judged("judge", "calibrate", "sample", "--study", "s", "--judge", "verl-judge")
    assert refused.exit_code == 1
    assert "fewer than the default calibration plan's 600 items" in refused.output
    assert "rcea audit rubric init --study s --out rubric.toml" in refused.output
    out = tmp_path / "rubric.toml"
    size = judged.json("audit", "rubric", "init", "--study", "s", "--out", str(out))
    judged.json("audit", "rubric", "freeze", str(out), "--study", "s")
    cal = judged.json("judge", "calibrate", "sample", "--study", "s", "--judge", "verl-judge",
                      "--rubric", "s-rubric")  # fmt: skip
    assert cal["n_drawn"] == size["calibration_size"] < cal["n_pool"]
    assert cal["held_out"] == size["calibration_held_out"]
    # the calibration leaves the accepted-set check its 100 judge-accepted successes: it
    # takes every rejected one and the accepted ones beyond 100 (the study's counts)
    n_acc = sum(vs.accepted(i, q) for i in range(len(vs.STEPS)) for q in range(vs.N_QUESTIONS))
    n_all = sum(vs.successes(i, q) for i in range(len(vs.STEPS)) for q in range(vs.N_QUESTIONS))
    assert cal["n_pool"] == n_all and n_acc > 100
    assert cal["n_judge_accepted"] == n_acc - 100
    assert cal["n_judge_not_accepted"] == n_all - n_acc
    assert cal["n_drawn"] == n_all - 100
    check = judged.json("judge", "accepted", "sample", "--study", "s", "--size", "100")
    assert check["size"] == 100 == check["n_pool"], check


def test_import_counts_the_skipped_and_refuses_a_reimport_with_other_options(
    dump: Path, store_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cli = Cli(store_url, tmp_path / "data", monkeypatch)
    empty = cli("import", "verl", str(dump), "--study", "s", "--run", vs.RUN, "--model",
                vs.MODEL, "--reward-threshold", "0")  # fmt: skip
    assert empty.exit_code == 1 and "empty completion (pass --skip-empty-output" in empty.output
    res = cli.json("import", "verl", str(dump), "--study", "s", *vs.IMPORT_ARGS)
    n = len(vs.STEPS) * vs.N_QUESTIONS * vs.N_SAMPLES
    assert res["n_empty_skipped"] == 1 and res["n_trajectories"] == n - 1
    text = cli("import", "verl", str(dump), "--study", "t", *vs.IMPORT_ARGS)
    assert "skipped 1 empty completion(s) (--skip-empty-output" in text.output
    assert "score rule: R = 1 when score > 0; score values seen: -1.0, 1.0" in text.output
    # 8 samples per question: K+ >= 8 needs every sample to succeed, and the import says so
    assert "warning: at the default K_min = 8, 3 of 3 checkpoint(s) have too few" in text.output
    assert "`rcea audit rubric init --study t` sizes K_min to the study" in text.output

    again = cli("import", "verl", str(dump), "--study", "s", *vs.IMPORT_ARGS)
    assert again.exit_code == 0 and "already imported: all 3 file(s)" in again.output
    other = cli("import", "verl", str(dump), "--study", "s", *vs.IMPORT_ARGS, "--question-key",
                "step")  # fmt: skip
    assert other.exit_code == 1
    lines = [x for x in other.output.splitlines() if x.strip()]
    assert len(lines) == 1 and "already exists" not in other.output
    assert (
        "3 file(s) were imported into study s before (run grpo, model qwen2.5-1.5b) with "
        "other options: no --question-key then, --question-key step now; nothing imported"
    ) in lines[0]
    assert lines[0].endswith("--study s-2")  # t is taken by the import above, s-2 is free
    js = cli.json("import", "verl", str(dump), "--study", "s", *vs.IMPORT_ARGS,
                  "--question-key", "step", code=1)  # fmt: skip
    assert js["suggested_study"] == "s-2" and js["earlier_options"]["question_key"] is None
    # another run of the same files is another set of trajectories: not refused
    run2 = cli("import", "verl", str(dump), "--study", "s", *vs.IMPORT_ARGS[2:], "--run", "r2",
               "--model", vs.MODEL)  # fmt: skip
    assert run2.exit_code == 0, run2.output


def test_answer_key_absent_from_a_grpo_dump_and_from_some_files(
    dump: Path, store_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cli = Cli(store_url, tmp_path / "data", monkeypatch)
    grpo = cli("import", "verl", str(dump), "--study", "s", *vs.IMPORT_ARGS, "--answer-key",
               "pred")  # fmt: skip
    assert grpo.exit_code == 1
    assert "--answer-key 'pred' is in no line of this file" in grpo.output
    assert "writes no reward extras: leave --answer-key out" in grpo.output

    mixed = vs.write_validation_dump(tmp_path / "dapo", extras=True)
    shutil.copy(dump / "40.jsonl", mixed / "40.jsonl")  # one file without `pred`
    res = cli.json("import", "verl", str(mixed), "--study", "m", *vs.IMPORT_ARGS,
                   "--answer-key", "pred")  # fmt: skip
    per_file = vs.N_QUESTIONS * vs.N_SAMPLES
    assert res["n_answer_missing"] == per_file
    assert (
        f"--answer-key 'pred' is in no line of 1 of 3 file(s) (40.jsonl); {per_file} of "
        f"{3 * per_file - 1} sample(s) have no answer"
    ) in res["warnings"]


def test_plan_scoped_to_one_run_and_step_draws_only_there(
    judged: Cli, dump: Path, tmp_path: Path
) -> None:
    """Two runs of one model: pooled, every question could give pairs across runs and
    steps; a plan for run r2 at step 40 counts, and draws, only those trajectories."""
    res = judged("import", "verl", str(dump), "--study", "s", *vs.IMPORT_ARGS[2:], "--run", "r2",
                 "--model", vs.MODEL)  # fmt: skip
    assert res.exit_code == 0, res.output
    eng = make_engine(judged.url)
    vs.judge_study(eng, "s", judged.data)  # the same judge: judges only the new successes
    out = tmp_path / "r2.toml"
    pooled = judged.json("audit", "rubric", "init", "--study", "s", "--out", str(out))
    size = judged.json("audit", "rubric", "init", "--study", "s", "--out", str(out), "--force",
                       "--run", "r2", "--step", "40")  # fmt: skip
    keep, below = expected_pairs(2)
    assert size["flow"]["n_questions_drawn"] == len(keep)
    assert size["planned_pairs"] == sum(keep.values())  # the cap is the largest: all pairs
    assert pooled["planned_pairs"] > size["planned_pairs"]
    judged.json("audit", "rubric", "freeze", str(out), "--study", "s")
    judged.json("audit", "partition", "freeze", "--study", "s")
    judged.json("audit", "sample", "--study", "s", "--rubric", "s-rubric")
    with session_scope(eng) as s:
        pairs = s.exec(select(AuditPair)).all()
        assert len(pairs) == size["planned_pairs"]
        assert all(
            t.startswith(f"r2:{vs.MODEL}:s40:")
            for p in pairs
            for t in (p.trajectory_a, p.trajectory_b)
        )
    eng.dispose()
