"""People and their projects: accounts on each person's own server, and the typed
person → project binding of every round (``labelling_project``).

Domain rules live here, not in the CLI: every role of one round is a different person
(A ≠ B; an adjudicator is neither), and a role once bound stays with its person.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import Any

from sqlmodel import Session, select

from rcea.annotation.accounts import create_annotator
from rcea.annotation.people import People, Person, normalise_email
from rcea.study.labelling.families import Family
from rcea.study.store.models import LabellingProject, utcnow


class LabellingError(RuntimeError):
    """A round cannot be pushed, synced or recorded as asked; the message says why."""


@dataclass(frozen=True)
class Member:
    """A person with an account on their own server."""

    person: Person
    user_id: int
    new_password: str | None = None  # only when the account was created just now

    @property
    def email(self) -> str:
        return self.person.email


def ensure_member(
    people: People, email: str, password: str | None = None, *, start_timeout: float = 300.0
) -> Member:
    """Register ``email``'s server (managed by default), start it if rcea runs it, and
    make sure the person has an account there (idempotent: an existing account keeps its
    password). Returns the new password only when the account was created now."""

    email = normalise_email(email)
    person = people.get(email) or people.add(email)
    people.start(person, timeout=start_timeout)
    new = password or secrets.token_urlsafe(12)
    acct = create_annotator(person.url, people.admin_token(person), email, new)
    return Member(person, acct.id, new if acct.created else None)


def binding(session: Session, family: Family, owner_id: int, role: str) -> LabellingProject | None:
    return session.exec(
        select(LabellingProject).where(
            LabellingProject.family == family.name,
            LabellingProject.owner_id == owner_id,
            LabellingProject.role == role,
        )
    ).first()


def bindings(session: Session, family: Family, owner_id: int) -> list[LabellingProject]:
    return list(
        session.exec(
            select(LabellingProject)
            .where(LabellingProject.family == family.name, LabellingProject.owner_id == owner_id)
            .order_by(LabellingProject.role)
        ).all()
    )


def check_distinct_people(assignment: dict[str, str]) -> None:
    """Every role of a round is a different person (e-mails compared case-insensitively)."""
    seen: dict[str, str] = {}
    for role, email in assignment.items():
        key = normalise_email(email)
        if key in seen:
            raise LabellingError(
                f"{email} cannot be both {seen[key]} and {role}: every role of a round is a "
                "different person (annotators A and B must be two different people; an "
                "adjudicator is neither of them)"
            )
        seen[key] = role


def bind(
    session: Session, family: Family, owner: Any, role: str, member: Member
) -> LabellingProject:
    """The binding of ``role`` to ``member`` (created in state ``intent``; idempotent).

    Refuses to move a role to another person and to give one person two roles."""
    current = bindings(session, family, owner.id)
    for row in current:
        if row.role == role:
            if row.person != member.email:
                raise LabellingError(
                    f"{family.owner_label} {owner.name}: {role} is {row.person}, not "
                    f"{member.email} (a role stays with its person)"
                )
            return row
    check_distinct_people({**{r.role: r.person for r in current}, role: member.email})
    row = LabellingProject(
        family=family.name,
        owner_id=owner.id,
        role=role,
        person=member.email,
        person_slug=member.person.slug,
        server_url=member.person.url,
        user_id=member.user_id,
        marker=secrets.token_hex(8),
        state="intent",
    )
    session.add(row)
    session.flush()
    return row


def bind_existing(
    session: Session,
    family: Family,
    owner: Any,
    role: str,
    *,
    person: Person,
    user_id: int,
    project_id: int | None = None,
) -> LabellingProject:
    """A binding for a project that exists already (tests, imports of earlier audits)."""
    row = bind(session, family, owner, role, Member(person, user_id))
    if project_id is not None:
        row.project_id, row.state, row.updated_at = project_id, "created", utcnow()
        session.add(row)
        session.flush()
    return row
