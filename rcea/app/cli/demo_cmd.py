"""``rcea demo``: the embedded RLVR study end to end on a fresh machine (``make demo``).

Build the tiny base policy, train the six objectives, probe base + milestones, ingest,
judge and run the codebook cycle with the toy oracles, freeze the rubric, draw the pair
audit, push it (and the validity calibration sample) to Label Studio, optionally let
SIMULATED annotators label everything and publish the bundle, then serve Label Studio,
the API and the view until Ctrl-C. Steps are resumable (:mod:`rcea.app.demo.steps`).

``rcea demo --sample`` keeps the earlier, cheap demo: the bundled sample study and its
pair audit.
"""

from __future__ import annotations

import json
import secrets
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import typer

from rcea.annotation.people import people_from_settings
from rcea.app.cli.common import engine, fail, settings
from rcea.app.demo.audits import PEOPLE, ensure_people, logins_path, people_accounts
from rcea.app.demo.config import QUICK, SIZES, with_train_seeds
from rcea.app.demo.context import DemoContext, DemoStepError
from rcea.app.demo.simulate import SIM_ROLES
from rcea.app.demo.state import DemoState, DemoStateError
from rcea.app.demo.steps import plan, run_steps
from rcea.pipeline.safety import write_private
from rcea.pipeline.sample_study import write_sample_study
from rcea.study import logins as researcher_logins
from rcea.study.labelling import webhook_target
from rcea.study.pair_audit.freeze import freeze_partition_from_modes, freeze_rubric
from rcea.study.pair_audit.push import push_audit
from rcea.study.pair_audit.sampling import audit_overview, draw_audit, find_audit, get_audit
from rcea.study.progress import Where, read_progress, walkthrough
from rcea.study.records.ingest import ingest_file
from rcea.study.store import open_store, require_study, session_scope, study_summary
from rcea.study.store.repository import get_study

DEMO_RUBRIC = Path(__file__).resolve().parents[2] / "audits" / "demo_rubric.toml"
DEMO_ACTOR = "rcea-demo"
BANNER = (
    "SIMULATED RUN: the pair-audit annotators, the adjudicator and the validity labels are "
    "oracles with seeded noise, not people. Nothing here is a human judgment."
)


def demo(
    tctx: typer.Context,
    quick: bool = typer.Option(
        False, "--quick", help="small sizes (< 5 min on 2 cores; the CI smoke test)"
    ),
    simulate: bool = typer.Option(
        False,
        "--simulate-annotators",
        help="SIMULATED oracle annotators label through the Label Studio API, so the run "
        "reaches a final gate and a published bundle without people",
    ),
    serve: bool = typer.Option(
        True, "--serve/--no-serve", help="then serve Label Studio, the API and the view"
    ),
    fresh: bool = typer.Option(
        False, "--fresh", help="forget finished steps and start over under a new study name"
    ),
    sample: bool = typer.Option(
        False, "--sample", help="the bundled sample study instead (no training)"
    ),
    seed: int = typer.Option(0, help="seed of the generated sample study (--sample)"),
    train_seeds: int = typer.Option(
        1,
        "--train-seeds",
        help="train the first scale's grpo run at this many training seeds (0..N-1; 1: "
        "one unseeded run, the default), probe each and put them in the study, so the "
        "report's replicates section aggregates across seeds; its own study "
        "(<study>-seedsN); costs N-1 more training runs and their probing",
    ),
) -> None:
    """The embedded study end to end: train, probe, judge, codebook, audits, report.

    Each step prints its number, name and duration; a re-run skips finished steps (state
    in <data_dir>/demo/<study>/state.json), --fresh starts over under a new study name.
    With --serve (the default; what `make demo` runs) Label Studio, `rcea serve` and
    `rcea view` run until Ctrl-C, which stops every process the demo started and nothing
    else. `rcea demo status` prints the walkthrough per role at any time."""
    if tctx.invoked_subcommand is not None:
        return
    if sample:
        _sample_demo(seed=seed, serve=serve)
        return

    if train_seeds < 1:
        fail(f"--train-seeds must be >= 1 (1: one unseeded run), got {train_seeds}")
    sizes = with_train_seeds(QUICK if quick else SIZES["default"], train_seeds)
    cfg = settings()
    cfg.ensure_data_dir()
    if simulate:
        typer.echo(BANNER)
    try:
        ctx = demo_context(cfg, sizes, simulate=simulate, serve=serve, fresh=fresh)
    except DemoStateError as exc:
        fail(str(exc))

    began = time.monotonic()
    typer.echo(
        f"rcea demo ({sizes.name} size) — study {ctx.study}, work dir {ctx.work}"
        + (f" — {sizes.train_seeds} training seeds of one run" if sizes.replicated else "")
        + (" — SIMULATED annotators" if simulate else "")
    )
    procs: list[subprocess.Popen[bytes]] = []
    code = 0
    previous = signal.signal(signal.SIGTERM, _raise_interrupt)  # SIGTERM stops like Ctrl-C
    try:
        status = run_steps(ctx, plan(simulate=simulate))
        _summary(ctx, status, time.monotonic() - began)
        if serve:
            _serve(ctx, procs)
        else:
            _print_walkthrough(ctx.cfg, ctx.state)
    except KeyboardInterrupt:
        typer.echo("interrupted: stopping what the demo started (finished steps are kept)")
        code = 130
    except DemoStepError as exc:
        typer.echo(f"error: {exc}", err=True)
        code = 1
    finally:
        _stop(ctx, procs)
        signal.signal(signal.SIGTERM, previous)
    if code:
        raise typer.Exit(code)


