"""SQLModel tables of the store.

Token-level arrays never become SQL rows: they live in Parquet artifacts under the data
dir, and a trajectory row points at them with ``token_artifact`` (path relative to the
data dir) + ``token_row``.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import JSON, BigInteger, Column, Index, Text, UniqueConstraint
from sqlmodel import Field, SQLModel


def utcnow() -> datetime:
    return datetime.now(UTC)


class Study(SQLModel, table=True):
    __tablename__ = "study"

    id: int | None = Field(default=None, primary_key=True)
    name: str = Field(index=True, unique=True, max_length=200)
    description: str = Field(default="", sa_type=Text)
    created_at: datetime = Field(default_factory=utcnow)


class Question(SQLModel, table=True):
    __tablename__ = "question"
    __table_args__ = (UniqueConstraint("study_id", "question_id", name="uq_question_study_qid"),)

    id: int | None = Field(default=None, primary_key=True)
    study_id: int = Field(foreign_key="study.id", index=True)
    question_id: str = Field(max_length=300)
    text: str | None = Field(
        default=None, sa_type=Text, description="problem statement (records' `question`)"
    )
    ground_truth: str | None = Field(
        default=None, sa_type=Text, description="reference answer (records' `ground_truth`)"
    )
    created_at: datetime = Field(default_factory=utcnow)


class Ingest(SQLModel, table=True):
    """One ingested file: its content hash makes re-ingesting the same file a no-op."""

    __tablename__ = "ingest"
    __table_args__ = (UniqueConstraint("study_id", "sha256", name="uq_ingest_study_sha"),)

    id: int | None = Field(default=None, primary_key=True)
    study_id: int = Field(foreign_key="study.id", index=True)
    source: str = Field(sa_type=Text, description="file name as given to `rcea ingest`")
    sha256: str = Field(max_length=64)
    n_records: int
    token_artifact: str | None = Field(default=None, sa_type=Text)
    created_at: datetime = Field(default_factory=utcnow)


class TrajectoryBase(SQLModel):
    """The interchange record (docs/record-schema.md) (one sampled trajectory)."""

    trajectory_id: str = Field(max_length=300)
    question_id: str = Field(max_length=300)
    text: str = Field(sa_type=Text)
    reward: int
    run: str = Field(max_length=200)
    model: str = Field(max_length=200)
    step: int
    seed: int = Field(sa_type=BigInteger)
    train_seed: int | None = Field(
        default=None,
        description="training seed (replicate) of the run; not the decoding seed; None = "
        "the run's one unnamed seed (docs/estimators.md item 17)",
    )
    mean_token_entropy: float | None = None
    n_tokens: int | None = None
    seq_logprob: float | None = None
    answer: str | None = Field(default=None, sa_type=Text)
    validity: int | None = None
    mode: str | None = Field(default=None, max_length=300)
    split: str | None = Field(default=None, max_length=20)
    truncated: bool | None = None
    sampling_temperature: float | None = None
    sampling_top_p: float | None = None
    logprob_temperature: float | None = None
    reward_extras: str | None = Field(default=None, sa_type=Text)
    turns: str | None = Field(default=None, sa_type=Text)


class Trajectory(TrajectoryBase, table=True):
    __tablename__ = "trajectory"
    __table_args__ = (
        UniqueConstraint("study_id", "trajectory_id", name="uq_trajectory_study_tid"),
        Index("ix_trajectory_study_question", "study_id", "question_id"),
        Index("ix_trajectory_study_run_step", "study_id", "run", "step"),
    )

    id: int | None = Field(default=None, primary_key=True)
    study_id: int = Field(foreign_key="study.id")
    ingest_id: int = Field(foreign_key="ingest.id", index=True)
    token_artifact: str | None = Field(
        default=None, sa_type=Text, description="Parquet path under data dir"
    )
    token_row: int | None = Field(default=None, description="row in the token artifact")


class Event(SQLModel, table=True):
    """Append-only audit log: freezes, extensions, adjudications, publications.

    The migration installs database triggers that reject UPDATE and DELETE.
    """

    __tablename__ = "event"

    id: int | None = Field(default=None, primary_key=True)
    time: datetime = Field(default_factory=utcnow, index=True)
    actor: str = Field(max_length=200)
    kind: str = Field(max_length=100, index=True)
    study_id: int | None = Field(default=None, foreign_key="study.id", index=True)
    payload: dict[str, Any] = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))


# --------------------------------------------------------------------------- audits


class Rubric(SQLModel, table=True):
    """A frozen rubric: immutable once stored; a change is a new version (parent kept)."""

    __tablename__ = "rubric"
    __table_args__ = (UniqueConstraint("name", "version", name="uq_rubric_name_version"),)

    id: int | None = Field(default=None, primary_key=True)
    name: str = Field(max_length=200, index=True)
    version: str = Field(max_length=50)
    content_hash: str = Field(max_length=64, index=True)
    content: dict[str, Any] = Field(sa_column=Column(JSON, nullable=False))
    source_text: str = Field(sa_type=Text)
    parent_id: int | None = Field(default=None, foreign_key="rubric.id")
    frozen_by: str = Field(max_length=200)
    frozen_at: datetime = Field(default_factory=utcnow)


class Partition(SQLModel, table=True):
    """A frozen automatic partition of a study's accepted trajectories into modes."""

    __tablename__ = "partition"

    id: int | None = Field(default=None, primary_key=True)
    study_id: int = Field(foreign_key="study.id", index=True)
    source: str = Field(max_length=200, description="e.g. 'mode-column' or 'codebook:v2'")
    content_hash: str = Field(max_length=64, index=True)
    n_accepted: int
    n_uncertain: int
    frozen_by: str = Field(max_length=200)
    frozen_at: datetime = Field(default_factory=utcnow)


