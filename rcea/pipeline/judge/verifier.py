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
  (:func:`rcea.pipeline.toy.verify`: the last boxed value is the exact integer answer).
* :func:`make_verifier` — the pluggable verifier of a ``[verifier] kind``: ``"math"``,
  ``"toy"`` or ``"python:MODULE:FUNCTION"``, as one ``(text, gold, question_id) ->
  Verification`` callable (probing, training rewards, ``rcea judge verify``).

A ``python:MODULE:FUNCTION`` verifier is called as ``FUNCTION(text, gold)`` (``gold`` is the
question's reference answer, ``None`` when the source has none) and returns a
:class:`Verification`, a ``(reward, answer)`` pair, a bool, or the number 0 or 1 (the
interchange schema's R is binary; any other value is a :class:`VerifierError` naming the
function and the value).
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rcea.pipeline import toy

__all__ = [
    "VERIFIER_KINDS",
    "Verification",
    "Verifier",
    "VerifierError",
    "extract_boxed",
    "make_verifier",
    "math_equivalent",
    "verify_math",
    "verify_toy",
]

VERIFIER_KINDS = ("math", "toy", "python:MODULE:FUNCTION")

_OPENERS = ("\\boxed{", "\\fbox{")


@dataclass(frozen=True)
class Verification:
    """``reward`` (0/1) and the extracted answer (``None``: no boxed answer)."""

    reward: int
    answer: str | None


def extract_boxed(text: str) -> str | None:
    """Content of the last ``\\boxed{…}``/``\\fbox{…}`` whose braces close, stripped.

    One pass over the text's braces with a stack (linear in its length): a degenerate
    rollout of a million unclosed ``\\boxed{`` costs what any million characters cost,
    where scanning from every opener to its match was quadratic."""
    last = max(text.rfind(op) for op in _OPENERS)
    if last < 0:
        return None
    # the usual case first: the last opener closes (one scan from it to its brace)
    content = text.index("{", last) + 1
    depth = 1
    for m in _BRACE.finditer(text, content):
        depth += 1 if m.group() == "{" else -1
        if depth == 0:
            return text[content : m.start()].strip()
    stack: list[int] = []  # per open brace: its opener's start, or -1 for a plain brace
    best = (-1, 0, 0)  # (opener start, content start, content end) of the last closed one
    for m in _BRACE.finditer(text):
        at = m.start()
        if m.group() == "{":
            stack.append(_opener_start(text, at))
        elif stack:
            start = stack.pop()
            if start > best[0]:
                best = (start, text.index("{", start) + 1, at)
    if best[0] < 0:
        return None
    return text[best[1] : best[2]].strip()


_BRACE = re.compile(r"[{}]")


def _opener_start(text: str, brace: int) -> int:
    """Where the ``\\boxed{``/``\\fbox{`` that ends with the brace at ``brace``
    starts, or -1 when that brace opens no such command."""
    for op in _OPENERS:
        start = brace + 1 - len(op)
        if start >= 0 and text.startswith(op, start):
            return start
    return -1


def _latex(expr: str) -> str:
    expr = expr.strip()
    return expr if expr.startswith("$") else f"${expr}$"


def math_equivalent(gold: str, answer: str) -> bool:
    """``math_verify.verify(parse(gold), parse(answer))`` — gold first; when either side
    does not parse, the two stripped strings must be identical."""
    from math_verify import parse, verify  # the `train` extra; imported on use

    gold_parsed = parse(_latex(gold))
    answer_parsed = parse(_latex(answer))
    if not gold_parsed or not answer_parsed:
        return gold.strip() == answer.strip()
    return bool(verify(gold_parsed, answer_parsed))


def verify_math(text: str, gold: str) -> Verification:
    """R = 1 iff ``text`` has a boxed answer that ``math-verify`` finds equal to ``gold``."""
    answer = extract_boxed(text)
    if answer is None or not answer:
        return Verification(0, answer)
    return Verification(int(math_equivalent(gold, answer)), answer)


def verify_toy(question_id: str, text: str) -> Verification:
    """The toy domain's verifier; raises ``ValueError`` for a non-toy question id."""
    question = toy.question_from_id(question_id)
    return Verification(toy.verify(question, text), toy.extract_answer(text))


Verifier = Callable[[str, str | None, str], Verification]
"""``verifier(text, gold, question_id) -> Verification``."""


class VerifierError(ValueError):
    """A verifier that cannot be built or that returned something other than R in {0, 1}."""


def _math(text: str, gold: str | None, question_id: str) -> Verification:
    if gold is None:
        raise VerifierError(f"question {question_id!r}: the math verifier needs a gold answer")
    return verify_math(text, gold)


def _toy(text: str, gold: str | None, question_id: str) -> Verification:
    return verify_toy(question_id, text)


def _python(spec: str) -> Verifier:
    parts = spec.split(":")
    if len(parts) != 3 or not parts[1] or not parts[2]:
        raise VerifierError(f"{spec!r}: expected python:MODULE:FUNCTION")
    _, module, name = parts
    try:
        fn = getattr(importlib.import_module(module), name)
    except ImportError as exc:
        raise VerifierError(f"{spec!r}: cannot import module {module!r}: {exc}") from None
    except AttributeError:
        raise VerifierError(f"{spec!r}: module {module!r} has no {name!r}") from None
    if not callable(fn):
        raise VerifierError(f"{spec!r}: {module}.{name} is not callable")

    def verifier(text: str, gold: str | None, question_id: str) -> Verification:
        return _as_verification(fn(text, gold), spec, question_id)

    return verifier


def _as_verification(value: Any, spec: str, question_id: str) -> Verification:
    answer = None
    if isinstance(value, Verification):
        reward: Any = value.reward
        answer = value.answer
    elif isinstance(value, tuple) and len(value) == 2:
        reward, answer = value
    else:
        reward = value
    if isinstance(reward, bool):
        reward = int(reward)
    if not isinstance(reward, int | float) or reward not in (0, 1):
        raise VerifierError(
            f"{spec}: returned {value!r} for question {question_id!r}; expected 0/1, a bool, "
            "(reward, answer) or a Verification (R is binary)"
        )
    if answer is not None and not isinstance(answer, str):
        answer = str(answer)
    return Verification(int(reward), answer)


def make_verifier(kind: str) -> Verifier:
    """The verifier of a ``[verifier] kind`` (module docstring); :class:`VerifierError` for
    an unknown kind or a ``python:`` function that cannot be imported."""
    if kind == "math":
        return _math
    if kind == "toy":
        return _toy
    if isinstance(kind, str) and kind.startswith("python:"):
        return _python(kind)
    raise VerifierError(f"unknown verifier {kind!r} (one of {', '.join(VERIFIER_KINDS)})")
