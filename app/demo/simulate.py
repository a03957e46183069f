"""SIMULATED annotators for the demo's pair audit (``rcea demo --simulate-annotators``).

Two noisy oracle annotators and an oracle adjudicator stand in for people so that the
whole path to a published bundle can be watched without anyone labelling. They work
exactly where people would: each has a Label Studio account (created through the invite
flow, e-mails ``sim-…@rcea.local``), logs in through the real login form and posts its
annotations through the Label Studio REST API as itself; the labels reach the store by
``audit sync`` like any others. Nothing is written to the store directly.

The oracle: a pair's true label is ``same`` iff the domain's strategy function gives both
trajectories the same strategy (for the toy domain ``pipeline.toy:strategy_by_id``, which
reads the question id and the text). Annotator ``r`` answers the truth except on pairs
where a seeded draw ``u(seed, r, pair_key) < error_rate`` flips it; the draws are
independent per annotator and pair and do not depend on the order of labelling. The
adjudicator answers the truth.

Every line this module prints and every event it records says SIMULATED.
"""

from __future__ import annotations

import hashlib
import json
import secrets
from collections.abc import Callable
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlmodel import select

from annotation.tasks import PAIR_CHOICE
from app.report.publish import SIMULATED_EVENT
from app.store import append_event, session_scope
from app.store.models import Audit, AuditTask, Trajectory

SIMULATED = "SIMULATED"
SIM_ACTOR = "rcea-demo-simulation"
SIM_ROLES: dict[str, str] = {
    "A": "sim-annotator-a@rcea.local",
    "B": "sim-annotator-b@rcea.local",
    "adjudicator": "sim-adjudicator@rcea.local",
}
SIM_EVENT = SIMULATED_EVENT  # the report marks a bundle SIMULATED when it finds one


@dataclass(frozen=True)
class SimAccount:
    role: str
    email: str
    password: str
    user_id: int


