"""``rcea status`` walked through a whole study: at every stage the printed NEXT is the
command that advances it, and the test then runs that very command (placeholders such as
NAME, DIR or A_EMAIL filled in) — import, the oracle judge, the rubric, the calibration
and the accepted-set check, the codebook cycle and its export, the pair audit, its final
gate, publish and verify. Where a command talks to people's Label Studio servers (push,
sync, adjudicate) the test does in the store what the push and the people's labels do
(bindings, tasks, counted labels, the adjudication event), after checking the NEXT names
that command."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path
from typing import Any

import pytest
from sqlmodel import select
from typer.testing import CliRunner

from rcea.annotation.payloads import ParsedAnnotation
from rcea.app.cli import app
from rcea.pipeline.toy import validity_by_id
from rcea.study import events
from rcea.study.labelling import PAIR, VALIDITY, bind_existing
from rcea.study.pair_audit.labels import (
    audit_rubric,
    current_labels,
    needs_adjudication,
    record_annotation,
)
from rcea.study.pair_audit.sampling import audit_pairs
from rcea.study.settings import get_settings
from rcea.study.store import append_event, session_scope
from rcea.study.store.models import Audit, AuditTask, Trajectory, ValidityCheck, ValidityLabel
from rcea.study.validity_audit.checks import check_items
from tests.support.helpers import fake_person, fake_tasks, write_jsonl
from tests.support.judge_study import toy_records

STUDY = "walk"
JUDGE_ORACLE = "rcea.pipeline.toy:validity_by_id"
CODEBOOK_ORACLE = "rcea.pipeline.toy:strategy_by_id"


def rcea(*args: str, ok: bool = True) -> Any:
    res = CliRunner().invoke(app, list(args))
    if ok:
        assert res.exit_code == 0, (args, res.output)
    return res


def status() -> dict[str, Any]:
    return json.loads(rcea("status", "--study", STUDY, "--json").stdout)


def next_step() -> dict[str, Any]:
    """The step ``rcea status`` marks NEXT (the first non-optional one with a command)."""
    steps = status()["steps"]
    return next(s for s in steps if s["command"] and not s["optional"])


def expect_next(command: str) -> dict[str, Any]:
    step = next_step()
    assert step["command"] == command, status()
    return step


def run(command: str, **fill: str) -> Any:
    """Run the printed command with its placeholders filled in (and extra options)."""
    for key, value in fill.items():
        command = command.replace(key, value)
    argv = shlex.split(command)
    assert argv[0] == "rcea"
    return rcea(*argv[1:])


def bind_check(engine, name: str, roles: tuple[str, ...]) -> None:  # type: ignore[no-untyped-def]
    """What `judge calibrate|accepted push` leaves in the store: each role bound to its
    project on its person's server."""
    with session_scope(engine) as s:
        check = s.exec(select(ValidityCheck).where(ValidityCheck.name == name)).one()
        for i, role in enumerate(roles):
            bind_existing(
                s, VALIDITY, check, role, person=fake_person(role), user_id=40 + i,
                project_id=400 + 10 * check.id + i,
            )  # fmt: skip


def label_check(engine, name: str, roles: tuple[str, ...]) -> None:  # type: ignore[no-untyped-def]
    """The annotators label every item with its true validity; the sync counts them."""
    with session_scope(engine) as s:
        check = s.exec(select(ValidityCheck).where(ValidityCheck.name == name)).one()
        texts = dict(
            s.exec(select(Trajectory.trajectory_id, Trajectory.text).where(
                Trajectory.study_id == check.study_id)).all()
        )  # fmt: skip
        n = 0
        for i, role in enumerate(roles):
            for item in check_items(s, check_id=check.id):
                n += 1
                truth = validity_by_id(item.question_id, texts[item.trajectory_id])
                s.add(
                    ValidityLabel(
                        check_id=check.id, annotation_id=50_000 * check.id + n,
                        task_id=60_000 * check.id + n, project_id=400 + 10 * check.id + i,
                        item_id=item.id, role=role, user_id=40 + i,
                        label="valid" if truth else "invalid", status="counted",
                    )
                )  # fmt: skip


