"""Multi-turn (agent-loop, tool-calling) transcripts as turns: the record field ``turns``
(docs/record-schema.md), what ``rcea import verl --multi-turn transcript`` stores.

A transcript is a list of turns ``{"role": ROLE, "content": TEXT}`` in order, stored as
JSON text. verl's agent loop dumps one as a single decoded ``output`` (the completion
tokens after the prompt: the first assistant turn, then every tool response and later
turn, each opened by its chat-template header); :func:`split_transcript` cuts it back at
those headers — ``<|im_start|>ROLE`` when the dump kept special tokens, the bare
``ROLE`` line they leave when it did not (``skip_special_tokens=True``, what verl's
``_log_rollout_data`` decodes with). A ``user`` turn that only holds
``<tool_response>…</tool_response>`` (how Qwen2.5's template renders a tool message) is
given the role ``tool``. :func:`turns_prompt` is the form the judge reads: one block per
turn, its role named (docs/how-to-verl.md, "Multi-turn").
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import NamedTuple

ROLES = ("system", "user", "assistant", "tool")
#: A turn header: ChatML's ``<|im_end|>\n<|im_start|>ROLE\n`` with the special tokens
#: kept, or the ``\nROLE\n`` line left once they are dropped.
_HEADER = re.compile(
    r"(?:<\|im_end\|>)?(?:<\|endoftext\|>)*\n(?:<\|im_start\|>)?(" + "|".join(ROLES) + r")\n"
)
_TOOL_RESPONSE = re.compile(r"\A\s*(?:<tool_response>.*?</tool_response>\s*)+\Z", re.S)
#: End-of-turn tokens a dump that kept special tokens leaves inside a turn's text.
_TURN_END = re.compile(r"(?:\s*(?:<\|im_end\|>|<\|endoftext\|>))+\s*\Z")


class Turn(NamedTuple):
    """One turn of a transcript (a plain ``(role, content)`` tuple for the renderers)."""

    role: str
    content: str


def split_transcript(output: str, *, first_role: str = "assistant") -> list[Turn]:
    """The turns of a decoded completion that starts inside a ``first_role`` turn (the
    prompt ended with the assistant header). Empty turns are dropped; trailing
    end-of-turn tokens are stripped from each."""
    turns: list[Turn] = []
    role, start = first_role, 0
    for m in _HEADER.finditer(output):
        turns.append(Turn(role, output[start : m.start()]))
        role, start = m.group(1), m.end()
    turns.append(Turn(role, output[start:]))
    out = []
    for t in turns:
        content = _TURN_END.sub("", t.content)
        if not content.strip():
            continue
        role = "tool" if t.role == "user" and _TOOL_RESPONSE.match(content) else t.role
        out.append(Turn(role, content))
    return out


def turns_json(turns: Sequence[Turn]) -> str:
    """The record field ``turns``: a JSON array of ``{"role", "content"}`` objects."""
    return json.dumps([{"role": t.role, "content": t.content} for t in turns], ensure_ascii=False)


def parse_turns(blob: str) -> list[Turn]:
    """The turns of a record's ``turns`` field; ``ValueError`` saying what is wrong
    (not JSON, not a non-empty array, an item without a ``role`` of :data:`ROLES` or a
    string ``content``)."""
    try:
        data = json.loads(blob)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not JSON ({exc.msg} at column {exc.colno})") from None
    if not isinstance(data, list) or not data:
        raise ValueError('must be a non-empty JSON array of {"role", "content"} objects')
    out = []
    for i, item in enumerate(data):
        if not isinstance(item, dict) or set(item) != {"role", "content"}:
            raise ValueError(f'turn {i}: must be an object with exactly "role" and "content"')
        if item["role"] not in ROLES:
            raise ValueError(
                f"turn {i}: role must be one of {', '.join(ROLES)}, got {item['role']!r}"
            )
        if not isinstance(item["content"], str):
            raise ValueError(f"turn {i}: content must be a string")
        out.append(Turn(item["role"], item["content"]))
    return out


def turns_or_none(blob: str | None) -> list[Turn] | None:
    """The stored turns of a trajectory, or ``None`` for a single-turn one."""
    return parse_turns(blob) if blob else None


def turns_prompt(turns: Sequence[Turn]) -> str:
    """A transcript as the judge reads it: one ``<turn role="ROLE">`` block per turn."""
    return "\n".join(f'<turn role="{t.role}">\n{t.content}\n</turn>' for t in turns)


def solution_text(text: str, turns: str | None) -> str:
    """What a prompt shows of a trajectory: its turns as blocks when it has any (a
    multi-turn transcript), else its text."""
    parsed = turns_or_none(turns)
    return turns_prompt(parsed) if parsed else text


__all__ = [
    "ROLES",
    "Turn",
    "parse_turns",
    "solution_text",
    "split_transcript",
    "turns_json",
    "turns_or_none",
    "turns_prompt",
]