class PartitionAssignment(SQLModel, table=True):
    __tablename__ = "partition_assignment"
    __table_args__ = (
        UniqueConstraint("partition_id", "trajectory_id", name="uq_assignment_partition_tid"),
    )

    id: int | None = Field(default=None, primary_key=True)
    partition_id: int = Field(foreign_key="partition.id", index=True)
    trajectory_id: str = Field(max_length=300)
    question_id: str = Field(max_length=300)
    mode: str | None = Field(default=None, max_length=300, description="None = uncertain")


class Audit(SQLModel, table=True):
    """One pair audit: binds a rubric hash and a locked partition hash."""

    __tablename__ = "audit"

    id: int | None = Field(default=None, primary_key=True)
    study_id: int = Field(foreign_key="study.id", index=True)
    name: str = Field(max_length=200, unique=True)
    rubric_id: int = Field(foreign_key="rubric.id")
    rubric_hash: str = Field(max_length=64)
    partition_id: int = Field(foreign_key="partition.id")
    partition_hash: str = Field(max_length=64)
    seed: int = Field(sa_type=BigInteger)
    excluded_questions: list[str] = Field(
        default_factory=list, sa_column=Column(JSON, nullable=False)
    )
    labelstudio: dict[str, Any] = Field(
        default_factory=dict, sa_column=Column(JSON, nullable=False)
    )
    created_by: str = Field(max_length=200)
    created_at: datetime = Field(default_factory=utcnow)


class AuditPair(SQLModel, table=True):
    """A within-question trajectory pair. ``pair_key`` is the only id annotators see."""

    __tablename__ = "audit_pair"
    __table_args__ = (UniqueConstraint("audit_id", "pair_key", name="uq_pair_audit_key"),)

    id: int | None = Field(default=None, primary_key=True)
    audit_id: int = Field(foreign_key="audit.id", index=True)
    pair_key: str = Field(max_length=64)
    question_id: str = Field(max_length=300)
    trajectory_a: str = Field(max_length=300)
    trajectory_b: str = Field(max_length=300)
    automatic: str | None = Field(default=None, max_length=20, description="None = uncertain")


class AuditTask(SQLModel, table=True):
    """A pair pushed to one role's Label Studio project (role A, B or adjudicator)."""

    __tablename__ = "audit_task"
    __table_args__ = (
        UniqueConstraint(
            "audit_id", "role", "pair_id", "repeat", name="uq_task_audit_role_pair_repeat"
        ),
    )

    id: int | None = Field(default=None, primary_key=True)
    audit_id: int = Field(foreign_key="audit.id", index=True)
    role: str = Field(max_length=20)
    pair_id: int = Field(foreign_key="audit_pair.id")
    project_id: int
    task_id: int = Field(index=True)
    left_is_a: bool = Field(description="whether trajectory_a is shown on the left")
    repeat: bool = Field(
        default=False,
        description="a hidden repeat: the pair shown a second time to the same person "
        "(rubric [annotators] repeat_share); its labels never count in the gate",
    )
    render_sha256: str | None = Field(
        default=None,
        max_length=64,
        description="SHA-256 of everything the task showed when it was pushed (its data's "
        "shown_sha256, rcea.annotation.render.shown_hash); None for tasks pushed before it was "
        "recorded; never updated (docs/labelstudio.md)",
    )


