"""Two studies in one data dir never mix (``rcea.study.targets``): without ``--study`` or a
record's name, an audit, calibration or accepted-set command refuses and lists the
candidates (one line and the list; ``--json`` stays JSON); with ``--study`` (or
``RCEA_STUDY``) it acts on that study's latest record and prints the study and the record
with its action; a name of another study's record is refused."""

from __future__ import annotations

import contextlib
import json
import sys
from pathlib import Path

import pytest
from sqlmodel import select
from typer.testing import CliRunner

from rcea.annotation.payloads import ParsedAnnotation
from rcea.app.cli import app, audit_cmd
from rcea.study.labelling import Member
from rcea.study.pair_audit.labels import record_annotation
from rcea.study.pair_audit.sampling import audit_pairs
from rcea.study.settings import get_settings
from rcea.study.store import session_scope
from rcea.study.store.models import Audit, AuditTask
from rcea.study.targets import TargetError, resolve_audit, resolve_check
from tests.support import report_study
from tests.support.fake_labelstudio import FakeServers
from tests.support.helpers import fake_person, fake_tasks
from tests.support.validity import stored_check


@pytest.fixture
def two_studies(store_url: str, engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    """Studies ``rep`` and ``other``, each with a drawn pair audit (``other`` drawn last,
    so "the latest audit in the data dir" would be ``other``'s)."""
    for study in ("rep", "other"):
        (tmp_path / study).mkdir()
        report_study.make_report_study(engine, tmp_path / study, study=study)
        report_study.draw(engine, tmp_path / study, study=study)
    monkeypatch.setenv("RCEA_DATABASE_URL", store_url)
    monkeypatch.setenv("RCEA_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.delenv("RCEA_STUDY", raising=False)
    get_settings.cache_clear()
    yield engine
    get_settings.cache_clear()


def test_commands_refuse_to_guess_between_studies(two_studies) -> None:  # type: ignore[no-untyped-def]
    runner = CliRunner()
    res = runner.invoke(app, ["audit", "gate"])
    assert res.exit_code == 1
    lines = res.output.splitlines()
    assert lines[0] == (
        "error: 2 studies in this data dir have a pair audit: name the study with --study S "
        "(or RCEA_STUDY) or the pair audit with --audit NAME"
    )
    assert lines[1:] == ["  other: other-audit-2", "  rep: rep-audit-1"]
    # --json stays JSON, with the candidates
    res = runner.invoke(app, ["audit", "sync", "--json"])
    out = json.loads(res.stdout)
    assert out["ok"] is False and out["candidates"] == {
        "other": ["other-audit-2"],
        "rep": ["rep-audit-1"],
    }
    assert "\n" not in out["error"]
    # the same for adjudicate (before any server is contacted) and the validity rounds
    res = runner.invoke(app, ["audit", "adjudicate", "--adjudicator", "r@lab.org"])
    assert res.exit_code == 1 and "2 studies in this data dir" in res.output


def test_study_picks_its_own_audit_and_prints_it(  # type: ignore[no-untyped-def]
    two_studies, monkeypatch: pytest.MonkeyPatch
) -> None:
    runner = CliRunner()
    res = runner.invoke(app, ["audit", "gate", "--study", "rep"])
    assert res.exit_code == 0, res.output
    assert res.output.splitlines()[0] == "study rep · pair audit rep-audit-1"
    assert "audit rep-audit-1: status" in res.output and "other-audit" not in res.output
    data = json.loads(runner.invoke(app, ["audit", "gate", "--json", "--study", "rep"]).stdout)
    assert (data["study"], data["audit"]) == ("rep", "rep-audit-1")
    # RCEA_STUDY does what --study does
    monkeypatch.setenv("RCEA_STUDY", "other")
    data = json.loads(runner.invoke(app, ["audit", "gate", "--json"]).stdout)
    assert (data["study"], data["audit"]) == ("other", "other-audit-2")

    # adjudicate names the study and audit it acts on before it acts. The adjudication
    # itself is stubbed to fail: the real one would start the adjudicator's own Label
    # Studio server, which would outlive this in-process run (a leaked server per run)
    def no_server(*_a: object, **_k: object) -> None:
        raise RuntimeError("the adjudicator's server is not there")

    monkeypatch.setattr(audit_cmd, "adjudicate", no_server)
    res = runner.invoke(app, ["audit", "adjudicate", "--study", "rep", "--adjudicator", "r@x.org"])
    assert res.output.splitlines()[0] == "study rep · pair audit rep-audit-1", res.output


def test_a_record_of_another_study_is_refused(two_studies) -> None:  # type: ignore[no-untyped-def]
    res = CliRunner().invoke(app, ["audit", "gate", "--study", "rep", "--audit", "other-audit-2"])
    assert res.exit_code == 1
    assert "pair audit other-audit-2 belongs to study other, not rep" in res.output


def test_the_resolver_never_mixes_studies(two_studies, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """The one rule every command calls: the adjudication of ``rep`` is drawn from
    ``rep``'s pairs only, whichever study was drawn last."""
    with session_scope(two_studies) as s:
        rep = resolve_audit(s, study="rep", audit=None)
        other = resolve_audit(s, study="other", audit=None)
        assert (rep.name, other.name) == ("rep-audit-1", "other-audit-2")
        assert s.get(Audit, rep.id).study_id != other.study_id
        with pytest.raises(TargetError, match="no pair audit 'nope' of study rep"):
            resolve_audit(s, study="rep", audit="nope")
        with pytest.raises(TargetError, match="study other has no calibration"):
            resolve_check(s, study="other", name=None, kind="calibration")
    stored_check(two_studies, kind="calibration", judge=["valid"], labels={}, study="rep")
    with session_scope(two_studies) as s:  # only rep has one: no --study needed
        assert resolve_check(s, study=None, name=None, kind="calibration").name == "c1"


def _disputed_labels(engine, audit_id: int) -> None:  # type: ignore[no-untyped-def]
    """A says "same" and B "different" on every pair: each needs adjudication."""
    tasks = fake_tasks(engine, audit_id)
    with session_scope(engine) as s:
        audit = s.get(Audit, audit_id)
        for role, user, label in (("A", 11, "same"), ("B", 12, "different")):
            for p in audit_pairs(s, audit_id=audit_id):
                ann = ParsedAnnotation(
                    audit_id * 10_000 + tasks[role][p.id], tasks[role][p.id], None, user,
                    label, None, False,
                )  # fmt: skip
                record_annotation(s, audit, ann, source="test")


def test_adjudicate_sends_only_this_studys_pairs(  # type: ignore[no-untyped-def]
    two_studies, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both studies have disputed pairs; `rcea audit adjudicate --study rep` puts rep's
    (and no pair of the study drawn after it) into the adjudicator's project."""
    with session_scope(two_studies) as s:
        ids = {a.name: a.id for a in s.exec(select(Audit)).all()}
        pair_ids = {n: {p.id for p in audit_pairs(s, audit_id=i)} for n, i in ids.items()}
    for audit_id in ids.values():
        _disputed_labels(two_studies, audit_id)
    servers = FakeServers()
    labelling_push = sys.modules["rcea.study.labelling.push"]
    pair_push = sys.modules["rcea.study.pair_audit.push"]

    def member(people, email, password=None):  # type: ignore[no-untyped-def]
        return Member(fake_person("adjudicator"), 13)

    def project(session, people, binding, **kw):  # type: ignore[no-untyped-def]
        binding.project_id, binding.state = 30 + binding.owner_id, "created"
        session.add(binding)
        return binding.project_id

    class People:
        def client(self, person):  # type: ignore[no-untyped-def]
            return None

        def http(self, person):  # type: ignore[no-untyped-def]
            return contextlib.nullcontext(None)

    monkeypatch.setattr(pair_push, "ensure_member", member)
    monkeypatch.setattr(labelling_push, "ensure_project", project)
    monkeypatch.setattr(labelling_push, "import_tasks", servers.import_tasks)
    monkeypatch.setattr(labelling_push, "export_tasks", servers.export_tasks)
    monkeypatch.setattr(audit_cmd, "_people", People)
    res = CliRunner().invoke(
        app,
        ["audit", "adjudicate", "--study", "rep", "--adjudicator", "r@x.org", "--no-webhook",
         "--json"],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert (out["study"], out["audit"], out["n_pairs"]) == (
        "rep", "rep-audit-1", len(pair_ids["rep-audit-1"])
    )  # fmt: skip
    with session_scope(two_studies) as s:
        sent = {
            t.pair_id
            for t in s.exec(select(AuditTask).where(AuditTask.role == "adjudicator")).all()
        }
    assert sent == pair_ids["rep-audit-1"]
    assert not sent & pair_ids["other-audit-2"]
    (project_tasks,) = servers.projects.values()
    assert len(project_tasks) == len(pair_ids["rep-audit-1"])
