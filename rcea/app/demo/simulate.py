"""SIMULATED annotators for the demo's pair audit (``rcea demo --simulate-annotators``).

Two noisy oracle annotators and an oracle adjudicator stand in for people so that the
whole path to a published bundle can be watched without anyone labelling. They work
exactly where people would: each has a Label Studio account (created through the invite
flow, e-mails ``sim-…@rcea.local``), logs in through the real login form and posts its
annotations through the Label Studio REST API as itself; the labels reach the store by
``audit sync`` like any others. Nothing is written to the store directly.

The oracle: a pair's true label is ``same`` iff the domain's strategy function gives both
trajectories the same strategy (for the toy domain ``rcea.pipeline.toy:strategy_by_id``, which
reads the question id and the text). Annotator ``r`` answers the truth except on pairs
where a seeded draw ``u(seed, r, pair_key) < error_rate`` flips it; the draws are
independent per annotator and pair and do not depend on the order of labelling. The
adjudicator answers the truth.

They label in task order, look by look when the frozen rubric predeclares a sequential
plan (``[sequential]``): after each look the labels are synced, the interim gate is
computed and a ``gate.interim`` event recorded; a gate settled before the last look is
said so (the plan would allow stopping there; the simulation labels the rest anyway).
Hidden repeats (``[annotators] repeat_share``) are answered afresh, with their own draw
(``u(seed, "A:repeat", pair_key)``), so the annotators' self-consistency is not perfect.

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

from rcea.annotation.accounts import login_session, set_password, side_by_side
from rcea.annotation.people import people_from_settings
from rcea.annotation.tasks import PAIR_CHOICE
from rcea.audits.sequential import look_sizes
from rcea.pipeline.safety import write_private
from rcea.study.labelling import PAIR, ensure_member
from rcea.study.labelling import current_labels as core_labels
from rcea.study.pair_audit.gate import gate_status
from rcea.study.pair_audit.labels import audit_rubric, current_labels
from rcea.study.pair_audit.push import adjudicate, sync_audit
from rcea.study.pair_audit.sampling import audit_pairs, audit_tasks, get_audit
from rcea.study.pair_audit.sequential import record_interim
from rcea.study.report.publication import SIMULATED_EVENT
from rcea.study.store import append_event, session_scope
from rcea.study.store.repository import trajectories_by_id

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

    logins_path.parent.mkdir(parents=True, exist_ok=True)
    write_private(logins_path, json.dumps(saved, indent=2).encode())
    return out


def pair_truth(
    engine: Any, audit_name: str, strategy_fn: Callable[[str, str], str | None]
) -> dict[str, str]:
    """pair key → the oracle's ``same``/``different`` for every pair of the audit."""

    with session_scope(engine) as s:
        audit = get_audit(s, name=audit_name)
        pairs = audit_pairs(s, audit_id=audit.id)  # type: ignore[arg-type]  # a stored row's id is set: SQLModel types every primary key Optional
        ids = {p.trajectory_a for p in pairs} | {p.trajectory_b for p in pairs}
        rows = trajectories_by_id(s, study_id=audit.study_id, ids=ids)
        strategy = {tid: strategy_fn(r.question_id, r.text) for tid, r in rows.items()}
        return {
            p.pair_key: "same"
            if strategy[p.trajectory_a] == strategy[p.trajectory_b]
            else "different"
            for p in pairs
        }


def _tasks(engine: Any, audit_name: str, role: str) -> list[tuple[int, str, bool, bool]]:
    """``role``'s tasks in task order (Label Studio's: the import order): (task id, pair
    key, whether it is a hidden repeat, whether it has a counted label already)."""

    with session_scope(engine) as s:
        audit = get_audit(s, name=audit_name)
        done = current_labels(s, audit).get(role, {})
        again = core_labels(s, PAIR, audit.id, repeats=True).get(role, {})  # type: ignore[arg-type]  # a stored row's id is set: SQLModel types every primary key Optional
        keys = {p.id: p.pair_key for p in audit_pairs(s, audit_id=audit.id)}  # type: ignore[arg-type]  # a stored row's id is set: SQLModel types every primary key Optional
        tasks = audit_tasks(s, audit_id=audit.id, role=role)  # type: ignore[arg-type]  # a stored row's id is set: SQLModel types every primary key Optional
        return [
            (t.task_id, keys[t.pair_id], t.repeat, t.pair_id in (again if t.repeat else done))
            for t in tasks
        ]


def todo_pairs(engine: Any, audit_name: str, role: str) -> dict[str, int]:
    """pair key → task id of ``role``'s first showings that have no counted label."""
    return {k: t for t, k, rep, done in _tasks(engine, audit_name, role) if not rep and not done}


def upto_look(
    tasks: list[tuple[int, str, bool, bool]], n_pairs: int
) -> list[tuple[int, str, bool]]:
    """What a person labelling in task order still has to label for the first
    ``n_pairs`` pairs to be done: every unlabelled task up to the ``n_pairs``-th first
    showing (hidden repeats placed before it included)."""
    seen, out = 0, []
    for task_id, key, repeat, done in tasks:
        if not repeat:
            if seen == n_pairs:
                break
            seen += 1
        if not done:
            out.append((task_id, key, repeat))
    return out


def post_labels(cfg: Any, account: SimAccount, labels: dict[int, str]) -> None:
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


def post_side_by_side(cfg: Any, batches: list[tuple[SimAccount, dict[int, str]]]) -> None:
    """Each person's labels posted to their own server, the people side by side."""
    side_by_side(lambda batch: post_labels(cfg, *batch), batches)