class AuditLabel(SQLModel, table=True):
    """The current label of one Label Studio annotation (history lives in ``event``)."""

    __tablename__ = "audit_label"
    __table_args__ = (
        UniqueConstraint(
            "audit_id", "role", "annotation_id", name="uq_label_audit_role_annotation"
        ),
    )

    id: int | None = Field(default=None, primary_key=True)
    audit_id: int = Field(foreign_key="audit.id", index=True)
    annotation_id: int
    task_id: int
    project_id: int
    pair_id: int | None = Field(default=None, foreign_key="audit_pair.id")
    role: str | None = Field(default=None, max_length=20)
    user_id: int | None = None
    label: str | None = Field(default=None, max_length=20)
    note: str | None = Field(default=None, sa_type=Text)
    status: str = Field(
        max_length=30,
        description="counted | wrong_project | unknown_task | wrong_user | foreign_update | "
        "cancelled | no_label | deleted | duplicate",
    )
    updated_at: datetime = Field(default_factory=utcnow)
    lead_time: float | None = Field(
        default=None, description="Label Studio's lead_time: seconds spent on the annotation"
    )
    annotated_at: datetime | None = Field(
        default=None, description="Label Studio's created_at of the annotation"
    )
    repeat: bool = Field(
        default=False,
        description="the label of a hidden repeat task: self-consistency only, never "
        "counted in the gate, the reference, agreement or the sequential looks",
    )


# --------------------------------------------------------------------------- codebook cycle


class CodebookDraft(SQLModel, table=True):
    """The editable draft codebook of one question (from the merge, then researcher
    edits). Locked once frozen: later changes go through extension review."""

    __tablename__ = "codebook_draft"
    __table_args__ = (
        UniqueConstraint("study_id", "question_id", name="uq_codebook_draft_study_qid"),
    )

    id: int | None = Field(default=None, primary_key=True)
    study_id: int = Field(foreign_key="study.id", index=True)
    question_id: str = Field(max_length=300)
    modes: list[dict[str, Any]] = Field(
        default_factory=list, sa_column=Column(JSON, nullable=False)
    )
    frozen_version_id: int | None = Field(default=None, foreign_key="codebook_version.id")
    updated_by: str = Field(max_length=200)
    updated_at: datetime = Field(default_factory=utcnow)


class CodebookVersion(SQLModel, table=True):
    """A frozen, content-hashed codebook of one question; immutable (database triggers).
    Version n > 1 records its parent and why it was made."""

    __tablename__ = "codebook_version"
    __table_args__ = (
        UniqueConstraint("study_id", "question_id", "version", name="uq_codebook_version"),
    )

    id: int | None = Field(default=None, primary_key=True)
    study_id: int = Field(foreign_key="study.id", index=True)
    question_id: str = Field(max_length=300)
    version: int
    content_hash: str = Field(max_length=64, index=True)
    modes: list[dict[str, Any]] = Field(sa_column=Column(JSON, nullable=False))
    parent_id: int | None = Field(default=None, foreign_key="codebook_version.id")
    reason: str = Field(default="", sa_type=Text)
    prompts: str = Field(max_length=300, description="prompt-set id the codebook came from")
    frozen_by: str = Field(max_length=200)
    frozen_at: datetime = Field(default_factory=utcnow)


class CodebookBatch(SQLModel, table=True):
    """One finished LLM/oracle batch of a stage: what makes every stage resumable (a rerun
    skips batches whose key is here) and what records seeds, replies and usage."""

    __tablename__ = "codebook_batch"
    __table_args__ = (
        UniqueConstraint("study_id", "batch_key", name="uq_codebook_batch_key"),
        Index("ix_codebook_batch_stage", "study_id", "stage", "question_id"),
    )

    id: int | None = Field(default=None, primary_key=True)
    study_id: int = Field(foreign_key="study.id")
    stage: str = Field(max_length=20, description="induce | merge | assign | arbitrate")
    question_id: str = Field(max_length=300)
    version_id: int | None = Field(default=None, foreign_key="codebook_version.id")
    pass_no: int = Field(default=0, description="assignment pass 1 or 2; 0 otherwise")
    batch_key: str = Field(max_length=64)
    seed: int = Field(sa_type=BigInteger)
    trajectory_ids: list[str] = Field(sa_column=Column(JSON, nullable=False))
    request_hash: str | None = Field(default=None, max_length=64)
    status: str = Field(max_length=20, description="done | failed")
    reply: dict[str, Any] | None = Field(default=None, sa_column=Column(JSON, nullable=True))
    error: str | None = Field(default=None, sa_type=Text)
    usage: dict[str, Any] = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))
    created_at: datetime = Field(default_factory=utcnow)


