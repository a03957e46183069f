"""``rcea import lm-eval``: the ``samples_<task>_<timestamp>.jsonl`` files lm-eval's own
``--log_samples`` path writes (its evaluator and ``EvaluationTracker`` on a toy task,
:mod:`tests.support.lm_eval_logs`) → interchange records → the store. Expected ids, seeds
and rewards are computed here from the JSON lines, not by the importer; refusals name the
file, line and key and write nothing."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from typer.testing import CliRunner

from rcea.app.cli import app
from rcea.study.events import IMPORT_LM_EVAL
from rcea.study.settings import get_settings
from rcea.study.store import Event, Question, Trajectory
from tests.support.lm_eval_logs import write_lm_eval_logs

runner = CliRunner()
BASE = ("--run", "base", "--model", "tiny", "--step", "0")


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """Two lm-eval runs (seeds 0 and 1), each a folder of two samples files."""
    return write_lm_eval_logs(tmp_path_factory.mktemp("lm-eval"), seeds=(0, 1))


@pytest.fixture
def store(engine, store_url: str, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    monkeypatch.setenv("RCEA_DATABASE_URL", store_url)
    get_settings.cache_clear()
    return engine


def _file(folder: Path, task: str) -> Path:
    (path,) = folder.glob(f"samples_{task}_2*.jsonl")
    return path


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _cli(*args: str) -> tuple[int, dict[str, Any]]:
    res = runner.invoke(app, ["import", "lm-eval", *args, "--json"])
    return res.exit_code, json.loads(res.stdout)


def _stored(engine) -> list[Trajectory]:  # type: ignore[no-untyped-def]
    with sa.orm.Session(engine) as s:
        return list(s.scalars(sa.select(Trajectory).order_by(Trajectory.trajectory_id)))


def _questions(engine) -> dict[str, tuple[str | None, str | None]]:  # type: ignore[no-untyped-def]
    with sa.orm.Session(engine) as s:
        return {q.question_id: (q.text, q.ground_truth) for q in s.scalars(sa.select(Question))}


def test_samples_import_one_question_per_document_and_the_named_metric(
    store, runs: list[Path]
) -> None:  # type: ignore[no-untyped-def]
    path = _file(runs[0], "toy_arith")
    lines = _lines(path)
    assert {"doc_id", "doc", "target", "arguments", "resps", "filtered_resps"} <= set(lines[0])
    assert {ln["filter"] for ln in lines} == {"strict", "none"}
    # two filters: every document is logged twice, so the filter must be named
    code, res = _cli(str(path), "--study", "e", *BASE)
    assert code == 1 and res["message"] == "nothing was imported"
    assert "--filter" in res["errors"][0]["message"]
    assert _stored(store) == []

    code, res = _cli(str(path), "--study", "e", *BASE, "--filter", "strict")
    assert code == 0, res
    strict = [ln for ln in lines if ln["filter"] == "strict"]
    expected = {
        f"base:tiny:s0:lme-{ln['doc_hash'][:16]}:0": (
            ln["resps"][0][0],
            int(ln["exact_match"]),
            ln["target"],
            ln["arguments"]["gen_args_0"]["arg_0"],
        )
        for ln in strict
    }
    questions = _questions(store)
    got = {
        t.trajectory_id: (t.text, t.reward, *questions[t.question_id][::-1]) for t in _stored(store)
    }
    assert got == expected
    assert {r for _, r, _, _ in got.values()} == {0, 1}  # the scripted model is half right
    # the rule is recorded with the import; importing again is a no-op
    with sa.orm.Session(store) as s:
        (event,) = s.scalars(sa.select(Event).where(Event.kind == IMPORT_LM_EVAL))
    (rule,) = event.payload["score_rules"].values()
    assert rule["source"] == "exact_match" and rule["filter"] == "strict"
    assert event.payload["options"]["step"] == 0
    code, res = _cli(str(path), "--study", "e", *BASE, "--filter", "strict")
    assert code == 0 and res["n_imported_files"] == 0 and res["n_skipped_files"] == 1
    assert len(_stored(store)) == len(strict)


def test_runs_with_other_seeds_add_samples_to_the_same_questions(store, runs: list[Path]) -> None:  # type: ignore[no-untyped-def]
    files = [_file(folder, "toy_arith") for folder in runs]
    # the folders are searched; the repeats task's file is refused (see the next test), so
    # name the files themselves
    code, res = _cli(
        *map(str, files), "--study", "e", *BASE, "--filter", "strict", "--question-key", "question"
    )
    assert code == 0, res
    assert res["n_imported_files"] == 2 and res["n_questions"] == 4
    expected = {}
    for seed, path in enumerate(files):
        for ln in _lines(path):
            if ln["filter"] == "strict":
                question = ln["doc"]["question"]
                qid = "q-" + hashlib.sha256(question.encode()).hexdigest()[:16]  # verl's id
                expected[f"base:tiny:s0:{qid}:{seed}"] = (question, int(ln["exact_match"]))
    questions = _questions(store)
    got = {t.trajectory_id: (questions[t.question_id][0], t.reward) for t in _stored(store)}
    assert got == expected


def test_repeats_need_a_score_per_response(store, runs: list[Path], tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    path = _file(runs[0], "toy_arith_rep")
    (line,) = [ln for ln in _lines(path) if ln["filter"] == "strict"][:1]
    assert len(line["resps"][0]) == 3  # lm-eval's repeats: 3 responses, one metric value
    code, res = _cli(str(runs[0]), "--study", "r", *BASE, "--filter", "strict")
    assert code == 1
    err = res["errors"][0]
    assert err["file"] == str(path) and err["field"] == "exact_match"
    assert err["message"].startswith("one value for 3 responses")
    assert _stored(store) == []  # the good file in the same folder is not written either
    # the filtered response is the one the metric scored
    code, res = _cli(
        str(path), "--study", "r", *BASE, "--filter", "strict", "--responses", "filtered"
    )
    assert code == 0 and res["n_trajectories"] == 4
    # a task whose metric scores every response (a list per document) gives one each
    per = tmp_path / path.name
    rows = _lines(path)
    for ln in rows:
        ln["exact_match"] = [float(r.split()[0] == ln["target"]) for r in ln["resps"][0]]
    per.write_text("".join(json.dumps(ln) + "\n" for ln in rows))
    code, res = _cli(str(per), "--study", "r2", *BASE, "--filter", "strict")
    assert code == 0 and res["n_trajectories"] == 12
    stored = [t for t in _stored(store) if t.trajectory_id.endswith((":0", ":1", ":2"))]
    assert {t.seed for t in stored} == {0, 1, 2}


def test_bad_lines_are_named_and_nothing_is_written(
    store, runs: list[Path], tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    src = _file(runs[0], "toy_arith")
    rows = _lines(src)
    del rows[0]["resps"]
    rows[1]["exact_match"] = 0.5
    rows[2]["arguments"]["gen_args_0"]["arg_1"] = " 5"  # a loglikelihood request's shape
    bad = tmp_path / src.name
    bad.write_text("".join(json.dumps(ln) + "\n" for ln in rows) + "{not json\n")
    code, res = _cli(str(bad), "--study", "b", *BASE, "--filter", "strict")
    assert code == 1
    found = {(e["location"], e["field"]) for e in res["errors"]}
    assert found == {
        ("line 1", "resps"),
        ("line 2", "exact_match"),
        ("line 3", "arguments"),
        ("line 9", None),
    }, res["errors"]
    assert _stored(store) == []
    # a threshold accepts partial credit; the loglikelihood line stays refused
    good = tmp_path / "ok" / src.name
    good.parent.mkdir()
    shutil.copy(src, good)
    rows = _lines(good)
    rows[1]["exact_match"] = 0.5
    good.write_text("".join(json.dumps(ln) + "\n" for ln in rows))
    code, res = _cli(
        str(good), "--study", "b", *BASE, "--filter", "strict", "--metric-threshold", "0.4"
    )
    assert code == 0, res
    assert "R = `exact_match` > 0.4" in " ".join(
        runner.invoke(
            app,
            [
                "import",
                "lm-eval",
                str(good),
                "--study",
                "c",
                *BASE,
                "--filter",
                "strict",
                "--metric-threshold",
                "0.4",
            ],
        ).stdout.splitlines()
    )
