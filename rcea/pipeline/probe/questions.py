"""Question sources for probing: the toy domain's splits and local benchmark files.

A :class:`ProbeQuestion` carries the prompt the policy is conditioned on and a scorer:

* toy questions (``source = "toy"``) are scored by the toy oracles: ``reward`` = verifier R,
  ``validity`` = process validity V, ``strategy`` = the oracle's mode Z;
* benchmark questions (``source = PATH``, JSONL or Parquet) are scored by comparing the
  last ``\\boxed{...}`` of the completion with the reference answer through ``math-verify``
  (``reward`` only; ``validity`` and ``strategy`` are ``None``).

``verifier`` (the ``[verifier] kind``, :func:`rcea.pipeline.judge.verifier.make_verifier`)
replaces the default reward of either source: ``"math"`` (toy questions: gold = the true
answer), ``"toy"`` (toy questions only) or ``"python:MODULE:FUNCTION"``. The toy oracles'
validity and strategy stay with toy questions whatever the verifier.

Benchmark files have one question per row with a question column (``problem`` or
``question``) and an answer column (``answer``, or ``solution`` whose last ``\\boxed{}`` is
the answer); an ``id``/``question_id``/``unique_id`` column names the question (default:
``<file stem>-<row>``). The prompt is ``prompt_template`` with ``{question}`` replaced
(no other placeholder).
Nothing is downloaded: a missing file is an error naming the file to provide.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from rcea.audits.inputs import InputError, check_input_file
from rcea.pipeline import toy
from rcea.pipeline.jsonl import iter_json_objects
from rcea.pipeline.judge.verifier import make_verifier, math_equivalent

QUESTION_COLUMNS = ("problem", "question")
ANSWER_COLUMNS = ("answer", "solution")
ID_COLUMNS = ("question_id", "id", "unique_id")
DEFAULT_PROMPT_TEMPLATE = (
    "{question}\nPlease reason step by step, and put your final answer within \\boxed{}.\n"
)


class DatasetError(ValueError):
    """A benchmark file that is missing or malformed (the message names file/row/column)."""


@dataclass(frozen=True)
class Scores:
    reward: int
    validity: int | None
    strategy: str | None
    answer: str | None


@dataclass(frozen=True)
class ProbeQuestion:
    """One question: id, prompt and a scorer ``score(text) -> Scores``."""

    question_id: str
    prompt: str
    source: str
    reference: str | None = None
    score: Callable[[str], Scores] = field(compare=False, repr=False, default=None)  # type: ignore[assignment]  # every constructor passes a scorer; None is only the dataclass default
    problem: str | None = None
    """the bare problem statement (the record's ``question``), when ``prompt`` wraps it"""


def last_boxed(text: str) -> str | None:
    """Content of the last ``\\boxed{...}`` with balanced braces; None when there is none."""
    start = text.rfind("\\boxed{")
    while start != -1:
        i = start + len("\\boxed{")
        depth = 1
        j = i
        while j < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[j], 0)
            j += 1
        if depth == 0:
            return text[i : j - 1].strip()
        start = text.rfind("\\boxed{", 0, start)
    return None


def math_equal(reference: str, predicted: str | None) -> bool:
    """``math-verify`` equivalence of two LaTeX answers, gold first (False when
    ``predicted`` is None or empty); :func:`rcea.pipeline.judge.verifier.math_equivalent`."""
    if predicted is None or not predicted.strip():
        return False
    return math_equivalent(reference, predicted)


def _toy_scorer(q: Any, verifier: str | None = None) -> Callable[[str], Scores]:
    custom = None if verifier in (None, "toy") else make_verifier(verifier)
    gold = str(toy.true_answer(q))

    def score(text: str) -> Scores:
        if custom is None:
            reward, answer = toy.verify(q, text), toy.extract_answer(text)
        else:
            v = custom(text, gold, q.question_id)
            reward, answer = v.reward, v.answer
        return Scores(
            reward=reward,
            validity=toy.process_valid(q, text),
            strategy=toy.strategy(q, text),
            answer=answer,
        )

    return score


def _math_scorer(reference: str) -> Callable[[str], Scores]:
    def score(text: str) -> Scores:
        answer = last_boxed(text)
        return Scores(int(math_equal(reference, answer)), None, None, answer)

    return score


def _verifier_scorer(reference: str, qid: str, verifier: str) -> Callable[[str], Scores]:
    fn = make_verifier(verifier)

    def score(text: str) -> Scores:
        v = fn(text, reference, qid)
        return Scores(v.reward, None, None, v.answer)

    return score


