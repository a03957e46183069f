"""``rcea codebook ...``: the question-local codebook cycle (induce → merge → freeze →
assign ×2 → reconcile → extend → export). Every automatic stage is resumable: rerun the
same command after an interruption and it skips finished batches."""

from __future__ import annotations

import signal
from collections.abc import Callable
from contextlib import suppress
from pathlib import Path
from typing import Any

import typer

from rcea.app.cli import exit_codes
from rcea.app.cli.common import (
    domain_errors,
    emit,
    engine,
    settings,
    store_session,
    warn_if_llm_unreachable,
)
from rcea.app.cli.options import (
    ACTOR_OPTION,
    CODEBOOK_THRESHOLD_OPTION,
    JSON_OPTION,
    STUDY_OPTION,
    backend_options,
)
from rcea.study.codebook import (
    BackendOptions,
    assign,
    cycle_status,
    decide_extension,
    edit_draft,
    exclude_trajectory,
    export_partition,
    freeze_codebooks,
    induce,
    make_backend,
    merge,
    reconcile,
    request_extensions,
    researcher_queue,
    resolve_dispute,
)
from rcea.study.codebook.approval import approve_extensions
from rcea.study.codebook.cycle import run_cycle
from rcea.study.codebook.review import codebook_list
from rcea.study.settings import actor_name
from rcea.study.store import require_study, session_scope
from rcea.study.store.repository import trajectories_by_id

codebook_app = typer.Typer(
    rich_markup_mode=None,
    help="Question-local codebooks: induction, merge, freeze, double assignment, "
    "reconciliation, extension review, export of the partition.",
    no_args_is_help=True,
)
edit_app = typer.Typer(
    rich_markup_mode=None,
    help="Edit a question's draft codebook (before it is frozen).",
    no_args_is_help=True,
)
codebook_app.add_typer(edit_app, name="edit")

QUESTION_OPTION = typer.Option(None, "--question", help="only this question (repeatable)")
#: ``rcea codebook run`` exit codes (docs/codebook.md).
EXIT_UNANSWERED = exit_codes.CODEBOOK_UNANSWERED
EXIT_RESEARCHER = exit_codes.CODEBOOK_RESEARCHER


