"""The audit half of the demo: rubric and pair-audit draw, Label Studio (reused or
started), annotator accounts (people, or SIMULATED ones), the pushes, the SIMULATED
labelling, the final gate, and the report/bundle."""

from __future__ import annotations

import json
import secrets
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from rcea.annotation.people import people_from_settings
from rcea.app.demo.config import ORACLE, rubric_toml
from rcea.app.demo.context import DEMO_ACTOR, DemoContext, DemoStepError, brief
from rcea.app.demo.export import export_records
from rcea.app.demo.simulate import (
    SIM_ACTOR,
    SIM_EVENT,
    SIM_ROLES,
    SIMULATED,
    sim_accounts,
    simulate_pair_audit,
)
from rcea.app.demo.study import JUDGE_NAME, VALIDITY_ORACLE
from rcea.pipeline.safety import write_private
from rcea.study.codebook import load_strategy_fn
from rcea.study.labelling import ensure_member, webhook_target
from rcea.study.pair_audit.freeze import freeze_rubric
from rcea.study.pair_audit.gate import decide_gate
from rcea.study.pair_audit.push import push_audit
from rcea.study.pair_audit.sampling import audit_overview, draw_audit, find_audit, get_audit
from rcea.study.report.entropy_law import law_summary
from rcea.study.store import append_event, require_study, session_scope
from rcea.study.validity_audit.simulate import simulate_validity_labels

PEOPLE = {
    "A": "annotator-a@rcea.local",
    "B": "annotator-b@rcea.local",
    "adjudicator": "adjudicator@rcea.local",
}


def step_audit(ctx: DemoContext) -> dict[str, Any]:
    """Freeze the demo rubric and draw the pair audit (binds rubric + partition hashes)."""

    path = ctx.work / "rubric.toml"
    path.write_text(rubric_toml(ctx.sizes), encoding="utf-8")
    with session_scope(ctx.engine()) as s:
        rubric, _ = freeze_rubric(s, path=path, actor=DEMO_ACTOR)
        audit = find_audit(s, name=ctx.audit_name)
        if audit is None:
            audit = draw_audit(
                s, study=ctx.study, rubric=rubric.name, name=ctx.audit_name, actor=DEMO_ACTOR
            )
        info = audit_overview(s, audit)
        out = {
            "rubric": rubric.name,
            "rubric_hash": rubric.content_hash,
            "audit": audit.name,
            "n_pairs": info["n_pairs"],
        }
    ctx.say(
        f"rubric {rubric.name} ({out['rubric_hash'][:12]}…); audit {ctx.audit_name}: "
        f"{info['n_pairs']} pairs in {info['n_questions']} questions"
    )
    return out


def ensure_people(ctx: DemoContext, emails: list[str]) -> None:
    """Each person's own Label Studio server: registered, and started (in parallel) when
    it is not running. Servers this run starts are remembered so Ctrl-C stops just those."""

    people = people_from_settings(ctx.cfg)
    todo = []
    for email in emails:
        person = people.get(email) or people.add(email)
        if not people.status(person).healthy:
            todo.append(person)
    if not todo:
        return
    who = f"{SIMULATED} " if ctx.simulate else ""
    ctx.say(
        f"Label Studio: starting one server per person ({who}"
        + ", ".join(p.email for p in todo)
        + "); a first start takes 20–90 s"
    )
    began = time.monotonic()
    ctx.started_people.extend(p.email for p in todo if p.managed)  # Ctrl-C stops them too
    with ThreadPoolExecutor(max_workers=len(todo)) as pool:
        for fut in [pool.submit(people.start, p) for p in todo]:
            fut.result()
    ctx.say(f"Label Studio: {len(todo)} server(s) started in {time.monotonic() - began:.0f} s")


def logins_path(ctx: DemoContext) -> Path:
    return ctx.cfg.data_dir / "demo-logins.json"