class CodebookAssignment(SQLModel, table=True):
    """One pass's label for one trajectory against one frozen codebook version."""

    __tablename__ = "codebook_assignment"
    __table_args__ = (
        UniqueConstraint(
            "version_id", "trajectory_id", "pass_no", name="uq_codebook_assignment_pass"
        ),
    )

    id: int | None = Field(default=None, primary_key=True)
    study_id: int = Field(foreign_key="study.id", index=True)
    version_id: int = Field(foreign_key="codebook_version.id", index=True)
    question_id: str = Field(max_length=300)
    trajectory_id: str = Field(max_length=300)
    pass_no: int
    label: str = Field(max_length=300, description="mode id | NEW | NONE | INVALID")
    confidence: float | None = None
    proposal: dict[str, Any] | None = Field(default=None, sa_column=Column(JSON, nullable=True))
    note: str | None = Field(default=None, sa_type=Text)
    batch_id: int = Field(foreign_key="codebook_batch.id")


class CodebookDispute(SQLModel, table=True):
    """A trajectory in reconciliation: arbitration, then (if needed) the researcher queue.

    status: open → resolved (a mode, or ``uncertain``) | new (provisional NEW, awaiting
    extension review) | researcher (arbitration could not settle it)."""

    __tablename__ = "codebook_dispute"
    __table_args__ = (
        UniqueConstraint("version_id", "trajectory_id", name="uq_codebook_dispute_tid"),
    )

    id: int | None = Field(default=None, primary_key=True)
    study_id: int = Field(foreign_key="study.id", index=True)
    version_id: int = Field(foreign_key="codebook_version.id", index=True)
    question_id: str = Field(max_length=300)
    trajectory_id: str = Field(max_length=300)
    reasons: list[str] = Field(default_factory=list, sa_column=Column(JSON, nullable=False))
    status: str = Field(max_length=20, index=True)
    arbitration_label: str | None = Field(default=None, max_length=300)
    arbitration_confidence: float | None = None
    arbitration_note: str | None = Field(default=None, sa_type=Text)
    proposal: dict[str, Any] | None = Field(default=None, sa_column=Column(JSON, nullable=True))
    final_label: str | None = Field(default=None, max_length=300)
    resolved_by: str | None = Field(default=None, max_length=200)
    resolved_at: datetime | None = None
    extension_id: int | None = Field(default=None, foreign_key="codebook_extension.id")
    created_at: datetime = Field(default_factory=utcnow)


class CodebookExtension(SQLModel, table=True):
    """A question-level request to add modes for provisional NEW assignments."""

    __tablename__ = "codebook_extension"

    id: int | None = Field(default=None, primary_key=True)
    study_id: int = Field(foreign_key="study.id", index=True)
    question_id: str = Field(max_length=300)
    base_version_id: int = Field(foreign_key="codebook_version.id")
    proposals: list[dict[str, Any]] = Field(sa_column=Column(JSON, nullable=False))
    status: str = Field(max_length=20, description="pending | approved | rejected")
    affected_trajectory_ids: list[str] = Field(
        default_factory=list, sa_column=Column(JSON, nullable=False)
    )
    new_version_id: int | None = Field(default=None, foreign_key="codebook_version.id")
    decided_by: str | None = Field(default=None, max_length=200)
    decided_at: datetime | None = None
    reason: str | None = Field(default=None, sa_type=Text)
    created_at: datetime = Field(default_factory=utcnow)


class CodebookExport(SQLModel, table=True):
    """The final partition exported from the latest frozen codebooks; immutable."""

    __tablename__ = "codebook_export"

    id: int | None = Field(default=None, primary_key=True)
    study_id: int = Field(foreign_key="study.id", index=True)
    partition_id: int = Field(foreign_key="partition.id")
    versions: dict[str, Any] = Field(sa_column=Column(JSON, nullable=False))
    n_modes: int
    n_included: int
    n_uncertain: int
    parquet_path: str = Field(sa_type=Text)
    created_by: str = Field(max_length=200)
    created_at: datetime = Field(default_factory=utcnow)


