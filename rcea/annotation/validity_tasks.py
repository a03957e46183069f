"""Blinded single-trajectory Label Studio tasks for the validity audit.

A task holds exactly three data fields: an opaque item key, the problem statement and the
solution text. Annotators answer ``valid`` or ``fatal error`` (stored as ``invalid``) and
may note where the first fatal error is. No run, model, step, seed, trajectory id,
question id, judge verdict or rationale ever goes into a task: every batch is scanned
(:func:`rcea.study.labelling.check_blinding`) before anything is created in Label Studio.
"""

from __future__ import annotations

from typing import Any

from rcea.annotation.display import config_text, xml_attr
from rcea.annotation.payloads import ParsedAnnotation, parse_annotation
from rcea.annotation.tasks import (
    RENDER_STYLE,
    BlindingViolation,
    Shown,
    rendered_text,
    with_rendered,
)

VALIDITY_CHOICE = "validity"
LOCATION_FIELD = "location"
TASK_DATA_KEYS = ("item", "problem", "solution")
#: Label Studio choice value → stored human label.
CHOICES = {"valid": "valid", "fatal error": "invalid"}
INSTRUCTIONS = (
    "The final answer is correct. Choose 'fatal error' if any step is false, uses a number "
    "that comes from nowhere, or the answer does not follow from the steps; otherwise "
    "'valid'. Style and notation never matter."
)


def validity_label_config(*, adjudication: bool = False) -> str:
    """The problem, one solution, a required valid / fatal-error choice and an optional
    note on where the first fatal error is. The adjudication variant also shows the two
    annotators' answers (in random order; never who gave them, never the judge's). Every
    text placed in the XML goes through :func:`~rcea.annotation.display.xml_attr`."""
    answers = (
        '\n  <Header value="Annotator answers (random order): $answer_1 / $answer_2" size="5"/>'
        if adjudication
        else ""
    )
    choice, location = xml_attr(VALIDITY_CHOICE), xml_attr(LOCATION_FIELD)
    choices = "\n".join(
        f'    <Choice value="{xml_attr(v)}" alias="{xml_attr(v)}"/>' for v in CHOICES
    )
    problem = rendered_text("problem", "Source of the problem")
    solution = rendered_text("solution", "Source of the solution")
    return f"""<View>{RENDER_STYLE}
  <Header value="Is this solution process-valid?"/>{answers}
  <Text name="instructions" value="{config_text(INSTRUCTIONS)}"/>
  <View style="min-width: 0; overflow-wrap: anywhere; overflow-x: auto;">
    <Header value="Problem" size="4"/>
{problem}
    <Header value="Solution" size="4"/>
{solution}
  </View>
  <Choices name="{choice}" toName="solution" choice="single" required="true"
           showInLine="true">
{choices}
  </Choices>
  <TextArea name="{location}" toName="solution"
            placeholder="optional: where is the first fatal error?"
            maxSubmissions="1" editable="true"/>
</View>"""


def build_validity_task(item_key: str, problem: str, solution: Shown) -> dict[str, str]:
    """One blinded task; the problem and solution are shown through
    :func:`~rcea.annotation.display.visible` (bidi and invisible characters as ``⟨U+XXXX⟩``,
    long lines cut), and rendered (``problem_html``, ``solution_html``), with the hash of
    it all (:func:`rcea.annotation.tasks.with_rendered`). ``solution`` may be a multi-turn
    transcript's turns, rendered one block per turn."""
    data: dict[str, Shown] = {"item": item_key, "problem": problem, "solution": solution}
    return with_rendered(data, ("problem", "solution"))


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
    "choice_result",
    "parse_validity_annotation",
    "validity_label_config",
]