def people_accounts(ctx: DemoContext) -> dict[str, tuple[int, str, str | None]]:
    """The accounts for real people (A, B and the adjudicator), each on their own server:
    role → (user id, e-mail, password or None when the account was made outside the
    demo). Passwords are generated once and kept in ``<data_dir>/demo-logins.json``
    (mode 0600)."""

    ensure_people(ctx, list(PEOPLE.values()))
    people = people_from_settings(ctx.cfg)
    path = logins_path(ctx)
    saved: dict[str, Any] = json.loads(path.read_text()) if path.exists() else {}
    out = {}
    for role, email in PEOPLE.items():
        password = saved.get(email) or secrets.token_urlsafe(9)
        member = ensure_member(people, email, password)
        if member.new_password:
            saved[email] = password
        out[role] = (member.user_id, email, saved.get(email))
    path.parent.mkdir(parents=True, exist_ok=True)
    write_private(path, json.dumps(saved, indent=2).encode())
    return out


def annotators(ctx: DemoContext) -> dict[str, tuple[int, str]]:
    """role → (user id, e-mail) of A, B and the adjudicator (people, or SIMULATED)."""
    if ctx.simulate:
        ensure_people(ctx, list(SIM_ROLES.values()))
        accts = sim_accounts(ctx.cfg, logins_path(ctx))
        ctx.notes["sim_accounts"] = accts
        return {r: (a.user_id, a.email) for r, a in accts.items()}
    return {r: (uid, email) for r, (uid, email, _pw) in people_accounts(ctx).items()}


def step_push(ctx: DemoContext) -> dict[str, Any]:
    """Push the blinded pair tasks to A's and B's projects, each on their own server."""

    accts = annotators(ctx)
    # People label while the API serves (now or in a later `rcea demo --serve`): webhooks
    # deliver their labels live. Simulated labels arrive by sync; no webhook is needed.
    live = ctx.serve or not ctx.simulate
    with session_scope(ctx.engine()) as s:
        audit = get_audit(s, name=ctx.audit_name)
        out = push_audit(
            s,
            audit,
            people_from_settings(ctx.cfg),
            annotators={r: accts[r][1] for r in ("A", "B")},
            # the demo serves this data dir's receiver at that address afterwards (`--serve`)
            webhook=webhook_target(ctx.cfg, check=False) if live else None,
            actor=DEMO_ACTOR,
        )
    for role, info in out["projects"].items():
        who = f"{SIMULATED} " if ctx.simulate else ""
        ctx.say(
            f"{who}annotator {role} ({info['email']}): {info['url']}/projects/"
            f"{info['project_id']}, {info['n_tasks']} tasks"
        )
    return {"projects": out["projects"], "annotators": {r: e for r, (_i, e) in accts.items()}}


def step_calibration_push(ctx: DemoContext) -> dict[str, Any]:
    """Draw the judge-calibration sample (rubric plan) and push it to both annotators."""
    accts = annotators(ctx)
    sample = ctx.rcea(
        "judge",
        "calibrate",
        "sample",
        "--study",
        ctx.study,
        "--judge",
        JUDGE_NAME,
        "--rubric",
        ctx.sizes.rubric_name,
        "--name",
        ctx.calibration_name,
        log="calibration",
    )
    ctx.say(f"calibration sample {ctx.calibration_name}: {brief(sample)}")
    ctx.rcea(
        "judge",
        "calibrate",
        "push",
        "--calibration",
        ctx.calibration_name,
        "--annotator",
        accts["A"][1],
        "--annotator",
        accts["B"][1],
        "--no-receiver-check",  # the demo serves the receiver afterwards (`--serve`)
        log="calibration",
    )
    who = f"{SIMULATED} " if ctx.simulate else ""
    ctx.say(f"pushed to {who}annotators {accts['A'][1]}, {accts['B'][1]}")
    # "calibrated" needs the accepted-set check too (docs/validity-audit.md "Acceptance")
    accepted = ctx.rcea(
        "judge",
        "accepted",
        "sample",
        "--study",
        ctx.study,
        "--judge",
        JUDGE_NAME,
        "--rubric",
        ctx.sizes.rubric_name,
        "--size",
        str(ctx.sizes.accepted_size),
        "--seed",
        str(ctx.sizes.seed),
        "--name",
        ctx.accepted_name,
        log="calibration",
    )
    ctx.say(f"accepted-set check {ctx.accepted_name}: {brief(accepted)}")
    ctx.rcea(
        "judge",
        "accepted",
        "push",
        "--check",
        ctx.accepted_name,
        "--annotator-a",
        accts["A"][1],
        "--annotator-b",
        accts["B"][1],
        "--no-receiver-check",
        log="calibration",
    )
    return {"calibration": ctx.calibration_name, "accepted": ctx.accepted_name}