# --------------------------------------------------------------------------- measurements


class Measurement(SQLModel, table=True):
    """One named result a producer computed outside the trajectory table: a training
    curve, a greedy accuracy, pass@k, an accuracy trace, a covariance transition, a tail
    table. Keyed by (study, kind, run, model, step, key); recording the same key again
    replaces the payload (producers are resumable, and a re-run recomputes the same value).

    Kinds and payloads are listed in ``rcea.study.store.measurements.KINDS``."""

    __tablename__ = "measurement"
    __table_args__ = (
        UniqueConstraint(
            "study_id",
            "kind",
            "run",
            "model",
            "train_seed",
            "step",
            "key",
            name="uq_measurement_key",
        ),
        Index("ix_measurement_kind", "study_id", "kind"),
    )

    id: int | None = Field(default=None, primary_key=True)
    study_id: int = Field(foreign_key="study.id")
    kind: str = Field(max_length=50)
    run: str = Field(default="", max_length=200)
    model: str = Field(default="", max_length=200)
    train_seed: int = Field(
        default=-1, description="training seed of the run; -1 = none (docs/estimators.md item 17)"
    )
    step: int = Field(default=-1, description="checkpoint step; -1 = not step-specific")
    key: str = Field(default="", max_length=200, description="e.g. benchmark name")
    payload: dict[str, Any] = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))
    source: str = Field(default="", sa_type=Text, description="file or command it came from")
    created_at: datetime = Field(default_factory=utcnow)


# --------------------------------------------------------------------------- validity audit


class JudgeVersion(SQLModel, table=True):
    """A frozen validity judge (backend, model, prompt template, decoding), content-hashed;
    immutable (database triggers). A change is version n+1 recording its parent and why."""

    __tablename__ = "judge_version"
    __table_args__ = (UniqueConstraint("name", "version", name="uq_judge_version"),)

    id: int | None = Field(default=None, primary_key=True)
    name: str = Field(max_length=200, index=True)
    version: int
    content_hash: str = Field(max_length=64, index=True)
    content: dict[str, Any] = Field(sa_column=Column(JSON, nullable=False))
    parent_id: int | None = Field(default=None, foreign_key="judge_version.id")
    reason: str = Field(default="", sa_type=Text)
    frozen_by: str = Field(max_length=200)
    frozen_at: datetime = Field(default_factory=utcnow)


class JudgeProblem(SQLModel, table=True):
    """The problem statement of a question, shown to the judge and to annotators."""

    __tablename__ = "judge_problem"
    __table_args__ = (UniqueConstraint("study_id", "question_id", name="uq_judge_problem"),)

    id: int | None = Field(default=None, primary_key=True)
    study_id: int = Field(foreign_key="study.id", index=True)
    question_id: str = Field(max_length=300)
    text: str = Field(sa_type=Text)


class JudgeVerdict(SQLModel, table=True):
    """One frozen judge's verdict on one verifier success; immutable (triggers)."""

    __tablename__ = "judge_verdict"
    __table_args__ = (
        UniqueConstraint("judge_id", "study_id", "trajectory_id", name="uq_judge_verdict"),
        Index("ix_judge_verdict_study_judge", "study_id", "judge_id"),
    )

    id: int | None = Field(default=None, primary_key=True)
    judge_id: int = Field(foreign_key="judge_version.id")
    study_id: int = Field(foreign_key="study.id")
    trajectory_id: str = Field(max_length=300)
    question_id: str = Field(max_length=300)
    verdict: str = Field(max_length=20, description="valid | invalid | unparseable")
    rationale: str = Field(default="", sa_type=Text)
    error_location: str = Field(default="", sa_type=Text)
    error: str | None = Field(default=None, sa_type=Text)
    request_hash: str | None = Field(default=None, max_length=64)
    usage: dict[str, Any] = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))
    created_at: datetime = Field(default_factory=utcnow)


class ValidityCheck(SQLModel, table=True):
    """A human check of one frozen judge: a blinded ``calibration`` (development and
    held-out splits) or an ``accepted``-set check (two annotators per item)."""

    __tablename__ = "validity_check"

    id: int | None = Field(default=None, primary_key=True)
    study_id: int = Field(foreign_key="study.id", index=True)
    kind: str = Field(max_length=20, description="calibration | accepted")
    name: str = Field(max_length=200, unique=True)
    judge_id: int = Field(foreign_key="judge_version.id")
    judge_hash: str = Field(max_length=64)
    seed: int = Field(sa_type=BigInteger)
    plan: dict[str, Any] = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))
    labelstudio: dict[str, Any] = Field(
        default_factory=dict, sa_column=Column(JSON, nullable=False)
    )
    created_by: str = Field(max_length=200)
    created_at: datetime = Field(default_factory=utcnow)


