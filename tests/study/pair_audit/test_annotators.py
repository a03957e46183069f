"""`rcea audit annotators`: annotations in Label Studio's export shape
(with its ``lead_time`` and ``created_at``) go through the real parser and recorder; the
command's lead times, throughput, per-class agreement with the final reference and
hotspots are recomputed from the export with the standard library and sklearn."""

from __future__ import annotations

import json
import statistics
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sklearn.metrics import precision_recall_fscore_support
from typer.testing import CliRunner

from rcea.annotation.payloads import parse_annotation
from rcea.annotation.tasks import PAIR_CHOICE
from rcea.app.cli import app
from rcea.study.labelling import PAIR, bind_existing
from rcea.study.pair_audit.annotators import annotator_quality
from rcea.study.pair_audit.freeze import freeze_partition_from_modes, freeze_rubric
from rcea.study.pair_audit.labels import record_annotation
from rcea.study.pair_audit.sampling import audit_pairs, draw_audit
from rcea.study.store import session_scope
from rcea.study.store.models import Audit, AuditTask
from tests.support.helpers import RUBRIC, audit_study, fake_person, fake_tasks, rubric_file

T0 = datetime(2026, 11, 30, 9, 0, 0, tzinfo=UTC)


def _export(ann_id: int, task: int, project: int, user: int, label: str, k: int) -> dict:  # type: ignore[type-arg]
    """One annotation as Label Studio's export writes it."""
    return {
        "id": ann_id,
        "task": task,
        "project": project,
        "completed_by": user,
        "result": [
            {
                "from_name": PAIR_CHOICE,
                "to_name": "pair",
                "type": "choices",
                "value": {"choices": [label]},
            }
        ],  # fmt: skip
        "was_cancelled": False,
        "lead_time": round(4.5 + 3.25 * ((k * 7) % 11), 3),
        "created_at": (T0 + timedelta(seconds=40 * k + user)).isoformat().replace("+00:00", "Z"),
        "updated_by": user,
    }


@pytest.fixture
def audit_with_export(engine, tmp_path: Path):  # type: ignore[no-untyped-def]
    audit_study(engine, tmp_path)
    with session_scope(engine) as s:
        freeze_rubric(s, path=rubric_file(tmp_path, RUBRIC), actor="r")
        freeze_partition_from_modes(s, study="s", actor="r")
        audit_id = draw_audit(s, study="s", rubric="test-rubric", actor="r").id
    tasks = fake_tasks(engine, audit_id)
    with session_scope(engine) as s:
        pairs = audit_pairs(s, audit_id=audit_id)
    a = {p.id: p.automatic or "same" for p in pairs}
    flip = {"same": "different", "different": "same"}
    b = {p.id: flip[a[p.id]] if k % 5 == 0 else a[p.id] for k, p in enumerate(pairs)}
    export: dict[str, list[dict]] = {"A": [], "B": [], "adjudicator": []}  # type: ignore[type-arg]
    for role, labels, user, project in (("A", a, 11, 1), ("B", b, 12, 2)):
        for k, p in enumerate(pairs):
            ann = 100 * user + k
            export[role].append(_export(ann, tasks[role][p.id], project, user, labels[p.id], k))
    disputed = [p for p in pairs if a[p.id] != b[p.id]]
    with session_scope(engine) as s:
        audit = s.get(Audit, audit_id)
        for role in ("A", "B"):
            for ann in export[role]:
                record_annotation(s, audit, parse_annotation(ann), source="test")
        bind_existing(s, PAIR, audit, "adjudicator", person=fake_person("adjudicator"),
                      user_id=13, project_id=3)  # fmt: skip
        for p in disputed:
            s.add(AuditTask(audit_id=audit_id, role="adjudicator", pair_id=p.id, project_id=3,
                            task_id=3000 + p.id, left_is_a=True))  # fmt: skip
    with session_scope(engine) as s:
        audit = s.get(Audit, audit_id)
        for k, p in enumerate(disputed[:-1]):  # the last dispute is still open
            ann = _export(9000 + k, 3000 + p.id, 3, 13, b[p.id] if k % 2 else a[p.id], k)
            export["adjudicator"].append(ann)
            record_annotation(s, audit, parse_annotation(ann), source="test")
    return audit_id, pairs, a, b, disputed, export


