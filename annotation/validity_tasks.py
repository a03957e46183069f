"""Blinded single-trajectory Label Studio tasks for the validity audit.

A task holds exactly three data fields: an opaque item key, the problem statement and the
solution text. Annotators answer ``valid`` or ``fatal error`` (stored as ``invalid``) and
may note where the first fatal error is. No run, model, step, seed, trajectory id,
question id, judge verdict or rationale ever goes into a task: :func:`check_blinding`
scans every batch with the shared :class:`~annotation.tasks.LeakScanner` before it is
sent.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from annotation.display import config_text, visible, xml_attr
from annotation.payloads import ParsedAnnotation, parse_annotation
from annotation.projects import export_tasks
from annotation.tasks import BlindingViolation, LeakScanner

if TYPE_CHECKING:
    from label_studio_sdk import LabelStudio

VALIDITY_CHOICE = "validity"
LOCATION_FIELD = "location"
TASK_DATA_KEYS = ("item", "problem", "solution")
#: Label Studio choice value → stored human label.
CHOICES = {"valid": "valid", "fatal error": "invalid"}
FORBIDDEN_KEYS = (
    "run",
    "model",
    "step",
    "seed",
    "trajectory_id",
    "question_id",
    "reward",
    "verdict",
    "judge",
    "validity",
    "rationale",
    "split",
    "mode",
    "predictions",
)
IMPORT_BATCH = 2_000
INSTRUCTIONS = (
    "The final answer is correct. Choose 'fatal error' if any step is false, uses a number "
    "that comes from nowhere, or the answer does not follow from the steps; otherwise "
    "'valid'. Style and notation never matter."
)


def validity_label_config() -> str:
    """The problem, one solution, a required valid / fatal-error choice and an optional
    note on where the first fatal error is. Every text placed in the XML goes through
    :func:`~annotation.display.xml_attr`."""
    choice, location = xml_attr(VALIDITY_CHOICE), xml_attr(LOCATION_FIELD)
    choices = "\n".join(
        f'    <Choice value="{xml_attr(v)}" alias="{xml_attr(v)}"/>' for v in CHOICES
    )
    return f"""<View>
  <Header value="Is this solution process-valid?"/>
  <Text name="instructions" value="{config_text(INSTRUCTIONS)}"/>
  <View style="min-width: 0; overflow-wrap: anywhere; overflow-x: auto;">
    <Header value="Problem" size="4"/>
    <Text name="problem" value="$problem"/>
    <Header value="Solution" size="4"/>
    <Text name="solution" value="$solution"/>
  </View>
  <Choices name="{choice}" toName="solution" choice="single" required="true"
           showInLine="true">
{choices}
  </Choices>
  <TextArea name="{location}" toName="solution"
            placeholder="optional: where is the first fatal error?"
            maxSubmissions="1" editable="true"/>
</View>"""


def build_validity_task(item_key: str, problem: str, solution: str) -> dict[str, str]:
    """One blinded task; the problem and solution are shown through
    :func:`~annotation.display.visible` (bidi and invisible characters as ``⟨U+XXXX⟩``,
    long lines cut)."""
    return {"item": item_key, "problem": visible(problem), "solution": visible(solution)}


def check_blinding(
    tasks: Iterable[dict[str, Any]], forbidden: Iterable[str], forbidden_exact: Iterable[str]
) -> None:
    """Raise :class:`BlindingViolation` if any task carries a forbidden value or key
    (``forbidden``: ids and provenance names, also as substrings; ``forbidden_exact``:
    question ids, steps, seeds, verdicts, rationales — whole values)."""
    scanner = LeakScanner(forbidden, forbidden_keys=FORBIDDEN_KEYS, forbidden_exact=forbidden_exact)
    leaks = scanner.scan(list(tasks))
    if leaks:
        raise BlindingViolation(f"refusing to send validity tasks that leak: {leaks[:5]}")


def task_ids_by_item(tasks: Sequence[dict[str, Any]]) -> dict[str, int]:
    return {str(t["data"]["item"]): int(t["id"]) for t in tasks if "item" in t.get("data", {})}


def import_validity_tasks(
    client: LabelStudio,
    project_id: int,
    tasks: Sequence[dict[str, str]],
    *,
    progress: Callable[[int], None] | None = None,
) -> dict[str, int]:
    """Import the tasks not yet in the project (by item key) in bulk; return item key →
    task id for every item of the project afterwards (idempotent)."""
    present = task_ids_by_item(export_tasks(client, project_id))
    todo = [t for t in tasks if t["item"] not in present]
    mapping = dict(present)
    ids_known = True
    for start in range(0, len(todo), IMPORT_BATCH):
        chunk = todo[start : start + IMPORT_BATCH]
        answer = client.projects.import_tasks(
            project_id, request=[{"data": t} for t in chunk], return_task_ids=True
        )
        ids = getattr(answer, "task_ids", None)
        if isinstance(ids, list) and len(ids) == len(chunk):
            mapping.update((t["item"], int(i)) for t, i in zip(chunk, ids, strict=True))
        else:
            ids_known = False
        if progress:
            progress(len(chunk))
    if todo and not ids_known:
        return task_ids_by_item(export_tasks(client, project_id))
    return mapping


def parse_validity_annotation(
    ann: dict[str, Any], *, task_id: int | None = None, project_id: int | None = None
) -> ParsedAnnotation:
    """Id, task, annotator, ``valid``/``invalid`` (None: no choice), note, cancel flag."""
    return parse_annotation(
        ann,
        task_id=task_id,
        project_id=project_id,
        choice_field=VALIDITY_CHOICE,
        choices=CHOICES,
        note_field=LOCATION_FIELD,
    )


def choice_result(label: str, note: str | None = None) -> list[dict[str, Any]]:
    """The annotation ``result`` for a human label (``valid``/``invalid``)."""
    value = next(k for k, v in CHOICES.items() if v == label)
    out: list[dict[str, Any]] = [
        {
            "from_name": VALIDITY_CHOICE,
            "to_name": "solution",
            "type": "choices",
            "value": {"choices": [value]},
        }
    ]
    if note:
        out.append(
            {
                "from_name": LOCATION_FIELD,
                "to_name": "solution",
                "type": "textarea",
                "value": {"text": [note]},
            }
        )
    return out


__all__ = [
    "CHOICES",
    "BlindingViolation",
    "build_validity_task",
    "check_blinding",
    "choice_result",
    "import_validity_tasks",
    "parse_validity_annotation",
    "validity_label_config",
]