def _raise_interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def demo_context(cfg: Any, sizes: Any, *, simulate: bool, serve: bool, fresh: bool) -> Any:
    """The state of this size/simulation (new, resumed, or fresh under a new name)."""

    base = sizes.study_name(simulate=simulate)
    work = cfg.data_dir / "demo" / base
    state_path = work / "state.json"
    if fresh and work.exists():
        shutil.rmtree(work)
    state = DemoState.load(state_path)
    if state is not None and state.sizes:
        now = json.loads(json.dumps(sizes.to_dict()))
        changed = sorted(k for k in {*now, *state.sizes} if now.get(k) != state.sizes.get(k))
        if changed:
            raise DemoStateError(
                f"{state_path}: made with other {sizes.name} sizes (changed: "
                f"{', '.join(changed)}), e.g. before the demo trained two policy scales; "
                "rerun with --fresh to start over"
            )
    if state is None:
        with session_scope(open_store(cfg)) as s:
            name, n = base, 1
            while get_study(s, name=name) is not None:
                n += 1
                name = f"{base}-{n}"
        if name != base:
            typer.echo(
                f"study {base} is already in the store (frozen records are never deleted): "
                f"this run uses {name}"
            )
        state = DemoState(
            path=state_path,
            size=sizes.name,
            simulate=simulate,
            study=name,
            seed=sizes.seed,
            sizes=sizes.to_dict(),
        )
        work.mkdir(parents=True, exist_ok=True)
        state.save()
    return DemoContext(
        cfg=cfg,
        sizes=sizes,
        simulate=simulate,
        serve=serve,
        state=state,
        work=work,
        echo=lambda line: typer.echo(line),
    )


def _summary(ctx: Any, status: dict[str, str], seconds: float) -> None:
    """The final lines: what finished, gate, calibration, bundle, logins."""
    sim = "SIMULATED " if ctx.simulate else ""
    unfinished = [k for k, v in status.items() if v not in ("done", "done-earlier")]
    typer.echo("")
    typer.echo(f"demo summary ({ctx.sizes.name} size, {seconds:.0f} s this run)")
    typer.echo(f"  study           {ctx.study}")
    gate = ctx.state.result("gate")
    typer.echo(
        f"  pair gate       {sim}{gate['status']}"
        if gate
        else "  pair gate       pending (the walkthrough says what comes next)"
    )
    cal = ctx.state.result("simulate-validity")
    typer.echo(f"  calibration     {sim}completed" if cal else "  calibration     pending")
    rep = ctx.state.result("report")
    if rep.get("bundle"):
        typer.echo(f"  bundle          {sim}{rep['bundle']}")
    elif rep:
        typer.echo(f"  report          {rep['report']} (not published)")
    if unfinished:
        typer.echo(f"  unfinished      {', '.join(unfinished)}")
    if ctx.simulate:
        typer.echo(f"  {BANNER}")


def _logins(ctx: Any) -> dict[str, str | None]:

    path = logins_path(ctx)
    saved: dict[str, Any] = json.loads(path.read_text()) if path.exists() else {}
    if ctx.simulate:
        return {e["email"]: e["password"] for e in saved.get("simulated", {}).values()}

    return {email: saved.get(email) for email in PEOPLE.values()}


