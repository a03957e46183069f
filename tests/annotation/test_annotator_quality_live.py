"""`rcea audit annotators` against real Label Studio servers: lead times and
self-consistency on hidden repeats, recomputed from nothing but Label Studio's own export
of each person's project, equal what the command reports.

The annotators label in their own sessions on their own servers (first showings first,
then the hidden repeats), with known ``lead_time`` values; rcea syncs; the export is then
read back independently: tasks showing the same two texts are one pair shown twice, the
earlier annotation is the first showing."""

from __future__ import annotations

import json
import statistics
from collections import defaultdict
from contextlib import closing
from pathlib import Path

import pytest
import sqlalchemy as sa
from typer.testing import CliRunner

import tests.support.labelling_study as labelling_study
from rcea.annotation.projects import export_tasks
from rcea.app.cli import app as cli
from rcea.study.pair_audit.annotators import annotator_quality
from rcea.study.pair_audit.freeze import freeze_partition_from_modes, freeze_rubric
from rcea.study.pair_audit.sampling import audit_pairs, draw_audit
from rcea.study.store import session_scope
from rcea.study.store.models import Audit, AuditTask
from tests.support.helpers import RUBRIC, rubric_file
from tests.support.labelling_study import Study, choice
from tests.support.labelstudio_fixture import LabelStudioHandle

pytestmark = pytest.mark.slow

REPEAT_RUBRIC = RUBRIC + "\n[annotators]\nrepeat_share = 0.25\n"
FLIP = {"same": "different", "different": "same"}


def _draw_with_repeats(engine, tmp_path: Path) -> int:  # type: ignore[no-untyped-def]
    with session_scope(engine) as s:
        freeze_rubric(s, path=rubric_file(tmp_path, REPEAT_RUBRIC), actor="r")
        freeze_partition_from_modes(s, study="s", actor="r")
        return draw_audit(s, study="s", rubric="test-rubric", actor="r").id


@pytest.fixture
def study(
    tmp_path: Path, labelstudio_pool: list[LabelStudioHandle], monkeypatch: pytest.MonkeyPatch
) -> Study:
    monkeypatch.setattr(labelling_study, "draw_test_audit", _draw_with_repeats)
    st = Study(tmp_path, labelstudio_pool)
    yield st  # type: ignore[misc]
    st.engine.dispose()


def _label(study: Study, role: str, labels: list[tuple[int, str, float]]) -> None:
    """Post (task id, label, lead_time) in order, in the person's own session."""
    with closing(study.session_of(role)) as web:
        for task_id, label, lead in labels:
            r = web.post(
                f"/api/tasks/{task_id}/annotations/",
                json={"result": choice(label), "lead_time": lead},
            )
            assert r.status_code == 201, r.text


def test_lead_times_and_self_consistency_equal_label_studios_export(
    study: Study, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pushed = study.push()
    with session_scope(study.engine) as s:
        pairs = audit_pairs(s, audit_id=study.audit_id)
        tasks = (
            s.exec(sa.select(AuditTask).where(AuditTask.audit_id == study.audit_id)).scalars().all()
        )
    n = len(pairs)
    k = sum(1 for t in tasks if t.repeat and t.role == "A")
    assert k == int(0.25 * n + 0.5) > 1  # round(share × n), half up
    assert pushed["projects"]["A"]["n_tasks"] == n + k
    truth = {p.id: p.automatic or "same" for p in pairs}
    lead = iter(1.5 + 0.75 * i for i in range(10_000))
    for role in ("A", "B"):
        first = [t for t in tasks if t.role == role and not t.repeat]
        again = sorted((t for t in tasks if t.role == role and t.repeat), key=lambda t: t.pair_id)
        # A changes their mind on the first repeat; B on none; B's last repeat unlabelled
        second = [
            (t.task_id, FLIP[truth[t.pair_id]] if role == "A" and j == 0 else truth[t.pair_id])
            for j, t in enumerate(again)
        ]
        if role == "B":
            second = second[:-1]
        _label(study, role, [(t.task_id, truth[t.pair_id], next(lead)) for t in first])
        _label(study, role, [(tid, label, next(lead)) for tid, label in second])
    study.sync()

    with session_scope(study.engine) as s:
        q = annotator_quality(s, s.get(Audit, study.audit_id))
    got = {p["round"]: p for p in q["annotators"]}

    # --- from Label Studio's export alone
    for role in ("A", "B"):
        project = pushed["projects"][role]["project_id"]
        export = export_tasks(study.people.client(study.person(role)), project)
        assert len(export) == n + k
        shown: dict[frozenset[str], list[tuple[str, str, float]]] = defaultdict(list)
        for t in export:
            texts = frozenset((t["data"]["left"], t["data"]["right"]))
            for a in t["annotations"]:
                shown[texts].append(
                    (a["created_at"], a["result"][0]["value"]["choices"][0], a["lead_time"])
                )
        assert len(shown) == n  # every pair once or twice, nothing else
        ordered = {texts: sorted(v) for texts, v in shown.items()}
        firsts = [v[0] for v in ordered.values()]
        twice = [v for v in ordered.values() if len(v) == 2]
        leads = [x[2] for x in firsts]
        same = sum(v[0][1] == v[1][1] for v in twice)
        p = got[role]
        assert p["labels"] == n and p["n_lead_times"] == len(leads) == n
        assert p["lead_time_median_s"] == pytest.approx(statistics.median(leads), abs=1e-9)
        p90 = statistics.quantiles(leads, n=10, method="inclusive")[8]
        assert p["lead_time_p90_s"] == pytest.approx(p90, abs=1e-9)
        sc = p["self_consistency"]
        assert (sc["n"], sc["same"], sc["planned"]) == (len(twice), same, k)
        assert (sc["n"], sc["same"]) == ((k, k - 1) if role == "A" else (k - 1, k - 1))

    # --- the command prints the same figures
    monkeypatch.setenv("RCEA_DATA_DIR", str(study.data_dir))
    monkeypatch.setenv("RCEA_DATABASE_URL", study.engine.url.render_as_string(hide_password=False))
    with session_scope(study.engine) as s:
        audit_name = s.get(Audit, study.audit_id).name
    res = CliRunner().invoke(cli, ["audit", "annotators", "--audit", audit_name, "--json"])
    assert res.exit_code == 0, res.output
    out = {p["round"]: p for p in json.loads(res.output)["annotators"]}
    for role in ("A", "B"):
        assert out[role]["self_consistency"] == got[role]["self_consistency"]
        assert out[role]["lead_time_median_s"] == got[role]["lead_time_median_s"]