def flip(seed: int, role: str, key: str, rate: float) -> bool:
    """Whether annotator ``role`` answers pair ``key`` wrongly: a uniform draw in [0, 1)
    from SHA-256 of ``seed:role:key`` is below ``rate`` (independent of labelling order)."""
    digest = hashlib.sha256(f"{seed}:{role}:{key}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 < rate


def sim_accounts(
    cfg: Any, logins_path: Path, roles: tuple[str, ...] = tuple(SIM_ROLES)
) -> dict[str, SimAccount]:
    """The simulated accounts, each on its own Label Studio server like a person's
    (created once through the invite flow; their generated passwords are kept in
    ``logins_path``, mode 0600). An account whose password this data dir has lost is
    given a new one (rcea runs that server)."""
    from annotation.accounts import set_password
    from annotation.people import people_from_settings
    from app.labelling import ensure_member

    people = people_from_settings(cfg)
    saved: dict[str, Any] = json.loads(logins_path.read_text()) if logins_path.exists() else {}
    sim = saved.setdefault("simulated", {})
    out: dict[str, SimAccount] = {}
    for role in roles:
        entry = sim.get(role) or {
            "email": SIM_ROLES[role],
            "password": secrets.token_urlsafe(12),
        }
        member = ensure_member(people, entry["email"], entry["password"])
        if member.new_password is None and role not in sim and member.person.managed:
            set_password(people.server(member.person), entry["email"], entry["password"])
        sim[role] = entry
        out[role] = SimAccount(role, entry["email"], entry["password"], member.user_id)
    from app.demo.audits import write_private_json

    write_private_json(logins_path, saved)
    return out


def pair_truth(
    engine: Any, audit_name: str, strategy_fn: Callable[[str, str], str | None]
) -> dict[str, str]:
    """pair key → the oracle's ``same``/``different`` for every pair of the audit."""
    from app.pair_audit.sampling import audit_pairs, get_audit

    with session_scope(engine) as s:
        audit = get_audit(s, name=audit_name)
        pairs = audit_pairs(s, audit_id=audit.id)
        ids = {p.trajectory_a for p in pairs} | {p.trajectory_b for p in pairs}
        rows = s.exec(
            select(Trajectory.trajectory_id, Trajectory.question_id, Trajectory.text).where(
                Trajectory.study_id == audit.study_id,
                Trajectory.trajectory_id.in_(ids),  # type: ignore[attr-defined]
            )
        ).all()
        strategy = {r.trajectory_id: strategy_fn(r.question_id, r.text) for r in rows}
        return {
            p.pair_key: "same"
            if strategy[p.trajectory_a] == strategy[p.trajectory_b]
            else "different"
            for p in pairs
        }


def _todo(engine: Any, audit_name: str, role: str) -> dict[str, int]:
    """pair key → Label Studio task id of ``role``'s tasks that have no counted label."""
    from app.pair_audit.labels import current_labels
    from app.pair_audit.sampling import audit_pairs, get_audit

    with session_scope(engine) as s:
        audit = get_audit(s, name=audit_name)
        done = current_labels(s, audit).get(role, {})
        keys = {p.id: p.pair_key for p in audit_pairs(s, audit_id=audit.id)}
        tasks = s.exec(
            select(AuditTask).where(AuditTask.audit_id == audit.id, AuditTask.role == role)
        ).all()
        return {keys[t.pair_id]: t.task_id for t in tasks if t.pair_id not in done}


def _post_labels(cfg: Any, account: SimAccount, labels: dict[int, str]) -> None:
    from annotation.accounts import login_session
    from annotation.people import people_from_settings

    url = people_from_settings(cfg).require(account.email).url
    with closing(login_session(url, account.email, account.password)) as session:
        for task_id, label in labels.items():
            result = [
                {
                    "from_name": PAIR_CHOICE,
                    "to_name": "left",
                    "type": "choices",
                    "value": {"choices": [label]},
                }
            ]
            resp = session.post(
                f"/api/tasks/{task_id}/annotations/", json={"result": result, "lead_time": 1.0}
            )
            if resp.status_code != 201:
                raise RuntimeError(
                    f"{SIMULATED} {account.email}: Label Studio refused the annotation of "
                    f"task {task_id}: HTTP {resp.status_code} {resp.text[:200]}"
                )


def _sync(engine: Any, cfg: Any, audit_name: str) -> dict[str, Any]:
    from annotation.people import people_from_settings
    from app.pair_audit.push import sync_audit
    from app.pair_audit.sampling import get_audit

    with session_scope(engine) as s:
        return sync_audit(s, get_audit(s, name=audit_name), people_from_settings(cfg))


def simulate_pair_audit(
    engine: Any,
    cfg: Any,
    audit_name: str,
    accounts: dict[str, SimAccount],
    *,
    strategy_fn: Callable[[str, str], str | None],
    error_rate: float,
    seed: int,
    echo: Callable[[str], None],
) -> dict[str, Any]:
    """Label every pair as the two SIMULATED annotators, sync, open the adjudication round,
    settle it as the SIMULATED adjudicator and sync again. Resumable: pairs a role has a
    counted label for are not labelled again (the store is synced first)."""
    from app.pair_audit.push import adjudicate
    from app.pair_audit.sampling import get_audit

    truth = pair_truth(engine, audit_name, strategy_fn)
    _sync(engine, cfg, audit_name)
    flipped: dict[str, int] = {}
    for role in ("A", "B"):
        todo = _todo(engine, audit_name, role)
        labels: dict[int, str] = {}
        flipped[role] = 0
        for key, task_id in todo.items():
            label = truth[key]
            if flip(seed, role, key, error_rate):
                label = "different" if label == "same" else "same"
                flipped[role] += 1
            labels[task_id] = label
        echo(
            f"{SIMULATED} annotator {role} ({accounts[role].email}): labelling "
            f"{len(labels)} pair(s) through the Label Studio API, {flipped[role]} "
            f"deliberately wrong (error rate {error_rate:.0%})"
        )
        _post_labels(cfg, accounts[role], labels)
    synced = _sync(engine, cfg, audit_name)
    from annotation.people import people_from_settings

    with session_scope(engine) as s:
        audit = get_audit(s, name=audit_name)
        round_ = adjudicate(
            s,
            audit,
            people_from_settings(cfg),
            adjudicator=accounts["adjudicator"].email,
            actor=SIM_ACTOR,
        )
    todo = _todo(engine, audit_name, "adjudicator")
    echo(
        f"{SIMULATED} adjudicator ({accounts['adjudicator'].email}): settling "
        f"{len(todo)} pair(s) with the oracle"
    )
    _post_labels(
        cfg,
        accounts["adjudicator"],
        {task_id: truth[key] for key, task_id in todo.items()},
    )
    final_sync = _sync(engine, cfg, audit_name)
    summary = {
        "simulated": True,
        "audit": audit_name,
        "accounts": {r: a.email for r, a in accounts.items()},
        "error_rate": error_rate,
        "seed": seed,
        "n_pairs": len(truth),
        "deliberate_errors": flipped,
        "n_adjudication_pairs": round_["n_pairs"],
        "annotations_seen": final_sync["annotations_seen"],
        "first_sync": synced,
    }
    with session_scope(engine) as s:
        audit = s.exec(select(Audit).where(Audit.name == audit_name)).one()
        append_event(
            s,
            actor=SIM_ACTOR,
            kind=SIM_EVENT,
            study_id=audit.study_id,
            payload={"what": "pair-audit labels", **summary},
        )
    return summary