def _serve(ctx: Any, procs: list[subprocess.Popen[bytes]]) -> None:
    """Label Studio (reused or started), `rcea serve` and `rcea view` (appended to
    ``procs`` as they start, for :func:`_stop`); prints the URLs and logins, then waits
    until Ctrl-C or until one of them exits."""

    cfg = ctx.cfg
    logins = _logins(ctx)
    ensure_people(ctx, list(logins))
    people = people_from_settings(cfg)
    exe = str(Path(sys.executable).parent / "rcea")
    procs.append(subprocess.Popen([exe, "serve"]))
    procs.append(subprocess.Popen([exe, "view", "--port", str(cfg.view_port)]))
    sim = "SIMULATED " if ctx.simulate else ""
    typer.echo("")
    typer.echo(
        f"Label Studio  one server per person (logins also in {cfg.data_dir / 'demo-logins.json'}):"
    )
    for email, password in logins.items():
        shown = password or "(account made outside the demo: password unknown)"
        person = people.require(email)
        typer.echo(f"  {sim}{email}: {person.url}/user/login/  password {shown}")
    typer.echo(
        f"API           http://{cfg.api_host}:{cfg.api_port}/openapi.json "
        f"(bearer token in {cfg.data_dir / 'api-token'})"
    )
    typer.echo(f"view          http://127.0.0.1:{cfg.view_port}")
    typer.echo(f"  {ensure_demo_view_login(cfg)}")
    if ctx.state.size != "sample":  # the --sample demo has no calibration nor gate steps
        typer.echo("")
        _print_walkthrough(cfg, ctx.state)
    typer.echo("")
    typer.echo("Ctrl-C stops every process the demo started")
    while all(p.poll() is None for p in procs):
        time.sleep(0.5)
    typer.echo("a served process exited: stopping the others")


def ensure_demo_view_login(cfg: Any) -> str:
    """The demo's researcher account of the view: made once (``demo-researcher``, with a
    generated password kept in ``<data_dir>/demo-view-login.json``, mode 0600) unless
    researcher accounts exist already."""
    saved = cfg.data_dir / "demo-view-login.json"
    if saved.exists():
        login = json.loads(saved.read_text())
        return f"researcher login: {login['name']} / {login['password']}"
    accounts = researcher_logins.logins_path(cfg)
    if researcher_logins.researchers(accounts):
        return "researcher login: your account (`rcea view researchers` lists them)"
    login = {"name": "demo-researcher", "password": secrets.token_urlsafe(12)}
    researcher_logins.add_researcher(accounts, login["name"], login["password"])
    write_private(saved, (json.dumps(login) + "\n").encode())
    return f"researcher login: {login['name']} / {login['password']}"


def _stop(ctx: Any, procs: list[subprocess.Popen[bytes]]) -> None:
    """Stop what this run started: the API and view, and Label Studio only if we started
    it (a server the settings pointed at and that was running stays up)."""
    for p in procs:
        if p.poll() is None:
            p.terminate()
    for p in procs:
        try:
            p.wait(timeout=15)
        except subprocess.TimeoutExpired:
            p.kill()
    if ctx.started_people:
        people = people_from_settings(ctx.cfg)
        stopped = [e for e in ctx.started_people if people.stop(people.require(e))]
        if stopped:
            typer.echo(
                f"stopped {len(stopped)} Label Studio server(s) started by this demo "
                "(`rcea labelstudio start` brings them back with the same data)"
            )


# --------------------------------------------------------------------------- --sample


def _sample_demo(*, seed: int, serve: bool) -> None:
    """The bundled sample study (1,920 generated records) and its 48-pair audit."""

    study = "sample"
    cfg = settings()
    cfg.ensure_data_dir()
    path = write_sample_study(cfg.data_dir / "demo" / f"{study}-seed{seed}.jsonl", seed=seed)
    typer.echo(f"[1/4] wrote sample records to {path}")
    eng = engine()
    result = ingest_file(
        eng,
        path,
        study=study,
        artifacts_dir=cfg.artifacts_dir,
        data_dir=cfg.data_dir,
        progress=False,
    )
    typer.echo(f"[2/4] {result.summary()}")
    with session_scope(eng) as session:
        data = study_summary(session, study_id=require_study(session, name=study).id)  # type: ignore[arg-type]  # a stored row's id is set: SQLModel types every primary key Optional
    for g in data["groups"]:
        acc = g["n_success"] / g["n"] if g["n"] else 0.0
        typer.echo(
            f"      {g['run']:<10} step {g['step']:>4}: {g['n']:>4} samples, accuracy {acc:.2f}"
        )
    audit_name = _draw_sample_audit(eng, study)
    if serve:
        _serve_sample(cfg, audit_name)


