"""SIMULATED annotators for the validity checks (the demo and the tests).

:func:`simulate_validity_labels` logs in as each annotator through Label Studio's real
login form and posts one annotation per unlabelled task of that annotator's project
through the REST API — exactly what a person's browser does — with the label a domain
oracle gives, flipped with probability ``error_rate`` (seeded per annotator and item).
The labels it makes are a simulation, not human judgement; its result says so.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from contextlib import closing
from typing import Any

from sqlmodel import Session, select

from rcea.annotation.accounts import login_session, side_by_side
from rcea.annotation.people import People
from rcea.annotation.validity_tasks import choice_result
from rcea.study.labelling import VALIDITY, bindings
from rcea.study.store.models import Trajectory, ValidityCheck, ValidityItem, ValidityTask
from rcea.study.validity_audit.versions import JudgeError

SIMULATION_NOTE = (
    "SIMULATION: these labels were produced by a domain oracle posing as annotators "
    "(with injected errors), not by people"
)


def _check(session: Session, name: str) -> ValidityCheck:
    row = session.exec(select(ValidityCheck).where(ValidityCheck.name == name)).first()
    if row is None:
        raise JudgeError(f"no calibration or accepted-set check named {name!r}")
    return row


def simulate_validity_labels(
    session: Session,
    calibration_name: str,
    people: People,
    annotator_credentials: Mapping[str, str],
    oracle: Callable[[str, str], Any],
    error_rate: float = 0.0,
    seed: int = 0,
) -> dict[str, Any]:
    """Label every still-unlabelled task of the check (calibration or accepted-set) as
    each annotator in ``annotator_credentials`` (e-mail → password) who was assigned a
    project by ``push``. ``oracle(question_id, text)`` → 1 valid / 0 fatal error.

    Returns per role the number of labels posted, how many were flipped on purpose, and
    ``simulated: True`` with :data:`SIMULATION_NOTE`. Run ``sync`` afterwards."""
    if not 0.0 <= error_rate <= 1.0:
        raise ValueError(f"error_rate must be in [0, 1], got {error_rate}")
    check = _check(session, calibration_name)
    creds = {k.lower(): v for k, v in annotator_credentials.items()}
    tasks = session.exec(select(ValidityTask).where(ValidityTask.check_id == check.id)).all()
    items = {
        i.id: i
        for i in session.exec(select(ValidityItem).where(ValidityItem.check_id == check.id)).all()
    }
    texts = dict(
        session.exec(
            select(Trajectory.trajectory_id, Trajectory.text).where(
                Trajectory.study_id == check.study_id,
                Trajectory.trajectory_id.in_(sorted(i.trajectory_id for i in items.values())),  # type: ignore[attr-defined]  # SQLModel types a column attribute as its Python value, not as the SQL column
            )
        ).all()
    )
    out: dict[str, Any] = {"check": check.name, "simulated": True, "note": SIMULATION_NOTE}

    def label_as(role: str, email: str) -> dict[str, Any]:
        """Every still-unlabelled task of ``role``'s project, as ``email`` on their server."""
        mine = sorted((t for t in tasks if t.role == role), key=lambda t: t.task_id)
        posted = flipped = skipped = 0
        url = people.require(email).url
        with closing(login_session(url, email, creds[email])) as web:
            me = web.get("/api/current-user/whoami").json().get("id")
            for t in mine:
                existing = web.get(f"/api/tasks/{t.task_id}/annotations/")
                existing.raise_for_status()
                if any(
                    (a.get("completed_by") == me or a.get("completed_by", {}) == {"id": me})
                    and not a.get("was_cancelled")
                    for a in existing.json()
                ):
                    skipped += 1
                    continue
                item = items[t.item_id]
                truth = (
                    "valid" if oracle(item.question_id, texts[item.trajectory_id]) else "invalid"
                )
                rng = random.Random(f"{seed}:{role}:{item.item_key}")
                label = truth
                if rng.random() < error_rate:
                    label = "invalid" if truth == "valid" else "valid"
                    flipped += 1
                resp = web.post(
                    f"/api/tasks/{t.task_id}/annotations/",
                    json={"result": choice_result(label), "lead_time": 1.0},
                )
                if resp.status_code != 201:
                    raise RuntimeError(
                        f"Label Studio refused the simulated annotation of task {t.task_id}: "
                        f"HTTP {resp.status_code} {resp.text[:200]}"
                    )
                posted += 1
        return {"email": email, "posted": posted, "flipped": flipped, "skipped": skipped}

    people_of = [
        (b.role, b.person)
        for b in bindings(session, VALIDITY, check.id)  # type: ignore[arg-type]  # a stored row's id is set: SQLModel types every primary key Optional
        if b.person in creds
    ]
    done = side_by_side(lambda person: label_as(*person), people_of)
    out.update({role: res for (role, _email), res in zip(people_of, done, strict=True)})
    return out
