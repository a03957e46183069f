"""The validity audit end to end against the real Label Studio server, with the toy
domain's oracle acting as the annotators (logged in through the real login form, labelling
through the REST API): a deliberately weakened judge (it accepts every lucky final answer)
must show a measurably worse held-out accepted-valid precision than the oracle judge.
Also: the blinding of what Label Studio stores, wrong-user annotations, idempotent
push/sync, the development split never reported as held out, the completed-calibration
contract, the accepted-set check with two annotators, and a judge change afterwards."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
from sqlmodel import select
from typer.testing import CliRunner

from rcea.annotation.projects import export_tasks
from rcea.annotation.validity_tasks import choice_result
from rcea.app.cli import app
from rcea.audits.calibration import clopper_pearson
from rcea.pipeline.judge import DEFAULT_TEMPLATE, JudgeTemplate
from rcea.pipeline.toy import process_valid, question_from_id, validity_by_id
from rcea.study.labelling import ensure_member
from rcea.study.settings import Settings, get_settings
from rcea.study.store import list_events, make_engine, require_study, session_scope, upgrade
from rcea.study.store.models import JudgeVerdict, ValidityCheck
from rcea.study.validity_audit.checks import HELD_OUT, check_items, sample_calibration
from rcea.study.validity_audit.labelling import push_check, sync_check
from rcea.study.validity_audit.problems import load_problems
from rcea.study.validity_audit.reports import calibration_report
from rcea.study.validity_audit.run import run_judge
from rcea.study.validity_audit.simulate import simulate_validity_labels
from rcea.study.validity_audit.status import validity_status
from tests.support.judge_study import MODEL, ORACLE, RUN, WEAK, freeze, ingest_toy
from tests.support.labelstudio_fixture import LabelStudioHandle, register_people
from tests.support.product_helpers import scan_for_leaks
from tests.support.rendered import SHOWN_VALIDITY

pytestmark = pytest.mark.slow
PASSWORD = "validity-pass-123"


def _people(tmp_path: Path, pool: list[LabelStudioHandle], tags: list[str]):  # type: ignore[no-untyped-def]
    """Person i (an account with PASSWORD) on pool server i, registered in the data dir
    the CLI reads (``RCEA_DATA_DIR``, set per test by conftest)."""
    emails = [f"{tag}-{uuid.uuid4().hex[:8]}@rcea.test" for tag in tags]
    people = register_people(tmp_path / "data", pool, emails)
    for email in emails:
        ensure_member(people, email, PASSWORD)
    return people, emails


def _check(engine, name: str) -> int:  # type: ignore[no-untyped-def]
    with session_scope(engine) as s:
        return s.exec(select(ValidityCheck.id).where(ValidityCheck.name == name)).one()


def _cli(*args: str) -> dict:  # type: ignore[type-arg]
    out = CliRunner().invoke(app, ["judge", *args, "--json"])
    assert out.exit_code == 0, out.output
    return json.loads(out.output)


def test_weak_judge_has_worse_held_out_precision(
    labelstudio_pool: list[LabelStudioHandle], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = make_engine(f"sqlite:///{tmp_path / 'v.db'}")
    upgrade(engine)
    recs = ingest_toy(engine, tmp_path, n_questions=10, per_question=14)
    truth = {
        r["trajectory_id"]: process_valid(question_from_id(r["question_id"]), r["text"])
        for r in recs
    }
    settings = Settings(data_dir=tmp_path / "d")
    with session_scope(engine) as s:
        load_problems(s, study="toy", source="rcea.pipeline.toy:problem_by_id")
        sid = require_study(s, name="toy").id
    freeze(engine, "weak", WEAK)
    freeze(engine, "oracle", ORACLE)
    run_judge(engine, study="toy", judge="weak", settings=settings, actor="r")
    run_judge(engine, study="toy", judge="oracle", settings=settings, actor="r")
    with session_scope(engine) as s:
        for judge in ("weak", "oracle"):
            sample_calibration(
                s, study="toy", judge=judge, actor="r", size=40, held_out=30, seed=1,
                name=f"cal-{judge}",
            )  # fmt: skip
    people, (email, a_email, b_email) = _people(
        tmp_path, labelstudio_pool, ["cal", "acc-a", "acc-b"]
    )
    client = people.client(people.require(email))

    # --- push (twice: the second adds nothing), then what Label Studio stores is blinded
    projects = {}
    for _ in range(2):
        for judge in ("weak", "oracle"):
            with session_scope(engine) as s:
                check = s.get(ValidityCheck, _check(engine, f"cal-{judge}"))
                out = push_check(s, check, people, annotators=[email], actor="r")
                info = out["projects"]["annotator-1"]
                projects[judge] = info["project_id"]
                assert info["n_tasks"] == 40
    assert info["n_new"] == 0
    with session_scope(engine) as s:
        rationales = {v.rationale for v in s.exec(select(JudgeVerdict)).all()}
    stored = [t for p in projects.values() for t in export_tasks(client, p)]
    assert len(stored) == 80
    assert all(set(t["data"]) == {"item", "problem", "solution", *SHOWN_VALIDITY} for t in stored)
    assert all(not t.get("predictions") for t in stored)
    forbidden = {RUN, MODEL, *truth}
    exact = (
        {r["question_id"] for r in recs}
        | {str(r["seed"]) for r in recs}
        | {"40", "valid", "invalid", "unparseable"}
        | rationales
    )
    sent = [{"data": t["data"], "meta": t.get("meta")} for t in stored]
    assert scan_for_leaks(sent, forbidden, forbidden_exact=exact) == []
    titles = [p.title for p in client.projects.list()]
    assert not any(v in t for v in (RUN, MODEL, "weak", "oracle") for t in titles)
    # one annotator per item: named like a pair round's annotator A, not "annotator-1"
    ids = [_check(engine, f"cal-{j}") for j in ("weak", "oracle")]
    assert {f"Validity {i} · annotator A" for i in ids} <= set(titles)
    assert not any("annotator-" in t for t in titles)

    # --- the oracle labels as the annotator; the admin's extra label is not counted
    with session_scope(engine) as s:
        for judge in ("weak", "oracle"):
            sim = simulate_validity_labels(
                s, f"cal-{judge}", people, {email: PASSWORD}, validity_by_id, 0.0, 0
            )
            assert sim["simulated"] and "SIMULATION" in sim["note"]
            assert sim["annotator-1"]["posted"] == 40
            assert calibration_report(s, s.get(ValidityCheck, _check(engine, f"cal-{judge}")))[
                "status"
            ] == "pending"  # fmt: skip
    client.annotations.create(id=stored[0]["id"], result=choice_result("invalid"))

    reports = {}
    for judge in ("weak", "oracle"):
        with session_scope(engine) as s:
            check = s.get(ValidityCheck, _check(engine, f"cal-{judge}"))
            synced = sync_check(s, check, people)
            assert synced["changed"] >= 40
            assert sync_check(s, check, people)["changed"] == 0  # idempotent
            reports[judge] = calibration_report(s, check, actor="r")
            dev = calibration_report(s, check, split="development")
            held = [i for i in check_items(s, check_id=check.id) if i.split == HELD_OUT]
        assert reports[judge]["status"] == "complete" and reports[judge]["publishable"]
        assert dev["held_out"] is False and not dev["publishable"] and dev["n_items"] == 10
        assert reports[judge]["labels"]["counted"] == 40
        # independent reference: the judge's stored verdicts vs the toy oracle's truth
        accepted = [i for i in held if i.judge_verdict == "valid"]
        expect = sum(truth[i.trajectory_id] for i in accepted) / len(accepted)
        assert reports[judge]["report"]["accepted_valid_precision"] == pytest.approx(expect)

    assert sum(r["labels"].get("wrong_user", 0) for r in reports.values()) == 1  # the admin's
    oracle_r, weak_r = reports["oracle"]["report"], reports["weak"]["report"]
    assert oracle_r["accepted_valid_precision"] == 1.0 and oracle_r["accuracy"] == 1.0
    assert oracle_r["macro_f1"] == 1.0 and oracle_r["coverage"] == 1.0
    assert weak_r["accepted_valid_precision"] <= oracle_r["accepted_valid_precision"] - 0.15
    assert weak_r["macro_f1"] < oracle_r["macro_f1"]

    with session_scope(engine) as s:
        done = list_events(s, kind="judge.calibration.completed", study_id=sid)
        assert {e.payload["calibration"] for e in done} == {"cal-weak", "cal-oracle"}
        assert all(e.payload["split"] == "held_out" for e in done)
        status = validity_status(s, study_id=sid)  # the latest run is the oracle judge's
        # held-out calibration alone: incomplete until an accepted-set check is decided
        assert status["status"] == "calibration-incomplete"
        assert status["calibration"] == "cal-oracle"

    # --- accepted-set check through the CLI: two annotators; B errs on purpose
    monkeypatch.setenv("RCEA_DATABASE_URL", str(engine.url))
    get_settings.cache_clear()
    sampled = _cli("accepted", "sample", "--study", "toy", "--size", "8", "--seed", "2",
                   "--name", "acc")  # fmt: skip
    assert sampled["size"] == 8
    pushed = _cli("accepted", "push", "--check", "acc", "--annotator-a", a_email,
                  "--annotator-b", b_email, "--no-receiver-check")  # fmt: skip
    assert pushed["new_accounts"] == {}  # existing accounts: passwords untouched
    assert [p["n_tasks"] for p in pushed["projects"].values()] == [8, 8]
    with session_scope(engine) as s:
        sim = simulate_validity_labels(
            s, "acc", people, {a_email: PASSWORD}, validity_by_id, 0.0, 0
        )
        sim_b = simulate_validity_labels(
            s, "acc", people, {b_email: PASSWORD}, validity_by_id, 0.5, 4
        )
    assert sim["A"]["posted"] == 8 and sim_b["B"]["posted"] == 8
    assert _cli("accepted", "sync", "--check", "acc")["changed"] == 16
    # 8 items cannot reach the predeclared lower bound of accepted-set precision (the
    # Clopper-Pearson bound of 8/8 is 0.63 < 0.80): the check is complete and failed,
    # and the command says so with exit code 5 (rcea/app/cli/exit_codes.py).
    out = CliRunner().invoke(app, ["judge", "accepted", "report", "--check", "acc", "--json"])
    assert out.exit_code == 5, out.output
    acc = json.loads(out.output)
    assert acc["status"] == "complete" and acc["outcome"] == "failed"
    a, b = acc["report"]["annotator_a"], acc["report"]["annotator_b"]
    assert (a["n"], a["n_valid"], a["precision"]) == (8, 8, 1.0)
    assert (a["ci_low"], a["ci_high"]) == pytest.approx(clopper_pearson(8, 8))
    assert b["n_valid"] == 8 - sim_b["B"]["flipped"]
    assert (b["ci_low"], b["ci_high"]) == pytest.approx(clopper_pearson(b["n_valid"], 8))

    # --- a judge change afterwards: a new version, a new hash → uncalibrated again
    stricter = JudgeTemplate("validity", 2, DEFAULT_TEMPLATE.system + " Be strict.",
                             DEFAULT_TEMPLATE.user)  # fmt: skip
    freeze(engine, "oracle", ORACLE, stricter)
    run_judge(engine, study="toy", judge="oracle", settings=settings, actor="r")
    with session_scope(engine) as s:
        assert validity_status(s, study_id=sid)["status"] == "uncalibrated"
        old = calibration_report(s, s.get(ValidityCheck, _check(engine, "cal-oracle")))
        assert old["judge_is_latest_version"] is False
    engine.dispose()


TWO_PER_ITEM = """
[rubric]
name = "two-per-item"
version = "1"

