"""The quick demo's SIMULATED pair audit exercises the sequential gate and the hidden
repeats, fast: the demo's own quick rubric (6 × 24 pairs, looks
[0.5, 0.75, 1.0], Pocock, repeat share 0.1) on a small store study, the real push (task
building, repeats, leak scan) into fake Label Studio projects, and the real simulation
loop (:func:`rcea.app.demo.simulate.simulate_pair_audit`) whose HTTP posts and syncs are
replaced by recording the same annotations in the store. The gate settles
(``settled_pass``) at look 1 of 3 here (on the real quick demo's data: at look 2 of 3),
a ``gate.interim`` event records each look, the output says so, the final gate passes,
and each annotator gets self-consistency figures."""

from __future__ import annotations

import sys
from itertools import count
from pathlib import Path
from typing import Any

from sqlmodel import select

from rcea.annotation.payloads import ParsedAnnotation
from rcea.app.demo import simulate
from rcea.app.demo.config import QUICK, rubric_toml
from rcea.study.labelling import PAIR, Member, bind_existing, bindings
from rcea.study.pair_audit.annotators import annotator_quality
from rcea.study.pair_audit.freeze import freeze_partition_from_modes, freeze_rubric
from rcea.study.pair_audit.gate import gate_status
from rcea.study.pair_audit.labels import (
    ADJUDICATOR,
    current_labels,
    needs_adjudication,
    record_annotation,
)
from rcea.study.pair_audit.repeats import n_repeats
from rcea.study.pair_audit.sampling import audit_pairs, draw_audit, get_audit
from rcea.study.store import list_events, session_scope
from rcea.study.store.models import Audit, AuditTask
from tests.support.fake_labelstudio import PROJECTS, USERS, FakeServers
from tests.support.helpers import audit_study, fake_person, rubric_file


def _mode(question_id: str, text: str) -> str | None:
    """The store study's strategy oracle: ``solution {100·q + k}`` follows m1 for odd k,
    m2 for even k (the one uncertain trajectory of audit_study included)."""
    k = int(text.split()[-1]) % 100
    return "m1" if k % 2 else "m2"


