"""Hidden repeats (item 4; rubric ``[annotators] repeat_share``): the push
places exactly ⌊share·n + ½⌋ repeats per annotator, far from the first showing and
indistinguishable from a normal task; their labels never change the gate, the reference,
agreement or the sequential looks; self-consistency is exact on a hand-computed case and
equals what Label Studio's own export (tasks with the same two texts are the same pair)
gives."""

from __future__ import annotations

import re
from collections import defaultdict
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlmodel import select

from rcea.annotation.payloads import parse_annotation
from rcea.annotation.tasks import PAIR_CHOICE
from rcea.audits.rubric import parse_rubric
from rcea.study.labelling import Member
from rcea.study.pair_audit.annotators import annotator_quality
from rcea.study.pair_audit.freeze import freeze_partition_from_modes, freeze_rubric
from rcea.study.pair_audit.gate import gate_status
from rcea.study.pair_audit.labels import current_labels, record_annotation, status_counts
from rcea.study.pair_audit.repeats import n_repeats, repeat_key, repeat_positions, with_repeats
from rcea.study.pair_audit.sampling import audit_pairs, draw_audit
from rcea.study.store import session_scope
from rcea.study.store.models import Audit, AuditTask
from tests.support.fake_labelstudio import PROJECTS, USERS, FakeServers
from tests.support.helpers import RUBRIC, audit_study, fake_person, rubric_file

SHARE = "\n[annotators]\nrepeat_share = 0.2\n"
SEQUENTIAL = '\n[sequential]\nlooks = [0.5, 1.0]\nspending = "pocock"\n'
T0 = datetime(2026, 11, 30, 9, 0, 0, tzinfo=UTC)


# --------------------------------------------------------------------------- pure parts


def test_how_many_which_and_where() -> None:
    assert [n_repeats(18, s) for s in (0.0, 0.05, 0.2, 0.25, 0.5)] == [0, 1, 4, 5, 9]
    assert n_repeats(7, 0.5) == 4 and n_repeats(0, 0.3) == 0
    pos = repeat_positions(18, 0.2, "5:1")
    assert pos == repeat_positions(18, 0.2, "5:1") and len(pos) == 4
    assert all(0 <= i < 9 for i in pos) and pos == sorted(set(pos))
    assert pos != repeat_positions(18, 0.2, "6:1") or pos != repeat_positions(18, 0.2, "7:1")
    tasks = [f"t{i}" for i in range(18)]
    out = with_repeats(tasks, {i: f"r{i}" for i in pos})
    assert len(out) == 22 and [t for t in out if t.startswith("t")] == tasks
    for i in pos:  # right after original i + 9: at least 9 tasks later, in the later half
        assert out.index(f"r{i}") == out.index(f"t{i + 9}") + 1
        assert out.index(f"r{i}") - out.index(f"t{i}") >= 10
    key = repeat_key("5:1", "p00000000000000aa", set())
    assert re.fullmatch(r"p[0-9a-f]{16}", key)
    assert repeat_key("5:1", "p00000000000000aa", {key}) != key


def test_rubric_table_is_validated_and_hashed_only_when_set() -> None:
    head = '[rubric]\nname = "r"\nversion = "1"\n'
    plain = parse_rubric(head)
    zero = parse_rubric(head + "[annotators]\nrepeat_share = 0\n")
    assert plain.content_hash() == zero.content_hash() and "annotators" not in plain.to_dict()
    some = parse_rubric(head + "[annotators]\nrepeat_share = 0.05\n")
    assert some.annotators.repeat_share == 0.05 and some.content_hash() != plain.content_hash()
    assert parse_rubric(some.to_toml()) == some
    for bad in ("0.6", "-0.1", "true", '"x"'):
        with pytest.raises(ValueError, match=r"\[annotators\] repeat_share"):
            parse_rubric(head + f"[annotators]\nrepeat_share = {bad}\n")


# --------------------------------------------------------------------------- the push


