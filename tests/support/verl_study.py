"""A verl-shaped study for the documented path (docs/how-to-verl.md), written by verl's
OWN dump writer (``RayPPOTrainer._dump_generations``, tests/support/verl_dumps.py) and
scored by verl's DAPO scorer: ±1 scores, uneven successes per question, 8 samples per
question at every step, one empty completion.

* :func:`write_validation_dump` writes ``{step}.jsonl`` per step into a directory, as a
  ``trainer.validation_data_dir`` holds it. ``extras=False`` (the default) is a GRPO
  dump whose reward function returns a bare score: its lines have ``input``,
  ``output``, ``gts``, ``score`` and ``step`` only — no ``acc``, no ``pred``;
  ``extras=True`` keeps DAPO's ``acc`` and ``pred`` reward extras.
* :data:`IMPORT_ARGS` is the how-to's import for it (±1 → ``--reward-threshold 0``,
  the empty completion → ``--skip-empty-output``).
* :func:`judge_verdict` is an oracle judge (``tests.support.verl_study:judge_verdict``)
  that rejects every "guessed" success, so judge-accepted successes differ from
  verifier successes; :func:`judge_study` freezes and runs it through ``run_judge``.
* :func:`successes`, :func:`accepted` and :func:`strategy` say what was written, for the
  expected values of a test (and the scripted people of tests/test_howto_verl.py).
* A correct, non-guessed success uses one of two strategies (:func:`strategy`): ``direct``
  (add the numbers) or ``expand`` (split the second number into tens and units), so that
  a question's accepted successes fall into two solution modes.
* :class:`Shape` sizes a study (steps, per-question base successes); the default is the
  12-question, three-step study every earlier test uses.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rcea.study.settings import Settings
from rcea.study.validity_audit.run import run_judge
from tests.support import verl_dumps
from tests.support.judge_study import freeze

N_SAMPLES = 8
STEPS = (0, 20, 40)
N_QUESTIONS = 12
#: verifier successes of question q at step index 0 (then +1 per later step, at most 8):
#: uneven on purpose (a question that is never solved, one always solved, the rest between)
BASE_SUCCESSES = (0, 1, 2, 3, 4, 5, 6, 7, 8, 2, 5, 3)
#: the empty completion: (step, question, sample), a failure
EMPTY_AT = (0, 0, N_SAMPLES - 1)


@dataclass(frozen=True)
class Shape:
    """The steps written and each question's verifier successes at the first step."""

    steps: tuple[int, ...] = STEPS
    base: tuple[int, ...] = BASE_SUCCESSES


DEFAULT = Shape()
RUN, MODEL = "grpo", "qwen2.5-1.5b"
ORACLE = "tests.support.verl_study:judge_verdict"


def question(q: int) -> tuple[str, str]:
    """The question text and its ground truth."""
    a, b = 11 + 3 * q, 7 + 5 * q
    return f"What is {a} + {b}?", str(a + b)


def successes(step_index: int, q: int, shape: Shape = DEFAULT) -> int:
    base = shape.base[q]
    return min(N_SAMPLES, base + step_index) if base else 0


def guessed(step_index: int, q: int, s: int, shape: Shape = DEFAULT) -> bool:
    """Whether success ``s`` is a lucky guess (the judge rejects it): the last success of
    a question with at least four."""
    k = successes(step_index, q, shape)
    return k >= 4 and s == k - 1


def accepted(step_index: int, q: int, shape: Shape = DEFAULT) -> int:
    """Judge-accepted successes of question q at that step."""
    k = successes(step_index, q, shape)
    return k - (1 if k >= 4 else 0)


def strategy(step_index: int, q: int, s: int, shape: Shape = DEFAULT) -> str | None:
    """The solution mode of sample ``s`` (``None``: a failure or a guess)."""
    if s >= successes(step_index, q, shape) or guessed(step_index, q, s, shape):
        return None
    return "expand" if s % 2 else "direct"


def completion(step_index: int, q: int, s: int, shape: Shape = DEFAULT) -> str:
    text, gt = question(q)
    if (shape.steps[step_index], q, s) == EMPTY_AT:
        return ""
    if s < successes(step_index, q, shape):
        a, b = text.removeprefix("What is ").removesuffix("?").split(" + ")
        how = strategy(step_index, q, s, shape)
        if how is None:
            return f"I guess.\nAnswer: {gt}"
        if how == "expand":
            tens, units = int(b) - int(b) % 10, int(b) % 10
            return (
                f"Expand {b} into {tens} and {units}, then count on from {a}: "
                f"{a} + {tens} = {int(a) + tens}, and {units} more is {gt}.\nAnswer: {gt}"
            )
        return f"Add the tens, then the units: {a} + {b} = {gt}.\nAnswer: {gt}"
    return f"Add them: the sum is {int(gt) + 1 + s}.\nAnswer: {int(gt) + 1 + s}"


def prompt(q: int) -> str:
    """The prompt as verl decodes a Qwen chat template with ``skip_special_tokens=True``."""
    return f"system\nPlease reason step by step.\nuser\n{question(q)[0]}\nassistant\n"


def write_validation_dump(directory: Path, *, extras: bool = False, shape: Shape = DEFAULT) -> Path:
    """One ``{step}.jsonl`` per step of the shape (default :data:`STEPS`), via verl's
    ``_dump_generations``."""
    directory.mkdir(parents=True, exist_ok=True)
    for i, step in enumerate(shape.steps):
        rows = [(q, s) for q in range(len(shape.base)) for s in range(N_SAMPLES)]
        texts = [completion(i, q, s, shape) for q, s in rows]
        scored = [
            verl_dumps.dapo_score(t, question(q)[1]) for (q, _), t in zip(rows, texts, strict=True)
        ]
        verl_dumps.dump_generations(
            directory,
            step,
            [prompt(q) for q, _ in rows],
            texts,
            [question(q)[1] for q, _ in rows],
            [r["score"] for r in scored],
            {k: [r[k] for r in scored] for k in ("acc", "pred")} if extras else None,
        )
    return directory


#: the how-to's import of this dump (after ``rcea import verl DIR``)
IMPORT_ARGS = [
    "--run",
    RUN,
    "--model",
    MODEL,
    "--reward-threshold",
    "0",
    "--skip-empty-output",
]


def judge_verdict(question_id: str, text: str) -> int:
    """The oracle judge: a guessed answer is not a valid process."""
    return 0 if text.startswith("I guess.") else 1


def judge_study(engine: Any, study: str, data_dir: Path, name: str = "verl-judge") -> None:
    """Freeze :func:`judge_verdict` as a judge and run it on the study (``run_judge``)."""
    freeze(engine, name, ORACLE)
    run_judge(engine, study=study, judge=name, settings=Settings(data_dir=data_dir), actor="r")
