"""The question inside a chat-templated prompt.

verl dumps the prompt as the tokenizer decoded it, normally with
``skip_special_tokens=True``: a Qwen (ChatML) prompt then reads
``system\\n…\\nuser\\nQUESTION\\nassistant\\n`` and a Llama 3 prompt
``system\\n\\n…user\\n\\nQUESTIONassistant\\n\\n``; decoded with the special tokens kept, the
``<|im_start|>`` / ``<|start_header_id|>`` markers are still there. ``auto`` recognises these
four shapes, and only as the WHOLE prompt (anchored patterns), so that a question that
merely contains the word "user" is never cut; any other prompt is kept as it is. A custom
regular expression (one capture group, the question) overrides the known shapes, and a
prompt it does not match is an error, never a silent fallback.
"""

from __future__ import annotations

import re

import regex as timed_re  # the `regex` engine: the same syntax as `re`, plus a time limit

TEMPLATES = ("auto", "qwen", "llama3", "none")
#: The longest one ``--question-regex`` search may take on one prompt (seconds): a pattern
#: that backtracks catastrophically (``(a+)+$``) is refused at that line, never a hang.
QUESTION_REGEX_TIMEOUT_S = 1.0


class QuestionRegexTimeout(ValueError):
    """``--question-regex`` ran past :data:`QUESTION_REGEX_TIMEOUT_S` on one prompt."""


_S = re.DOTALL
# Last user turn of a ChatML prompt with its markers, up to the assistant header.
_QWEN_MARKED = re.compile(
    r"\A(?:.*<\|im_end\|>\s*)?<\|im_start\|>user\n(?P<q>(?:(?!<\|im_start\|>).)*?)<\|im_end\|>"
    r"\s*<\|im_start\|>assistant\n?\s*\Z",
    _S,
)
# The same with the special tokens dropped by the decoder.
_QWEN_PLAIN = re.compile(
    r"\A(?:system\n(?:(?!\nuser\n).)*\n)?user\n(?P<q>.*)\nassistant\n?\Z",
    _S,
)
_LLAMA_MARKED = re.compile(
    r"\A.*<\|start_header_id\|>user<\|end_header_id\|>\n\n(?P<q>(?:(?!<\|eot_id\|>).)*)"
    r"<\|eot_id\|>\s*<\|start_header_id\|>assistant<\|end_header_id\|>\n*\Z",
    _S,
)
_LLAMA_PLAIN = re.compile(
    r"\A(?:system\n\n(?:(?!\n\nuser\n\n).)*\n\n)?user\n\n(?P<q>.*)assistant\n\n\Z",
    _S,
)
KNOWN: dict[str, tuple[re.Pattern[str], ...]] = {
    "qwen": (_QWEN_MARKED, _QWEN_PLAIN),
    "llama3": (_LLAMA_MARKED, _LLAMA_PLAIN),
}


def compile_question_regex(pattern: str) -> timed_re.Pattern[str]:
    """A user's ``--question-regex``: exactly one capture group (or a group named ``q``)."""
    try:
        rx = timed_re.compile(pattern, timed_re.DOTALL)
    except timed_re.error as exc:
        raise ValueError(f"--question-regex is not a valid regular expression: {exc}") from None
    if "q" not in rx.groupindex and rx.groups != 1:
        raise ValueError(
            "--question-regex needs exactly one capture group (or one named 'q') around the "
            f"question; it has {rx.groups}"
        )
    return rx


def extract_question(
    prompt: str, *, template: str = "auto", regex: timed_re.Pattern[str] | None = None
) -> str | None:
    """The question inside ``prompt``, stripped of surrounding whitespace; ``None`` when a
    custom ``regex`` or an explicitly named template does not match. ``auto`` and ``none``
    never return ``None`` (an unrecognised prompt is returned whole). A custom ``regex``
    that runs past :data:`QUESTION_REGEX_TIMEOUT_S` raises :class:`QuestionRegexTimeout`."""
    if regex is not None:
        try:
            m = regex.search(prompt, timeout=QUESTION_REGEX_TIMEOUT_S)
        except TimeoutError:
            raise QuestionRegexTimeout(
                f"--question-regex ran longer than {QUESTION_REGEX_TIMEOUT_S:g} s on this "
                "prompt; simplify it (nested repeats such as (a+)+ backtrack without end)"
            ) from None
        if m is None:
            return None
        return (m.group("q") if "q" in regex.groupindex else m.group(1)).strip()
    if template == "none":
        return prompt.strip()
    if template == "auto":
        patterns = (*KNOWN["qwen"], *KNOWN["llama3"])
    elif template in KNOWN:
        patterns = KNOWN[template]
    else:
        raise ValueError(f"unknown chat template {template!r}: use one of {', '.join(TEMPLATES)}")
    for rx in patterns:
        m = rx.match(prompt)
        if m is not None and m.group("q").strip():
            return m.group("q").strip()
    return prompt.strip() if template == "auto" else None
