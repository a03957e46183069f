"""The two families of human rounds and what differs between them: the store tables, the
owner (an ``audit`` or a ``validity_check``), the unit a task stands for (a pair or an item),
and the answer parser. Everything else — push, verification, sync, the status rule — is
shared (:mod:`rcea.study.labelling`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rcea.annotation.payloads import ParsedAnnotation, parse_annotation
from rcea.annotation.validity_tasks import parse_validity_annotation
from rcea.study.store.models import (
    Audit,
    AuditLabel,
    AuditTask,
    ValidityCheck,
    ValidityLabel,
    ValidityTask,
)

Parser = Callable[..., ParsedAnnotation]


@dataclass(frozen=True)
class Family:
    name: str  # the ``labelling_project.family`` value
    owner_model: type[Any]
    task_model: type[Any]
    label_model: type[Any]
    owner_field: str  # owner foreign key of task and label rows
    unit_field: str  # pair_id / item_id of task and label rows
    unit_data_key: str  # the opaque key in the task data ("pair" / "item")
    parse: Parser  # raw Label Studio annotation → ParsedAnnotation
    event_prefix: str  # "annotation" → annotation.created / annotation.updated / ...
    owner_label: str  # how messages name the owner

    def owner_id(self, row: Any) -> int:
        return int(getattr(row, self.owner_field))


PAIR = Family(
    name="pair",
    owner_model=Audit,
    task_model=AuditTask,
    label_model=AuditLabel,
    owner_field="audit_id",
    unit_field="pair_id",
    unit_data_key="pair",
    parse=parse_annotation,
    event_prefix="annotation",
    owner_label="audit",
)

VALIDITY = Family(
    name="validity",
    owner_model=ValidityCheck,
    task_model=ValidityTask,
    label_model=ValidityLabel,
    owner_field="check_id",
    unit_field="item_id",
    unit_data_key="item",
    parse=parse_validity_annotation,
    event_prefix="judge.annotation",
    owner_label="check",
)

FAMILIES = {f.name: f for f in (PAIR, VALIDITY)}
