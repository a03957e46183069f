"""``rcea import verl`` on dumps written by verl itself (``tests/support/verl_dumps.py``:
``RayPPOTrainer._dump_generations`` / ``_log_rollout_data`` on a stand-in trainer, scores
from verl's gsm8k and DAPO scorers): the v0.5-style dump without ground truth, the
current one with ``gts``, DAPO (``score`` ±1, ``acc``, penalised reward), partial credit
(0.1), multi-turn transcripts and a rollout dump decoded with special tokens kept.
Imported through the documented command; expected rewards come from verl's scorers.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from typer.testing import CliRunner

from rcea.app.cli import app
from rcea.study.events import IMPORT_VERL
from rcea.study.store import Event, Question, Trajectory
from tests.support import verl_dumps

QUESTIONS = [
    ("Natalia sold 48 clips in April and half as many in May. How many in all?", "72"),
    ("Weng earns $12 an hour. How much for 50 minutes?", "10"),
    (
        "Betty needs $100 and has half. Her parents give $15, grandparents twice that. "
        "How much more does she need?",
        "5",
    ),
]
N = 4  # samples per question
SYSTEM = "Please reason step by step."


@pytest.fixture(scope="module")
def verl() -> Any:
    """verl's trainer module, imported once (about 15 s)."""
    return verl_dumps.trainer_class()


def decoded_prompt(question: str) -> str:
    """A Qwen ChatML prompt as verl decodes it (``skip_special_tokens=True``)."""
    return f"system\n{SYSTEM}\nuser\n{question}\nassistant\n"


def samples(step: int, style: str) -> list[tuple[int, int, str]]:
    """(question, seed, completion): verl interleaves a prompt's n samples."""
    out = []
    for q, (_, gt) in enumerate(QUESTIONS):
        for s in range(N):
            right = (q + s + step) % 3 != 0
            ans = gt if right else str(int(gt) + 1)
            if style == "gsm8k":
                text = f"Let me compute. The answer is #### {ans}"
                if (q + s) % 4 == 3:
                    text = f"I think it is {ans}."  # unformatted: gsm8k gives 0
            else:  # dapo / minerva: "Answer: X"
                text = "Step by step... " + ("x" * (40 * s)) + f"\nAnswer: {ans}"
            out.append((q, s, text))
    return out


def cli(store_url: str, monkeypatch: pytest.MonkeyPatch, *args: str) -> Any:
    from rcea.study.settings import get_settings

    monkeypatch.setenv("RCEA_DATABASE_URL", store_url)
    get_settings.cache_clear()
    return CliRunner().invoke(app, list(args))


def imported(store_url: str) -> list[Any]:
    eng = sa.create_engine(store_url)
    with eng.connect() as conn:
        rows = conn.execute(
            sa.select(
                Trajectory.step,
                Trajectory.seed,
                Trajectory.text,
                Trajectory.reward,
                Trajectory.answer,
                Trajectory.reward_extras,
                Trajectory.turns,
                Question.text.label("question"),
                Question.ground_truth,
            )
            .join(
                Question,
                sa.and_(
                    Question.study_id == Trajectory.study_id,
                    Question.question_id == Trajectory.question_id,
                ),
            )
            .order_by(Trajectory.id)
        ).all()
    eng.dispose()
    return rows


def events(store_url: str) -> list[dict[str, Any]]:
    eng = sa.create_engine(store_url)
    with eng.connect() as conn:
        out = [
            p if isinstance(p, dict) else json.loads(p)
            for p in conn.execute(sa.select(Event.payload).where(Event.kind == IMPORT_VERL))
            .scalars()
            .all()
        ]
    eng.dispose()
    return out


def import_args(dump: Path, *extra: str) -> list[str]:
    return ["import", "verl", str(dump), "--study", "s", "--run", "grpo", "--model", "qwen", *extra]