[calibration]
size = 24
held_out = 12
seed = 3
annotators_per_item = 2
"""


def _labels_in_label_studio(people, email: str, project_id: int) -> dict[str, str]:  # type: ignore[no-untyped-def]
    """item key → the label as Label Studio itself stores it (independent of the store)."""
    from rcea.annotation.validity_tasks import CHOICES

    out = {}
    for task in export_tasks(people.client(people.require(email)), project_id):
        for ann in task["annotations"]:
            picked = [
                r["value"]["choices"][0] for r in ann["result"] if r["from_name"] == "validity"
            ]
            out[task["data"]["item"]] = CHOICES[picked[0]]
    return out


def test_two_annotators_per_item_with_adjudication(
    labelstudio_pool: list[LabelStudioHandle], tmp_path: Path
) -> None:
    """A rubric asking for two annotators per item: A and B label every item on their own
    servers, B errs on purpose; the report waits for adjudication, reports A–B agreement
    (equal to the agreement recomputed from Label Studio's own exports), and completes once
    the adjudicator (neither A nor B) settles every disagreement."""
    from rcea.audits.calibration import validity_agreement
    from rcea.study.pair_audit.freeze import freeze_rubric
    from rcea.study.validity_audit.labelling import adjudicate_check, needs_adjudication

    engine = make_engine(f"sqlite:///{tmp_path / 'v2.db'}")
    upgrade(engine)
    recs = ingest_toy(engine, tmp_path, n_questions=8, per_question=12)
    truth = {
        r["trajectory_id"]: process_valid(question_from_id(r["question_id"]), r["text"])
        for r in recs
    }
    rubric = tmp_path / "two.toml"
    rubric.write_text(TWO_PER_ITEM)
    with session_scope(engine) as s:
        load_problems(s, study="toy", source="rcea.pipeline.toy:problem_by_id")
        freeze_rubric(s, path=rubric, actor="r")
    freeze(engine, "oracle", ORACLE)
    run_judge(engine, study="toy", judge="oracle", settings=Settings(data_dir=tmp_path / "d"),
              actor="r")  # fmt: skip
    with session_scope(engine) as s:
        check = sample_calibration(s, study="toy", judge="oracle", rubric="two-per-item",
                                   actor="r", name="cal2")  # fmt: skip
        assert check.plan["annotators_per_item"] == 2
    people, (a, b, adj) = _people(tmp_path, labelstudio_pool, ["v2-a", "v2-b", "v2-adj"])
    with session_scope(engine) as s:
        check = s.get(ValidityCheck, _check(engine, "cal2"))
        with pytest.raises(Exception, match="exactly two"):
            push_check(s, check, people, annotators=[a], actor="r")
    with session_scope(engine) as s:
        check = s.get(ValidityCheck, _check(engine, "cal2"))
        pushed = push_check(s, check, people, annotators=[a, b], actor="r")
        n = pushed["projects"]["A"]["n_tasks"]
        assert pushed["projects"]["B"]["n_tasks"] == n == 24
        sim_a = simulate_validity_labels(s, "cal2", people, {a: PASSWORD}, validity_by_id, 0.0, 0)
        sim_b = simulate_validity_labels(s, "cal2", people, {b: PASSWORD}, validity_by_id, 0.4, 7)
    flipped = sim_b["B"]["flipped"]
    assert sim_a["A"]["posted"] == sim_b["B"]["posted"] == 24 and 0 < flipped < 24
    with session_scope(engine) as s:
        check = s.get(ValidityCheck, _check(engine, "cal2"))
        sync_check(s, check, people)
        rep = calibration_report(s, check)
        disputed = needs_adjudication(s, check)
    assert len(disputed) == flipped
    held_disputed = sum(i.split == HELD_OUT for i in disputed)
    assert rep["n_needing_adjudication"] == held_disputed
    assert rep["status"] == ("pending" if held_disputed else "complete")
    # independent: the agreement recomputed from what Label Studio stores
    la = _labels_in_label_studio(people, a, pushed["projects"]["A"]["project_id"])
    lb = _labels_in_label_studio(people, b, pushed["projects"]["B"]["project_id"])
    with session_scope(engine) as s:
        held = [i.item_key for i in check_items(s, check_id=check.id) if i.split == HELD_OUT]
    expected = validity_agreement([la[k] for k in held], [lb[k] for k in held]).to_dict()
    assert rep["human_agreement"] == pytest.approx(expected)
    assert rep["human_agreement"]["n_agree"] == 12 - held_disputed

    with session_scope(engine) as s:
        check = s.get(ValidityCheck, _check(engine, "cal2"))
        with pytest.raises(Exception, match="different person"):
            adjudicate_check(s, check, people, adjudicator=b, actor="r")
    with session_scope(engine) as s:
        check = s.get(ValidityCheck, _check(engine, "cal2"))
        ensure_member(people, adj, PASSWORD)
        out = adjudicate_check(s, check, people, adjudicator=adj, actor="r")
        assert out["n_items"] == flipped and out["url"] == labelstudio_pool[2].url
        adj_tasks = export_tasks(people.client(people.require(adj)), out["project_id"])
        assert all(
            sorted([t["data"]["answer_1"], t["data"]["answer_2"]]) == ["fatal error", "valid"]
            for t in adj_tasks
        )
        assert all(set(t["data"])
            == {"item", "problem", "solution", "answer_1", "answer_2", *SHOWN_VALIDITY}
                   for t in adj_tasks)  # fmt: skip
        simulate_validity_labels(s, "cal2", people, {adj: PASSWORD}, validity_by_id, 0.0, 0)
        sync_check(s, check, people)
        final = calibration_report(s, check, actor="r")
    assert final["status"] == "complete" and final["progress"]["adjudicator"] == held_disputed
    assert final["human_agreement"] == rep["human_agreement"]  # adjudication cannot change it
    with session_scope(engine) as s:
        items = [i for i in check_items(s, check_id=check.id) if i.split == HELD_OUT]
    # A and the adjudicator answer the oracle's truth: the reference is the truth
    ref_truth = ["valid" if truth[i.trajectory_id] else "invalid" for i in items]
    from rcea.audits.calibration import judge_calibration

    balanced = {k: v for k, v in final["report"].items() if k != "population"}
    assert balanced == judge_calibration(ref_truth, [i.judge_verdict for i in items]).to_dict()
    assert final["report"]["population"]["accuracy"] is not None  # the population figures