def look_plan(engine: Any, audit_name: str, n_pairs: int) -> tuple[int, ...]:
    """Pairs labelled by both annotators at each predeclared look of the audit's frozen
    rubric (``[sequential]``), or just all of them without a plan."""

    with session_scope(engine) as s:
        plan = audit_rubric(s, get_audit(s, name=audit_name)).sequential
    return (n_pairs,) if plan is None else look_sizes(plan.looks, n_pairs)


def _interim(engine: Any, audit_name: str) -> dict[str, Any] | None:
    """The gate at the current look under the sequential plan (``None`` without one),
    recorded as a ``gate.interim`` event the first time the look is reached."""

    with session_scope(engine) as s:
        audit = get_audit(s, name=audit_name)
        seq = gate_status(s, audit, final=False).get("sequential")
        if seq is None:
            return None
        record_interim(s, audit, seq, f"{SIM_ACTOR} ({SIMULATED} labels)")
        return {k: seq[k] for k in ("look", "n_looks", "n_labelled", "n_planned", "decision")}


def _adjudicate(
    engine: Any,
    cfg: Any,
    audit_name: str,
    accounts: dict[str, SimAccount],
    truth: dict[str, str],
    echo: Callable[[str], None],
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Open (or extend) the adjudication round with every pair that needs it so far,
    settle the new ones as the SIMULATED oracle adjudicator and sync: (round, sync)."""

    with session_scope(engine) as s:
        audit = get_audit(s, name=audit_name)
        round_ = adjudicate(
            s,
            audit,
            people_from_settings(cfg),
            adjudicator=accounts["adjudicator"].email,
            actor=SIM_ACTOR,
        )
    todo = todo_pairs(engine, audit_name, "adjudicator")
    echo(
        f"{SIMULATED} adjudicator ({accounts['adjudicator'].email}): settling "
        f"{len(todo)} pair(s) with the oracle"
    )
    post_labels(
        cfg, accounts["adjudicator"], {task_id: truth[key] for key, task_id in todo.items()}
    )
    return round_, _sync(engine, cfg, audit_name)


def _sync(engine: Any, cfg: Any, audit_name: str) -> dict[str, Any]:
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
    """Label every pair as the two SIMULATED annotators, look by look (all at once
    without a sequential plan): after each look sync, open or extend the adjudication
    round, settle it as the SIMULATED adjudicator, sync again and record the interim gate.
    Resumable: pairs a role has a counted label for are not labelled again (the store is
    synced first)."""
    truth = pair_truth(engine, audit_name, strategy_fn)
    _sync(engine, cfg, audit_name)
    flipped: dict[str, int] = {"A": 0, "B": 0}
    repeated: dict[str, int] = {"A": 0, "B": 0}
    looks: list[dict[str, Any]] = []
    synced: dict[str, Any] = {}
    round_: dict[str, Any] = {"n_pairs": 0}
    final_sync: dict[str, Any] = {"annotations_seen": 0}
    for size in look_plan(engine, audit_name, len(truth)):
        batches: list[tuple[SimAccount, dict[int, str]]] = []
        for role in ("A", "B"):
            labels: dict[int, str] = {}
            n_wrong = n_rep = 0
            for task_id, key, repeat in upto_look(_tasks(engine, audit_name, role), size):
                # a hidden repeat is answered afresh: its own seeded draw
                who = f"{role}:repeat" if repeat else role
                label = truth[key]
                if flip(seed, who, key, error_rate):
                    label = "different" if label == "same" else "same"
                    n_wrong += 1
                n_rep += repeat
                labels[task_id] = label
            flipped[role] += n_wrong
            repeated[role] += n_rep
            if labels:
                echo(
                    f"{SIMULATED} annotator {role} ({accounts[role].email}): labelling "
                    f"{len(labels)} task(s) through the Label Studio API ({n_rep} hidden "
                    f"repeat(s)), {n_wrong} deliberately wrong (error rate {error_rate:.1%})"
                )
                batches.append((accounts[role], labels))
        post_side_by_side(cfg, batches)
        synced = _sync(engine, cfg, audit_name)
        # the adjudicator settles what needs it so far (the round grows look by look)
        round_, final_sync = _adjudicate(engine, cfg, audit_name, accounts, truth, echo)
        look = _interim(engine, audit_name)
        if look is not None:
            looks.append(look)
            echo(
                f"{SIMULATED} look {look['look']}/{look['n_looks']} of the predeclared "
                f"sequential plan: {look['n_labelled']} of {look['n_planned']} pairs labelled "
                f"by A and B → gate {look['decision']}"
            )
            first = all(x["decision"] == "undecided" for x in looks[:-1])
            if first and look["decision"] != "undecided" and look["look"] < look["n_looks"]:
                echo(
                    f"{SIMULATED} the gate is settled ({look['decision']}) at look "
                    f"{look['look']} of {look['n_looks']}, before the last look: the plan "
                    "allows stopping here (`rcea audit gate --final`); the simulated "
                    "annotators label the rest anyway (labelling beyond a settled look "
                    "stays allowed)"
                )
    summary = {
        "simulated": True,
        "audit": audit_name,
        "accounts": {r: a.email for r, a in accounts.items()},
        "error_rate": error_rate,
        "seed": seed,
        "n_pairs": len(truth),
        "deliberate_errors": flipped,
        "hidden_repeats_labelled": repeated,
        "looks": looks,
        "settled_at_look": next((x["look"] for x in looks if x["decision"] != "undecided"), None),
        "n_adjudication_pairs": round_["n_pairs"],
        "annotations_seen": final_sync["annotations_seen"],
        "first_sync": synced,
    }
    with session_scope(engine) as s:
        audit = get_audit(s, name=audit_name)
        append_event(
            s,
            actor=SIM_ACTOR,
            kind=SIM_EVENT,
            study_id=audit.study_id,
            payload={"what": "pair-audit labels", **summary},
        )
    return summary