def check_name(engine, kind: str) -> str:  # type: ignore[no-untyped-def]
    with session_scope(engine) as s:
        return s.exec(
            select(ValidityCheck.name).where(ValidityCheck.kind == kind)
            .order_by(ValidityCheck.id.desc())  # type: ignore[union-attr]
        ).first()  # fmt: skip


def review(path: Path) -> None:
    """The researcher's review of the sized rubric: a smaller calibration (so that the
    accepted-set check has trajectories left to draw) and a short pair plan."""
    sizes = {
        ("calibration", "size"): "40",
        ("calibration", "held_out"): "20",
        ("pairs", "pairs_per_question"): "3",
        ("pairs", "n_questions"): "6",
    }
    out, section = [], None
    for line in path.read_text().splitlines():
        head = re.match(r"\s*\[(\w+)\]", line)
        section = head.group(1) if head else section
        kv = re.match(r"(\w+)\s*=", line)
        if kv and (section, kv.group(1)) in sizes:
            line = f"{kv.group(1)} = {sizes[(section, kv.group(1))]}"
        out.append(line)
    path.write_text("\n".join(out) + "\n")


@pytest.fixture
def cli_store(store_url: str, engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    monkeypatch.setenv("RCEA_DATABASE_URL", store_url)
    monkeypatch.setenv("RCEA_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.delenv("RCEA_STUDY", raising=False)
    monkeypatch.chdir(tmp_path)
    get_settings.cache_clear()
    yield engine
    get_settings.cache_clear()


def test_status_names_the_command_that_advances_every_stage(cli_store, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    engine = cli_store
    # -- import (a JSONL file here, as `import verl` writes a dump's trajectories)
    expect_next(f"rcea import verl DIR --study {STUDY} --run RUN --model MODEL")
    recs = toy_records(n_questions=10, per_question=16, steps=(0, 40))
    rcea("ingest", str(write_jsonl(tmp_path / "walk.jsonl", recs)), "--study", STUDY)
    # -- the validity judge (frozen once, as the step says it needs)
    step = expect_next(f"rcea judge run --study {STUDY} --judge NAME")
    assert "rcea judge freeze" in step["waits_for"]
    rcea("judge", "freeze", "--name", "vj", "--backend", "oracle", "--oracle", JUDGE_ORACLE)
    rcea("judge", "problems", "rcea.pipeline.toy:problem_by_id", "--study", STUDY)
    run(step["command"], NAME="vj")
    # -- the rubric the calibration is sized from, then the calibration sample
    step = expect_next(f"rcea audit rubric init --study {STUDY} --out rubric.toml")
    run(step["command"])
    assert "rcea audit rubric freeze rubric.toml" in step["state"]
    review(tmp_path / "rubric.toml")
    rcea("audit", "rubric", "freeze", "rubric.toml")
    step = expect_next(
        f"rcea judge calibrate sample --study {STUDY} --judge vj --rubric walk-rubric"
    )
    run(step["command"])
    cal = check_name(engine, "calibration")
    with session_scope(engine) as s:
        roles = ("A", "B") if s.exec(select(ValidityCheck).where(
            ValidityCheck.name == cal)).one().plan.get("annotators_per_item") == 2 else (
            "annotator-1", "annotator-2")  # fmt: skip
    # push, then the annotators label and the sync counts their labels
    expect_next(
        f"rcea judge calibrate push --study {STUDY} --annotator A_EMAIL --annotator B_EMAIL"
    )
    bind_check(engine, cal, roles)
    expect_next(f"rcea judge calibrate sync --study {STUDY}")
    label_check(engine, cal, roles)
    step = expect_next(f"rcea judge calibrate report --study {STUDY}")
    run(step["command"])
    # -- the accepted-set check ("calibrated" needs it)
    step = expect_next(f"rcea judge accepted sample --study {STUDY} --judge vj --size 100")
    run(step["command"])
    acc = check_name(engine, "accepted")
    expect_next(
        f"rcea judge accepted push --study {STUDY} --annotator-a A_EMAIL --annotator-b B_EMAIL"
    )
    bind_check(engine, acc, ("A", "B"))
    expect_next(f"rcea judge accepted sync --study {STUDY}")
    label_check(engine, acc, ("A", "B"))
    step = expect_next(f"rcea judge accepted report --study {STUDY}")
    run(step["command"])
    assert ("validity calibration", None) in [(s["track"], s["command"]) for s in status()["steps"]]
    # -- the codebook cycle, then its export (the partition the pair audit checks)
    step = expect_next(f"rcea codebook run --study {STUDY}")
    run(step["command"] + f" --backend oracle --oracle {CODEBOOK_ORACLE}")
    step = expect_next(f"rcea codebook export --study {STUDY}")
    run(step["command"])
    # -- the pair audit
    step = expect_next(f"rcea audit sample --study {STUDY} --rubric walk-rubric")
    run(step["command"])
    with session_scope(engine) as s:
        audit_id = s.exec(select(Audit.id).where(Audit.name.like(f"{STUDY}-%"))).one()  # type: ignore[attr-defined]
    step = expect_next(
        f"rcea audit push --study {STUDY} --annotator-a A_EMAIL --annotator-b B_EMAIL"
    )
    assert "rcea serve" in step["waits_for"]
    tasks = fake_tasks(engine, audit_id)
    expect_next(f"rcea audit sync --study {STUDY}")
    ann = iter(range(1, 100_000))
    with session_scope(engine) as s:
        audit = s.get(Audit, audit_id)
        pairs = audit_pairs(s, audit_id=audit_id)
        truth = {p.id: p.automatic or "same" for p in pairs}  # the codebook oracle's labels
        for role, user in (("A", 11), ("B", 12)):
            for k, p in enumerate(pairs):
                label = truth[p.id]
                if role == "B" and k == 0:  # one disagreement for the adjudicator
                    label = "different" if label == "same" else "same"
                record_annotation(
                    s, audit,
                    ParsedAnnotation(next(ann), tasks[role][p.id], None, user, label, None, False),
                    source="test",
                )  # fmt: skip
    # no --no-receiver-check for a real study: its receiver is `rcea serve`
    step = expect_next(f"rcea audit adjudicate --study {STUDY} --adjudicator ADJUDICATOR_EMAIL")
    with session_scope(engine) as s:
        audit = s.get(Audit, audit_id)
        todo = needs_adjudication(
            pairs, current_labels(s, audit), audit_rubric(s, audit).adjudication.scope
        )
        bind_existing(
            s, PAIR, audit, "adjudicator", person=fake_person("adjudicator"), user_id=13,
            project_id=3,
        )  # fmt: skip
        for p in todo:
            s.add(AuditTask(audit_id=audit_id, role="adjudicator", pair_id=p.id, project_id=3,
                            task_id=3000 + p.id, left_is_a=True))  # fmt: skip
        append_event(
            s, actor="t", kind=events.AUDIT_ADJUDICATE, study_id=audit.study_id,
            payload={"n_pairs": len(todo), "audit_id": audit_id},
        )  # fmt: skip
    expect_next(f"rcea audit sync --study {STUDY}")
    with session_scope(engine) as s:
        audit = s.get(Audit, audit_id)
        for p in todo:
            record_annotation(
                s, audit,
                ParsedAnnotation(next(ann), 3000 + p.id, 3, 13, truth[p.id], None, False),
                source="test",
            )  # fmt: skip
    step = expect_next(f"rcea audit gate --final --study {STUDY}")
    run(step["command"])
    # -- publish (what `rcea report publish` decides), then verify from anywhere
    step = expect_next(f"rcea report publish --study {STUDY} --out reports/")
    run(step["command"])
    step = next_step()
    assert step["track"] == "verify"
    bundle = step["command"].removeprefix("rcea report verify ")
    assert Path(bundle).is_absolute() and Path(bundle).is_dir()
    run(step["command"])
    # token entropies are missing throughout, but no checkpoint was ever scored: no probe
    assert not any("probe" in (s["command"] or "") for s in status()["steps"])