class ValidityItem(SQLModel, table=True):
    """A sampled trajectory of a check, with the judge verdict bound when it was drawn;
    immutable (triggers). ``item_key`` is the only id annotators see."""

    __tablename__ = "validity_item"
    __table_args__ = (
        UniqueConstraint("check_id", "item_key", name="uq_validity_item_key"),
        UniqueConstraint("check_id", "trajectory_id", name="uq_validity_item_tid"),
    )

    id: int | None = Field(default=None, primary_key=True)
    check_id: int = Field(foreign_key="validity_check.id", index=True)
    item_key: str = Field(max_length=64)
    trajectory_id: str = Field(max_length=300)
    question_id: str = Field(max_length=300)
    split: str = Field(max_length=20, description="development | held_out | accepted")
    judge_verdict: str = Field(max_length=20)


class ValidityTask(SQLModel, table=True):
    """An item pushed to one annotator's Label Studio project."""

    __tablename__ = "validity_task"
    __table_args__ = (
        UniqueConstraint("check_id", "role", "item_id", name="uq_validity_task_role_item"),
    )

    id: int | None = Field(default=None, primary_key=True)
    check_id: int = Field(foreign_key="validity_check.id", index=True)
    role: str = Field(max_length=20)
    item_id: int = Field(foreign_key="validity_item.id")
    project_id: int
    task_id: int = Field(index=True)
    render_sha256: str | None = Field(
        default=None,
        max_length=64,
        description="SHA-256 of everything the task showed when it was pushed (its data's "
        "shown_sha256, rcea.annotation.render.shown_hash); None for tasks pushed before it was "
        "recorded; never updated (docs/labelstudio.md)",
    )


class ValidityLabel(SQLModel, table=True):
    """The current label of one Label Studio annotation (history lives in ``event``)."""

    __tablename__ = "validity_label"
    __table_args__ = (
        UniqueConstraint(
            "check_id", "role", "annotation_id", name="uq_validity_label_role_annotation"
        ),
    )

    id: int | None = Field(default=None, primary_key=True)
    check_id: int = Field(foreign_key="validity_check.id", index=True)
    annotation_id: int
    task_id: int
    project_id: int
    item_id: int | None = Field(default=None, foreign_key="validity_item.id")
    role: str | None = Field(default=None, max_length=20)
    user_id: int | None = None
    label: str | None = Field(default=None, max_length=20, description="valid | invalid")
    note: str | None = Field(default=None, sa_type=Text)
    status: str = Field(
        max_length=30,
        description="counted | wrong_project | unknown_task | wrong_user | foreign_update | "
        "cancelled | no_label | deleted | duplicate",
    )
    updated_at: datetime = Field(default_factory=utcnow)


# --------------------------------------------------------------------------- labelling core


class LabellingProject(SQLModel, table=True):
    """Which person labels which round, in which project of which server.

    ``family`` is ``pair`` (owner: an ``audit``) or ``validity`` (owner: a
    ``validity_check``); ``role`` is A, B, adjudicator or annotator-N. The row is written
    (state ``intent``) and committed *before* the project is created, with a ``marker``
    that goes into the project's description, so a push interrupted by a crash adopts the
    half-made project instead of making a second one (state ``created``)."""

    __tablename__ = "labelling_project"
    __table_args__ = (
        UniqueConstraint("family", "owner_id", "role", name="uq_labelling_project_role"),
    )

    id: int | None = Field(default=None, primary_key=True)
    family: str = Field(max_length=20)
    owner_id: int = Field(index=True)
    role: str = Field(max_length=20)
    person: str = Field(max_length=320, index=True, description="e-mail")
    person_slug: str = Field(max_length=64)
    server_url: str = Field(max_length=300)
    user_id: int = Field(description="the person's Label Studio user id on their server")
    project_id: int | None = Field(default=None)
    marker: str = Field(max_length=64)
    state: str = Field(max_length=20, description="intent | created")
    created_at: datetime = Field(default_factory=utcnow)
    updated_at: datetime = Field(default_factory=utcnow)
    synced_until: datetime | None = Field(
        default=None,
        description="server-clock start of the last sync of this project (incremental sync)",
    )
