"""Every kind of event the study's append-only log holds, in one place. An event is (time,
actor, kind, study, payload); the store's triggers refuse to change or delete one
(docs/store.md). The modules that append an event import its kind from here, so that a
reader can find every writer and every reader of a kind; the payloads are read through
:func:`rcea.study.store.payloads` / :func:`~rcea.study.store.latest_payload`. Names only:
the report's pure core imports them without the store (tests/test_layering.py).
"""

from __future__ import annotations

# -- freezes and the codebook cycle
RUBRIC_FREEZE = "rubric.freeze"
PARTITION_FREEZE = "partition.freeze"
CODEBOOK_FREEZE = "codebook.freeze"
CODEBOOK_EDIT = "codebook.edit"
CODEBOOK_RESOLVE = "codebook.resolve"
CODEBOOK_EXPORT = "codebook.export"
CODEBOOK_EXCLUDE = "codebook.exclude"
CODEBOOK_DEV_QUESTIONS = "codebook.dev_questions"
EXTENSION_REQUEST = "codebook.extension.request"
EXTENSION_UPDATE = "codebook.extension.update"
EXTENSION_APPROVE = "codebook.extension.approve"
EXTENSION_REJECT = "codebook.extension.reject"

# -- imports
IMPORT_VERL = "import.verl"
IMPORT_TRL = "import.trl"
IMPORT_LM_EVAL = "import.lm_eval"

# -- probing
PROBE_SET = "probe.probe_set"
PROBE_SCORE = "probe.score"

# -- the pair audit
AUDIT_SAMPLE = "audit.sample"
AUDIT_PUSH = "audit.push"
AUDIT_ADJUDICATE = "audit.adjudicate"
GATE_INTERIM = "gate.interim"
GATE_FINAL = "gate.final"
AUDIT_ABANDON = "audit.abandon"

# -- the validity audit
JUDGE_FREEZE = "judge.freeze"
JUDGE_RUN = "judge.run"
CALIBRATION_SAMPLE = "judge.calibration.sample"
CALIBRATION_COMPLETED = "judge.calibration.completed"
ACCEPTED_SAMPLE = "judge.accepted.sample"
ACCEPTED_COMPLETED = "judge.accepted.completed"
CALIBRATION_ABANDON = "judge.calibration.abandon"
ACCEPTED_ABANDON = "judge.accepted.abandon"

# -- publication and the demo
REPORT_PUBLISH = "report.publish"
DEMO_SIMULATED = "demo.simulated"


def codebook_stage(stage: str) -> str:
    """An automatic codebook stage finished (``codebook.induce``, ``.merge``, ``.assign``,
    ``.reconcile``)."""
    return f"codebook.{stage}"


def extension_decision(approve: bool) -> str:
    return EXTENSION_APPROVE if approve else EXTENSION_REJECT


def judge_round(check: str, action: str) -> str:
    """A validity round's push or adjudication (``judge.calibration.push`` …)."""
    return f"judge.{check}.{action}"


def label_change(prefix: str, verb: str) -> str:
    """A verified label read back from Label Studio: ``<family prefix>.<created|updated|
    deleted>`` (``annotation.*`` for pairs, ``judge.annotation.*`` for validity)."""
    return f"{prefix}.{verb}"
