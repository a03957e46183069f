"""``SCHEMA_VERSION`` moves with the schema: the fingerprint of the generated
``docs/report.schema.json`` (its ``$id``, which names the version, left out) is tied to the
version here, so a change of the report's keys fails until ``SCHEMA_VERSION`` is bumped, the
new fingerprint recorded below and CHANGELOG.md says so. That the file is the generated one
is tests/test_docs.py::test_generated_reference_pages_are_up_to_date."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from rcea.study.report.schema import SCHEMA_VERSION, report_json_schema

ROOT = Path(__file__).resolve().parents[3]

#: schema version → fingerprint of its JSON schema (sha256 of the canonical JSON, no $id)
FINGERPRINTS = {
    "2": "559fdcd40a37a667503446877235368260165471475c512d3a2172ea0ebaff5b",
    "3": "523ba0d5b369c99027c07e61558be515618a653fb0f174db9f23dff7306f39ef",
    "4": "b2b1772ded042b087d654a977c5f1992b43d0932284138e53f5a160dfa13db4d",
    "5": "33525879eda6570b76582f87822cf86511e7a4593ff64ea975fe29c80a1d61c8",
}


def fingerprint(schema: dict[str, Any]) -> str:
    body = {k: v for k, v in schema.items() if k != "$id"}
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def test_the_schema_is_the_one_its_version_names() -> None:
    docs = json.loads((ROOT / "docs" / "report.schema.json").read_text(encoding="utf-8"))
    got = fingerprint(docs)
    assert got == fingerprint(report_json_schema()), (
        "regenerate: python -m rcea.study.report.schema"
    )
    assert FINGERPRINTS.get(SCHEMA_VERSION) == got, (
        f"the report schema changed ({got}): bump SCHEMA_VERSION in rcea/study/report/schema.py, "
        "record the new fingerprint in FINGERPRINTS and add a line to CHANGELOG.md"
    )


def test_each_version_has_one_schema() -> None:
    assert len(set(FINGERPRINTS.values())) == len(FINGERPRINTS)


def test_the_changelog_records_the_version() -> None:
    changelog = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    assert f"Report schema version {SCHEMA_VERSION}" in changelog


def test_a_changed_key_changes_the_fingerprint() -> None:
    schema = report_json_schema()
    grown = json.loads(json.dumps(schema))
    grown["properties"]["new_key"] = {"type": "string"}
    assert fingerprint(grown) != fingerprint(schema)
    assert fingerprint({**schema, "$id": "rcea-study-report/99"}) == fingerprint(schema)
