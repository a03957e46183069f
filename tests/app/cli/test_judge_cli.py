"""``rcea judge ...`` in-process: the verifier on math text and the toy domain with its
bad-input errors, problems, freeze/list, an oracle run, calibration sampling and reports
before any label, status and the validity table."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from rcea.app.cli import app
from rcea.audits.sampling import attempt_seed
from tests.support.helpers import write_jsonl
from tests.support.judge_study import ORACLE, WEAK, toy_records

runner = CliRunner()


def rcea(*args: str, code: int = 0):  # type: ignore[no-untyped-def]
    out = runner.invoke(app, list(args))
    assert out.exit_code == code, out.output
    return out


def rcea_json(*args: str, code: int = 0):  # type: ignore[no-untyped-def]
    return json.loads(rcea(*args, "--json", code=code).output)


def _math(i: int, text: str, reward: int | None = None, **kw: object) -> dict:  # type: ignore[type-arg]
    rec = {"trajectory_id": f"t{i}", "question_id": f"q{i % 3}", "text": text, **kw}
    if reward is not None:
        rec["reward"] = reward
    return rec


def test_verify_math_and_toy(tmp_path: Path) -> None:
    gold = write_jsonl(
        tmp_path / "gold.jsonl",
        [
            {"question_id": "q0", "answer": "\\frac{1}{2}"},
            {"question_id": "q1", "answer": "12"},
            {"question_id": "q2", "answer": "\\sqrt{2}/2"},
        ],
    )
    recs = [
        _math(0, "so x = \\boxed{0.5}", 1),  # equivalent: agrees
        _math(1, "hence \\boxed{12}", 0),  # stored 0, recomputed 1: disagreement
        _math(2, "= \\boxed{\\frac{\\sqrt{2}}{2}}"),  # no reward: filled
        _math(3, "no box, 1/2"),  # no boxed answer: 0
        _math(4, "first \\boxed{13} then \\boxed{12}", 1),  # the last box counts
    ]
    path = write_jsonl(tmp_path / "r.jsonl", recs)
    out_path = tmp_path / "filled.jsonl"
    res = rcea_json("judge", "verify", str(path), "--gold", str(gold), "--out", str(out_path))
    assert res["n_records"] == 5 and res["n_checked"] == 3 and res["n_filled"] == 2
    assert [(d["trajectory_id"], d["stored"], d["recomputed"]) for d in res["disagreements"]] == [
        ("t1", 0, 1)
    ]
    filled = [json.loads(line) for line in out_path.read_text().splitlines()]
    assert [r["reward"] for r in filled] == [1, 1, 1, 0, 1]
    assert [r["answer"] for r in filled] == ["0.5", "12", "\\frac{\\sqrt{2}}{2}", None, "12"]

    # bad inputs: a question missing from the gold file, a record without text
    bad = write_jsonl(tmp_path / "bad.jsonl", [_math(0, "\\boxed{1}"), _math(5, "")])
    partial = write_jsonl(tmp_path / "g2.jsonl", [{"question_id": "q0", "answer": "1"}])
    err = rcea_json("judge", "verify", str(bad), "--gold", str(partial), code=1)
    assert f"{bad}:line 2: text: missing or empty" in err["error"]
    assert f"{bad}:line 2: question_id: 'q2' has no answer in {partial}" in err["error"]
    assert "line 1" not in err["error"]
    notext = write_jsonl(tmp_path / "nt.jsonl", [{"trajectory_id": "a", "question_id": "q0"}])
    assert (
        "line 1: text" in rcea("judge", "verify", str(notext), "--gold", str(gold), code=1).output
    )
    assert "--gold" in rcea("judge", "verify", str(path), code=1).output

    toy = toy_records(n_questions=3, per_question=6)
    toy[0]["reward"] = 1 - toy[0]["reward"]
    tres = rcea_json("judge", "verify", str(write_jsonl(tmp_path / "toy.jsonl", toy)),
                     "--domain", "toy")  # fmt: skip
    assert tres["n_disagreements"] == 1 and tres["disagreements"][0]["line"] == 1


def test_judge_cli_flow(tmp_path: Path) -> None:
    rcea("ingest", str(write_jsonl(tmp_path / "s.jsonl", toy_records(10, 14))), "--study", "s")
    bad = rcea("judge", "problems", "rcea.pipeline.toy:nope", "--study", "s", code=1).output
    assert "problem source 'rcea.pipeline.toy:nope'" in bad
    probs = rcea_json("judge", "problems", "rcea.pipeline.toy:problem_by_id", "--study", "s")
    assert probs == {"n_questions": 10, "new": 10, "changed": 0}
    assert "RCEA_LLM" not in rcea("judge", "freeze", "--name", "x", "--backend", "oracle",
                                  code=1).output  # fmt: skip
    v1 = rcea_json("judge", "freeze", "--name", "toy", "--backend", "oracle", "--oracle", ORACLE)
    assert v1["created"] and v1["version"] == 1 and len(v1["judge_hash"]) == 64
    assert not rcea_json("judge", "freeze", "--name", "toy", "--backend", "oracle",
                         "--oracle", ORACLE)["created"]  # fmt: skip
    tmpl = tmp_path / "t.toml"
    tmpl.write_text(
        '[template]\nname = "validity"\nversion = 2\nsystem = "Task: judge.validity\\nbe strict"'
        '\nuser = "$problem / $solution"\n'
    )
    v2 = rcea_json("judge", "freeze", "--name", "toy", "--backend", "oracle", "--oracle", ORACLE,
                   "--template", str(tmpl), "--reason", "stricter")  # fmt: skip
    assert (
        v2["version"] == 2 and v2["parent_id"] is not None and v2["judge_hash"] != v1["judge_hash"]
    )
    tmpl.write_text('[template]\nname = "v"\nversion = 1\nsystem = "s"\nuser = "$solution"\n')
    bad = rcea("judge", "freeze", "--name", "z", "--backend", "oracle", "--oracle", ORACLE,
               "--template", str(tmpl), code=1).output  # fmt: skip
    assert "$problem" in bad and str(tmpl) in bad
    assert [r["version"] for r in rcea_json("judge", "list")] == [1, 2]
    assert rcea_json("judge", "status", "--study", "s")["status"] == "no-judge"

    run = rcea_json("judge", "run", "--study", "s", "--judge", "toy", "--version", "1")
    assert run["complete"] and run["n_judged"] == run["n_successes"] > 0
    assert rcea_json("judge", "status", "--study", "s")["status"] == "uncalibrated"
    cal = rcea_json("judge", "calibrate", "sample", "--study", "s", "--judge", "toy", "--version",
                    "1", "--size", "20", "--held-out", "8", "--name", "c1")  # fmt: skip
    assert cal["n_drawn"] == 20 and cal["held_out"] == 8 and cal["n_judge_accepted"] == 10
    rep = rcea_json("judge", "calibrate", "report", "--calibration", "c1")
    assert rep["status"] == "pending" and rep["report"] is None and rep["n_items"] == 8
    assert rep["held_out"] and not rep["publishable"]
    dev = rcea_json("judge", "calibrate", "report", "--calibration", "c1", "--split",
                    "development")  # fmt: skip
    assert dev["split"] == "development" and dev["held_out"] is False and dev["n_items"] == 12
    assert "judge_is_latest_version" in rep and rep["judge_is_latest_version"] is False
    rubric = tmp_path / "r.toml"
    rubric.write_text(
        '[rubric]\nname = "r-cal"\nversion = "1"\n[calibration]\nsize = 16\nheld_out = 6\n'
        "seed = 2\n"
    )
    rcea("audit", "rubric", "freeze", str(rubric))
    c2 = rcea_json("judge", "calibrate", "sample", "--study", "s", "--judge", "toy", "--version",
                   "1", "--rubric", "r-cal", "--name", "c2")  # fmt: skip
    # the judge's second calibration: attempt 2, a seed derived from the rubric's
    assert (c2["n_drawn"], c2["held_out"], c2["rubric_seed"], c2["rubric"]) == (16, 6, 2, "r-cal")
    assert (c2["attempt"], c2["seed"]) == (2, attempt_seed(2, 2))
    acc = rcea_json("judge", "accepted", "sample", "--study", "s", "--size", "5", "--name", "a1")
    assert acc["size"] == 5
    val = rcea_json("judge", "validity", "--study", "s", "--k-min", "2")
    assert val["validity_status"]["status"] == "uncalibrated"
    assert val["groups"][0]["mean_validity_rate"] is not None

    # a weak judge (accepts every right answer) is another judge, with its own run
    rcea("judge", "freeze", "--name", "weak", "--backend", "oracle", "--oracle", WEAK)
    weak = rcea_json("judge", "run", "--study", "s", "--judge", "weak")
    assert weak["n_valid"] == weak["n_successes"] > run["n_valid"]