# --------------------------------------------------------------------------- simulation


def step_simulate_pairs(ctx: DemoContext) -> dict[str, Any]:
    """SIMULATED: the two noisy oracle annotators and the oracle adjudicator label the
    pair audit through the Label Studio API (see :mod:`rcea.app.demo.simulate`)."""

    if "sim_accounts" not in ctx.notes:
        annotators(ctx)
    return simulate_pair_audit(
        ctx.engine(),
        ctx.cfg,
        ctx.audit_name,
        ctx.notes["sim_accounts"],
        strategy_fn=load_strategy_fn(ORACLE),
        error_rate=ctx.sizes.annotator_error,
        seed=ctx.sizes.seed,
        echo=ctx.say,
    )


def step_simulate_validity(ctx: DemoContext) -> dict[str, Any]:
    """SIMULATED: the oracle validity annotators label the calibration sample through
    Label Studio (``rcea.study.validity_audit.simulate``), then sync and the held-out report (which
    records ``judge.calibration.completed`` once every held-out item is labelled)."""

    if "sim_accounts" not in ctx.notes:
        annotators(ctx)
    accts = ctx.notes["sim_accounts"]
    # the calibration and the accepted-set check of the same judge, labelled alike
    checks = {
        "validity calibration labels": ctx.calibration_name,
        "accepted-set check labels": ctx.accepted_name,
    }
    posted = {}
    with session_scope(ctx.engine()) as s:
        for what, name in checks.items():
            posted[what] = simulate_validity_labels(
                s,
                name,
                people_from_settings(ctx.cfg),
                {accts[r].email: accts[r].password for r in ("A", "B")},
                load_strategy_fn(VALIDITY_ORACLE),
                error_rate=ctx.sizes.validity_error,
                seed=ctx.sizes.seed,
            )
            append_event(
                s,
                actor=SIM_ACTOR,
                kind=SIM_EVENT,
                study_id=require_study(s, name=ctx.study).id,
                payload={"what": what, **posted[what]},
            )
    res = posted["validity calibration labels"]  # its per-person counts are printed below
    for role, r in sorted((k, v) for k, v in res.items() if isinstance(v, dict)):
        ctx.say(
            f"{SIMULATED} validity annotator {role} ({r['email']}): {r['posted']} label(s) "
            f"through the Label Studio API, {r['flipped']} deliberately wrong "
            f"(error rate {ctx.sizes.validity_error:.0%})"
        )
    calibration = ("--calibration", ctx.calibration_name)
    ctx.rcea("judge", "calibrate", "sync", *calibration, log="calibration")
    rep = ctx.rcea("judge", "calibrate", "report", *calibration, log="calibration")
    r = rep.get("report") or {}
    ctx.say(
        f"{SIMULATED} labels → calibration {rep.get('status')}: accuracy "
        f"{r.get('accuracy')}, accepted-valid precision {r.get('accepted_valid_precision')}"
    )
    if rep.get("status") != "complete":
        raise DemoStepError(f"the calibration report is {rep.get('status')}, not complete")
    check = ("--check", ctx.accepted_name)
    ctx.rcea("judge", "accepted", "sync", *check, log="calibration")
    acc_rep = ctx.rcea("judge", "accepted", "report", *check, log="calibration")
    ctx.say(
        f"{SIMULATED} labels → accepted-set check {acc_rep.get('status')}, outcome "
        f"{acc_rep.get('outcome')}"
    )
    return {
        "simulated": True,
        "status": rep.get("status"),
        "report": r,
        "accepted": acc_rep.get("outcome"),
    }