@pytest.fixture
def pushed(engine, tmp_path: Path, monkeypatch):  # type: ignore[no-untyped-def]
    import sys

    from rcea.study.pair_audit.push import push_audit

    # the package re-exports functions of the same names: patch the module that calls them
    push_mod = sys.modules["rcea.study.labelling.push"]

    audit_study(engine, tmp_path)
    with session_scope(engine) as s:
        freeze_rubric(s, path=rubric_file(tmp_path, RUBRIC + SHARE + SEQUENTIAL), actor="r")
        freeze_partition_from_modes(s, study="s", actor="r")
        audit_id = draw_audit(s, study="s", rubric="test-rubric", actor="r").id
    servers = FakeServers()
    emails = {"A": "a@people.test", "B": "b@people.test"}
    role_of = {e: r for r, e in emails.items()}

    def member(people, email, password=None):  # type: ignore[no-untyped-def]
        return Member(fake_person(role_of[email]), USERS[role_of[email]])

    def project(session, people, binding, **kw):  # type: ignore[no-untyped-def]
        binding.project_id, binding.state = PROJECTS[binding.role], "created"
        session.add(binding)
        return binding.project_id

    class People:
        def client(self, person):  # type: ignore[no-untyped-def]
            return None

        def http(self, person):  # type: ignore[no-untyped-def]
            import contextlib

            return contextlib.nullcontext(None)  # nothing is patched: every key is intact

    monkeypatch.setattr(push_mod, "ensure_member", member)
    monkeypatch.setattr(push_mod, "ensure_project", project)
    monkeypatch.setattr(push_mod, "import_tasks", servers.import_tasks)
    # a re-push re-checks the tasks it owns through the project's export
    monkeypatch.setattr(push_mod, "export_tasks", servers.export_tasks)

    def push() -> dict[str, Any]:
        with session_scope(engine) as s:
            return push_audit(
                s, s.get(Audit, audit_id), People(), annotators=emails, webhook=None, actor="t"
            )

    return audit_id, servers, push


def test_push_places_exact_indistinguishable_repeats(engine, pushed) -> None:  # type: ignore[no-untyped-def]
    audit_id, servers, push = pushed
    out = push()
    with session_scope(engine) as s:
        pairs = audit_pairs(s, audit_id=audit_id)
        rows = s.exec(select(AuditTask)).all()
    n, k = len(pairs), round(0.2 * len(pairs))
    assert (n, k, out["n_repeats"]) == (18, 4, 4)
    keys = {p.pair_key for p in pairs}
    by_id = {p.id: p for p in pairs}
    repeated: dict[str, set[int]] = {}
    for role in ("A", "B"):
        sent = servers.projects[PROJECTS[role]]
        assert len(sent) == n + k and out["projects"][role]["n_new"] == n + k
        role_rows = {r.task_id: r for r in rows if r.role == role}
        assert sum(r.repeat for r in role_rows.values()) == k
        originals = {role_rows[i].pair_id: (pos, d) for pos, (i, d) in enumerate(sent)
                     if not role_rows[i].repeat}  # fmt: skip
        assert set(originals) == set(by_id) and {d["pair"] for _, d in originals.values()} == keys
        repeated[role] = set()
        for pos, (task_id, data) in enumerate(sent):
            row = role_rows[task_id]
            if not row.repeat:
                continue
            repeated[role].add(row.pair_id)
            first_pos, first = originals[row.pair_id]
            # nothing differs in kind: same keys, same value types, a key of the same form
            assert list(data) == list(first) and all(isinstance(v, str) for v in data.values())
            assert re.fullmatch(r"p[0-9a-f]{16}", data["pair"]) and data["pair"] not in keys
            assert {data["left"], data["right"]} == {first["left"], first["right"]}
            # the recorded side is right for the repeat too (trajectory_a's text)
            text_a = first["left"] if role_rows[sent[first_pos][0]].left_is_a else first["right"]
            assert (data["left"] == text_a) == row.left_is_a
            assert pos - first_pos >= n // 2 + 1 and pos >= (n + k) // 2
        assert len({d["pair"] for _, d in sent}) == n + k  # fresh key, fresh task id
    assert repeated["A"] == repeated["B"] and len(repeated["A"]) == k
    again = push()  # idempotent: nothing new, still n + k tasks each
    assert [again["projects"][r]["n_new"] for r in ("A", "B")] == [0, 0]
    assert [len(servers.projects[p]) for p in (1, 2)] == [n + k, n + k]


def _export(ann_id: int, task: int, role: str, label: str, k: int) -> dict[str, Any]:
    """One annotation as Label Studio's export writes it."""
    user = USERS[role]
    return {
        "id": ann_id,
        "task": task,
        "project": PROJECTS[role],
        "completed_by": user,
        "result": [
            {
                "from_name": PAIR_CHOICE,
                "to_name": "left",
                "type": "choices",
                "value": {"choices": [label]},
            }
        ],  # fmt: skip
        "was_cancelled": False,
        "lead_time": 2.0 + k,
        "created_at": (T0 + timedelta(seconds=30 * k + user)).isoformat().replace("+00:00", "Z"),
        "updated_by": user,
    }