def gsm8k_dump(directory: Path, *, gts: bool, format_score: float = 0.0) -> list[float]:
    scores: list[float] = []
    for step in (0, 10):
        rows = samples(step, "gsm8k")
        sc = [
            verl_dumps.gsm8k_score(t, QUESTIONS[q][1], format_score=format_score)
            for q, _, t in rows
        ]
        verl_dumps.dump_generations(
            directory,
            step,
            [decoded_prompt(QUESTIONS[q][0]) for q, _, _ in rows],
            [t for _, _, t in rows],
            [QUESTIONS[q][1] if gts else None for q, _, _ in rows],
            sc,
        )
        scores += sc
    return scores


def test_v05_style_dump_without_ground_truth_imports_binary_scores(
    verl: Any, store_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dump = tmp_path / "val"
    scores = gsm8k_dump(dump, gts=False)
    first = json.loads((dump / "0.jsonl").read_text().splitlines()[0])
    assert set(first) == {"input", "output", "gts", "score", "step"} and first["gts"] is None
    assert set(scores) == {0.0, 1.0}
    res = cli(store_url, monkeypatch, *import_args(dump))
    assert res.exit_code == 0, res.output
    assert "score rule: R = score (0/1); score values seen: 0.0, 1.0" in res.output
    rows = imported(store_url)
    assert [r.reward for r in rows] == [int(s) for s in scores]
    assert rows[0].question == QUESTIONS[0][0]
    assert {r.ground_truth for r in rows} == {None}  # no gts: nothing invented
    assert [r.seed for r in rows[:N]] == list(range(N))
    (ev,) = events(store_url)
    assert (
        list(ev["score_rules"].values())
        == [{"source": "score", "threshold": None, "score_values": [0.0, 1.0]}] * 2
    )


def test_current_dump_with_gts_and_partial_credit_needs_a_rule(
    verl: Any, store_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dump = tmp_path / "val"
    scores = gsm8k_dump(dump, gts=True, format_score=0.1)
    assert set(scores) == {0.0, 0.1, 1.0}
    assert json.loads((dump / "10.jsonl").read_text().splitlines()[0])["gts"] == "72"
    refused = cli(store_url, monkeypatch, *import_args(dump))
    assert refused.exit_code == 1
    assert "score: scores are not only 0 and 1 (values seen: 0, 0.1, 1)" in refused.output
    assert "--reward-key KEY" in refused.output and "--reward-threshold T" in refused.output
    assert imported(store_url) == []
    ok = cli(store_url, monkeypatch, *import_args(dump, "--reward-threshold", "0.5"))
    assert ok.exit_code == 0, ok.output
    assert "score rule: R = 1 when score > 0.5" in ok.output
    assert [r.reward for r in imported(store_url)] == [int(s > 0.5) for s in scores]
    assert [r.ground_truth for r in imported(store_url)[::N]] == [gt for _, gt in QUESTIONS] * 2
    # `rcea export` keeps the question text and the ground truth; re-ingested, nothing lost.
    out = tmp_path / "s.jsonl"
    exp = cli(store_url, monkeypatch, "export", "s", "--out", str(out))
    assert exp.exit_code == 0, exp.output
    recs = [json.loads(ln) for ln in out.read_text().splitlines()]
    assert [(r["question"], r["ground_truth"]) for r in recs[:: N * len(QUESTIONS)][:1]] == [
        QUESTIONS[0]
    ]
    assert {(r["question"], r["ground_truth"]) for r in recs} == set(QUESTIONS)
    again = cli(store_url, monkeypatch, "ingest", str(out), "--study", "copy")
    assert again.exit_code == 0, again.output
    back = cli(store_url, monkeypatch, "export", "copy", "--out", str(tmp_path / "c.jsonl"))
    assert back.exit_code == 0, back.output
    assert (tmp_path / "c.jsonl").read_text() == out.read_text()
    (ev,) = events(store_url)
    assert {r["threshold"] for r in ev["score_rules"].values()} == {0.5}
    assert ev["options"]["reward_threshold"] == 0.5


def dapo_dump(directory: Path, max_len: int = 60, buffer: int = 30) -> list[dict[str, Any]]:
    """DAPO: the scorer's dict extras (score ±1, acc, pred) and the overlong penalty on the
    reward (DAPORewardManager's arithmetic on the response length)."""
    results = []
    for step in (0, 20):
        rows = samples(step, "dapo")
        res = [verl_dumps.dapo_score(t, QUESTIONS[q][1]) for q, _, t in rows]
        over = [min(-(len(t) - (max_len - buffer)) / buffer * 1.0, 0.0) for _, _, t in rows]
        reward = [r["score"] + o for r, o in zip(res, over, strict=True)]
        extras = {k: [r[k] for r in res] for k in ("score", "acc", "pred")}
        extras["reward"] = reward
        extras["overlong_reward"] = over
        verl_dumps.dump_generations(
            directory,
            step,
            [decoded_prompt(QUESTIONS[q][0]) for q, _, _ in rows],
            [t for _, _, t in rows],
            [QUESTIONS[q][1] for q, _, _ in rows],
            reward,
            extras,
        )
        results += [{**r, "reward": w} for r, w in zip(res, reward, strict=True)]
    return results


def test_dapo_dump_needs_acc_or_a_threshold(
    verl: Any, store_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dump = tmp_path / "train"
    results = dapo_dump(dump)
    line = json.loads((dump / "20.jsonl").read_text().splitlines()[0])
    # verl's writer lets the reward extra `score` (±1) replace the summed reward.
    assert line["score"] in (1.0, -1.0) and "acc" in line and "reward" in line
    assert any(r["acc"] and r["reward"] < 0 for r in results)  # correct, penalised below 0
    refused = cli(store_url, monkeypatch, *import_args(dump))
    assert refused.exit_code == 1
    assert "values seen: -1, 1" in refused.output
    assert "--reward-key acc (this dump has `acc`" in refused.output
    ok = cli(
        store_url, monkeypatch, *import_args(dump, "--reward-key", "acc", "--answer-key", "pred")
    )
    assert ok.exit_code == 0, ok.output
    assert "score rule: R = `acc` (0/1); score values seen: -1.0, 1.0" in ok.output
    rows = imported(store_url)
    assert [r.reward for r in rows] == [int(r["acc"]) for r in results]
    assert [r.answer for r in rows] == [r["pred"] for r in results]
    extras = [json.loads(r.reward_extras) for r in rows]  # every reward extra kept
    assert [e["overlong_reward"] for e in extras] == pytest.approx(
        [r["reward"] - r["score"] for r in results]
    )
    assert set(extras[0]) == {"acc", "pred", "reward", "overlong_reward"}
    (ev,) = events(store_url)
    assert {r["source"] for r in ev["score_rules"].values()} == {"acc"}


def test_penalised_reward_key_with_threshold(
    verl: Any, store_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dump = tmp_path / "train"
    results = dapo_dump(dump)
    bad = cli(store_url, monkeypatch, *import_args(dump, "--reward-key", "reward"))
    assert bad.exit_code == 1
    assert "reward: must be 0, 1, true or false (or a number with --reward-threshold)" in bad.output
    ok = cli(
        store_url,
        monkeypatch,
        *import_args(dump, "--reward-key", "reward", "--reward-threshold", "0"),
    )
    assert ok.exit_code == 0, ok.output
    assert [r.reward for r in imported(store_url)] == [int(r["reward"] > 0) for r in results]


def test_missing_answer_key_is_an_error(
    verl: Any, store_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dump = tmp_path / "val"
    gsm8k_dump(dump, gts=True)
    res = cli(store_url, monkeypatch, *import_args(dump, "--answer-key", "pred"))
    assert res.exit_code == 1
    assert (
        "--answer-key 'pred' is in no line of this file (keys: gts, input, output, score, step)"
        in res.output
    )
    assert imported(store_url) == []


def test_rollout_dump_with_special_tokens_kept_is_stripped(
    verl: Any, store_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``_log_rollout_data`` decodes a real batch (Qwen-like tokenizer: eos ``<|im_end|>``,
    pad ``<|endoftext|>``). Decoded with the special tokens kept (a trainer fork or a
    tokenizer that does not skip them), completions end in ``<|im_end|><|endoftext|>…``
    and prompts start with the left padding and keep their ChatML markers."""
    import types

    from tests.support.tiny_qwen import build_tokenizer

    real = build_tokenizer()
    tok = types.SimpleNamespace(
        batch_decode=lambda ids, skip_special_tokens=True: real.batch_decode(
            ids, skip_special_tokens=False
        ),
        encode=real.encode,
        pad_token_id=real.pad_token_id,
    )
    rows = samples(30, "gsm8k")
    prompts = [
        f"<|im_start|>system\n{SYSTEM}<|im_end|>\n<|im_start|>user\n{QUESTIONS[q][0]}"
        "<|im_end|>\n<|im_start|>assistant\n"
        for q, _, _ in rows
    ]
    scores = [verl_dumps.gsm8k_score(t, QUESTIONS[q][1]) for q, _, t in rows]
    dump = verl_dumps.log_rollout_data(
        tmp_path / "roll",
        30,
        tok,
        prompts,
        [t + "<|im_end|>" for _, _, t in rows],
        scores,
        [QUESTIONS[q][1] for q, _, _ in rows],
    ).parent
    lines = [json.loads(ln) for ln in (dump / "30.jsonl").read_text().splitlines()]
    assert any("<|im_end|><|endoftext|>" in ln["output"] for ln in lines)
    assert any(ln["input"].startswith("<|endoftext|>") for ln in lines)
    n_special = sum(
        ln["output"].count("<|im_end|>") + ln["output"].count("<|endoftext|>") for ln in lines
    )
    res = cli(store_url, monkeypatch, *import_args(dump))
    assert res.exit_code == 0, res.output
    stored = imported(store_url)
    assert [r.text for r in stored] == [t for _, _, t in rows]
    assert [r.reward for r in stored] == [int(s) for s in scores]
    assert f"stripped {n_special} trailing special token(s)" in res.output
    assert stored[0].question == QUESTIONS[0][0]


TOOL_CALL = '<tool_call>\n{"name": "calc", "arguments": {"expr": "48/2"}}\n</tool_call>'


def test_multi_turn_transcript_needs_an_explicit_choice(
    verl: Any, store_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An agent-loop (tool-calling) validation dump: ``output`` is the whole transcript as
    verl decodes it without special tokens (tool call, tool response, final turn: each
    later turn under its bare role line), ``num_turns`` a reward extra. Refused by
    default, naming the file, line and option; ``--multi-turn transcript`` keeps the
    text and stores the turns; ``last-turn`` keeps the final assistant turn only;
    ``num_turns`` is kept in ``reward_extras`` either way."""
    rows = samples(0, "gsm8k")
    outputs = [
        f"{TOOL_CALL}\nuser\n<tool_response>\n24\n</tool_response>\nassistant\n{t}"
        for _, _, t in rows
    ]
    scores = [
        verl_dumps.gsm8k_score(t, QUESTIONS[q][1])
        for (q, _, _), t in zip(rows, outputs, strict=True)
    ]
    dump = verl_dumps.dump_generations(
        tmp_path / "agent",
        0,
        [decoded_prompt(QUESTIONS[q][0]) for q, _, _ in rows],
        outputs,
        [QUESTIONS[q][1] for q, _, _ in rows],
        scores,
        {"num_turns": [3] * len(rows)},
    ).parent
    assert json.loads((dump / "0.jsonl").read_text().splitlines()[0])["num_turns"] == 3
    refused = cli(store_url, monkeypatch, *import_args(dump))
    assert refused.exit_code == 1
    assert (
        f"{dump / '0.jsonl'}:line 1: output: a multi-turn transcript (num_turns=3): choose "
        "--multi-turn transcript (every turn kept and shown as turns) or last-turn"
    ) in refused.output
    assert imported(store_url) == []  # nothing half-written
    res = cli(store_url, monkeypatch, *import_args(dump, "--multi-turn", "transcript"))
    assert res.exit_code == 0, res.output
    stored = imported(store_url)
    assert [r.text for r in stored] == outputs
    assert [r.reward for r in stored] == [int(s) for s in scores]
    assert {json.loads(r.reward_extras)["num_turns"] for r in stored} == {3}
    assert [json.loads(r.turns) for r in stored] == [
        [
            {"role": "assistant", "content": TOOL_CALL},
            {"role": "tool", "content": "<tool_response>\n24\n</tool_response>"},
            {"role": "assistant", "content": t},
        ]
        for _, _, t in rows
    ]
    last = cli(
        store_url,
        monkeypatch,
        *["import", "verl", str(dump), "--study", "last", "--run", "grpo", "--model", "q"],
        *["--multi-turn", "last-turn"],
    )
    assert last.exit_code == 0, last.output
    after = imported(store_url)[len(rows) :]
    assert [r.text for r in after] == [t for _, _, t in rows]
    assert {r.turns for r in after} == {None}


def test_rollout_transcript_is_stored_as_turns_and_exported(
    verl: Any, store_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A rollout dump of an agent loop written by verl's own ``_log_rollout_data`` from a
    tokenised batch (a Qwen-like tokenizer, ``skip_special_tokens=True``): the response
    holds an assistant tool call, the tool's response, an interaction's user reply and
    the final assistant turn. ``--multi-turn transcript`` stores those four turns with
    their roles; ``rcea export`` writes them back and the export re-ingests."""
    from tests.support.tiny_qwen import build_tokenizer

    tok = build_tokenizer()
    rows = samples(20, "gsm8k")
    turns = [
        [
            ("assistant", TOOL_CALL),
            ("tool", "24"),
            ("user", "Please finish with the final answer."),
            ("assistant", t),
        ]
        for _, _, t in rows
    ]
    prompts = [
        f"<|im_start|>system\n{SYSTEM}<|im_end|>\n<|im_start|>user\n{QUESTIONS[q][0]}"
        "<|im_end|>\n<|im_start|>assistant\n"
        for q, _, _ in rows
    ]
    scores = [verl_dumps.gsm8k_score(t, QUESTIONS[q][1]) for q, _, t in rows]
    dump = verl_dumps.log_rollout_data(
        tmp_path / "roll",
        20,
        tok,
        prompts,
        [verl_dumps.agent_loop_response(ts) for ts in turns],
        scores,
        [QUESTIONS[q][1] for q, _, _ in rows],
        {"num_turns": [5] * len(rows)},
    ).parent
    line = json.loads((dump / "20.jsonl").read_text().splitlines()[0])
    assert "<|im_start|>" not in line["output"] and "\nuser\n<tool_response>" in line["output"]
    res = cli(store_url, monkeypatch, *import_args(dump, "--multi-turn", "transcript"))
    assert res.exit_code == 0, res.output
    stored = imported(store_url)
    want = [
        [
            {"role": r, "content": f"<tool_response>\n{c}\n</tool_response>" if r == "tool" else c}
            for r, c in ts
        ]
        for ts in turns
    ]
    assert [json.loads(r.turns) for r in stored] == want
    assert [r.reward for r in stored] == [int(s) for s in scores]
    out = tmp_path / "export.jsonl"
    assert cli(store_url, monkeypatch, "export", "s", "--out", str(out)).exit_code == 0
    exported = [json.loads(x) for x in out.read_text().splitlines()]
    assert [json.loads(r["turns"]) for r in exported] == want
    again = cli(store_url, monkeypatch, "ingest", str(out), "--study", "copy")
    assert again.exit_code == 0, again.output
    assert [json.loads(r.turns) for r in imported(store_url)[len(rows) :]] == want


def test_validate_and_ingest_on_a_raw_dump_point_to_import_verl(
    verl: Any, store_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dump = tmp_path / "val"
    gsm8k_dump(dump, gts=True)
    step_file = dump / "10.jsonl"
    hint = (
        f"{step_file} is a verl dump (input/output/score per line), not interchange records: "
        f"import it with `rcea import verl {dump} --study S --run RUN --model MODEL`"
    )
    res = cli(store_url, monkeypatch, "validate", str(step_file))
    assert res.exit_code == 1
    assert hint in res.output
    assert res.output.count(f"{step_file}:line") == 5 and "... and " in res.output
    assert "README" not in res.output
    data = json.loads(cli(store_url, monkeypatch, "validate", str(step_file), "--json").stdout)
    assert data["ok"] is False and data["hint"].startswith(hint)
    ing = cli(store_url, monkeypatch, "ingest", str(step_file), "--study", "x")
    assert ing.exit_code == 1 and hint in ing.output
