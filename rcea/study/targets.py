"""Which study, and which of its pair audits, calibrations or accepted-set checks, a command
acts on: the one rule every audit, calibration and accepted-set command (CLI and demo)
calls, so that two studies in one data dir never mix.

- A name (``--audit``/``--calibration``/``--check``) picks that record; with ``--study``
  (or ``RCEA_STUDY``) too, the record must belong to that study.
- ``--study`` alone picks the study's latest record of the kind (its current attempt).
- Neither: the latest record of the only study that has one. When records of more than
  one study are in the data dir the command is refused, and the refusal lists them.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from sqlmodel import Session, select

from rcea.study.store import require_study
from rcea.study.store.models import Audit, Study, ValidityCheck

PAIR_AUDIT = "audit"
CALIBRATION = "calibration"
ACCEPTED = "accepted"

#: per kind: the words, the option that names one record, and the command that draws one
_KINDS: dict[str, tuple[str, str, str]] = {
    PAIR_AUDIT: ("pair audit", "--audit", "rcea audit sample --study {s} --rubric NAME"),
    CALIBRATION: (
        "calibration",
        "--calibration",
        "rcea judge calibrate sample --study {s} --judge NAME",
    ),
    ACCEPTED: (
        "accepted-set check",
        "--check",
        "rcea judge accepted sample --study {s} --judge NAME",
    ),
}


class TargetError(ValueError):
    """The command cannot tell which study's record it acts on (or the one named is not
    the study's). ``headline`` is the one line; ``candidates`` (study → record names,
    oldest first) are listed after it, and carried as they are under ``--json``."""

    def __init__(self, headline: str, candidates: dict[str, list[str]] | None = None) -> None:
        self.headline = headline
        self.candidates = candidates or {}
        listed = [f"  {st}: {', '.join(names)}" for st, names in self.candidates.items()]
        super().__init__("\n".join([headline, *listed]))

    def details(self) -> dict[str, Any]:
        """What ``--json`` carries besides the headline."""
        return {"candidates": self.candidates} if self.candidates else {}


@dataclass(frozen=True)
class Target:
    """The record a command acts on and its study (printed with every action)."""

    study: str
    kind: str  # audit | calibration | accepted
    name: str

    def line(self) -> str:
        return f"study {self.study} · {_KINDS[self.kind][0]} {self.name}"

    def as_dict(self) -> dict[str, str]:
        return {"study": self.study, _KINDS[self.kind][1].lstrip("-"): self.name}


def resolve_audit(session: Session, *, study: str | None, audit: str | None) -> Audit:
    """The pair audit a command acts on (see the module docstring)."""
    row = _resolve(session, Audit, PAIR_AUDIT, study=study, name=audit)
    assert isinstance(row, Audit)
    return row


def resolve_check(
    session: Session, *, study: str | None, name: str | None, kind: str
) -> ValidityCheck:
    """The calibration (``kind="calibration"``) or accepted-set check (``"accepted"``) a
    command acts on (see the module docstring)."""
    row = _resolve(session, ValidityCheck, kind, study=study, name=name)
    assert isinstance(row, ValidityCheck)
    return row


def target_of(session: Session, row: Audit | ValidityCheck) -> Target:
    """The study and name of ``row``, as a command prints them."""
    st = session.get(Study, row.study_id)
    kind = PAIR_AUDIT if isinstance(row, Audit) else row.kind
    return Target(study=st.name if st is not None else "?", kind=kind, name=row.name)


def _resolve(
    session: Session, model: Any, kind: str, *, study: str | None, name: str | None
) -> Audit | ValidityCheck:
    what, option, draw = _KINDS[kind]
    stmt = select(model)
    if model is ValidityCheck:
        stmt = stmt.where(ValidityCheck.kind == kind)
    st = require_study(session, name=study) if study else None
    if name:
        row = session.exec(stmt.where(model.name == name)).first()
        if row is None:
            scope = f" of study {study}" if st is not None else ""
            known = _names(session, model, kind, st)
            hint = (
                f"known: {', '.join(known)}"
                if known
                else f"draw one with `{draw.format(s=study or 'S')}`"
            )
            raise TargetError(f"no {what} {name!r}{scope}; {hint}")
        if st is not None and row.study_id != st.id:
            other = session.get(Study, row.study_id)
            raise TargetError(
                f"{what} {name} belongs to study {other.name if other else '?'}, not {study}: "
                f"name one of {study}'s with {option}, or leave --study (RCEA_STUDY) out"
            )
        # the table (Audit or ValidityCheck) is chosen at run time: select(model) rows are Any
        return row  # type: ignore[no-any-return]
    if st is not None:
        row = session.exec(stmt.where(model.study_id == st.id).order_by(model.id.desc())).first()
        if row is None:
            raise TargetError(
                f"study {study} has no {what}: draw one with `{draw.format(s=study)}`"
            )
        # the table (Audit or ValidityCheck) is chosen at run time: select(model) rows are Any
        return row  # type: ignore[no-any-return]
    by_study = _candidates(session, model, kind)
    if not by_study:
        raise TargetError(f"no {what} in this data dir: draw one with `{draw.format(s='S')}`")
    if len(by_study) > 1:
        raise TargetError(
            f"{len(by_study)} studies in this data dir have a {what}: name the study with "
            f"--study S (or RCEA_STUDY) or the {what} with {option} NAME",
            by_study,
        )
    (only,) = by_study
    return _resolve(session, model, kind, study=only, name=None)


def _candidates(session: Session, model: Any, kind: str) -> dict[str, list[str]]:
    stmt = select(model, Study.name).join(Study, Study.id == model.study_id)
    if model is ValidityCheck:
        stmt = stmt.where(ValidityCheck.kind == kind)
    out: dict[str, list[str]] = defaultdict(list)
    for row, study in session.exec(stmt.order_by(Study.name, model.id)).all():
        out[study].append(row.name)
    return dict(out)


def _names(session: Session, model: Any, kind: str, st: Study | None) -> list[str]:
    found = _candidates(session, model, kind)
    if st is not None:
        return found.get(st.name, [])
    return [n for names in found.values() for n in names]