def test_repeats_never_count_and_self_consistency_is_exact(engine, pushed) -> None:  # type: ignore[no-untyped-def]
    audit_id, servers, push = pushed
    push()
    flip = {"same": "different", "different": "same"}
    with session_scope(engine) as s:
        pairs = audit_pairs(s, audit_id=audit_id)
        tasks = s.exec(select(AuditTask)).all()
    first = {(t.role, t.pair_id): t.task_id for t in tasks if not t.repeat}
    second = {(t.role, t.pair_id): t.task_id for t in tasks if t.repeat}
    rep_pairs = sorted({pid for _, pid in second})
    # A and B label every pair (B disagrees on every fourth), in Label Studio's shape
    truth = {p.id: p.automatic or "same" for p in pairs}
    given = {"A": dict(truth), "B": {p.id: flip[truth[p.id]] if i % 4 == 0 else truth[p.id]
                                     for i, p in enumerate(pairs)}}  # fmt: skip
    export: dict[str, list[dict[str, Any]]] = {"A": [], "B": []}
    ann = 1
    for role in ("A", "B"):
        for k, p in enumerate(pairs):
            export[role].append(_export(ann, first[(role, p.id)], role, given[role][p.id], k))
            ann += 1

    def record(items: list[dict[str, Any]]) -> None:
        with session_scope(engine) as s:
            audit = s.get(Audit, audit_id)
            for x in items:
                record_annotation(s, audit, parse_annotation(x), source="test")

    record(export["A"] + export["B"])

    def snapshot() -> tuple[Any, ...]:
        with session_scope(engine) as s:
            audit = s.get(Audit, audit_id)
            q = annotator_quality(s, audit, window=3)
            for p in q["annotators"]:
                p.pop("self_consistency", None)
            return (
                gate_status(s, audit, final=False),
                current_labels(s, audit),
                status_counts(s, audit),
                q,
            )

    before = snapshot()
    assert before[0]["sequential"]["look"] == 2  # every pair labelled: the last look
    # repeats: A changes its mind on the 2nd of 4 (3/4 the same); B labels only the
    # first two repeats, changing the first (1/2) — against B's own first labels
    a_rep = {pid: flip[given["A"][pid]] if j == 1 else given["A"][pid]
             for j, pid in enumerate(rep_pairs)}  # fmt: skip
    b_rep = {pid: flip[given["B"][pid]] if j == 0 else given["B"][pid]
             for j, pid in enumerate(rep_pairs[:2])}  # fmt: skip
    for role, labels in (("A", a_rep), ("B", b_rep)):
        for k, (pid, label) in enumerate(labels.items()):
            export[role].append(_export(ann, second[(role, pid)], role, label, 100 + k))
            ann += 1
    record(export["A"][len(pairs) :] + export["B"][len(pairs) :])
    assert snapshot() == before  # gate, labels, statuses, agreement: identical
    with session_scope(engine) as s:
        q = annotator_quality(s, s.get(Audit, audit_id), window=3)
    sc = {p["round"]: p["self_consistency"] for p in q["annotators"]}
    key = {p.id: p.pair_key for p in pairs}
    assert sc["A"] == {"n": 4, "same": 3, "share": 0.75, "planned": 4,
                       "changed": [key[rep_pairs[1]]]}  # fmt: skip
    assert sc["B"] == {"n": 2, "same": 1, "share": 0.5, "planned": 4,
                       "changed": [key[rep_pairs[0]]]}  # fmt: skip

    # the view's Annotators table carries the same figures
    from rcea.app.view.data.audit import annotators_view

    with session_scope(engine) as s:
        people = annotators_view(s, s.get(Audit, audit_id))["people"].set_index("round")
    assert people.loc["A", "self_consistency"] == 0.75
    assert people.loc["B", "self_consistency_n"] == 2

    # From Label Studio's own export alone: tasks showing the same two texts are one
    # pair shown twice; the first-created annotation is the first showing.
    for role in ("A", "B"):
        texts = {
            tid: frozenset((d["left"], d["right"])) for tid, d in servers.projects[PROJECTS[role]]
        }
        seen: dict[frozenset[str], list[tuple[str, str]]] = defaultdict(list)
        for x in export[role]:
            seen[texts[x["task"]]].append((x["created_at"], x["result"][0]["value"]["choices"][0]))
        twice = [sorted(v) for v in seen.values() if len(v) == 2]
        same = sum(v[0][1] == v[1][1] for v in twice)
        assert (sc[role]["n"], sc[role]["same"]) == (len(twice), same)
