"""A multi-turn transcript (records' ``turns``, what ``rcea import verl --multi-turn
transcript`` stores) reaches the validity judge one block per turn, its role named,
through the ``openai`` backend against the local fake OpenAI-compatible server (checked
on what the server received); a single-turn trajectory's text reaches it unchanged."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from rcea.pipeline.judge import JudgeSpec
from rcea.study.records.ingest import ingest_file
from rcea.study.settings import Settings
from rcea.study.store import make_engine, session_scope, upgrade
from rcea.study.validity_audit.run import RunOptions, run_judge
from rcea.study.validity_audit.versions import freeze_judge
from tests.support.fake_llm import FakeLLM
from tests.support.helpers import write_jsonl

TURNS = [
    {
        "role": "assistant",
        "content": "I will compute 48/2 with the tool.\n<tool_call>48/2</tool_call>",
    },
    {"role": "tool", "content": "<tool_response>\n24\n</tool_response>"},
    {"role": "assistant", "content": "So 48 + 24 = 72. The answer is 72."},
]
FLAT = "\n".join(t["content"] for t in TURNS)


@pytest.fixture
def engine(tmp_path: Path):  # type: ignore[no-untyped-def]
    eng = make_engine(f"sqlite:///{tmp_path / 'store.db'}")
    upgrade(eng)
    yield eng
    eng.dispose()


def test_judge_sees_a_transcript_as_turns(engine, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    base = {"question_id": "q1", "question": "Natalia sold 48 clips ... How many?", "reward": 1}
    base |= {"run": "grpo-agent", "model": "qwen-x", "step": 0}
    recs = [
        {**base, "trajectory_id": "t-multi", "seed": 0, "text": FLAT, "turns": json.dumps(TURNS)},
        {**base, "trajectory_id": "t-single", "seed": 1, "text": "48 + 24 = 72."},
    ]
    path = write_jsonl(tmp_path / "r.jsonl", recs)
    ingest_file(engine, path, study="s", artifacts_dir=tmp_path / "art", data_dir=tmp_path)
    with session_scope(engine) as s:
        freeze_judge(s, name="llm", spec=JudgeSpec("openai", "judge-model", seed=1), actor="r")
    seen: list[str] = []

    def reply(task: str, messages: list[dict[str, str]]) -> str | None:
        solution = re.search(r"<solution>\n(.*?)\n</solution>", messages[-1]["content"], re.S)
        seen.append(solution.group(1))  # type: ignore[union-attr]
        return json.dumps({"verdict": "valid", "rationale": "ok"})

    with FakeLLM() as llm:
        llm.responder = reply
        settings = Settings(
            data_dir=tmp_path / "d", llm_base_url=llm.base_url, llm_model="m", llm_api_key="k"
        )
        out = run_judge(
            engine,
            study="s",
            judge="llm",
            settings=settings,
            actor="r",
            options=RunOptions(concurrency=1, max_retries=0, timeout_s=5),
        )
    assert out["complete"] and out["n_new"] == 2
    assert sorted(seen) == sorted(
        [
            '<turn role="assistant">\nI will compute 48/2 with the tool.\n'
            "<tool_call>48/2</tool_call>\n</turn>\n"
            '<turn role="tool">\n<tool_response>\n24\n</tool_response>\n</turn>\n'
            '<turn role="assistant">\nSo 48 + 24 = 72. The answer is 72.\n</turn>',
            "48 + 24 = 72.",
        ]
    )