def step_gate(ctx: DemoContext) -> dict[str, Any]:
    """The final pair gate over the (SIMULATED) labels, recorded as a gate.final event."""

    with session_scope(ctx.engine()) as s:
        audit = get_audit(s, name=ctx.audit_name)
        res = decide_gate(s, audit, final=True, actor=f"{DEMO_ACTOR} ({SIMULATED} labels)")
    rep = res["report"]
    ctx.say(
        f"{SIMULATED} labels → final gate {res['status'].upper()}: human–human macro-F1 "
        f"{rep['human_human_macro_f1']:.3f}, automatic {rep['automatic_macro_f1']:.3f}, "
        f"gap {rep['gap']:+.3f}, coverage {rep['automatic_coverage']:.3f}"
    )
    settled = (ctx.state.result("simulate-pairs") or {}).get("settled_at_look")
    if rep.get("sequential") and settled:
        ctx.say(
            f"{SIMULATED} sequential plan: the gate was settled at look {settled} of "
            f"{rep['sequential']['n_looks']} (see the gate.interim events and the view's "
            "Audit page)"
        )
    return {"status": res["status"], "report": rep}


# --------------------------------------------------------------------------- report


def step_report(ctx: DemoContext) -> dict[str, Any]:
    """Build the report and write the records behind it (``records-final.jsonl``, see
    :mod:`rcea.app.demo.export`); when simulating, publish the bundle (the gates allow it
    only if the SIMULATED labels passed them) under ``<work>/bundles-SIMULATED/``."""

    out = ctx.work / ("report-SIMULATED.json" if ctx.simulate else "report.json")
    ctx.rcea("report", "build", "--study", ctx.study, "--out", str(out), log="report")
    built = json.loads(out.read_text(encoding="utf-8"))
    pair = built["audits"]["pair"]
    law = built.get("entropy_law")  # docs/estimators.md item 18: say what the study finds
    if law:
        for line in law_summary(law):
            ctx.say(line)
        ctx.say(law["comparison"]["sentence"])
        if law.get("ordering_sentence"):
            ctx.say(law["ordering_sentence"])
    records = ctx.work / "records-final.jsonl"
    n = export_records(
        ctx.engine(), study=ctx.study, partition_id=pair.get("partition_id"), path=records
    )
    ctx.say(f"report {out} (pair audit {pair['status']}); {n} records in {records}")
    result: dict[str, Any] = {"report": str(out), "records": str(records)}
    if not ctx.simulate:
        return result
    parent = ctx.work / "bundles-SIMULATED"
    parent.mkdir(parents=True, exist_ok=True)
    (parent / "SIMULATED.txt").write_text(
        f"{SIMULATED}: every bundle in this directory rests on labels made by simulated "
        "annotators (oracles with seeded noise, `rcea demo --simulate-annotators`), not by "
        "people. See the `demo.simulated` events of the study.\n",
        encoding="utf-8",
    )
    pub = ctx.rcea(
        "report",
        "publish",
        "--study",
        ctx.study,
        "--out",
        str(parent),
        "--actor",
        f"{DEMO_ACTOR} ({SIMULATED} annotators)",
        log="report",
    )
    result.update(bundle=pub["bundle"], scope=pub.get("scope"), simulated=True)
    ctx.say(f"{SIMULATED} published bundle ({pub.get('scope')}): {pub['bundle']}")
    return result
