"""Validity checks on the store without Label Studio: a calibration or an accepted-set
check with its items and counted labels, so its report can be decided."""

from __future__ import annotations

from typing import Any

from rcea.study.store import get_or_create_study, session_scope


def stored_check(  # type: ignore[no-untyped-def]
    engine,
    *,
    kind: str,
    judge: list[str],
    labels: dict[str, list[str]],
    name: str = "c1",
    study: str = "cal",
    acceptance: dict[str, Any] | None = None,
    population: dict[str, int] | None = None,
) -> dict[str, Any]:
    """A check of ``len(judge)`` held-out items (``kind`` calibration or accepted): the
    judge's verdicts ``judge``, and per role (``annotator-1``; or ``A`` and ``B``) one
    counted label per item. ``acceptance``: thresholds frozen into the plan (None: the
    plan has none, as for checks drawn before thresholds existed); ``population``: the
    judge's verdict counts over the judged population recorded in the plan (None: none,
    so the report has no population figures)."""
    from rcea.pipeline.judge.backends import JudgeSpec
    from rcea.study.store.models import ValidityCheck, ValidityItem, ValidityLabel
    from rcea.study.validity_audit.versions import freeze_judge

    with session_scope(engine) as s:
        st = get_or_create_study(s, name=study)
        jv, _ = freeze_judge(s, name="llm", spec=JudgeSpec("openai", "m", seed=3), actor="r")
        plan: dict[str, Any] = {"annotators_per_item": 2 if "A" in labels else 1}
        if acceptance is not None:
            plan["acceptance"] = acceptance
        if population is not None:
            plan["population"] = population
        check = ValidityCheck(
            study_id=st.id,
            kind=kind,
            name=name,
            judge_id=jv.id,
            judge_hash=jv.content_hash,
            seed=1,
            plan=plan,
            created_by="x",
        )
        s.add(check)
        s.flush()
        split = "held_out" if kind == "calibration" else "accepted"
        items = [
            ValidityItem(
                check_id=check.id,
                item_key=f"{name}-k{i}",
                trajectory_id=f"t{i}",
                question_id="q",
                split=split,
                judge_verdict=v,
            )
            for i, v in enumerate(judge)
        ]
        s.add_all(items)
        s.flush()
        n = 0
        for role, role_labels in labels.items():
            for item, label in zip(items, role_labels, strict=True):
                n += 1
                s.add(
                    ValidityLabel(
                        check_id=check.id,
                        annotation_id=10_000 * (check.id or 0) + n,
                        task_id=20_000 * (check.id or 0) + n,
                        project_id=1,
                        item_id=item.id,
                        role=role,
                        user_id=7,
                        label=label,
                        status="counted",
                    )
                )
        return {"study_id": st.id, "name": name, "judge_hash": jv.content_hash}
