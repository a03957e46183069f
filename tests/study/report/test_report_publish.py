"""``rcea report publish``: refused while a mode/retention number rests on a partition
without a passing final gate or a validity number on an uncalibrated judge (the message
names the gate); ``--entropy-only``; the success bundle; the CLI and the API route.

Gates are produced by the real functions (draw, record annotations, ``gate_status``,
``record_final_gate``); judge events follow the ``rcea.study.validity_audit.status`` contract."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient
from sqlmodel import select
from typer.testing import CliRunner

from rcea.annotation.payloads import ParsedAnnotation
from rcea.app.cli import app as cli
from rcea.audits.modes import rarefied_retention
from rcea.study.labelling import PAIR, bind_existing
from rcea.study.pair_audit.freeze import freeze_partition_from_modes
from rcea.study.pair_audit.gate import gate_status
from rcea.study.pair_audit.labels import record_annotation
from rcea.study.pair_audit.sampling import audit_pairs
from rcea.study.records.ingest import ingest_file
from rcea.study.report.build import build_report
from rcea.study.report.publication import ENTROPY_ONLY_LABEL, PublishRefused
from rcea.study.report.schema import report_json
from rcea.study.store import list_events, require_study, session_scope
from rcea.study.store.models import Audit, AuditLabel, AuditTask, Trajectory
from tests.support.helpers import RUBRIC, fake_person, write_jsonl
from tests.support.report_study import (
    JUDGE,
    N_BOOT,
    draw,
    final_gate,
    judge,
    make_report_study,
    publish,
    report_records,
    unfreeze,
)


def refused(engine, out: Path, **kw: Any) -> str:  # type: ignore[no-untyped-def]
    with pytest.raises(PublishRefused) as err:
        publish(engine, out, **kw)
    assert not out.exists() or not any(out.iterdir()), "a refused publish wrote files"
    with session_scope(engine) as s:
        assert not list_events(s, kind="report.publish")
    return str(err.value)


# --------------------------------------------------------------------------- refusals


def test_refused_without_a_gate(engine, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    make_report_study(engine, tmp_path)
    judge(engine, calibrated_hash=JUDGE)
    msg = refused(engine, tmp_path / "out")
    assert "mode column, not a frozen partition" in msg and "validity" not in msg
    with session_scope(engine) as s:
        part, _ = freeze_partition_from_modes(s, study="rep", actor="r")
    msg = refused(engine, tmp_path / "out")
    assert f"partition {part.content_hash[:12]}… which has no pair audit" in msg
    audit_id = draw(engine, tmp_path)
    msg = refused(engine, tmp_path / "out")
    with session_scope(engine) as s:
        name = s.get(Audit, audit_id).name
    assert f"no passing final gate (audit {name}: status pending)" in msg


def test_refused_with_a_failed_gate(engine, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    make_report_study(engine, tmp_path)
    judge(engine, calibrated_hash=JUDGE)
    audit_id = draw(engine, tmp_path)
    res = final_gate(engine, audit_id, passing=False)
    msg = refused(engine, tmp_path / "out")
    assert (
        f"retention rests on partition {res['partition_hash'][:12]}… which has no passing "
        f"final gate (audit {res['audit']}: status failed)"
    ) in msg


def test_gate_bound_to_another_partition_does_not_count(engine, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    make_report_study(engine, tmp_path)
    judge(engine, calibrated_hash=JUDGE)
    res = final_gate(engine, draw(engine, tmp_path), passing=True)
    # a new partition (changed modes) is frozen after the gate passed
    with engine.begin() as conn:
        conn.execute(
            sa.update(Trajectory)
            .where(Trajectory.reward == 1, Trajectory.trajectory_id < "t000100")
            .values(mode="m9")
        )
    with session_scope(engine) as s:
        new, created = freeze_partition_from_modes(s, study="rep", actor="r")
    assert created and new.content_hash != res["partition_hash"]
    # by default the numbers rest on the gated partition ...
    with session_scope(engine) as s:
        rep = report_json(build_report(s, study="rep", n_boot=N_BOOT))
    pair = rep["audits"]["pair"]
    assert pair["partition_source"] == "gate" and pair["partition_hash"] == res["partition_hash"]
    assert pair["status"] == "passed" and all(q["publishable"] for q in rep["quantities"])
    # ... choosing the new one is refused, naming the gate bound to the other partition
    msg = refused(engine, tmp_path / "out", partition="latest")
    assert f"partition {new.content_hash[:12]}… which has no pair audit" in msg
    assert (
        f"a gate bound to another partition does not count (audit {res['audit']} passed "
        f"on partition {res['partition_hash'][:12]}…)"
    ) in msg


def test_refused_with_an_uncalibrated_judge(engine, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    make_report_study(engine, tmp_path)
    final_gate(engine, draw(engine, tmp_path), passing=True)
    msg = refused(engine, tmp_path / "out")
    assert "validity rests on no frozen judge" in msg and "partition" not in msg
    judge(engine, calibrated_hash="f" * 64)  # a calibration of another judge
    msg = refused(engine, tmp_path / "out")
    assert msg == (
        "refusing to publish: validity rests on judge 9c1d00000000… with no completed calibration"
    )
    judge(engine, calibrated_hash=JUDGE)
    # (the small study's numbers below the evidence floor qualify the scope after ";")
    assert publish(engine, tmp_path / "out")["scope"].split(";")[0] == "full (audited)"


def test_estimator_settings_come_from_the_gate_rubric(engine, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    make_report_study(engine, tmp_path)
    rubric = RUBRIC + "\n[estimators]\nn_boot = 150\nseed = 4\nk_min = 6\n"
    final_gate(engine, draw(engine, tmp_path, rubric=rubric), passing=True)
    with session_scope(engine) as s:
        rep = report_json(build_report(s, study="rep"))
        other = report_json(build_report(s, study="rep", n_boot=200, seed=4))
    par = rep["parameters"]
    assert (par["n_boot"], par["seed"], par["k_min"], par["n_min"]) == (150, 4, 6, 8)
    assert par["estimators_from"].startswith("rubric test-rubric v1 (")
    assert par["deviations_from_rubric"] == []
    e = rep["checkpoints"][0]["entropy"]
    assert (e["n_boot"], e["seed"], e["k_min"]) == (150, 4, 6)
    assert other["parameters"]["deviations_from_rubric"] == ["n_boot"]


# --------------------------------------------------------------------------- bundles


def _files(bundle: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(bundle)): p.read_bytes() for p in sorted(bundle.rglob("*")) if p.is_file()
    }


def test_entropy_only_publishes_only_audit_free_numbers(engine, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    make_report_study(engine, tmp_path)
    res = publish(engine, tmp_path / "out", entropy_only=True)
    bundle = Path(res["bundle"])
    assert bundle.parent == tmp_path / "out" and bundle.name.startswith("rep-")
    files = _files(bundle)
    assert not {"rubric.toml", "gate.json", "calibration.json"} & set(files)
    rep = json.loads(files["report.json"])
    assert rep["scope"] == ENTROPY_ONLY_LABEL == res["scope"]
    assert rep["quantities"] and all(  # below the evidence floor: labelled so instead
        not q["depends_on"]
        and q["label"] == ("insufficient evidence" if q["evidence"] else ENTROPY_ONLY_LABEL)
        for q in rep["quantities"]
    )
    assert {q["section"] for q in rep["quantities"]} >= {"entropy", "passk", "covariance", "tail"}
    for c in rep["checkpoints"]:
        assert c["validity"] is None and c["modes"] is None and c["retention"] is None
        assert c["entropy"] is not None
    assert rep["association"] is None
    assert "figures/retention.png" not in files and "figures/paired_ratio.png" in files
    assert ENTROPY_ONLY_LABEL in files["report.html"].decode()
    hashes = json.loads(files["hashes.json"])
    assert hashes["partition_hash"] is None and hashes["judge_hash"] is None
    with session_scope(engine) as s:
        (ev,) = list_events(s, kind="report.publish")
    assert ev.payload["scope"] == ENTROPY_ONLY_LABEL and ev.actor == "pub"


def test_study_without_audited_numbers_publishes_as_entropy_only(engine, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    recs = report_records()
    for r in recs:
        r["validity"] = r["mode"] = None
    path = write_jsonl(tmp_path / "plain.jsonl", recs)
    ingest_file(engine, path, study="rep", artifacts_dir=tmp_path / "art", data_dir=tmp_path)
    res = publish(engine, tmp_path / "out")
    assert res["scope"] == ENTROPY_ONLY_LABEL
    rep = json.loads((Path(res["bundle"]) / "report.json").read_text())
    assert rep["quantities"] and all(not q["depends_on"] for q in rep["quantities"])


def test_publish_success_bundle(engine, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    records = make_report_study(engine, tmp_path)
    judge(engine, calibrated_hash=JUDGE)
    gate = final_gate(engine, draw(engine, tmp_path), passing=True)
    res = publish(engine, tmp_path / "out")
    bundle = Path(res["bundle"])
    files = _files(bundle)
    figures = sorted(f for f in files if f.startswith("figures/"))
    assert figures == [
        f"figures/{n}.png"
        for n in sorted(
            (
                "training_entropy",
                "paired_ratio",
                "covariance_scatter",
                "retention",
                "accuracy_passk",
                "passk_curve",
                "entropy_by_outcome",
                "mode_entropy_split",
                "entropy_law",
            )
        )
    ]
    assert all(files[f].startswith(b"\x89PNG\r\n\x1a\n") for f in figures)
    assert set(files) == {
        *figures,
        "report.html",
        "report.json",
        "rubric.toml",
        "gate.json",
        "calibration.json",
        "rarefaction.json",
        "inputs.json",
        "report.schema.json",
        "hashes.json",
    }
    assert files["rubric.toml"].decode() == RUBRIC
    gate_json = json.loads(files["gate.json"])
    assert gate_json["status"] == "passed" and gate_json["gate"] == gate["report"]
    assert gate_json["partition_hash"] == gate["partition_hash"]
    assert json.loads(files["calibration.json"])["status"] == "calibrated"
    hashes = json.loads(files["hashes.json"])
    assert hashes["files"] == {
        name: hashlib.sha256(data).hexdigest()
        for name, data in files.items()
        if name != "hashes.json"
    }
    assert hashes["partition_hash"] == gate["partition_hash"]
    assert hashes["rubric_hash"] == gate["rubric_hash"] and hashes["judge_hash"] == JUDGE
    rep = json.loads(files["report.json"])
    assert rep["parameters"]["deviations_from_rubric"] == ["n_boot"]
    assert "deviate from the predeclared rubric: n_boot" in files["report.html"].decode()
    assert rep["scope"].split(";")[0] == "full (audited)"
    assert hashes["record_set_hash"] == rep["record_set_hash"]
    assert rep["simulated"] is False and hashes["simulated"] is False
    assert "SIMULATED" not in files["report.html"].decode()
    assert all(q["publishable"] and q["blocked_by"] is None for q in rep["quantities"])
    # self-contained page: every figure inline, nothing fetched from elsewhere
    html = files["report.html"].decode()
    assert html.count("src='data:image/png;base64,") == len(figures)
    assert "http://" not in html and "https://" not in html
    assert gate["audit"] in html and "entropy-only (no audit)" in html and "audited" in html
    # the published numbers are `rcea stats` numbers on the same records
    ref = json.loads(
        CliRunner()
        .invoke(cli, ["stats", "retention", str(records), "--n-boot", str(N_BOOT), "--json"])
        .output
    )
    for row in ref["results"]:
        c = next(
            c for c in rep["checkpoints"] if (c["run"], c["step"]) == (row["run"], row["step"])
        )
        assert c["retention"] == {
            k: v for k, v in row.items() if k not in ("run", "model", "step", "error")
        }
    # every published retention is recomputable from the bundle's stored draws
    entries = json.loads(files["rarefaction.json"])
    n_checked = 0
    assert len(entries) == len([c for c in rep["checkpoints"] if c["retention"]]) > 0
    for e in entries:
        c = next(
            c
            for c in rep["checkpoints"]
            if (c["run"], c["model"], c["step"]) == (e["run"], e["model"], e["step"])
        )
        assert "draws" not in c["retention"] and e["base"] == c["retention"]["base"]
        again = rarefied_retention(
            e["base_labels"],
            e["checkpoint_labels"],
            stored_draws=e["draws"],
            seed=12345,  # the draws are stored: the seed no longer matters
            n_min=e["settings"]["n_min"],
            n_draws=e["settings"]["n_draws"],
            n_boot=e["settings"]["n_boot"],
        )
        published = c["retention"]["retention"]
        n_checked += published is not None
        if published is None:
            assert again.retention is None
        else:
            assert again.retention == pytest.approx(published, rel=1e-12)
        assert again.n_eligible == c["retention"]["n_eligible"] == len(e["draws"])
    assert n_checked > 0
    with session_scope(engine) as s:
        from rcea.study.store.measurements import list_measurements

        stored = list_measurements(s, study_id=rep["study_id"], kind="rarefaction_draws")
        assert [m.payload for m in stored] == sorted(
            entries, key=lambda e: (e["run"], e["model"], e["step"])
        )
    with session_scope(engine) as s:
        (ev,) = list_events(s, kind="report.publish")
    assert ev.payload["bundle"] == str(bundle)
    assert ev.payload["report_json_sha256"] == hashes["files"]["report.json"]


# --------------------------------------------------------------------------- CLI and API


def test_cli_build_and_publish(engine, store_url: str, tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from rcea.study.settings import get_settings

    make_report_study(engine, tmp_path)
    monkeypatch.setenv("RCEA_DATABASE_URL", store_url)
    get_settings.cache_clear()
    runner = CliRunner()
    common = ["--study", "rep", "--n-boot", str(N_BOOT)]
    out = tmp_path / "r.json"
    res = runner.invoke(cli, ["report", "build", *common, "--json", "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert json.loads(res.output) == json.loads(out.read_text())
    res = runner.invoke(cli, ["report", "build", *common])
    assert res.exit_code == 0 and "UNPUBLISHABLE" in res.output and "paired_ratio" in res.output
    res = runner.invoke(cli, ["report", "publish", *common])
    assert res.exit_code == 2
    assert "refusing to publish" in res.output and "no frozen judge" in res.output
    res = runner.invoke(cli, ["report", "publish", *common, "--json"])
    body = json.loads(res.output)
    assert res.exit_code == 2 and body["ok"] is False and len(body["reasons"]) == 2
    res = runner.invoke(cli, ["report", "publish", *common, "--entropy-only"])
    assert res.exit_code == 0, res.output
    assert "entropy-only (no audit)" in res.output
    (bundle,) = (tmp_path / "data" / "reports").iterdir()
    assert (bundle / "report.html").exists() and str(bundle) in res.output
    res = runner.invoke(cli, ["report", "build", "--study", "nope"])
    assert res.exit_code == 1 and "no study named 'nope'" in res.output


def test_api_report_route(engine, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from rcea.app.api import create_app
    from rcea.study.settings import Settings

    make_report_study(engine, tmp_path)
    client = TestClient(
        create_app(Settings(data_dir=tmp_path / "d", api_token="tok"), engine=engine)
    )
    auth = {"Authorization": "Bearer tok"}
    with session_scope(engine) as s:
        sid = require_study(s, name="rep").id
        ref = report_json(build_report(s, study="rep", n_boot=50, seed=3))
    assert client.get(f"/api/studies/{sid}/report").status_code == 401
    r = client.get(f"/api/studies/{sid}/report?n_boot=50&seed=3", headers=auth)
    assert r.status_code == 200
    got = r.json()
    assert got.pop("generated_at") and ref.pop("generated_at")
    assert got == ref
    assert client.get("/api/studies/999/report", headers=auth).status_code == 404
    assert client.get(f"/api/studies/{sid}/report?n_boot=0", headers=auth).status_code == 422
    # the association is named per benchmark; an unknown one is a 422 naming the known
    r = client.get(
        f"/api/studies/{sid}/report?n_boot=50&association_benchmark=toy&association_k=4",
        headers=auth,
    )
    assert r.status_code == 200 and r.json()["association"]["metric"] == "toy pass@4"
    r = client.get(f"/api/studies/{sid}/report?association_benchmark=AIME", headers=auth)
    assert r.status_code == 422 and "have: toy" in r.text


# --------------------------------------------------------------------------- recompute


def test_publish_recomputes_the_gate_after_a_label_changed(engine, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """A's label of one pair is changed in the store after gate.final was recorded: the
    final gate recomputed from the stored labels no longer stands (A and B now disagree
    and nobody adjudicated); then both agree on "different" against the automatic
    "same" and the adjudicator confirms it: the gate recomputes with other values, and
    publish names the requirement with both values."""
    make_report_study(engine, tmp_path)
    judge(engine, calibrated_hash=JUDGE)
    audit_id = draw(engine, tmp_path)
    gate = final_gate(engine, audit_id, passing=True)
    with session_scope(engine) as s:
        audit = s.get(Audit, audit_id)
        p = next(p for p in audit_pairs(s, audit_id=audit_id) if p.automatic == "same")
        # A changes A's own annotation of that pair (a second annotation by A on the same
        # task would be a duplicate and not count)
        a_label = s.exec(
            select(AuditLabel).where(
                AuditLabel.audit_id == audit_id,
                AuditLabel.task_id == 1000 + p.id,
                AuditLabel.user_id == 11,
            )
        ).one()
        record_annotation(
            s,
            audit,
            ParsedAnnotation(
                a_label.annotation_id, 1000 + p.id, None, 11, "different", None, False
            ),
            source="test",
        )
    msg = refused(engine, tmp_path / "out")
    assert (
        f"gate.final of audit {gate['audit']}: the final gate cannot be recomputed (1 pair(s)"
        in msg
        and "need adjudication" in msg
    )
    with session_scope(engine) as s:
        audit = s.get(Audit, audit_id)
        b_label = s.exec(
            select(AuditLabel).where(
                AuditLabel.audit_id == audit_id,
                AuditLabel.task_id == 2000 + p.id,
                AuditLabel.user_id == 12,
            )
        ).one()
        record_annotation(
            s,
            audit,
            ParsedAnnotation(
                b_label.annotation_id, 2000 + p.id, None, 12, "different", None, False
            ),
            source="test",
        )
        s.add(
            AuditTask(
                audit_id=audit_id,
                role="adjudicator",
                pair_id=p.id,
                project_id=3,
                task_id=3000 + p.id,
                left_is_a=True,
            )
        )
        bind_existing(
            s,
            PAIR,
            audit,
            "adjudicator",
            person=fake_person("adjudicator"),
            user_id=13,
            project_id=3,
        )
        record_annotation(
            s,
            audit,
            ParsedAnnotation(50_003, 3000 + p.id, 3, 13, "different", None, False),
            source="test",
        )
        again = gate_status(s, audit, final=True)["report"]
    changed = [
        (r, o)
        for r, o in zip(again["requirements"], gate["report"]["requirements"], strict=True)
        if r["value"] != o["value"]
    ]
    assert changed
    msg = refused(engine, tmp_path / "out")
    for r, o in changed:
        assert (
            f"gate.final of audit {gate['audit']}: requirement {r['name']} recorded "
            f"{o['value']!r} (passed {o['passed']}), recomputed {r['value']!r} "
            f"(passed {r['passed']})"
        ) in msg


def test_publish_refuses_when_the_rubric_or_partition_changed(engine, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from rcea.study.store.models import PartitionAssignment, Rubric

    make_report_study(engine, tmp_path)
    judge(engine, calibrated_hash=JUDGE)
    gate = final_gate(engine, draw(engine, tmp_path), passing=True)
    unfreeze(engine, "rubric")
    unfreeze(engine, "partition_assignment")
    with engine.begin() as conn:
        conn.execute(sa.update(Rubric).values(source_text=RUBRIC.replace("seed = 5", "seed = 6")))
    msg = refused(engine, tmp_path / "out")
    assert (
        f"rubric_hash recorded {gate['rubric_hash']}, recomputed from the frozen rubric's text"
        in msg
    )
    with engine.begin() as conn:
        conn.execute(sa.update(Rubric).values(source_text=RUBRIC))
    assert publish(engine, tmp_path / "ok")["scope"].split(";")[0] == "full (audited)"
    with engine.begin() as conn:
        tid = conn.execute(
            sa.select(PartitionAssignment.trajectory_id).where(
                PartitionAssignment.mode.is_not(None)  # type: ignore[union-attr]
            )
        ).first()[0]
        conn.execute(
            sa.update(PartitionAssignment)
            .where(PartitionAssignment.trajectory_id == tid)
            .values(mode="m-changed")
        )
    with pytest.raises(PublishRefused) as err:
        publish(engine, tmp_path / "out2")
    assert not (tmp_path / "out2").exists() or not any((tmp_path / "out2").iterdir())
    msg = str(err.value)
    assert (
        f"gate.final of audit {gate['audit']}: partition_hash recorded {gate['partition_hash']}, "
        "recomputed from the locked partition's assignments"
    ) in msg
