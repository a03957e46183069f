"""The demo orchestrator: the embedded study end to end as an ordered list of named,
resumable steps (:func:`plan`) and the runner that executes them (:func:`run_steps`).

Each step is idempotent on its own (it looks at what exists: a trained objective, an
ingested file, a frozen rubric, a pushed task …) and is recorded in the state file
(:mod:`rcea.app.demo.state`) when it finishes, so a re-run skips finished steps outright and an
interrupted step resumes where its own resumability allows. A step whose predecessors did
not finish is skipped with the reason. The steps themselves are in :mod:`rcea.app.demo.study` and
:mod:`rcea.app.demo.audits`.

Every line printed about the simulation carries ``SIMULATED``.
"""

from __future__ import annotations

import time

from rcea.app.demo.audits import (
    step_audit,
    step_calibration_push,
    step_gate,
    step_push,
    step_report,
    step_simulate_pairs,
    step_simulate_validity,
)
from rcea.app.demo.context import DemoContext, DemoStepError, Step
from rcea.app.demo.simulate import SIMULATED
from rcea.app.demo.study import (
    step_base,
    step_codebook,
    step_ingest,
    step_judge,
    step_measure,
    step_probe,
    step_train,
)


def plan(*, simulate: bool) -> list[Step]:
    """The ordered steps for these options."""
    steps = [
        Step("base", "build the tiny base policy", step_base),
        Step("train", "train the six objectives", step_train, ("base",)),
        Step("probe", "probe base + milestones", step_probe, ("train",)),
        Step("ingest", "ingest the probe records", step_ingest, ("probe",)),
        Step("measure", "curves, pass@k, covariance", step_measure, ("ingest",)),
        Step("judge", "judge validity (oracle backend)", step_judge, ("ingest",)),
        Step("codebook", "codebook cycle (oracle backend)", step_codebook, ("judge",)),
        Step("audit", "freeze the rubric, draw the pair audit", step_audit, ("codebook",)),
        Step("push", "push the pair audit to Label Studio", step_push, ("audit",)),
        Step(
            "calibration",
            "push the validity calibration sample",
            step_calibration_push,
            ("judge", "audit"),
        ),
    ]
    if simulate:
        steps += [
            Step(
                "simulate-pairs",
                f"{SIMULATED} annotators label the pair audit",
                step_simulate_pairs,
                ("push",),
            ),
            Step("gate", f"final pair gate ({SIMULATED} labels)", step_gate, ("simulate-pairs",)),
            Step(
                "simulate-validity",
                f"{SIMULATED} validity calibration",
                step_simulate_validity,
                ("calibration",),
            ),
        ]
    steps.append(
        Step(
            "report",
            "build" + (" and publish" if simulate else "") + " the report",
            step_report,
            ("ingest",) + (("gate", "simulate-validity") if simulate else ()),
        )
    )
    return steps


def run_steps(ctx: DemoContext, steps: list[Step]) -> dict[str, str]:
    """Run the steps in order; returns step name → done | done-earlier | skipped. A failing
    step raises DemoStepError (its state stays unfinished)."""
    status: dict[str, str] = {}
    n = len(steps)
    for i, step in enumerate(steps, 1):
        head = f"[{i}/{n}] {step.title} …"
        if ctx.state.is_done(step.name):
            ctx.echo(f"{head} done earlier (skipped)")
            status[step.name] = "done-earlier"
            continue
        blocked = [a for a in step.after if status.get(a) not in ("done", "done-earlier")]
        if blocked:
            ctx.echo(f"{head} skipped: needs {', '.join(blocked)}")
            status[step.name] = "skipped"
            continue
        ctx.echo(head)
        began = time.monotonic()
        try:
            result = step.run(ctx)
        except (DemoStepError, KeyboardInterrupt):
            raise
        except Exception as exc:  # noqa: BLE001 - name the step, keep what finished
            raise DemoStepError(
                f"step {step.name} ({step.title}) failed: {type(exc).__name__}: {exc}\n"
                "  finished steps are kept; fix the cause and run the same command again"
            ) from exc
        seconds = time.monotonic() - began
        ctx.state.mark_done(step.name, seconds=seconds, result=result)
        ctx.echo(f"{head} done in {seconds:.1f} s")
        status[step.name] = "done"
    return status