def toy_questions(
    split: str, n: int | None, seed: int, verifier: str | None = None
) -> list[ProbeQuestion]:
    """``n`` toy questions of ``split`` drawn with ``seed`` (``rcea.pipeline.toy``)."""
    return [
        ProbeQuestion(
            q.question_id,
            q.prompt,
            f"toy:{split}",
            str(toy.true_answer(q)),
            _toy_scorer(q, verifier),
        )
        for q in toy.generate_questions(split, n, seed=seed)
    ]


def _rows(path: Path) -> list[dict[str, Any]]:
    suffix = path.suffix.lower()
    if suffix in (".jsonl", ".ndjson"):
        return [obj for _, obj in iter_json_objects(path, error=DatasetError)]
    if suffix in (".parquet", ".pq"):
        try:
            return pq.read_table(check_input_file(path)).to_pylist()
        except InputError as exc:
            raise DatasetError(str(exc)) from None
        except Exception as exc:  # noqa: BLE001 - pyarrow raises many types for bad files
            raise DatasetError(f"{path}: cannot read Parquet: {exc}") from None
    raise DatasetError(f"{path}: unsupported benchmark file type {suffix!r} (.jsonl or .parquet)")


def _pick(row: dict[str, Any], names: tuple[str, ...]) -> str | None:
    for name in names:
        if row.get(name) is not None and str(row[name]).strip():
            return name
    return None


def read_benchmark(
    path: str | Path,
    *,
    n: int | None = None,
    seed: int = 0,
    prompt_template: str = DEFAULT_PROMPT_TEMPLATE,
    verifier: str | None = None,
) -> list[ProbeQuestion]:
    """Questions of a local benchmark file (see the module docstring for the columns).

    With ``n`` a seeded draw of ``n`` distinct rows (in draw order), else every row in file
    order. Raises :class:`DatasetError` naming the file (missing: "provide it"), the row
    and the column.
    """
    path = Path(path)
    if not path.exists():
        raise DatasetError(
            f"{path}: benchmark file not found; provide it locally (JSONL or Parquet with "
            f"problem/question and answer/solution columns) — nothing is downloaded"
        )
    rows = _rows(path)
    if not rows:
        raise DatasetError(f"{path}: no rows")
    loc = "line" if path.suffix.lower() in (".jsonl", ".ndjson") else "row"
    out: list[ProbeQuestion] = []
    seen: set[str] = set()
    for i, row in enumerate(rows):
        where = f"{path}:{loc} {i + 1 if loc == 'line' else i}"
        qcol = _pick(row, QUESTION_COLUMNS)
        acol = _pick(row, ANSWER_COLUMNS)
        if qcol is None:
            raise DatasetError(f"{where}: no question (columns {', '.join(QUESTION_COLUMNS)})")
        if acol is None:
            raise DatasetError(f"{where}: no answer (columns {', '.join(ANSWER_COLUMNS)})")
        reference = str(row[acol]).strip()
        if acol == "solution":
            boxed = last_boxed(reference)
            if boxed is None:
                raise DatasetError(f"{where}: solution: no \\boxed{{}} answer in the solution")
            reference = boxed
        icol = _pick(row, ID_COLUMNS)
        qid = str(row[icol]) if icol else f"{path.stem}-{i}"
        if qid in seen:
            raise DatasetError(f"{where}: {icol}: duplicate question id {qid!r}")
        seen.add(qid)
        prompt = prompt_template.replace("{question}", str(row[qcol]))
        scorer = (
            _math_scorer(reference)
            if verifier in (None, "math")
            else _verifier_scorer(reference, qid, verifier)
        )
        out.append(
            ProbeQuestion(
                qid, prompt, str(path), reference, scorer, problem=str(row[qcol]).strip() or None
            )
        )
    if n is not None:
        if not 0 < n <= len(out):
            raise DatasetError(f"{path}: has {len(out)} questions; asked for n={n}")
        out = random.Random(f"{path.name}:{seed}").sample(out, n)
    return out


def load_questions(
    source: str,
    *,
    split: str = "probe",
    n: int | None = None,
    seed: int = 0,
    prompt_template: str = DEFAULT_PROMPT_TEMPLATE,
    verifier: str | None = None,
) -> list[ProbeQuestion]:
    """``source = "toy"`` (with ``split``) or a benchmark file path; ``verifier`` as in the
    module docstring (None: the source's default)."""
    if source == "toy":
        try:
            return toy_questions(split, n, seed, verifier)
        except ValueError as exc:
            raise DatasetError(str(exc)) from None
    if verifier == "toy":
        raise DatasetError(f"{source}: the toy verifier scores toy questions only")
    return read_benchmark(
        source, n=n, seed=seed, prompt_template=prompt_template, verifier=verifier
    )
