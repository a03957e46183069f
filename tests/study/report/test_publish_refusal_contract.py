"""The publish refusal rule pinned exactly on report dictionaries (docs/mutation.md):
which blocked quantities name which missing gate, in which order, the refusal's wording,
and when the recorded audits are recomputed at all. The store-level refusals (a missing,
failed or stale gate; an uncalibrated judge) are in ``test_report_publish.py``."""

from __future__ import annotations

from typing import Any

import pytest

from rcea.study.report.publication import PublishRefused, refusal_reasons
from rcea.study.report.publish import recompute_audits

PAIR_BLOCK = "modes rest on partition p1 without a passing final gate"
VAL_BLOCK = "validity rests on judge j1 with no completed calibration"


def _report(
    quantities: list[tuple[bool, list[str]]],
    pair: str | None = PAIR_BLOCK,
    val: str | None = VAL_BLOCK,
    pair_status: str = "failed",
    val_status: str = "uncalibrated",
) -> dict[str, Any]:
    return {
        "study_id": 1,
        "quantities": [{"publishable": p, "depends_on": d} for p, d in quantities],
        "audits": {
            "pair": {"blocked_by": pair, "status": pair_status, "audit": "a1"},
            "validity": {"blocked_by": val, "status": val_status},
        },
    }


@pytest.mark.parametrize(
    ("quantities", "pair", "val", "expected"),
    [
        ([(False, ["partition"])], PAIR_BLOCK, VAL_BLOCK, [PAIR_BLOCK]),
        ([(False, ["validity"])], PAIR_BLOCK, VAL_BLOCK, [VAL_BLOCK]),
        (
            [(False, ["validity"]), (False, ["partition"])],
            PAIR_BLOCK,
            VAL_BLOCK,
            [PAIR_BLOCK, VAL_BLOCK],
        ),
        ([(False, ["partition", "validity"])], PAIR_BLOCK, VAL_BLOCK, [PAIR_BLOCK, VAL_BLOCK]),
        # a publishable quantity never refuses, whatever it depends on
        ([(True, ["partition", "validity"]), (False, [])], PAIR_BLOCK, VAL_BLOCK, []),
        # a blocked quantity whose gate names no blocker refuses nothing
        ([(False, ["partition", "validity"])], None, VAL_BLOCK, [VAL_BLOCK]),
        ([(False, ["partition", "validity"])], PAIR_BLOCK, None, [PAIR_BLOCK]),
        ([(False, ["partition", "validity"])], "", "", []),
        ([], PAIR_BLOCK, VAL_BLOCK, []),
    ],
)
def test_refusal_reasons(
    quantities: list[tuple[bool, list[str]]], pair: str | None, val: str | None, expected: list[str]
) -> None:
    assert refusal_reasons(_report(quantities, pair, val)) == expected


def test_refusal_message() -> None:
    exc = PublishRefused([PAIR_BLOCK, VAL_BLOCK])
    assert exc.reasons == [PAIR_BLOCK, VAL_BLOCK]
    assert str(exc) == f"refusing to publish: {PAIR_BLOCK}; {VAL_BLOCK}"
    assert isinstance(exc, ValueError)


@pytest.mark.parametrize(
    ("quantities", "pair_status", "val_status"),
    [
        ([(True, [])], "passed", "calibrated"),  # nothing rests on an audit
        ([(True, ["partition"])], "failed", "calibrated"),  # the gate did not pass
        ([(True, ["validity"])], "passed", "uncalibrated"),  # no calibration to recompute
        ([(True, ["partition", "validity"])], "not-drawn", "none"),
    ],
)
def test_nothing_to_recompute(
    quantities: list[tuple[bool, list[str]]], pair_status: str, val_status: str
) -> None:
    """No store access at all (``session`` None) when nothing published rests on a
    passed gate or a completed calibration."""
    report = _report(quantities, None, None, pair_status, val_status)
    assert recompute_audits(None, report) == []  # type: ignore[arg-type]


def test_recompute_needs_a_named_audit() -> None:
    report = _report([(True, ["partition"])], None, None, "passed", "none")
    report["audits"]["pair"]["audit"] = None
    assert recompute_audits(None, report) == []  # type: ignore[arg-type]


def test_a_calibration_is_recomputed_against_its_stored_check(engine) -> None:  # type: ignore[no-untyped-def]
    """Validity numbers resting on a completed calibration: the check the event names
    is looked up in the report's study, and a judge hash that differs from the one the
    check binds refuses; a check of another study, or none, has nothing to recompute."""
    from rcea.study.store import get_or_create_study, session_scope
    from rcea.study.store.models import JudgeVersion, ValidityCheck

    with session_scope(engine) as s:
        a = get_or_create_study(s, name="a")
        b = get_or_create_study(s, name="b")
        judge = JudgeVersion(name="j", version=1, content_hash="h1" * 32, content={}, frozen_by="x")
        s.add(judge)
        s.flush()
        s.add(
            ValidityCheck(
                study_id=a.id,
                kind="calibration",
                name="c1",
                judge_id=judge.id,
                judge_hash="h1" * 32,
                seed=1,
                created_by="x",
            )
        )
        ids = (a.id, b.id)

    def report(study_id: int, name: str) -> dict[str, Any]:
        rep = _report([(True, ["validity"])], None, None, "none", "calibrated")
        rep["study_id"] = study_id
        rep["audits"]["validity"].update(calibration=name, judge_hash="h2" * 32)
        return rep

    with session_scope(engine) as s:
        assert recompute_audits(s, report(ids[0], "c1")) == [
            f"judge.calibration.completed (c1): judge_hash recorded {'h2' * 32}, "
            f"the check binds {'h1' * 32}"
        ]
        assert recompute_audits(s, report(ids[1], "c1")) == []  # another study's check
        assert recompute_audits(s, report(ids[0], "c9")) == []  # no such check
