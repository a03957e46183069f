"""A multi-turn transcript in a Label Studio task: one rendered block per turn, its role
named above its content, in order (the pair and validity tasks alike); the task data
keys are those of a single-turn task (nothing added, the blinding unchanged), the scan
finds no provenance in it, and the source panel shows each turn under its role."""

from __future__ import annotations

import random
import re

from rcea.annotation.render import html_text, render_turns
from rcea.annotation.tasks import SHOWN_KEY, TASK_DATA_KEYS, build_pair_task
from rcea.annotation.validity_tasks import TASK_DATA_KEYS as VALIDITY_KEYS
from rcea.annotation.validity_tasks import build_validity_task
from tests.support.product_helpers import scan_for_leaks
from tests.support.rendered import SHOWN_PAIR, SHOWN_VALIDITY

TURNS = [
    ("assistant", "I call the tool.\n<tool_call>48/2</tool_call>"),
    ("tool", "<tool_response>\n24\n</tool_response>"),
    ("user", "Please give the final answer."),
    ("assistant", r"So $48 + 24 = 72$ and the answer is $\boxed{72}$."),
]
BLOCK = re.compile(r'<div class="turn"><p class="turn-role"><strong>([^<]*)</strong></p>')


def turn_blocks(fragment: str) -> list[tuple[str, str]]:
    """(role, text a reader sees) of each turn block of a rendered fragment, in order."""
    starts = list(BLOCK.finditer(fragment))
    out = []
    for m, nxt in zip(starts, [*starts[1:], None], strict=False):
        body = fragment[m.end() : nxt.start() if nxt else len(fragment)]
        out.append((m.group(1), html_text(body).strip()))
    return out


def test_pair_task_shows_a_transcript_as_separate_turns() -> None:
    task = build_pair_task("p-1", TURNS, "48 + 24 = 72", rng=random.Random(3))
    side, other = ("left", "right") if task.left_is_a else ("right", "left")
    assert set(task.data) == set(TASK_DATA_KEYS) | SHOWN_PAIR  # the keys of any pair task
    blocks = turn_blocks(task.data[side + "_html"])
    assert [r for r, _ in blocks] == ["assistant", "tool", "user", "assistant"]
    assert "I call the tool." in blocks[0][1] and "72" not in blocks[0][1]
    assert "24" in blocks[1][1] and "final answer" in blocks[2][1]
    assert "<math" in task.data[side + "_html"].split('<div class="turn">')[4]  # TeX rendered
    assert turn_blocks(task.data[other + "_html"]) == []  # a single text: no turns
    assert task.data[side].startswith("[assistant]\nI call the tool.")
    assert "\n\n[tool]\n" in task.data[side] and "\n\n[user]\n" in task.data[side]
    assert scan_for_leaks([task.data], ["grpo-agent", "qwen2.5-7b", "run:model:s0:q1:0"]) == []


def test_validity_task_shows_a_transcript_as_separate_turns() -> None:
    data = build_validity_task("v-1", "What is 48 + 48/2?", TURNS)
    assert set(data) == set(VALIDITY_KEYS) | SHOWN_VALIDITY
    assert [r for r, _ in turn_blocks(data["solution_html"])] == [r for r, _ in TURNS]
    assert turn_blocks(data["problem_html"]) == []
    assert data[SHOWN_KEY] == build_validity_task("v-1", "What is 48 + 48/2?", TURNS)[SHOWN_KEY]


def test_turn_roles_and_contents_are_escaped() -> None:
    html = render_turns([("assistant", "<script>alert(1)</script> ok"), ("tool", "<b>x</b>")])
    assert "<script" not in html and "<b>" not in html
    assert [r for r, _ in turn_blocks(html)] == ["assistant", "tool"]