def _draw_sample_audit(eng: Any, study: str) -> str:
    """Freeze the sample rubric and the partition, and draw the audit once (idempotent)."""

    name = f"{study}-demo-audit"
    with session_scope(eng) as s:
        rubric, _ = freeze_rubric(s, path=DEMO_RUBRIC, actor=DEMO_ACTOR)
        part, _ = freeze_partition_from_modes(s, study=study, actor=DEMO_ACTOR)
        audit = find_audit(s, name=name)
        if audit is None:
            audit = draw_audit(s, study=study, rubric=rubric.name, name=name, actor=DEMO_ACTOR)
        info = audit_overview(s, audit)
    typer.echo(
        f"[3/4] rubric {rubric.name} v{rubric.version} ({rubric.content_hash[:12]}…), "
        f"partition {part.content_hash[:12]}… frozen"
    )
    typer.echo(f"[4/4] audit {name}: {info['n_pairs']} pairs in {info['n_questions']} questions")
    return name


def _serve_sample(cfg: Any, audit_name: str) -> None:
    """Push the sample audit to two people and serve everything until Ctrl-C."""

    ctx = DemoContext(
        cfg=cfg,
        sizes=QUICK,
        simulate=False,
        serve=True,
        state=DemoState(
            path=cfg.data_dir / "demo" / "sample-state.json",
            size="sample",
            simulate=False,
            study="sample",
            seed=0,
        ),
        work=cfg.data_dir / "demo",
        echo=lambda line: typer.echo(line),
    )
    procs: list[subprocess.Popen[bytes]] = []
    try:
        accounts = people_accounts(ctx)
        with session_scope(engine()) as s:
            audit = get_audit(s, name=audit_name)
            push_audit(
                s,
                audit,
                people_from_settings(cfg),
                annotators={r: accounts[r][1] for r in ("A", "B")},
                webhook=webhook_target(cfg),
                actor=DEMO_ACTOR,
            )
        _serve(ctx, procs)
    except KeyboardInterrupt:
        pass
    finally:
        _stop(ctx, procs)


# --------------------------------------------------------------------------- status

demo_app = typer.Typer(rich_markup_mode=None)
demo_app.callback(invoke_without_command=True)(demo)


@demo_app.command("status")
def status_cmd(
    study: str = typer.Option(
        None, "--study", help="the demo study (default: the most recently run demo)"
    ),
) -> None:
    """The walkthrough per role (annotator A, annotator B, the adjudicator, the
    researcher) and the researcher's next command, read from the store."""

    cfg = settings()
    states = []
    for path in (cfg.data_dir / "demo").glob("*/state.json"):
        try:
            st = DemoState.load(path)
        except DemoStateError as exc:
            fail(str(exc))
        if st is not None and (study is None or st.study == study):
            states.append((path.stat().st_mtime, str(path), st))
    if not states:
        fail(
            f"no demo {'study ' + study + ' ' if study else ''}under {cfg.data_dir / 'demo'}: "
            "run `rcea demo` (or `make demo`) first"
        )
    _print_walkthrough(cfg, max(states)[2])


def _print_walkthrough(cfg: Any, state: Any) -> None:
    """The walkthrough of ``state``'s study (see :mod:`rcea.study.progress`)."""

    roles = SIM_ROLES if state.simulate else PEOPLE
    people = people_from_settings(cfg)
    servers = {e: p.url for e in roles.values() if (p := people.get(e)) is not None}
    view_file = cfg.data_dir / "demo-view-login.json"
    where = Where(
        people=dict(roles),
        servers=servers,
        logins_file=(cfg.data_dir / "demo-logins.json").resolve(),
        view_url=f"http://127.0.0.1:{cfg.view_port}",
        view_login=str(view_file.resolve()) if view_file.exists() else "`rcea view add-researcher`",
        simulated=state.simulate,
    )
    with session_scope(open_store(cfg)) as s:
        progress = read_progress(
            s,
            study=state.study,
            audit=f"{state.study}-pairs",
            calibration=f"{state.study}-validity",
        )
    for line in walkthrough(progress, where):
        typer.echo(line)
    if shutil.which("rcea") is None:
        typer.echo(
            f"  (rcea is {Path(sys.executable).parent / 'rcea'}: `source .venv/bin/activate` "
            "or `make shell` puts it on PATH)"
        )


def register(app: typer.Typer) -> None:
    app.add_typer(demo_app, name="demo")