@codebook_app.callback()
def _graceful_sigterm(ctx: typer.Context) -> None:
    """Question-local codebooks: induction, merge, freeze, double assignment,
    reconciliation, extension review, export of the partition.

    SIGTERM stops a stage like Ctrl-C: no new call starts, the calls in flight finish and
    are recorded (they are paid for), then the command exits; rerun it to resume.
    """

    def stop(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    with suppress(ValueError):  # not the main thread (an embedding test runner)
        previous = signal.signal(signal.SIGTERM, stop)
        ctx.call_on_close(lambda: signal.signal(signal.SIGTERM, previous))


def _print_report(report: Any, as_json: bool) -> None:
    r = report.to_dict()
    warn_if_llm_unreachable(r.get("usage") or {})

    def show() -> None:
        typer.echo(
            f"{r['stage']}: {r['n_questions']} question(s), {r['n_batches']} batch(es) — "
            f"{r['n_run']} run now ({r['n_retried']} of them retried after an earlier failure), "
            f"{r['n_skipped']} already done, {r['n_failed']} failed"
        )
        u = r["usage"]
        if u.get("requests") or u.get("cache_hits"):
            typer.echo(
                f"  LLM: {u['requests']} request(s), {u['completed']} completed, "
                f"{u['cache_hits']} from cache, {u['retries']} retried (429: {u['rate_limited']}, "
                f"5xx: {u['server_errors']}, timeouts: {u['timeouts']}, invalid: "
                f"{u['invalid_replies']}), {u['failures']} given up; tokens "
                f"{u['prompt_tokens']} in / {u['completion_tokens']} out, ${u['cost_usd']:.4f}"
            )
        for key, value in r["details"].items():
            if value:
                typer.echo(f"  {key}: {value}")

    emit(r, as_json, show)


def _stage(
    stage: Callable[..., Any],
    study: str,
    question: list[str],
    actor: str | None,
    as_json: bool,
    llm: BackendOptions,
    **args: Any,
) -> None:
    """Run one LLM stage (induce, merge, assign, reconcile) on the configured backend and
    print its report."""
    with domain_errors(as_json):
        be = make_backend(settings(), llm)
        report = stage(
            engine(),
            study=study,
            backend=be,
            actor=actor_name(actor),
            concurrency=llm.concurrency,
            questions=question or None,
            **args,
        )
    _print_report(report, as_json)


@codebook_app.command("induce")
@backend_options
def induce_cmd(
    study: str = STUDY_OPTION,
    question: list[str] = QUESTION_OPTION,
    batch_size: int = typer.Option(12, "--batch-size", min=1, help="trajectories per chunk"),
    sample: int = typer.Option(
        None, "--sample", min=1, help="at most this many trajectories per question"
    ),
    actor: str = ACTOR_OPTION,
    as_json: bool = JSON_OPTION,
    *,
    llm: BackendOptions,
) -> None:
    """Candidate modes from blinded, shuffled chunks of each question's accepted
    trajectories (questions are never mixed)."""

    args = {"batch_size": batch_size, "seed": llm.seed, "sample_per_question": sample}
    _stage(induce, study, question, actor, as_json, llm, **args)


@codebook_app.command("merge")
@backend_options
def merge_cmd(
    study: str = STUDY_OPTION,
    question: list[str] = QUESTION_OPTION,
    redo: bool = typer.Option(False, "--redo", help="re-merge questions with an unfrozen draft"),
    actor: str = ACTOR_OPTION,
    as_json: bool = JSON_OPTION,
    *,
    llm: BackendOptions,
) -> None:
    """Merge each question's candidates into a draft codebook."""

    _stage(merge, study, question, actor, as_json, llm, redo=redo)


@codebook_app.command("show")
def show_cmd(
    study: str = STUDY_OPTION,
    question: list[str] = QUESTION_OPTION,
    as_json: bool = JSON_OPTION,
) -> None:
    """Each question's codebook: the latest frozen version, else the draft."""
    with store_session(as_json) as s:
        st = require_study(s, name=study)
        rows = codebook_list(s, study_id=st.id, questions=question or None)  # type: ignore[arg-type]  # a stored row's id is set: SQLModel types every primary key Optional

    def show() -> None:
        for r in rows:
            head = (
                f"v{r['version']} sha256 {r['content_hash'][:12]}… ({r['reason']})"
                if r["status"] == "frozen"
                else "draft (not frozen)"
            )
            typer.echo(f"{r['question_id']}: {head}")
            for m in r["modes"]:
                typer.echo(f"  {m['id']}  {m['name']} — {m.get('criterion', '')}")

    emit(rows, as_json, show)


def _edit(study: str, question: str, op: str, actor: str | None, **args: Any) -> None:

    with store_session() as s:
        draft = edit_draft(
            s, study=study, question_id=question, op=op, actor=actor_name(actor), **args
        )
        modes = list(draft.modes)
    typer.echo(f"{question}: draft now has {len(modes)} mode(s)")
    for m in modes:
        typer.echo(f"  {m['id']}  {m['name']} — {m.get('criterion', '')}")


EDIT_QUESTION = typer.Option(..., "--question", help="question id")


@edit_app.command("rename")
def edit_rename(
    mode: str = typer.Argument(..., help="mode id, e.g. m2"),
    study: str = STUDY_OPTION,
    question: str = EDIT_QUESTION,
    name: str = typer.Option(None, "--name"),
    criterion: str = typer.Option(None, "--criterion"),
    actor: str = ACTOR_OPTION,
) -> None:
    """Rename a mode and/or rewrite its inclusion criterion."""
    _edit(study, question, "rename", actor, mode=mode, name=name, criterion=criterion)


@edit_app.command("merge")
def edit_merge(
    mode: str = typer.Argument(..., help="the mode absorbed"),
    into: str = typer.Argument(..., help="the mode that stays"),
    study: str = STUDY_OPTION,
    question: str = EDIT_QUESTION,
    name: str = typer.Option(None, "--name"),
    criterion: str = typer.Option(None, "--criterion"),
    actor: str = ACTOR_OPTION,
) -> None:
    """Merge MODE into INTO (same method under different wording)."""
    _edit(study, question, "merge", actor, mode=mode, into=into, name=name, criterion=criterion)


@edit_app.command("split")
def edit_split(
    mode: str = typer.Argument(..., help="the mode to split"),
    study: str = STUDY_OPTION,
    question: str = EDIT_QUESTION,
    name: str = typer.Option(..., "--name", help="name of the new mode"),
    criterion: str = typer.Option(..., "--criterion", help="criterion of the new mode"),
    rest: str = typer.Option(None, "--rest-criterion", help="new criterion of MODE"),
    actor: str = ACTOR_OPTION,
) -> None:
    """Carve a new mode out of MODE."""
    _edit(
        study,
        question,
        "split",
        actor,
        mode=mode,
        name=name,
        criterion=criterion,
        criterion_rest=rest,
    )


@edit_app.command("add")
def edit_add(
    study: str = STUDY_OPTION,
    question: str = EDIT_QUESTION,
    name: str = typer.Option(..., "--name"),
    criterion: str = typer.Option(..., "--criterion"),
    actor: str = ACTOR_OPTION,
) -> None:
    """Add a mode (starts a draft if the question has none)."""
    _edit(study, question, "add", actor, name=name, criterion=criterion)


@edit_app.command("drop")
def edit_drop(
    mode: str = typer.Argument(...),
    study: str = STUDY_OPTION,
    question: str = EDIT_QUESTION,
    actor: str = ACTOR_OPTION,
) -> None:
    """Remove a mode from the draft."""
    _edit(study, question, "drop", actor, mode=mode)


@codebook_app.command("freeze")
def freeze_cmd(
    study: str = STUDY_OPTION,
    question: list[str] = QUESTION_OPTION,
    actor: str = ACTOR_OPTION,
    as_json: bool = JSON_OPTION,
) -> None:
    """Freeze every unfrozen draft as version 1 (content-hashed; immutable afterwards)."""

    with store_session(as_json) as s:
        made = [
            {"question_id": v.question_id, "version": v.version, "content_hash": v.content_hash}
            for v in freeze_codebooks(
                s, study=study, actor=actor_name(actor), questions=question or None
            )
        ]

    def show() -> None:
        typer.echo(f"froze {len(made)} codebook(s)")
        for v in made:
            typer.echo(f"  {v['question_id']} v{v['version']} sha256 {v['content_hash']}")

    emit(made, as_json, show)


@codebook_app.command("assign")
@backend_options
def assign_cmd(
    study: str = STUDY_OPTION,
    question: list[str] = QUESTION_OPTION,
    batch_size: int = typer.Option(10, "--batch-size", min=1, help="trajectories per call"),
    actor: str = ACTOR_OPTION,
    as_json: bool = JSON_OPTION,
    *,
    llm: BackendOptions,
) -> None:
    """Assign every accepted trajectory twice (independent shuffles and batchings) against
    its question's latest frozen codebook."""

    _stage(assign, study, question, actor, as_json, llm, batch_size=batch_size, seed=llm.seed)


@codebook_app.command("reconcile")
@backend_options
def reconcile_cmd(
    study: str = STUDY_OPTION,
    question: list[str] = QUESTION_OPTION,
    threshold: float = CODEBOOK_THRESHOLD_OPTION,
    batch_size: int = typer.Option(8, "--batch-size", min=1, help="trajectories per call"),
    actor: str = ACTOR_OPTION,
    as_json: bool = JSON_OPTION,
    *,
    llm: BackendOptions,
) -> None:
    """Disputes (passes disagree, NEW/NONE/invalid, low confidence) → LLM arbitration →
    researcher queue for what arbitration cannot settle."""

    args = {"threshold": threshold, "batch_size": batch_size, "seed": llm.seed}
    _stage(reconcile, study, question, actor, as_json, llm, **args)


def _texts(study: str, ids: list[str]) -> dict[str, str]:

    with session_scope(engine()) as s:
        st = require_study(s, name=study)
        rows = trajectories_by_id(s, study_id=st.id, ids=ids)  # type: ignore[arg-type]  # a stored row's id is set: SQLModel types every primary key Optional
    return {tid: t.text for tid, t in rows.items()}


def _indent(text: str, prefix: str = "    | ") -> str:
    return "\n".join(prefix + line for line in text.splitlines())


@codebook_app.command("queue")
def queue_cmd(study: str = STUDY_OPTION, as_json: bool = JSON_OPTION) -> None:
    """The researcher queue: disputes arbitration could not settle (texts only — no
    trajectory ids or provenance)."""

    with domain_errors(as_json):
        with session_scope(engine()) as s:
            rows = [
                {
                    "dispute_id": d.id,
                    "question_id": d.question_id,
                    "reasons": d.reasons,
                    "arbitration": d.arbitration_label,
                    "arbitration_confidence": d.arbitration_confidence,
                    "_tid": d.trajectory_id,
                }
                for d in researcher_queue(s, study=study)
            ]
        texts = _texts(study, [r["_tid"] for r in rows])  # type: ignore[misc]  # the queue rows are dicts of mixed values; _tid holds the trajectory id (str)
    for r in rows:
        r["text"] = texts.get(r.pop("_tid"), "")  # type: ignore[arg-type]  # the queue rows are dicts of mixed values; _tid holds the trajectory id (str)

    def show() -> None:
        typer.echo(f"{len(rows)} trajectory(ies) wait for a researcher")
        for r in rows:
            conf = r["arbitration_confidence"]
            typer.echo(
                f"#{r['dispute_id']}  {r['question_id']}  {', '.join(r['reasons'])}; arbitration: "  # type: ignore[arg-type]  # the queue rows are dicts of mixed values; reasons is a list of str
                f"{r['arbitration']}" + (f" ({conf:.2f})" if conf is not None else "")
            )
            typer.echo(_indent(r["text"]))  # type: ignore[arg-type]  # the queue rows are dicts of mixed values; text is a str
        if rows:
            typer.echo(
                "resolve: rcea codebook resolve ID --study S (--mode mN | --uncertain | "
                "--new NAME --criterion TEXT)"
            )

    emit(rows, as_json, show)


@codebook_app.command("resolve")
def resolve_cmd(
    dispute: int = typer.Argument(..., help="dispute id from `rcea codebook queue`"),
    study: str = STUDY_OPTION,
    mode: str = typer.Option(None, "--mode", help="an existing mode id"),
    uncertain: bool = typer.Option(False, "--uncertain", help="no mode fits; stays uncertain"),
    new: str = typer.Option(None, "--new", help="propose a new mode with this name"),
    criterion: str = typer.Option("", "--criterion", help="criterion of the proposed mode"),
    actor: str = ACTOR_OPTION,
) -> None:
    """Settle one queued trajectory."""

    with store_session() as s:
        d = resolve_dispute(
            s,
            study=study,
            dispute_id=dispute,
            actor=actor_name(actor),
            mode=mode,
            uncertain=uncertain,
            new_name=new,
            new_criterion=criterion,
        )
        status, label = d.status, d.final_label
    typer.echo(f"dispute #{dispute}: {status}" + (f" → {label}" if label else ""))


def _extension_dict(e: Any, texts: dict[str, str], n_examples: int) -> dict[str, Any]:
    return {
        "extension_id": e.id,
        "question_id": e.question_id,
        "status": e.status,
        "base_version_id": e.base_version_id,
        "new_version_id": e.new_version_id,
        "proposals": [
            {
                "name": p["name"],
                "criterion": p.get("criterion", ""),
                "n_trajectories": len(p.get("trajectory_ids", [])),
                "examples": [texts.get(t, "") for t in p.get("trajectory_ids", [])[:n_examples]],
            }
            for p in e.proposals
        ],
    }


@codebook_app.command("extend")
def extend_cmd(
    study: str = STUDY_OPTION,
    examples: int = typer.Option(2, "--examples", help="example texts shown per proposal"),
    actor: str = ACTOR_OPTION,
    as_json: bool = JSON_OPTION,
) -> None:
    """Group provisional NEW assignments into question-level extension requests and list
    the pending ones for review."""

    with domain_errors(as_json):
        with session_scope(engine()) as s:
            pending = request_extensions(s, study=study, actor=actor_name(actor))
            ids = [t for e in pending for p in e.proposals for t in p.get("trajectory_ids", [])]
            snapshot = [(e, list(e.proposals)) for e in pending]
        texts = _texts(study, ids)
        rows = [_extension_dict(e, texts, examples) for e, _ in snapshot]

    def show() -> None:
        typer.echo(f"{len(rows)} pending extension request(s)")
        for r in rows:
            typer.echo(f"#{r['extension_id']}  {r['question_id']}")
            for p in r["proposals"]:
                typer.echo(
                    f"  + {p['name']} ({p['n_trajectories']} trajectories): {p['criterion']}"
                )
                for text in p["examples"]:
                    typer.echo(_indent(text))
        if rows:
            typer.echo("review: rcea codebook approve ID --study S | rcea codebook reject ID ...")

    emit(rows, as_json, show)


@codebook_app.command("approve")
@backend_options
def approve_cmd(
    extension: int = typer.Argument(..., help="extension request id"),
    study: str = STUDY_OPTION,
    reason: str = typer.Option("", "--reason", help="recorded with the new version"),
    reassign: bool = typer.Option(
        True, "--reassign/--no-reassign", help="assign + reconcile the affected trajectories"
    ),
    threshold: float = CODEBOOK_THRESHOLD_OPTION,
    actor: str = ACTOR_OPTION,
    as_json: bool = JSON_OPTION,
    *,
    llm: BackendOptions,
) -> None:
    """Approve a request: refreeze the question's codebook as a new version (parent and
    reason recorded), then reassign only that question's affected trajectories."""

    with domain_errors(as_json):
        be = make_backend(settings(), llm) if reassign else None
        res = approve_extensions(
            engine(),
            study=study,
            extension_ids=[extension],
            actor=actor_name(actor),
            reason=reason,
            backend=be,
            seed=llm.seed,
            threshold=threshold,
            concurrency=llm.concurrency,
        )
        out: dict[str, Any] = {
            **{k: v for k, v in res["approved"][0].items() if k != "status"},
            **{k: res[k] for k in ("assign", "reconcile") if k in res},
        }
    emit(
        out,
        as_json,
        lambda: (
            f"approved #{out['extension_id']}: {out['question_id']} refrozen as "
            f"v{out['version']} sha256 {out['content_hash']}; {out['n_affected']} trajectory(ies) "
            + ("reassigned" if reassign else "to reassign (run `rcea codebook assign`)")
        ),
    )


@codebook_app.command("reject")
def reject_cmd(
    extension: int = typer.Argument(..., help="extension request id"),
    study: str = STUDY_OPTION,
    reason: str = typer.Option("", "--reason"),
    actor: str = ACTOR_OPTION,
) -> None:
    """Reject a request: its trajectories go to the researcher queue."""

    with store_session() as s:
        ext, _ = decide_extension(
            s,
            study=study,
            extension_id=extension,
            approve=False,
            actor=actor_name(actor),
            reason=reason,
        )
        n = sum(len(p.get("trajectory_ids", [])) for p in ext.proposals)
    typer.echo(f"rejected #{extension}: {n} trajectory(ies) moved to the researcher queue")


@codebook_app.command("export")
def export_cmd(
    study: str = STUDY_OPTION,
    out: Path = typer.Option(None, "--out", help="Parquet path (default: under artifacts)"),
    allow_incomplete: bool = typer.Option(
        False, "--allow-incomplete", help="count unfinished trajectories as uncertain"
    ),
    threshold: float = CODEBOOK_THRESHOLD_OPTION,
    actor: str = ACTOR_OPTION,
    as_json: bool = JSON_OPTION,
) -> None:
    """The final partition (mode per accepted trajectory, or uncertain), frozen in the
    store for the pair audit and written as Parquet."""

    with store_session(as_json) as s:
        result = export_partition(
            s,
            study=study,
            actor=actor_name(actor),
            artifacts_dir=settings().artifacts_dir,
            out=out,
            allow_incomplete=allow_incomplete,
            threshold=threshold,
        )

    def show() -> None:
        typer.echo(
            f"{'froze' if result['created'] else 'unchanged:'} partition #{result['partition_id']} "
            f"({result['source']}): {result['n_modes']} modes in {result['n_codebooks']} "
            "codebooks, "
            f"{result['n_included']} included, {result['n_uncertain']} uncertain trajectories; "
            f"sha256 {result['partition_hash']}"
        )
        for tid, e in result["excluded"].items():
            typer.echo(f"  excluded: {tid} ({e['question_id']}): {e['reason']}")
        typer.echo(f"  {result['parquet']}")

    emit(result, as_json, show)


@codebook_app.command("status")
def status_cmd(study: str = STUDY_OPTION, as_json: bool = JSON_OPTION) -> None:
    """Progress of every stage."""

    with store_session(as_json) as s:
        st = cycle_status(s, study=study)

    def show() -> None:
        typer.echo(
            f"{st['study']}: {st['n_accepted']} accepted trajectories in {st['n_questions']} "
            f"questions; {st['n_drafts']} drafts, {st['n_frozen_codebooks']} frozen codebooks"
        )
        for key in ("batches", "disputes", "extensions", "outcomes", "tokens"):
            if st[key]:
                typer.echo(f"  {key}: " + ", ".join(f"{k} {v}" for k, v in sorted(st[key].items())))

    emit(st, as_json, show)


@codebook_app.command("run")
@backend_options
def run_cmd(
    study: str = STUDY_OPTION,
    induce_batch_size: int = typer.Option(12, "--induce-batch-size", min=1),
    sample: int = typer.Option(None, "--sample", min=1, help="induction sample per question"),
    assign_batch_size: int = typer.Option(10, "--assign-batch-size", min=1),
    threshold: float = CODEBOOK_THRESHOLD_OPTION,
    actor: str = ACTOR_OPTION,
    as_json: bool = JSON_OPTION,
    *,
    llm: BackendOptions,
) -> None:
    """Every automatic stage in order — induce, merge, freeze (drafts as they are),
    assign, reconcile, extend — stopping where a researcher decides (queue, extension
    review). For unattended runs such as the oracle demo; resumable like each stage."""

    with domain_errors(as_json):
        be = make_backend(settings(), llm)
        res = run_cycle(
            engine(),
            study=study,
            backend=be,
            actor=actor_name(actor),
            seed=llm.seed,
            induce_batch_size=induce_batch_size,
            sample_per_question=sample,
            assign_batch_size=assign_batch_size,
            threshold=threshold,
            concurrency=llm.concurrency,
        )
    code, why = 0, ""
    if res.waiting == "unanswered":
        code = EXIT_UNANSWERED
        why = (
            f"{res.n_unanswered} batch(es) got no answer from the endpoint (unreachable or "
            "retries spent): rerun `rcea codebook run` to retry them"
        )
    elif res.waiting == "researcher":
        code = EXIT_RESEARCHER
        why = (
            f"{res.n_queue} item(s) wait in the researcher queue (`rcea codebook queue`) and "
            f"{res.n_extensions} extension request(s) wait for review (`rcea codebook "
            "extend`): the cycle is not finished"
        )

    def show() -> None:
        for r in res.reports:
            _print_report(r, False)
        typer.echo(
            f"froze {res.n_frozen} codebook(s) now; {res.n_extensions} pending extension request(s)"
        )
        typer.echo("next: " + "; ".join(res.next_steps(study)))
        if why:
            typer.echo(f"not finished (exit {code}): {why}", err=True)

    emit({**res.to_dict(), "exit_code": code, "waiting": why or None}, as_json, show)
    if code:
        raise typer.Exit(code)


@codebook_app.command("exclude")
def exclude_cmd(
    study: str = STUDY_OPTION,
    trajectory: str = typer.Option(..., "--trajectory", help="trajectory id to exclude"),
    reason: str = typer.Option(..., "--reason", help="why (recorded in the event log)"),
    actor: str = ACTOR_OPTION,
    as_json: bool = JSON_OPTION,
) -> None:
    """Exclude one trajectory from the codebook cycle (e.g. its text leaks provenance):
    left out of every later plan, prompt and export (listed there as excluded); recorded
    as a ``codebook.exclude`` event. Idempotent."""

    with store_session(as_json) as s:
        out = exclude_trajectory(
            s, study=study, trajectory_id=trajectory, reason=reason, actor=actor_name(actor)
        )
    emit(
        out,
        as_json,
        lambda: (
            f"excluded {trajectory} (question {out['question_id']}) from the codebook cycle"
            if out["created"]
            else f"{trajectory} was already excluded ({out['reason']})"
        ),
    )


def register(app: typer.Typer) -> None:
    app.add_typer(codebook_app, name="codebook")