def test_quick_simulated_audit_settles_before_the_last_look(  # type: ignore[no-untyped-def]
    engine, settings, tmp_path: Path, monkeypatch
) -> None:
    from rcea.study.pair_audit.push import push_audit

    audit_study(engine, tmp_path, n_q=7, per_q=10)  # C(10, 2) = 45 >= 24 pairs each
    with session_scope(engine) as s:
        freeze_rubric(s, path=rubric_file(tmp_path, rubric_toml(QUICK)), actor="r")
        freeze_partition_from_modes(s, study="s", actor="r")
        name = draw_audit(s, study="s", rubric=QUICK.rubric_name, actor="r").name

    # --- the push, into fake Label Studio projects
    servers = FakeServers()
    emails = {"A": "a@people.test", "B": "b@people.test"}
    role_of = {e: r for r, e in emails.items()}
    push_mod = sys.modules["rcea.study.labelling.push"]

    def project(session, people, binding, **kw):  # type: ignore[no-untyped-def]
        binding.project_id, binding.state = PROJECTS[binding.role], "created"
        session.add(binding)
        return binding.project_id

    class People:
        def client(self, person):  # type: ignore[no-untyped-def]
            return None

    monkeypatch.setattr(
        push_mod,
        "ensure_member",
        lambda people, email, pw=None: Member(fake_person(role_of[email]), USERS[role_of[email]]),
    )
    monkeypatch.setattr(push_mod, "ensure_project", project)
    monkeypatch.setattr(push_mod, "import_tasks", servers.import_tasks)
    with session_scope(engine) as s:
        pushed = push_audit(
            s, get_audit(s, name=name), People(), annotators=emails, webhook=None, actor="t"
        )
    n = 6 * 24
    assert pushed["n_repeats"] == n_repeats(n, 0.1) == 14

    # --- the simulation: posts and syncs become store records of the same annotations
    ann_ids = count(1)
    user_of = {**USERS, ADJUDICATOR: 13}

    def post(cfg: Any, account: simulate.SimAccount, labels: dict[int, str]) -> None:
        with session_scope(engine) as s:
            audit = get_audit(s, name=name)
            for task_id, label in labels.items():
                ann = ParsedAnnotation(
                    next(ann_ids), task_id, None, user_of[account.role], label, None, False
                )
                record_annotation(s, audit, ann, source="test")

    def adjudicate(s, audit, people, *, adjudicator, actor, **kw):  # type: ignore[no-untyped-def]
        """The round on a fake server: bound once, extended with the new pairs (as the
        real push is: idempotent by pair)."""
        todo = needs_adjudication(
            audit_pairs(s, audit_id=audit.id),
            current_labels(s, audit),
            "disagreements_and_automatic",
        )
        if not any(b.role == ADJUDICATOR for b in bindings(s, PAIR, audit.id)):
            bind_existing(s, PAIR, audit, ADJUDICATOR,
                          person=fake_person("adj"), user_id=13, project_id=3)  # fmt: skip
        have = {t.pair_id for t in s.exec(select(AuditTask).where(AuditTask.role == ADJUDICATOR))}
        for p in todo:
            if p.id not in have:
                s.add(AuditTask(audit_id=audit.id, role=ADJUDICATOR, pair_id=p.id, project_id=3,
                                task_id=90_000 + p.id, left_is_a=True))  # fmt: skip
        return {"n_pairs": len(todo)}

    monkeypatch.setattr(simulate, "post_labels", post)
    monkeypatch.setattr(simulate, "_sync", lambda engine, cfg, audit: {"annotations_seen": 0})
    monkeypatch.setattr(simulate, "adjudicate", adjudicate)
    said: list[str] = []
    accounts = {
        r: simulate.SimAccount(r, e, "pw", user_of[r])
        for r, e in {**emails, ADJUDICATOR: "adj@people.test"}.items()
    }
    out = simulate.simulate_pair_audit(
        engine,
        settings,  # its Label Studio is never contacted
        name,
        accounts,
        strategy_fn=_mode,
        error_rate=QUICK.annotator_error,
        seed=QUICK.seed,
        echo=said.append,
    )

    # settled_pass at look 1 of 3, recorded and shown
    assert out["settled_at_look"] == 1
    assert [(x["look"], x["n_labelled"], x["decision"]) for x in out["looks"]] == [
        (1, 72, "settled_pass"),
        (2, 108, "settled_pass"),
        (3, 144, "settled_pass"),
    ]
    with session_scope(engine) as s:
        audit = s.exec(select(Audit).where(Audit.name == name)).one()
        events = [e.payload for e in list_events(s, kind="gate.interim", study_id=audit.study_id)]
        final = gate_status(s, audit, final=True)
        quality = annotator_quality(s, audit)
    assert [(e["look"], e["decision"]) for e in events] == [
        (1, "settled_pass"),
        (2, "settled_pass"),
        (3, "settled_pass"),
    ]
    shown = [line for line in said if "before the last look" in line]  # said once
    assert len(shown) == 1 and shown[0].startswith("SIMULATED")
    assert "settled (settled_pass) at look 1 of 3" in shown[0]
    assert final["status"] == "passed" and final["report"]["gate_rule"] == "sequential"
    # every hidden repeat was labelled, after look 1 (they sit in the later half)
    assert out["hidden_repeats_labelled"] == {"A": 14, "B": 14}
    labelled_at_look1 = [line for line in said if "hidden repeat" in line][:2]
    assert all("(0 hidden repeat(s))" in line for line in labelled_at_look1)
    sc = {
        p["round"]: p["self_consistency"]
        for p in quality["annotators"]
        if p["round"] != ADJUDICATOR
    }
    for role in ("A", "B"):
        assert sc[role]["n"] == sc[role]["planned"] == 14
        # the repeat's own draw: a pair changes exactly when one of the two draws flipped
        with session_scope(engine) as s:
            keys = {p.id: p.pair_key for p in audit_pairs(s, audit_id=audit.id)}
            repeat = AuditTask.repeat == True  # noqa: E712
            rep = s.exec(select(AuditTask).where(AuditTask.role == role, repeat)).all()
        expected = sorted(
            keys[t.pair_id]
            for t in rep
            if simulate.flip(QUICK.seed, role, keys[t.pair_id], QUICK.annotator_error)
            != simulate.flip(QUICK.seed, f"{role}:repeat", keys[t.pair_id], QUICK.annotator_error)
        )
        assert sc[role]["changed"] == expected
        assert sc[role]["same"] == 14 - len(expected)