def test_annotator_report_equals_the_export(engine, audit_with_export) -> None:  # type: ignore[no-untyped-def]
    audit_id, pairs, a, b, disputed, export = audit_with_export
    with session_scope(engine) as s:
        out = annotator_quality(s, s.get(Audit, audit_id), window=5)
    by_round = {p["round"]: p for p in out["annotators"]}
    assert set(by_round) == {"A", "B", "adjudicator"}
    # the final reference from the export: adjudicated label, else the agreed one
    task_pair = {3000 + p.id: p.id for p in pairs}
    adj = {
        task_pair[x["task"]]: x["result"][0]["value"]["choices"][0] for x in export["adjudicator"]
    }
    ref = {p.id: adj.get(p.id, a[p.id]) for p in pairs if p.id in adj or a[p.id] == b[p.id]}
    assert out["n_reference"] == len(ref) == len(pairs) - 1
    for role, labels in (("A", a), ("B", b)):
        got = by_round[role]
        leads = [x["lead_time"] for x in export[role]]
        assert got["labels"] == len(pairs) and got["n_lead_times"] == len(leads)
        assert got["lead_time_median_s"] == pytest.approx(statistics.median(leads), abs=1e-12)
        p90 = statistics.quantiles(leads, n=10, method="inclusive")[-1]
        assert got["lead_time_p90_s"] == pytest.approx(p90, abs=1e-12)
        stamps = [
            datetime.fromisoformat(x["created_at"].replace("Z", "+00:00")) for x in export[role]
        ]
        hours = (max(stamps) - min(stamps)).total_seconds() / 3600
        assert got["labels_per_hour"] == pytest.approx((len(stamps) - 1) / hours)
        assert got["labels_per_active_hour"] == pytest.approx(len(leads) / (sum(leads) / 3600))
        ids = sorted(ref)
        y_true = [ref[i] for i in ids]
        y_pred = [labels[i] for i in ids]
        prec, rec, f1, sup = precision_recall_fscore_support(
            y_true, y_pred, labels=["same", "different"], zero_division=0
        )
        pc = got["vs_reference"]["per_class"]
        for j, cls in enumerate(["same", "different"]):
            assert pc[cls]["precision"] == pytest.approx(prec[j])
            assert pc[cls]["recall"] == pytest.approx(rec[j])
            assert pc[cls]["f1"] == pytest.approx(f1[j])
            assert pc[cls]["support"] == sup[j]
        assert len(got["rolling"]) == len(ids) - 4
    # A agrees with every agreed pair and wins half the adjudications; B is wrong more
    assert by_round["A"]["vs_reference"]["accuracy"] > by_round["B"]["vs_reference"]["accuracy"]
    assert by_round["adjudicator"]["labels"] == len(disputed) - 1
    # hotspots: per question, A ≠ B share
    per_q: dict[str, list[int]] = {}
    for p in pairs:
        per_q.setdefault(p.question_id, []).append(int(a[p.id] != b[p.id]))
    got_h = {h["question_id"]: h for h in out["hotspots"]}
    for q, flags in per_q.items():
        assert got_h[q]["pairs_both"] == len(flags)
        assert got_h[q]["disagreements"] == sum(flags)
        assert got_h[q]["disagreement_share"] == pytest.approx(sum(flags) / len(flags))
    shares = [h["disagreement_share"] for h in out["hotspots"]]
    assert shares == sorted(shares, reverse=True)


def test_annotators_command(engine, audit_with_export, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("RCEA_DATABASE_URL", str(engine.url))
    from rcea.study.settings import get_settings

    get_settings.cache_clear()
    runner = CliRunner()
    out = runner.invoke(app, ["audit", "annotators", "--json"])
    assert out.exit_code == 0, out.output
    data = json.loads(out.stdout)
    assert [p["round"] for p in data["annotators"]] == ["A", "B", "adjudicator"]
    text = runner.invoke(app, ["audit", "annotators"])
    assert text.exit_code == 0 and "disagreement hotspots" in text.output
    assert "median s" in text.output


def test_lead_time_and_created_at_parsing() -> None:
    base = _export(1, 2, 3, 4, "same", 0)
    parsed = parse_annotation(base)
    assert parsed.lead_time == base["lead_time"]
    assert parsed.created_at == T0 + timedelta(seconds=4)
    odd = parse_annotation({**base, "lead_time": "fast", "created_at": "yesterday"})
    assert (odd.lead_time, odd.created_at) == (None, None)
    tz = parse_annotation({**base, "created_at": "2026-11-30T10:00:04+01:00", "lead_time": -1})
    assert tz.created_at == T0 + timedelta(seconds=4) and tz.lead_time is None
