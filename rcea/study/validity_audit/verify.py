"""``rcea judge verify``: recompute the verifier outcome R of a records file.

Records (JSONL, one object per line) need ``trajectory_id``, ``question_id`` and a
non-empty ``text``; ``reward`` is optional. Math text is checked against a gold file
(JSONL ``{"question_id": ..., "answer": ...}`` per line) with ``\\boxed{}`` extraction and
``math-verify`` equivalence, gold first; ``domain="toy"`` uses the toy domain's own
verifier (no gold needed); ``python:MODULE:FUNCTION`` a pluggable verifier
(:func:`rcea.pipeline.judge.verifier.make_verifier`; gold optional). A record with a reward is
*checked* (a different recomputed value is a disagreement); one without is *filled*. With
``out`` the records are written back with ``reward`` (recomputed) and ``answer``
(extracted) filled.

Bad input raises :class:`VerifyError` listing every problem as ``file:line N: field:
message`` (a missing gold question names the record line and the gold file).

Without ``--gold``, math records are checked against their own ``ground_truth`` field
(an imported trainer dump's ``gts``, written by ``rcea export``); a ``--gold`` answer
takes precedence over it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rcea.audits.inputs import InputError, check_output_file, iter_json_lines
from rcea.pipeline.judge.verifier import VerifierError, make_verifier

DOMAINS = ("math", "toy", "python:MODULE:FUNCTION")
MAX_ERRORS = 100


class VerifyError(ValueError):
    def __init__(self, errors: list[str]) -> None:
        self.errors = errors
        super().__init__("\n".join(errors[:MAX_ERRORS]))


def _jsonl(path: Path) -> list[tuple[int, Any]]:
    """Every JSON line of ``path`` read through :mod:`rcea.audits.inputs`; every bad line
    is one ``VerifyError`` message (a file that cannot be read at all: the only one)."""
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such file")
    out = []
    errors = []
    try:
        for n, value in iter_json_lines(path):
            if isinstance(value, InputError):
                errors.append(str(value))
            else:
                out.append((n, value))
    except InputError as exc:
        raise VerifyError([str(exc)]) from None
    if errors:
        raise VerifyError(errors)
    return out


def read_gold(path: Path) -> dict[str, str]:
    gold: dict[str, str] = {}
    errors = []
    for n, rec in _jsonl(path):
        if not isinstance(rec, dict):
            errors.append(f"{path}:line {n}: expected a JSON object")
            continue
        qid, answer = rec.get("question_id"), rec.get("answer")
        if not isinstance(qid, str) or not qid:
            errors.append(f"{path}:line {n}: question_id: missing or not a string")
        elif answer is None or (isinstance(answer, str) and not answer.strip()):
            errors.append(f"{path}:line {n}: answer: missing or empty")
        elif qid in gold:
            errors.append(f"{path}:line {n}: question_id: duplicate {qid!r}")
        else:
            gold[qid] = str(answer)
    if errors:
        raise VerifyError(errors)
    return gold


def verify_file(
    records: Path, *, gold: Path | None = None, domain: str = "math", out: Path | None = None
) -> dict[str, Any]:
    """Recompute R for every record; see the module docstring. Returns counts and the
    disagreements (``trajectory_id``, ``line``, ``stored``, ``recomputed``, ``answer``)."""
    if out is not None:  # before any work, not after it
        check_output_file(out)
    try:
        verifier = make_verifier(domain)
    except VerifierError as exc:
        raise ValueError(f"--domain: {exc}") from None
    answers = read_gold(gold) if gold is not None else {}
    rows = _jsonl(records)
    for _, rec in rows:  # each question's own reference answer (``ground_truth``)
        if isinstance(rec, dict) and isinstance(rec.get("question_id"), str):
            g = rec.get("ground_truth")
            if isinstance(g, str) and g.strip():
                answers.setdefault(rec["question_id"], g)
    if domain == "math" and gold is None and not answers:
        raise ValueError(
            "math verification needs --gold GOLD.jsonl or records with ground_truth "
            "(or --domain toy)"
        )
    errors: list[str] = []
    for n, rec in rows:
        where = f"{records}:line {n}"
        if not isinstance(rec, dict):
            errors.append(f"{where}: expected a JSON object")
            continue
        for field in ("trajectory_id", "question_id"):
            if not isinstance(rec.get(field), str) or not rec.get(field):
                errors.append(f"{where}: {field}: missing required field")
        text = rec.get("text")
        if not isinstance(text, str) or not text.strip():
            errors.append(f"{where}: text: missing or empty (nothing to verify)")
        reward = rec.get("reward")
        if reward is not None and (isinstance(reward, bool) or reward not in (0, 1)):
            errors.append(f"{where}: reward: must be 0 or 1, got {rec.get('reward')!r}")
        qid = rec.get("question_id")
        if domain == "math" and isinstance(qid, str) and qid and qid not in answers:
            errors.append(
                f"{where}: question_id: {qid!r} has no answer in "
                + (f"{gold} nor a ground_truth" if gold is not None else "its ground_truth")
            )
    if errors:
        raise VerifyError(errors)
    n_checked = n_filled = 0
    disagreements = []
    written = []
    for n, rec in rows:
        try:
            v = verifier(rec["text"], answers.get(rec["question_id"]), rec["question_id"])
        except ValueError as exc:  # toy: not a toy id; python: not a binary reward
            field = "question_id" if domain == "toy" else "text"
            raise VerifyError([f"{records}:line {n}: {field}: {exc}"]) from exc
        if "reward" in rec and rec["reward"] is not None:
            n_checked += 1
            if int(rec["reward"]) != v.reward:
                disagreements.append(
                    {
                        "trajectory_id": rec["trajectory_id"],
                        "line": n,
                        "stored": int(rec["reward"]),
                        "recomputed": v.reward,
                        "answer": v.answer,
                    }
                )
        else:
            n_filled += 1
        written.append({**rec, "reward": v.reward, "answer": v.answer})
    if out is not None:
        with out.open("w", encoding="utf-8") as fh:
            for rec in written:
                fh.write(json.dumps(rec) + "\n")
    return {
        "records": str(records),
        "domain": domain,
        "gold": None if gold is None else str(gold),
        "n_records": len(rows),
        "n_checked": n_checked,
        "n_filled": n_filled,
        "n_success": sum(r["reward"] for r in written),
        "n_disagreements": len(disagreements),
        "disagreements": disagreements[:MAX_ERRORS],
        "out": None if out is None else str(out),
    }
