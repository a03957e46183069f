"""The one labelling core behind every human round (pair audit A/B, pair adjudication,
validity calibration, accepted-set check): people on their own Label Studio servers,
typed person → project bindings, the crash-safe push, verified labels (read back, one
status rule), two-way sync and webhooks as notifications. A round plugs in only what
differs: its tables and parser (:mod:`rcea.study.labelling.families`), its label config, task
builder and forbidden values."""

from rcea.study.labelling.bindings import (
    LabellingError,
    Member,
    bind,
    bind_existing,
    binding,
    bindings,
    check_distinct_people,
    ensure_member,
)
from rcea.study.labelling.blinding import (
    Forbidden,
    check_blinding,
    check_question_texts,
    forbidden_values,
    study_provenance,
)
from rcea.study.labelling.families import FAMILIES, PAIR, VALIDITY, Family
from rcea.study.labelling.push import (
    BuiltTask,
    ReceiverError,
    WebhookTarget,
    check_receiver,
    person_role,
    push_roles,
    push_tasks,
    round_title,
    webhook_target,
)
from rcea.study.labelling.record import (
    COUNTED,
    STATUSES,
    current_labels,
    label_status,
    status_counts,
)
from rcea.study.labelling.sync import SyncResult, notify, sync_all, sync_everything, sync_round

__all__ = [
    "COUNTED",
    "FAMILIES",
    "PAIR",
    "STATUSES",
    "VALIDITY",
    "BuiltTask",
    "Family",
    "Forbidden",
    "LabellingError",
    "Member",
    "SyncResult",
    "WebhookTarget",
    "bind",
    "bind_existing",
    "binding",
    "bindings",
    "check_blinding",
    "check_question_texts",
    "check_distinct_people",
    "current_labels",
    "ensure_member",
    "forbidden_values",
    "label_status",
    "notify",
    "person_role",
    "push_roles",
    "push_tasks",
    "round_title",
    "status_counts",
    "study_provenance",
    "sync_all",
    "sync_everything",
    "sync_round",
    "webhook_target",
    "ReceiverError",
    "check_receiver",
]
