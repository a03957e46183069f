"""After a FAILED final pair gate: the re-audit the frozen rubric allows, decided by the
rule ``rcea audit sample`` applies (:func:`~rcea.study.pair_audit.sampling.reaudit_check`),
and the options a researcher has (printed by ``rcea audit gate --final`` and ``rcea
status``; docs/pair-audit.md)."""

from __future__ import annotations

import shlex
from typing import Any

from sqlmodel import Session, select

from rcea.study.pair_audit.freeze import FreezeError, latest_partition
from rcea.study.pair_audit.sampling import failed_final_gates, reaudit_check
from rcea.study.store.models import Rubric
from rcea.study.store.repository import get_study


def _q(value: str) -> str:
    return shlex.quote(value)


def reaudit_allowed(session: Session, *, study: str) -> dict[str, Any] | None:
    """The re-audit of the study's latest partition that its failed audit's frozen rubric
    allows now (``[reaudit]``), decided by the rule ``rcea audit sample`` applies
    (:func:`~rcea.study.pair_audit.sampling.reaudit_check`): ``rubric``, ``version``,
    ``attempt``, ``max_attempts``, ``correction``; ``None`` when no final gate failed on
    it or the rubric allows no further audit."""
    st = get_study(session, name=study)
    if st is None:
        return None
    assert st.id is not None  # stored rows have ids; SQLModel types keys Optional
    try:
        part = latest_partition(session, study_id=st.id)
    except FreezeError:
        return None
    failed = failed_final_gates(session, study_id=st.id, partition_hash=part.content_hash)
    if not failed:
        return None
    rubric = session.exec(
        select(Rubric).where(Rubric.content_hash == failed[0]["rubric_hash"])
    ).first()
    if rubric is None:
        return None
    try:
        attempt = reaudit_check(
            session,
            study_id=st.id,
            partition_hash=part.content_hash,
            rubric=rubric,
            reason="(asked by rcea status)",
        )
    except FreezeError:
        return None
    policy = attempt["policy"] or {}
    return {
        "rubric": rubric.name,
        "version": rubric.version,
        "attempt": attempt["attempt"],
        "max_attempts": policy.get("max_attempts"),
        "correction": policy.get("correction"),
    }


def failed_gate_options(session: Session, *, study: str) -> list[str]:
    """What a researcher can do after a FAILED final pair gate (docs/pair-audit.md): the
    re-audit the frozen rubric allows (when it does), the entropy-only bundle, a revised
    codebook with a new partition, or a corrected rubric reported as a deviation."""
    s = _q(study)
    out = []
    again = reaudit_allowed(session, study=study)
    if again is not None:
        out.append(
            f"re-audit the same partition as the rubric predeclares (attempt "
            f"{again['attempt']} of {again['max_attempts']}, correction "
            f"{again['correction']}): {reaudit_command(study, again)}"
        )
    out += [
        f"publish the audit-independent numbers alone: rcea report publish --study {s} "
        "--entropy-only",
        f"revise the codebook (rcea codebook status --study {s}; edit, re-freeze, "
        "re-assign), freeze a new partition and draw a new audit: rcea audit sample "
        f"--study {s} --rubric RUBRIC",
        "change the rubric only if it was predeclared wrongly: a new rubric version, "
        "reported as a deviation",
    ]
    return out


def reaudit_command(study: str, again: dict[str, Any]) -> str:
    return (
        f"rcea audit sample --study {_q(study)} --rubric {_q(again['rubric'])} "
        f"--rubric-version {_q(str(again['version']))} --reason TEXT"
    )
