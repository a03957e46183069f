"""``rcea import verl``: verl rollout/validation dumps → interchange records → the store.

The dump is hand-written in verl's own shape (``{global_step}.jsonl``, keys ``input``,
``output``, ``gts``, ``score``, ``step`` and reward extras ``acc`` / ``pred``); expected
ids, seeds and rewards are computed here independently of the importer.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from typer.testing import CliRunner

from rcea.app.cli import app
from rcea.pipeline.importers.chat import compile_question_regex, extract_question
from rcea.pipeline.importers.verl import VerlOptions, read_verl_file
from rcea.pipeline.records import RecordValidationError
from rcea.study.records.imports import import_verl
from rcea.study.store import Ingest, Question, Study, Trajectory

QUESTIONS = [
    "What is 2+3?",
    "Compute 7*6.",
    "Solve x + 4 = 10 for x.",
    "How many primes are below 20?\nAnswer with a number.",
]
SYSTEM = "Please reason step by step, and put your final answer within \\boxed{}."
STEPS = (0, 5, 10)
N_SAMPLES = 8


def qwen_prompt(question: str, *, marked: bool) -> str:
    """A Qwen2.5 chat prompt as verl decodes it: with the ChatML markers kept, or (the
    default, ``skip_special_tokens=True``) with them dropped."""
    if marked:
        return (
            f"<|im_start|>system\n{SYSTEM}<|im_end|>\n<|im_start|>user\n{question}<|im_end|>\n"
            "<|im_start|>assistant\n"
        )
    return f"system\n{SYSTEM}\nuser\n{question}\nassistant\n"


def score_of(step: int, q: int, s: int) -> float:
    """1.0 correct, 0.0 wrong, -0.5 format penalty (reward 0 at the default threshold)."""
    v = (step + 3 * q + s) % 4
    return {0: 1.0, 1: 0.0, 2: -0.5, 3: 1.0}[v]


def expected_qid(question: str) -> str:
    return "q-" + hashlib.sha256(question.encode("utf-8")).hexdigest()[:16]


def step_lines(step: int, *, round_robin: bool = False) -> list[dict[str, Any]]:
    order = (
        [(q, s) for s in range(N_SAMPLES) for q in range(len(QUESTIONS))]
        if round_robin
        else [(q, s) for q in range(len(QUESTIONS)) for s in range(N_SAMPLES)]
    )
    lines = []
    for q, s in order:
        sc = score_of(step, q, s)
        lines.append(
            {
                "input": qwen_prompt(QUESTIONS[q], marked=q % 2 == 1),
                "output": f"step {step} sample {s}: thinking ... \\boxed{{{q + s}}}",
                "gts": str(q),
                "score": sc,
                "step": step,
                "acc": sc > 0,
                "pred": str(q + s) if s != 3 else None,
            }
        )
    return lines


def write_step(directory: Path, step: int, lines: list[Any]) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{step}.jsonl"
    path.write_text(
        "".join((ln if isinstance(ln, str) else json.dumps(ln)) + "\n" for ln in lines),
        encoding="utf-8",
    )
    return path


def write_dump(directory: Path) -> Path:
    for i, step in enumerate(STEPS):
        write_step(directory, step, step_lines(step, round_robin=i == 1))
    (directory / "README.txt").write_text("not a step file\n")
    return directory


def counts(engine) -> dict[str, int]:  # type: ignore[no-untyped-def]
    with engine.connect() as conn:
        return {
            t.__tablename__: conn.execute(sa.select(sa.func.count()).select_from(t)).scalar()
            for t in (Study, Question, Ingest, Trajectory)
        }


def run_import(engine, directory: Path, tmp_path: Path, **opts: Any):  # type: ignore[no-untyped-def]
    opts.setdefault("reward_threshold", 0.0)  # the scores include a -0.5 format penalty
    options = VerlOptions(run=opts.pop("run", "grpo"), model=opts.pop("model", "qwen-0.5b"), **opts)
    data = tmp_path / "data"
    return import_verl(
        engine, directory, options, study="s", artifacts_dir=data / "artifacts", data_dir=data
    )


def stored(engine) -> list[Any]:  # type: ignore[no-untyped-def]
    with engine.connect() as conn:
        return conn.execute(
            sa.select(
                Trajectory.trajectory_id,
                Trajectory.question_id,
                Trajectory.text,
                Trajectory.reward,
                Trajectory.run,
                Trajectory.model,
                Trajectory.step,
                Trajectory.seed,
                Trajectory.answer,
                Trajectory.validity,
            ).order_by(Trajectory.id)
        ).all()


# --------------------------------------------------------------------------- store


def test_dump_imports_with_right_ids_seeds_and_rewards(engine, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    dump = write_dump(tmp_path / "rollouts")
    res = run_import(engine, dump, tmp_path)
    assert (res.n_files, res.n_imported_files, res.n_skipped_files) == (3, 3, 0)
    assert (res.n_trajectories, res.n_questions) == (96, 4)
    assert res.ignored == [str(dump / "README.txt")]
    assert counts(engine) == {"study": 1, "question": 4, "ingest": 3, "trajectory": 96}
    rows = stored(engine)
    expected = {}
    for step in STEPS:
        for q, question in enumerate(QUESTIONS):
            qid = expected_qid(question)
            for s in range(N_SAMPLES):
                tid = f"grpo:qwen-0.5b:s{step}:{qid}:{s}"
                text = f"step {step} sample {s}: thinking ... \\boxed{{{q + s}}}"
                expected[tid] = (qid, text, int(score_of(step, q, s) > 0), step, s)
    got = {r.trajectory_id: (r.question_id, r.text, r.reward, r.step, r.seed) for r in rows}
    assert got == expected
    assert {(r.run, r.model) for r in rows} == {("grpo", "qwen-0.5b")}
    assert {r.answer for r in rows} == {None} and {r.validity for r in rows} == {None}
    # 3 of 8 samples score 1.0 per (step, question) pattern → 48 of 96 successes; the
    # format penalty (-0.5) is a failure, not a success.
    assert sum(r.reward for r in rows) == 48


def test_malformed_line_is_named_and_nothing_is_imported(engine, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    dump = write_dump(tmp_path / "rollouts")
    lines: list[Any] = step_lines(5)
    lines[12] = {**lines[12], "score": "high"}  # line 13 of 5.jsonl
    write_step(dump, 5, lines)
    bad10: list[Any] = step_lines(10)
    bad10[3] = '{"input": "user\\nQ\\nassistant\\n", "output": '  # line 4: broken JSON
    write_step(dump, 10, bad10)
    with pytest.raises(RecordValidationError) as info:
        run_import(engine, dump, tmp_path)
    named = [str(e) for e in info.value.errors]
    assert len(named) == 2
    assert named[0] == f"{dump / '5.jsonl'}:line 13: score: must be a number, got 'high'"
    assert named[1].startswith(f"{dump / '10.jsonl'}:line 4: invalid JSON (")
    assert counts(engine) == {"study": 0, "question": 0, "ingest": 0, "trajectory": 0}


def test_reimport_is_a_noop_and_a_new_step_file_adds_only_it(engine, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    dump = write_dump(tmp_path / "rollouts")
    run_import(engine, dump, tmp_path)
    before = stored(engine)
    again = run_import(engine, dump, tmp_path)
    assert (again.n_imported_files, again.n_skipped_files, again.n_trajectories) == (0, 3, 0)
    assert again.summary().startswith("already imported: all 3 file(s)")
    assert stored(engine) == before
    assert counts(engine)["ingest"] == 3
    write_step(dump, 15, step_lines(15))
    more = run_import(engine, dump, tmp_path)
    assert (more.n_imported_files, more.n_skipped_files, more.n_trajectories) == (1, 3, 32)
    assert more.imported == [str(dump / "15.jsonl")]
    rows = stored(engine)
    assert rows[:96] == before
    assert len(rows) == 128 and {r.step for r in rows[96:]} == {15}
    assert counts(engine) == {"study": 1, "question": 4, "ingest": 4, "trajectory": 128}
    # A changed step file is not "already imported": its ids collide, named, nothing written.
    lines = step_lines(15)
    lines[0]["output"] = "a different completion"
    write_step(dump, 15, lines)
    with pytest.raises(RecordValidationError, match=r"15\.jsonl:line 1: trajectory_id: .*already"):
        run_import(engine, dump, tmp_path)
    assert counts(engine)["trajectory"] == 128


def test_options_threshold_keys_and_other_run(engine, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    dump = write_dump(tmp_path / "rollouts")
    res = run_import(
        engine,
        dump,
        tmp_path,
        run="grpo-val",
        reward_threshold=-1.0,
        question_key="gts",
        answer_key="pred",
        validity_key="acc",
    )
    assert (res.n_trajectories, res.n_questions) == (96, 4)
    rows = stored(engine)
    assert {r.question_id for r in rows} == {"0", "1", "2", "3"}
    assert all(r.reward == 1 for r in rows)  # every score > -1
    by_id = {r.trajectory_id: r for r in rows}
    r = by_id["grpo-val:qwen-0.5b:s5:2:3"]
    assert (r.answer, r.validity) == (None, int(score_of(5, 2, 3) > 0))
    r = by_id["grpo-val:qwen-0.5b:s5:2:4"]
    assert (r.answer, r.validity) == ("6", int(score_of(5, 2, 4) > 0))
    # The same files under another run are new records, not a no-op.
    other = run_import(engine, dump, tmp_path, run="grpo")
    assert other.n_imported_files == 3 and counts(engine)["trajectory"] == 192


# --------------------------------------------------------------------------- pure reader


def test_question_text_is_the_prompt_without_its_template(tmp_path: Path) -> None:
    path = write_step(tmp_path, 0, step_lines(0))
    batch = read_verl_file(path, VerlOptions(run="r", model="m", reward_threshold=0.0))
    by_q = dict(zip(batch.columns["question_id"], batch.columns["question"], strict=True))
    assert by_q == {expected_qid(q): q for q in QUESTIONS}
    # Marked and plain prompts of the same question get the same id.
    lines = [
        {**step_lines(0)[0], "input": qwen_prompt(QUESTIONS[0], marked=m)} for m in (True, False)
    ]
    batch = read_verl_file(
        write_step(tmp_path / "b", 0, lines), VerlOptions(run="r", model="m", reward_threshold=0.0)
    )
    assert batch.columns["question_id"] == [expected_qid(QUESTIONS[0])] * 2
    assert batch.columns["seed"] == [0, 1]


LLAMA_MARKED = (
    "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: "
    "December 2023\nToday Date: 26 Jul 2024\n\n<|eot_id|><|start_header_id|>user"
    "<|end_header_id|>\n\nSolve x.\nuser: be brief<|eot_id|><|start_header_id|>assistant"
    "<|end_header_id|>\n\n"
)
LLAMA_PLAIN = (
    "system\n\nCutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\nuser\n\n"
    "Solve x.\nuser: be brief assistant\n\n"
)


@pytest.mark.parametrize(
    ("prompt", "template", "question"),
    [
        (qwen_prompt("Q one\nline two", marked=True), "auto", "Q one\nline two"),
        (qwen_prompt("Q one\nline two", marked=False), "auto", "Q one\nline two"),
        ("user\nQ only\nassistant\n", "qwen", "Q only"),
        (LLAMA_MARKED, "auto", "Solve x.\nuser: be brief"),
        (LLAMA_PLAIN, "llama3", "Solve x.\nuser: be brief"),
        # Not a whole templated prompt: kept as it is (auto), refused (named template).
        ("Tell the user what 2+2 is.\nassistant", "auto", "Tell the user what 2+2 is.\nassistant"),
        ("Tell the user what 2+2 is.", "qwen", None),
        (qwen_prompt("Q", marked=True), "none", qwen_prompt("Q", marked=True).strip()),
    ],
)
def test_extract_question(prompt: str, template: str, question: str | None) -> None:
    assert extract_question(prompt, template=template) == question


def test_question_regex_mismatch_is_an_error_on_input(tmp_path: Path) -> None:
    lines = step_lines(0)[:3]
    lines[0]["input"] = "Problem: 2+3?  "
    lines[1]["input"] = "Problem: 2+2?"
    lines[2]["input"] = "no marker here"
    path = write_step(tmp_path, 0, lines)
    opts = VerlOptions(
        run="r", model="m", reward_threshold=0.0, question_regex=r"Problem: (.*?)\s*$"
    )
    with pytest.raises(RecordValidationError) as info:
        read_verl_file(path, opts)
    assert [str(e) for e in info.value.errors] == [
        f"{path}:line 3: input: does not match --question-regex"
    ]
    lines[2]["input"] = "Problem: 2+3?"
    batch = read_verl_file(write_step(tmp_path, 0, lines), opts)
    assert batch.columns["question"] == ["2+3?", "2+2?", "2+3?"]
    assert batch.columns["seed"] == [0, 0, 1]
    with pytest.raises(ValueError, match="exactly one capture group"):
        compile_question_regex(r"(a)(b)")


def test_record_level_errors_name_the_verl_key(tmp_path: Path) -> None:
    lines = step_lines(0)[:4]
    lines[1]["output"] = "bad \x00 byte"
    lines[2]["output"] = ""
    lines[3]["pred"] = ["a list"]
    path = write_step(tmp_path, 0, lines)
    with pytest.raises(RecordValidationError) as info:
        read_verl_file(
            path, VerlOptions(run="r", model="m", reward_threshold=0.0, answer_key="pred")
        )
    named = [str(e) for e in info.value.errors]
    assert (
        named[0] == f"{path}:line 3: output: empty completion (pass --skip-empty-output to "
        "leave such samples out)"
    )
    assert named[1] == f"{path}:line 4: pred: must be a string or a number, got ['a list']"
    # The empty line left out keeps its seed: the next sample of that question is seed 3.
    lines[3]["pred"] = "x"
    path = write_step(tmp_path, 0, lines)
    with pytest.raises(RecordValidationError) as info:
        read_verl_file(
            path, VerlOptions(run="r", model="m", reward_threshold=0.0, skip_empty_output=True)
        )
    assert [str(e) for e in info.value.errors] == [
        f"{path}:line 2: output (text): contains a control character (U+0000) at character 4; "
        "only tab, line feed and carriage return are allowed"
    ]
    lines[1]["output"] = "fine"
    batch = read_verl_file(
        write_step(tmp_path, 0, lines),
        VerlOptions(run="r", model="m", reward_threshold=0.0, skip_empty_output=True),
    )
    assert batch.columns["seed"] == [0, 1, 3]


# --------------------------------------------------------------------------- CLI


def test_cli_import_verl(store_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from rcea.study.settings import get_settings

    monkeypatch.setenv("RCEA_DATABASE_URL", store_url)
    get_settings.cache_clear()
    runner = CliRunner()
    dump = write_dump(tmp_path / "val")
    args = ["import", "verl", str(dump), "--study", "v", "--run", "grpo", "--model", "m"]
    args += ["--reward-threshold", "0"]
    missing = runner.invoke(app, ["import", "verl", str(dump), "--study", "v", "--run", "grpo"])
    assert missing.exit_code == 2 and "--model" in missing.output
    lines: list[Any] = step_lines(10)
    lines[20] = {k: v for k, v in lines[20].items() if k != "output"}
    write_step(dump, 10, lines)
    bad = runner.invoke(app, [*args, "--json"])
    assert bad.exit_code == 1
    data = json.loads(bad.stdout)
    assert data["ok"] is False and data["message"] == "nothing was imported"
    assert [(e["file"], e["location"], e["field"]) for e in data["errors"]] == [
        (str(dump / "10.jsonl"), "line 21", "output")
    ]
    plain = runner.invoke(app, args)
    assert plain.exit_code == 1
    assert f"{dump / '10.jsonl'}:line 21: output: missing" in plain.output
    assert "nothing imported: 1 error(s)" in plain.output
    write_step(dump, 10, step_lines(10))
    ok = runner.invoke(app, [*args, "--json"])
    assert ok.exit_code == 0, ok.output
    data = json.loads(ok.stdout)
    assert (data["n_trajectories"], data["n_questions"], data["n_imported_files"]) == (96, 4, 3)
    problems = tmp_path / "problems.jsonl"
    again = runner.invoke(app, [*args, "--problems-out", str(problems)])
    assert again.exit_code == 0 and "already imported: all 3 file(s)" in again.output
    assert again.output.count("ignored 1 file(s) not named STEP.jsonl: README.txt") == 1
    written = [json.loads(ln) for ln in problems.read_text(encoding="utf-8").splitlines()]
    assert written == sorted(
        ({"question_id": expected_qid(q), "problem": q} for q in QUESTIONS),
        key=lambda d: d["question_id"],
    )
    summ = json.loads(runner.invoke(app, ["summary", "v", "--json"]).stdout)
    assert (summ["n_trajectories"], summ["n_questions"], summ["n_ingests"]) == (96, 4, 3)
    assert {(g["step"], g["n"]) for g in summ["groups"]} == {(0, 32), (5, 32), (10, 32)}


def test_a_threshold_with_a_reward_key_is_the_rule_applied(tmp_path: Path) -> None:
    """``R = KEY > T`` is recorded and applied to every value, 0/1 ones too; a threshold
    outside [0, 1) on a 0/1 key (every sample one reward) is refused, saying what to do."""
    lines = step_lines(0)
    for i, line in enumerate(lines):
        line["partial"] = [0, 1, 0.5, 0.25][i % 4]
    path = write_step(tmp_path, 0, lines)
    opts = VerlOptions(run="r", model="m", reward_key="partial", reward_threshold=0.4)
    batch = read_verl_file(path, opts)
    assert batch.columns["reward"] == [int(x["partial"] > 0.4) for x in lines]
    assert batch.extra["score_rule"]["threshold"] == 0.4
    binary = write_step(tmp_path / "b", 0, step_lines(0))
    with pytest.raises(RecordValidationError, match=r"acc: `acc` are 0/1, so --reward-threshold 1"):
        read_verl_file(
            binary, VerlOptions(run="r", model="m", reward_key="acc", reward_threshold=1)
        )
