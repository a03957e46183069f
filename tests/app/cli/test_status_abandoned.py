"""``rcea status`` after an abandoned calibration: the abandoned attempt stays on the
record but is not the study's current state — NEXT is a fresh calibration sample (the
state naming the abandoned one), then that new calibration's push, never the abandoned
one's sync."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from sqlmodel import select
from typer.testing import CliRunner

from rcea.app.cli import app
from rcea.study.labelling import VALIDITY, bind_existing
from rcea.study.settings import get_settings
from rcea.study.store import session_scope
from rcea.study.store.models import ValidityCheck
from tests.support import verl_study as vs
from tests.support.helpers import fake_person


def rcea(*args: str) -> Any:
    res = CliRunner().invoke(app, list(args))
    assert res.exit_code == 0, (args, res.output)
    return res


def next_step() -> dict[str, Any]:
    steps = json.loads(rcea("status", "--study", "s", "--json").stdout)["steps"]
    return next(x for x in steps if x["command"] and not x["optional"])  # type: ignore[no-any-return]


def test_status_skips_an_abandoned_calibration(  # type: ignore[no-untyped-def]
    store_url: str, engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RCEA_DATABASE_URL", store_url)
    get_settings.cache_clear()
    dump = vs.write_validation_dump(tmp_path / "validation")
    rcea("import", "verl", str(dump), "--study", "s", *vs.IMPORT_ARGS)
    vs.judge_study(engine, "s", tmp_path / "data")
    rcea("audit", "rubric", "init", "--study", "s", "--out", "rubric.toml")
    rcea("audit", "rubric", "freeze", "rubric.toml", "--study", "s")
    sample = "rcea judge calibrate sample --study s --judge verl-judge --rubric s-rubric"
    assert next_step()["command"] == sample
    rcea(*sample.split()[1:])
    with session_scope(engine) as s:  # what the push leaves: each role bound to a project
        check = s.exec(select(ValidityCheck).where(ValidityCheck.kind == "calibration")).one()
        first = check.name
        for i, role in enumerate(("A", "B")):
            bind_existing(s, VALIDITY, check, role, person=fake_person(role), user_id=40 + i,
                          project_id=400 + i)  # fmt: skip
    assert next_step()["command"] == "rcea judge calibrate sync --study s"
    rcea("judge", "calibrate", "abandon", "--study", "s", "--calibration", first,
         "--reason", "pushed to the wrong people")  # fmt: skip
    step = next_step()
    assert step["command"] == sample, step
    assert f"abandoned: {first}" in step["state"]
    rcea(*sample.split()[1:])
    step = next_step()
    assert step["command"] == (
        "rcea judge calibrate push --study s --annotator A_EMAIL --annotator B_EMAIL"
    ), step
    with session_scope(engine) as s:
        names = s.exec(select(ValidityCheck.name).order_by(ValidityCheck.id)).all()  # type: ignore[arg-type]  # SQLModel types a column attribute as its Python value
    assert len(names) == 2 and names[0] == first
    assert names[1] in step["state"]
