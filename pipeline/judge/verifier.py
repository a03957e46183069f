"""Rule-based verification of final answers (the verifier outcome R).

* :func:`extract_boxed` — the content of the LAST ``\\boxed{...}`` (or ``\\fbox{...}``) of
  a text, with nested braces matched (``\\boxed{\\frac{1}{2}}`` → ``\\frac{1}{2}``);
  ``None`` when there is none or its braces never close.
* :func:`math_equivalent` — normalised equivalence through ``math-verify``, **gold
  first**: ``verify(parse(gold), parse(answer))`` (the library's asymmetric contract:
  the gold decides e.g. whether ``x = 2`` and ``2`` match). Both sides are parsed as
  LaTeX inside ``$…$``.
* :func:`verify_math` — R = 1 iff the text has a boxed answer equivalent to the gold.
* :func:`verify_toy` — the embedded toy domain's own verifier
  (:func:`pipeline.toy.verify`: the last boxed value is the exact integer answer).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "Verification",
    "extract_boxed",
    "math_equivalent",
    "verify_math",
    "verify_toy",
]

_OPENERS = ("\\boxed{", "\\fbox{")


@dataclass(frozen=True)
class Verification:
    """``reward`` (0/1) and the extracted answer (``None``: no boxed answer)."""

    reward: int
    answer: str | None


def extract_boxed(text: str) -> str | None:
    """Content of the last ``\\boxed{…}``/``\\fbox{…}`` whose braces close, stripped."""
    found: str | None = None
    pos = 0
    while True:
        hits = [(i, op) for op in _OPENERS if (i := text.find(op, pos)) >= 0]
        if not hits:
            return found
        i, op = min(hits)
        j = k = i + len(op)
        depth = 1
        while k < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[k], 0)
            k += 1
        if depth == 0:
            found = text[j : k - 1].strip()
        pos = j


def _latex(expr: str) -> str:
    expr = expr.strip()
    return expr if expr.startswith("$") else f"${expr}$"


def math_equivalent(gold: str, answer: str) -> bool:
    """``math_verify.verify(parse(gold), parse(answer))`` — gold first; False when either
    side does not parse."""
    from math_verify import parse, verify  # the `train` extra; imported on use

    gold_parsed = parse(_latex(gold))
    answer_parsed = parse(_latex(answer))
    if not gold_parsed or not answer_parsed:
        return False
    return bool(verify(gold_parsed, answer_parsed))


def verify_math(text: str, gold: str) -> Verification:
    """R = 1 iff ``text`` has a boxed answer that ``math-verify`` finds equal to ``gold``."""
    answer = extract_boxed(text)
    if answer is None or not answer:
        return Verification(0, answer)
    return Verification(int(math_equivalent(gold, answer)), answer)


def verify_toy(question_id: str, text: str) -> Verification:
    """The toy domain's verifier; raises ``ValueError`` for a non-toy question id."""
    from pipeline.toy import extract_answer, question_from_id, verify

    question = question_from_id(question_id)
    return Verification(verify(question, text), extract_answer(text))
