"""The typed report: ``StudyReport`` matches what ``build_report`` produces (every key,
no extra — the models forbid unknown keys), the API route is typed with it, and the
generated docs (key list, JSON Schema) are current."""

from __future__ import annotations

import json
from pathlib import Path

from fastapi.testclient import TestClient

from rcea.study.report.build import build_report
from rcea.study.report.schema import (
    DOCS,
    SCHEMA_VERSION,
    StudyReport,
    key_list_markdown,
    report_json,
    report_json_schema,
    report_json_schema_text,
)
from rcea.study.store import require_study, session_scope
from tests.support.report_study import JUDGE, draw, final_gate, judge, make_report_study, publish

ROOT = Path(__file__).resolve().parents[3]


def test_docs_are_generated_from_the_models() -> None:
    keys, schema = (ROOT / d for d in DOCS)
    assert keys.read_text(encoding="utf-8") == "# Report JSON keys\n\n" + key_list_markdown(), (
        "docs/report-keys.md is stale: run `python -m rcea.study.report.schema`"
    )
    assert schema.read_text(encoding="utf-8") == report_json_schema_text()
    text = key_list_markdown()
    for path in (
        "`quantities[].depends_on`",
        "`checkpoints[].modes.mean_n_eff`",
        "`audits.pair.partition_hash`",
        "`schema_version`",
    ):
        assert path in text
    assert report_json_schema()["$id"] == f"rcea-study-report/{SCHEMA_VERSION}"


def test_the_report_is_a_study_report(engine, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    make_report_study(engine, tmp_path)
    judge(engine, calibrated_hash=JUDGE)
    final_gate(engine, draw(engine, tmp_path), passing=True)
    with session_scope(engine) as s:
        rep = report_json(build_report(s, study="rep", n_boot=50))
        sid = require_study(s, name="rep").id
    model = StudyReport.model_validate(rep)  # extra keys are refused by the models
    # every quantity names its units (n) and, where defined, its coverage
    by_key = {(q["name"], q["run"], q["model"], q["step"], q["key"]): q for q in rep["quantities"]}
    n_ret = 0
    for c in rep["checkpoints"]:
        k = (c["run"], c["model"], c["step"], None)
        assert by_key[("accuracy", *k)]["n"] == c["n"]
        e = c["entropy"]
        if e["paired_ratio"] is not None:
            assert by_key[("paired_ratio", *k)]["n"] == e["n_paired_questions"]
        if c["retention"] and c["retention"]["retention"] is not None:
            q = by_key[("retention", *k)]
            assert (q["n"], q["coverage"]) == (
                c["retention"]["n_eligible"],
                c["retention"]["eligible_share"],
            )
            n_ret += 1
        if c["modes"]:
            q = by_key[("mean_n_eff", *k)]
            assert (q["n"], q["coverage"]) == (c["modes"]["n_eligible"], c["modes"]["coverage"])
    assert n_ret > 0
    assert all(q["n"] is not None for q in rep["quantities"] if q["section"] != "failure")
    assert model.schema_version == SCHEMA_VERSION
    dumped = json.loads(model.model_dump_json(exclude_unset=True))
    assert dumped == json.loads(json.dumps(rep))
    bad = json.loads(json.dumps(rep))
    bad["quantities"][0]["surprise"] = 1
    try:
        StudyReport.model_validate(bad)
    except ValueError as exc:
        assert "quantities.0.surprise" in str(exc)
    else:
        raise AssertionError("an unknown quantity key was accepted")
    # the published report.json (with scope/simulated) is one too, and the bundle carries
    # the JSON Schema
    bundle = Path(publish(engine, tmp_path / "out")["bundle"])
    StudyReport.model_validate_json((bundle / "report.json").read_text())
    assert (bundle / "report.schema.json").read_text() == report_json_schema_text()
    # the API is typed with it
    from rcea.app.api import create_app
    from rcea.study.settings import Settings

    client = TestClient(
        create_app(Settings(data_dir=tmp_path / "d", api_token="tok"), engine=engine)
    )
    spec = client.get("/openapi.json", headers={"Authorization": "Bearer tok"}).json()
    schemas = spec["components"]["schemas"]
    assert "StudyReport" in schemas and "Quantity" in schemas
    # the estimator sections are typed there, down to their numbers
    for name in (
        "EntropySection",
        "PairedRatio",
        "ValiditySummary",
        "ModeSummary",
        "RetentionSection",
        "CovarianceSection",
        "TailSection",
        "AssociationSection",
        "GateSection",
        "FailureRun",
        "PassKRow",
        "GreedyRow",
    ):
        assert name in schemas, name
    ck = schemas["CheckpointReport"]["properties"]
    assert {"$ref": "#/components/schemas/EntropySection"} in ck["entropy"]["anyOf"]
    assert {"$ref": "#/components/schemas/RetentionSection"} in ck["retention"]["anyOf"]
    ret = schemas["RetentionSection"]["properties"]
    assert {"retention", "ci_low", "ci_high", "n_eligible", "eligible_share"} <= set(ret)
    assert ret["base"]["$ref"] == "#/components/schemas/CheckpointRef"
    assert schemas["PairedRatio"]["properties"]["ci_low"]["anyOf"][0]["type"] == "number"
    assert schemas["PassKRow"]["properties"]["step"]["type"] == "integer"
    route = spec["paths"]["/api/studies/{study_id}/report"]["get"]
    ok = route["responses"]["200"]["content"]["application/json"]["schema"]
    assert ok == {"$ref": "#/components/schemas/StudyReport"}
    r = client.get(f"/api/studies/{sid}/report?n_boot=50", headers={"Authorization": "Bearer tok"})
    assert r.status_code == 200 and r.json()["schema_version"] == SCHEMA_VERSION
    assert "scope" not in r.json()
    # the route hands FastAPI a validated model (not a dict), which serialises to the
    # same JSON as the report
    from rcea.app.api.studies import get_study_report

    with session_scope(engine) as s:
        typed = get_study_report(sid, s, n_boot=50, base_step=0, base_run="base")
    assert isinstance(typed, StudyReport)
    assert typed.checkpoints[0].entropy is not None
    assert typed.checkpoints[0].entropy.paired.k_min == 8
    got = r.json()
    assert {k: v for k, v in got.items() if k != "generated_at"} == {
        k: v
        for k, v in json.loads(json.dumps(build_report_again(engine))).items()
        if k != "generated_at"
    }


def build_report_again(engine):  # type: ignore[no-untyped-def]
    with session_scope(engine) as s:
        return report_json(build_report(s, study="rep", n_boot=50))
