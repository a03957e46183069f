"""``rcea import trl``: the completion logs TRL's own ``GRPOTrainer(log_completions=True)``
writes (a tiny CPU run, :mod:`tests.support.trl_logs`) → interchange records → the store.
Expected ids, groups, seeds and rewards are computed here from the parquet rows, not by the
importer; refusals name the file, row and column and write nothing."""

from __future__ import annotations

import hashlib
import json
import shutil
from collections import defaultdict
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import sqlalchemy as sa
from typer.testing import CliRunner

from rcea.app.cli import app
from rcea.study.events import IMPORT_TRL
from rcea.study.settings import get_settings
from rcea.study.store import Event, Trajectory
from tests.support.trl_logs import write_trl_logs

runner = CliRunner()


@pytest.fixture(scope="module")
def trl_out(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_trl_logs(tmp_path_factory.mktemp("trl"), conversational=True)


@pytest.fixture
def store(engine, store_url: str, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    """``engine``, and the CLI pointed at the same store."""
    monkeypatch.setenv("RCEA_DATABASE_URL", store_url)
    get_settings.cache_clear()
    return engine


def _rows(out: Path) -> list[dict[str, Any]]:
    return [
        r
        for f in sorted((out / "completions").glob("*.parquet"))
        for r in pq.read_table(f).to_pylist()
    ]


def _cli(*args: str) -> tuple[int, dict[str, Any]]:
    res = runner.invoke(app, ["import", "trl", *args, "--json"])
    return res.exit_code, json.loads(res.stdout)


def _stored(engine) -> list[Trajectory]:  # type: ignore[no-untyped-def]
    with sa.orm.Session(engine) as s:
        return list(s.scalars(sa.select(Trajectory).order_by(Trajectory.trajectory_id)))


def _copy(trl_out: Path, tmp_path: Path) -> Path:
    dest = tmp_path / "out"
    shutil.copytree(trl_out, dest)
    return dest


def test_trl_logs_import_with_groups_seeds_and_the_named_reward(
    store, trl_out: Path, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    out = _copy(trl_out, tmp_path)
    rows = _rows(out)
    assert {"correct", "fmt", "advantage"} <= set(rows[0])
    # two reward columns: the outcome must be named; nothing is written
    code, res = _cli(str(out), "--study", "t", "--run", "grpo", "--model", "tiny")
    assert code == 1 and res["ok"] is False and res["message"] == "nothing was imported"
    assert (
        "name the one that is the verifier outcome with --reward-column"
        in res["errors"][0]["message"]
    )
    assert _stored(store) == []

    code, res = _cli(
        str(out), "--study", "t", "--run", "grpo", "--model", "tiny", "--reward-column", "correct"
    )
    assert code == 0, res
    assert res["n_imported_files"] == 2 and res["n_trajectories"] == len(rows)
    expected = {}
    seeds: dict[tuple[int, str], int] = defaultdict(int)
    for r in rows:
        question = r["prompt"][-1]["content"]
        qid = "q-" + hashlib.sha256(question.encode()).hexdigest()[:16]
        seed = seeds[(r["step"], qid)]
        seeds[(r["step"], qid)] += 1
        tid = f"grpo:tiny:s{r['step']}:{qid}:{seed}"
        extras = {"correct": r["correct"], "fmt": r["fmt"], "advantage": r["advantage"]}
        expected[tid] = (qid, r["step"], seed, int(r["correct"]), extras)
    got = {
        t.trajectory_id: (t.question_id, t.step, t.seed, t.reward, json.loads(t.reward_extras))
        for t in _stored(store)
    }
    assert got == expected
    # the rule is recorded with the import; importing again is a no-op
    with sa.orm.Session(store) as s:
        (event,) = s.scalars(sa.select(Event).where(Event.kind == IMPORT_TRL))
    assert {r["source"] for r in event.payload["score_rules"].values()} == {"correct"}
    code, res = _cli(
        str(out), "--study", "t", "--run", "grpo", "--model", "tiny", "--reward-column", "correct"
    )
    assert code == 0 and res["n_imported_files"] == 0 and res["n_skipped_files"] == 2


def _rewrite(path: Path, dest: Path, edit: Any) -> None:
    rows = pq.read_table(path).to_pylist()
    for r in rows:
        edit(r)
    pq.write_table(pa.Table.from_pylist(rows), dest)


def test_text_prompts_relogs_and_refusals(store, trl_out: Path, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    out = _copy(trl_out, tmp_path)
    comp = out / "completions"
    first, second = sorted(comp.glob("*.parquet"))

    def as_text(r: dict[str, Any]) -> None:
        r["prompt"] = (
            f"<|im_start|>user\n{r['prompt'][-1]['content']}<|im_end|>\n<|im_start|>assistant\n"
        )
        r["completion"] = r["completion"][0]["content"] + "<|im_end|>"

    _rewrite(first, first, as_text)
    _rewrite(second, second, as_text)
    # a third logging step between two generations: TRL writes the same rows again
    _rewrite(second, comp / "completions_00003.parquet", lambda r: r.update(step=3))
    code, res = _cli(
        str(comp), "--study", "t", "--run", "r", "--model", "m", "--reward-column", "correct"
    )
    assert code == 0, res
    assert res["n_imported_files"] == 2 and res["relogged"] == [
        str(comp / "completions_00003.parquet")
    ]
    assert res["n_special_stripped"] == res["n_trajectories"]
    stored = _stored(store)
    assert {t.step for t in stored} == {1, 2}
    assert all(not t.text.endswith("<|im_end|>") for t in stored)
    # the chat template is stripped: the same question ids as the conversational prompts
    questions = ("What is 2 + 3?", "What is 7 - 4?", "What is 3 * 3?")
    ids = {"q-" + hashlib.sha256(q.encode()).hexdigest()[:16] for q in questions}
    assert {t.question_id for t in stored} <= ids

    # a reward that is not 0/1 needs a threshold; an empty completion needs the flag
    bad = tmp_path / "bad"
    bad.mkdir()
    _rewrite(
        first,
        bad / "completions_00001.parquet",
        lambda r: r.update(fmt=r["fmt"], correct=r["correct"] * 2 - 1),
    )
    code, res = _cli(
        str(bad), "--study", "u", "--run", "r", "--model", "m", "--reward-column", "correct"
    )
    assert code == 1 and "--reward-threshold" in res["errors"][0]["message"]
    code, res = _cli(
        str(bad),
        "--study",
        "u",
        "--run",
        "r",
        "--model",
        "m",
        "--reward-column",
        "correct",
        "--reward-threshold",
        "0",
    )
    assert code == 0 and res["n_imported_files"] == 1
    empty = tmp_path / "empty"
    empty.mkdir()
    _rewrite(first, empty / "completions_00001.parquet", lambda r: r.update(completion=""))
    code, res = _cli(
        str(empty), "--study", "v", "--run", "r", "--model", "m", "--reward-column", "correct"
    )
    err = res["errors"][0]
    assert code == 1 and err["location"] == "row 1" and err["field"] == "completion"
    assert "--skip-empty-output" in err["message"]
    code, res = _cli(
        str(empty),
        "--study",
        "v",
        "--run",
        "r",
        "--model",
        "m",
        "--reward-column",
        "correct",
        "--skip-empty-output",
    )
    assert code == 1 and res["ok"] is False  # every row empty: no records
