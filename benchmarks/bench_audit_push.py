"""Pair-audit push and sync against a real Label Studio: 4,526 pairs, two projects.

Figures (seconds, measured in this process against a Label Studio 1.23.2 that the script
starts itself in a temp dir on a free loopback port; its first boot is printed apart):

* push: ``push_audit`` creating the A and B projects and importing 2 x 4,526 = 9,052
  blinded tasks (bulk import batches, exports for the task ids, AuditTask rows, commit);
* sync: ``sync_audit`` exporting both projects and recording their 9,052 annotations
  (one AuditLabel row and one event each, commit) — the first sync of a round is full;
* incremental sync: then each annotator changes 2.5 % of their own annotations (2.5 % of
  all: 2 x 113 of 9,052, through their own login session, not measured) and
  ``sync_audit`` reads only the tasks changed since the first sync (Data Manager task
  list filtered by ``updated_at``);
  the same sync with ``full=True`` (export of both projects, nothing to record) is
  measured after it, as the full-reconciliation figure.

Baselines, measured in the same run on a subset and compared as rates:

* push vs one task per request: ``client.tasks.create(project=..., data=...)`` for
  ``--n-baseline`` tasks of the same audit into a separate project;
* sync vs one annotation listing per task: ``GET /api/tasks/{id}/annotations/`` then the
  same parse and ``record_annotation``, for ``--n-baseline`` tasks, into a copy of the store
  taken right after the push.

The 9,052 annotations are set-up, not measured. Label Studio Community has no bulk
annotation API (``/api/annotations/bulk/`` is Enterprise), so they are made the way its
UI can: predictions are imported in bulk (admin token), then each annotator, logged in
through the real login form, runs the Data Manager action "Create Annotations From
Predictions" on their own project, which bulk-creates annotations with ``completed_by`` =
that annotator; the predictions are deleted afterwards, so the sync exports only what a
labelled project holds.

Run: ``make bench`` or ``python benchmarks/bench_audit_push.py [--pairs 4526]``.
Add ``--profile`` to print cProfile's top functions of the push and the sync.
``--smoke`` runs 58 pairs in seconds (``make test`` runs it, against the test session's Label
Studio given by ``--labelstudio-url``/``--labelstudio-token``, so the script cannot rot).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import math
import pstats
import random
import socket
import sqlite3
import tempfile
import time
import uuid
from collections.abc import Callable
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from common import add_json_out, emit  # benchmarks/common.py

T = TypeVar("T")

TARGET_S = 30.0
#: Rendering may add at most this share to the push time (docs/content-safety.md).
RENDER_SHARE_MAX = 0.20
PASSWORD = "bench-annotator-pass-1"
PER_Q = 20  # trajectories per question: C(20, 2) = 190 pairs available per question
N_AUDIT_QUESTIONS = 29


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def solution_text(rng: random.Random, n_steps: int) -> str:
    """An arithmetic chain of thought (~1.5 kB): what a GRPO trajectory roughly looks like."""
    lines, total = [], rng.randint(10, 99)
    for k in range(1, n_steps + 1):
        a, b = rng.randint(2, 999), rng.randint(2, 99)
        op = rng.choice("+-*")
        val = a + b if op == "+" else a - b if op == "-" else a * b
        total += val
        lines.append(
            f"Step {k}: we compute {a} {op} {b} = {val}, so the running total becomes {total}."
        )
    lines.append(f"Therefore the answer is \\boxed{{{total}}}.")
    return "\n".join(lines)


def build_store(root: Path, n_questions: int, n_pairs: int):  # type: ignore[no-untyped-def]
    """A SQLite store with one study, a frozen rubric and partition, and a drawn audit of
    exactly ``n_pairs`` pairs over 29 questions."""
    from rcea.study.pair_audit.freeze import freeze_partition_from_modes, freeze_rubric
    from rcea.study.pair_audit.sampling import draw_audit
    from rcea.study.records.ingest import ingest_file
    from rcea.study.store import make_engine, session_scope, upgrade

    per_question = math.ceil(n_pairs / N_AUDIT_QUESTIONS)
    if math.comb(PER_Q, 2) < per_question:
        raise SystemExit(f"--pairs {n_pairs} needs more than {PER_Q} trajectories a question")
    rng = random.Random(0)
    with (root / "study.jsonl").open("w", encoding="utf-8") as fh:
        for q in range(n_questions):
            for k in range(PER_Q):
                i = q * PER_Q + k
                mode = "uncertain" if k == 0 and q % 7 == 0 else ("mode-a", "mode-b")[k % 2]
                rec = {
                    "trajectory_id": f"traj-{i:06d}",
                    "question_id": f"question-{q:04d}",
                    "text": solution_text(rng, 18),
                    "reward": 1,
                    "validity": 1,
                    "mode": mode,
                    "run": "grpo-bench",
                    "model": "tiny-bench",
                    "step": 10 * (k % 5),
                    "seed": i,
                }
                fh.write(json.dumps(rec) + "\n")
    rubric = root / "rubric.toml"
    rubric.write_text(
        '[rubric]\nname = "bench-rubric"\nversion = "1"\n\n'
        f"[pairs]\nseed = 3\npairs_per_question = {per_question}\n"
        f"n_questions = {N_AUDIT_QUESTIONS}\nmax_pairs = {n_pairs}\n"
    )
    engine = make_engine(f"sqlite:///{root / 'bench.db'}")
    upgrade(engine)
    ingest_file(
        engine, root / "study.jsonl", study="bench", artifacts_dir=root / "art", data_dir=root
    )
    with session_scope(engine) as s:
        freeze_rubric(s, path=rubric, actor="bench")
        freeze_partition_from_modes(s, study="bench", actor="bench")
        audit_id = draw_audit(s, study="bench", rubric="bench-rubric", actor="bench").id
    return engine, audit_id


@dataclass
class RunningServer:
    """A Label Studio started elsewhere (``--labelstudio-url``): used, never stopped."""

    url: str

    def stop(self) -> None:
        pass


def timed(fn: Callable[[], T], profile: bool, label: str) -> tuple[T, float]:
    prof = cProfile.Profile() if profile else None
    t0 = time.perf_counter()
    if prof is not None:
        prof.enable()
    try:
        out = fn()
    finally:
        if prof is not None:
            prof.disable()
    dt = time.perf_counter() - t0
    if prof is not None:
        buf = io.StringIO()
        pstats.Stats(prof, stream=buf).sort_stats("cumulative").print_stats(30)
        print(f"---- cProfile: {label} ({dt:.1f} s, profiled)\n{buf.getvalue()}")
    return out, dt


def choice_result(label: str) -> list[dict[str, Any]]:
    return [
        {
            "from_name": "strategy",
            "to_name": "left",
            "type": "choices",
            "value": {"choices": [label]},
        }
    ]


def admin_http(url: str, token: str):  # type: ignore[no-untyped-def]
    from rcea.annotation.client import http_client

    http = http_client(url, timeout=600.0)
    http.headers["Authorization"] = f"Token {token}"
    return http


def annotate_project(  # type: ignore[no-untyped-def]
    client, url: str, token: str, email: str, project_id: int, labels: dict[int, str]
) -> int:
    """Set-up: one annotation per task by ``email``, through bulk predictions and the
    Data Manager action run in that annotator's own session. Returns annotations made."""
    from rcea.annotation.accounts import login_session

    client.projects.import_predictions(
        project_id,
        request=[
            {"task": tid, "result": choice_result(lab), "model_version": "bench"}
            for tid, lab in labels.items()
        ],
    )
    with closing(login_session(url, email, PASSWORD)) as person:
        r = person.post(
            "/api/dm/actions/",
            params={"id": "predictions_to_annotations", "project": project_id},
            json={"selectedItems": {"all": True, "excluded": []}},
            timeout=600,
        )
        r.raise_for_status()
        made = int(r.json()["detail"].split()[1])  # "Created N annotations"
    # The admin removes the predictions again: a labelled project holds none.
    with admin_http(url, token) as http:
        http.post(
            "/api/dm/actions/",
            params={"id": "delete_tasks_predictions", "project": project_id},
            json={"selectedItems": {"all": True, "excluded": []}},
        ).raise_for_status()
    return made


def baseline_import(client, label_config: str, tasks: list[dict[str, str]]) -> float:  # type: ignore[no-untyped-def]
    """One ``POST /api/tasks/`` per task into a separate project; seconds for all."""
    from rcea.annotation.projects import create_project

    pid = create_project(
        client, title="RCEA bench: one task per request", label_config=label_config
    )
    t0 = time.perf_counter()
    for t in tasks:
        client.tasks.create(project=pid, data=t)
    return time.perf_counter() - t0


def check_task_ids(  # type: ignore[no-untyped-def]
    servers: dict[str, tuple[str, str]],
    pairs,
    task_of: dict[tuple[str, int], tuple[int, int]],
    n: int = 100,
) -> int:
    """Not measured: the task ids the push stored point at the tasks of their pairs (a
    sample of each role, batch boundaries included), each on that person's server."""
    picks = set(random.Random(2).sample(range(len(pairs)), min(n, len(pairs))))
    picks |= {i for k in range(0, len(pairs) + 1, 2000) for i in (k - 1, k) if 0 <= i < len(pairs)}
    for role, (url, token) in servers.items():
        with admin_http(url, token) as http:
            for i in sorted(picks):
                project_id, task_id = task_of[(role, pairs[i].id)]
                task = http.get(f"/api/tasks/{task_id}/").raise_for_status().json()
                if task["data"]["pair"] != pairs[i].pair_key or task["project"] != project_id:
                    raise SystemExit(f"task {task_id} is not pair {pairs[i].pair_key} of {role}")
    return 2 * len(picks)


def pair_texts(engine, audit_id: int, pairs) -> dict[str, str]:  # type: ignore[no-untyped-def]
    """The texts of the pairs' trajectories, read from the store (the push sends these)."""
    from sqlmodel import select

    from rcea.study.store import session_scope
    from rcea.study.store.models import Audit, Trajectory

    ids = {p.trajectory_a for p in pairs} | {p.trajectory_b for p in pairs}
    with session_scope(engine) as s:
        study_id = s.get(Audit, audit_id).study_id
        rows = s.exec(
            select(Trajectory.trajectory_id, Trajectory.text).where(
                Trajectory.study_id == study_id,
                Trajectory.trajectory_id.in_(sorted(ids)),  # type: ignore[attr-defined]
            )
        ).all()
    return {tid: text for tid, text in rows}


def copy_sqlite(src: Path, dst: Path) -> None:
    with closing(sqlite3.connect(src)) as a, closing(sqlite3.connect(dst)) as b:
        a.backup(b)


def baseline_sync(url: str, token: str, engine, audit_id: int, tasks: list[tuple[int, int]]) -> int:  # type: ignore[no-untyped-def]
    """One ``GET /api/tasks/{id}/annotations/`` per task (annotator A's server), then the
    same parse and the same recorder as the sync."""
    from rcea.annotation.payloads import parse_annotation
    from rcea.study.labelling import PAIR, binding
    from rcea.study.labelling.record import Recorder
    from rcea.study.store import session_scope
    from rcea.study.store.models import Audit

    n = 0
    with (
        admin_http(url, token) as http,
        session_scope(engine) as s,
    ):
        audit = s.get(Audit, audit_id)
        recorder = Recorder(s, PAIR, audit, binding(s, PAIR, audit_id, "A"))
        for project_id, task_id in tasks:
            r = http.get(f"/api/tasks/{task_id}/annotations/")
            r.raise_for_status()
            for ann in r.json():
                parsed = parse_annotation(ann, task_id=task_id, project_id=project_id)
                n += int(recorder.record(parsed, source="sync") is not None)
    return n


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pairs", type=int, default=4526)
    ap.add_argument("--questions", type=int, default=60, help="questions in the study")
    ap.add_argument("--n-baseline", type=int, default=300, help="tasks in each baseline")
    ap.add_argument("--profile", action="store_true", help="cProfile the push and the sync")
    ap.add_argument("--smoke", action="store_true", help="tiny sizes: does it still run?")
    ap.add_argument(
        "--labelstudio-url",
        action="append",
        default=[],
        help="twice: the running Label Studio of annotator A, then of B (one per person)",
    )
    ap.add_argument("--labelstudio-token", action="append", default=[], help="their tokens")
    add_json_out(ap)
    args = ap.parse_args()
    if args.smoke:
        args.pairs, args.questions, args.n_baseline = 58, 30, 10
    if len(args.labelstudio_url) not in (0, 2) or len(args.labelstudio_token) != len(
        args.labelstudio_url
    ):
        raise SystemExit("give --labelstudio-url and --labelstudio-token twice (A, then B)")

    from sqlmodel import select

    from rcea.annotation.client import make_client
    from rcea.annotation.people import People
    from rcea.annotation.render import clear_cache, render
    from rcea.annotation.server import LabelStudioServer, default_executable
    from rcea.annotation.tasks import pair_label_config, with_rendered
    from rcea.study.pair_audit.labels import audit_rubric, status_counts
    from rcea.study.pair_audit.push import push_audit, sync_audit
    from rcea.study.pair_audit.sampling import audit_pairs
    from rcea.study.store import make_engine, session_scope
    from rcea.study.store.models import Audit, AuditLabel, AuditTask

    with tempfile.TemporaryDirectory(prefix="rcea-bench-push-") as tmp:
        root = Path(tmp)
        t0 = time.perf_counter()
        engine, audit_id = build_store(root, args.questions, args.pairs)
        store_s = time.perf_counter() - t0

        # One Label Studio per person (A, B), as rcea runs audits.
        servers: list[Any] = []
        if args.labelstudio_url:
            servers = [RunningServer(u.rstrip("/")) for u in args.labelstudio_url]
            tokens, boot_s = list(args.labelstudio_token), 0.0
        else:
            from concurrent.futures import ThreadPoolExecutor

            servers = [
                LabelStudioServer(root / f"ls-{r}", free_port(), executable=default_executable())
                for r in ("a", "b")
            ]
            t0 = time.perf_counter()
            with ThreadPoolExecutor(2) as pool:
                for fut in [pool.submit(sv.start, 600) for sv in servers]:
                    fut.result()
            boot_s = time.perf_counter() - t0
            tokens = [sv.credentials().token for sv in servers]
            print(f"Label Studio first boots: {boot_s:.1f} s (not part of the figures)", flush=True)
        suffix = f"-{uuid.uuid4().hex[:8]}"  # a shared server may hold earlier runs' people
        emails = {role: f"bench-{role.lower()}{suffix}@rcea.test" for role in ("A", "B")}
        people = People(root / "data", "http://127.0.0.1:1")
        by_role = {}
        for (role, email), sv, token in zip(emails.items(), servers, tokens, strict=True):
            people.add(email, url=sv.url, token=token)
            by_role[role] = (sv.url, token)
        server = servers[0]
        token = tokens[0]
        try:
            client = make_client(server.url, token, timeout=600.0)

            # ---- push (measured): accounts made first, as an operator does
            from rcea.study.labelling import ensure_member

            members = {role: ensure_member(people, e, PASSWORD) for role, e in emails.items()}

            def push() -> dict[str, Any]:
                with session_scope(engine) as s:
                    return push_audit(
                        s,
                        s.get(Audit, audit_id),
                        people,
                        annotators=emails,
                        webhook=None,
                        actor="bench",
                    )

            clear_cache()  # the push renders from cold, like a fresh process
            pushed, push_s = timed(push, args.profile, "push_audit")
            n_tasks = sum(p["n_tasks"] for p in pushed["projects"].values())
            print(f"push: {n_tasks} tasks in {push_s:.1f} s", flush=True)

            with session_scope(engine) as s:
                audit = s.get(Audit, audit_id)
                pairs = audit_pairs(s, audit_id=audit_id)
                config = pair_label_config(audit_rubric(s, audit).pairs.strategy_definition)
                rows = s.exec(select(AuditTask).where(AuditTask.audit_id == audit_id)).all()
                task_of = {(r.role, r.pair_id): (r.project_id, r.task_id) for r in rows}
            # ---- the share of the push spent rendering (Markdown + TeX + sanitiser):
            # every text the push rendered, rendered again here from a cold cache as the
            # push did (2 roles x 2 texts a pair; a text met again is a cache hit)
            all_texts = pair_texts(engine, audit_id, pairs)
            clear_cache()
            t0 = time.perf_counter()
            for p in pairs:
                for _role in by_role:
                    render(all_texts[p.trajectory_a])
                    render(all_texts[p.trajectory_b])
            render_s = time.perf_counter() - t0
            render_share = render_s / max(push_s - render_s, 1e-9)
            print(
                f"rendering: {render_s:.1f} s of the push, +{100 * render_share:.0f} % over the "
                f"push without it (target <= {100 * RENDER_SHARE_MAX:.0f} %)",
                flush=True,
            )
            checked = check_task_ids(by_role, pairs, task_of)
            print(f"checked {checked} stored task ids against Label Studio", flush=True)
            engine.dispose()
            copy_sqlite(root / "bench.db", root / "baseline.db")

            # ---- baseline: one task per request, same task data as the push sent
            texts = pair_texts(engine, audit_id, pairs[: args.n_baseline])
            sub = [
                with_rendered(
                    {
                        "pair": p.pair_key,
                        "left": texts[p.trajectory_a],
                        "right": texts[p.trajectory_b],
                    },
                    ("left", "right"),
                )
                for p in pairs[: args.n_baseline]
            ]
            base_push_s = baseline_import(client, config, sub)
            print(f"baseline import: {len(sub)} tasks in {base_push_s:.1f} s", flush=True)

            # ---- set-up: 9,052 annotations by the assigned annotators (not measured)
            rng = random.Random(1)
            t0 = time.perf_counter()
            n_made = 0
            for role, person in members.items():
                labels: dict[int, str] = {}
                for p in pairs:
                    label = p.automatic or "same"
                    if role == "B" and rng.random() < 0.1:
                        label = "different" if label == "same" else "same"
                    labels[task_of[(role, p.id)][1]] = label
                project_id = pushed["projects"][role]["project_id"]
                url, tok = by_role[role]
                n_made += annotate_project(
                    make_client(url, tok, timeout=600.0),
                    url,
                    tok,
                    person.email,
                    project_id,
                    labels,
                )
            annotate_s = time.perf_counter() - t0
            print(f"set-up: {n_made} annotations in {annotate_s:.1f} s (not measured)", flush=True)

            # ---- sync (measured)
            def sync() -> dict[str, Any]:
                with session_scope(engine) as s:
                    return sync_audit(s, s.get(Audit, audit_id), people)

            synced, sync_s = timed(sync, args.profile, "sync_audit")
            with session_scope(engine) as s:
                counts = status_counts(s, s.get(Audit, audit_id))
            print(f"sync: {synced['annotations_seen']} annotations in {sync_s:.1f} s", flush=True)
            if synced["changed"] != n_made or counts.get("counted") != n_made:
                raise SystemExit(f"sync recorded {synced} / {counts}, expected {n_made} counted")

            # ---- baseline: one annotation listing per task (A's server), into the copy
            subset = [task_of[("A", p.id)] for p in pairs[: args.n_baseline]]
            base_engine = make_engine(f"sqlite:///{root / 'baseline.db'}")
            t0 = time.perf_counter()
            n_base_sync = baseline_sync(server.url, token, base_engine, audit_id, subset)
            base_sync_s = time.perf_counter() - t0
            base_engine.dispose()
            if n_base_sync != len(subset):
                raise SystemExit(f"baseline sync recorded {n_base_sync} of {len(subset)}")

            # ---- set-up: each annotator changes 2.5 % of their own labels (not measured)
            from rcea.annotation.accounts import login_session

            with session_scope(engine) as s:
                own = {
                    role: sorted(
                        (r.annotation_id, r.label)
                        for r in s.exec(
                            select(AuditLabel).where(
                                AuditLabel.audit_id == audit_id, AuditLabel.role == role
                            )
                        ).all()
                    )
                    for role in emails
                }
            n_changed = 0
            for role, email in emails.items():
                picks = random.Random(2).sample(own[role], max(1, round(0.025 * len(own[role]))))
                with closing(login_session(by_role[role][0], email, PASSWORD)) as web:
                    for ann_id, label in picks:
                        new = "different" if label == "same" else "same"
                        r = web.patch(
                            f"/api/annotations/{ann_id}/",
                            json={"result": choice_result(new)},
                        )
                        if r.status_code != 200:
                            raise SystemExit(f"changing annotation {ann_id}: {r.text[:200]}")
                        n_changed += 1
            print(f"set-up: {n_changed} annotations changed (not measured)", flush=True)

            def sync_full() -> dict[str, Any]:
                with session_scope(engine) as s:
                    return sync_audit(s, s.get(Audit, audit_id), people, full=True)

            inc, inc_s = timed(sync, args.profile, "sync_audit (incremental)")
            if inc["mode"] != "incremental" or inc["changed"] != n_changed:
                raise SystemExit(f"incremental sync recorded {inc}, expected {n_changed}")
            print(
                f"incremental sync: {inc['tasks_read']} tasks read, {inc['changed']} changed "
                f"in {inc_s:.1f} s",
                flush=True,
            )
            full, full_s = timed(sync_full, args.profile, "sync_audit (full)")
            if full["changed"] != 0:
                raise SystemExit(f"the full sync after the incremental one changed {full}")
            print(f"full sync (nothing changed): {full_s:.1f} s", flush=True)
        finally:
            for sv in servers:
                sv.stop()
            engine.dispose()

    n_ann = synced["annotations_seen"]
    push_rate, base_push_rate = n_tasks / push_s, len(sub) / base_push_s
    sync_rate, base_sync_rate = n_ann / sync_s, len(subset) / base_sync_s
    print()
    print(f"{'operation':<46}{'items':>8}{'seconds':>10}{'items/s':>10}")
    rows_out = [
        ("push_audit (bulk import, 2 projects)", n_tasks, push_s),
        ("baseline: one task per request (subset)", len(sub), base_push_s),
        ("  ... scaled to the same number of tasks", n_tasks, n_tasks / base_push_rate),
        ("sync_audit (export + record)", n_ann, sync_s),
        ("baseline: per-task annotation list (subset)", len(subset), base_sync_s),
        ("  ... scaled to the same number of annotations", n_ann, n_ann / base_sync_rate),
        (f"incremental sync ({n_changed} changed)", inc["tasks_read"], inc_s),
        ("full sync of the same audit (baseline)", n_ann, full_s),
    ]
    for name, n, sec in rows_out:
        print(f"{name:<46}{n:>8}{sec:>10.1f}{n / sec:>10.0f}")
    print(
        f"speed ratio push / one-per-request: {push_rate / base_push_rate:.1f}x; "
        f"sync / per-task listing: {sync_rate / base_sync_rate:.1f}x; "
        f"full / incremental sync at 5 % changed: {full_s / inc_s:.1f}x "
        f"(target < {TARGET_S:.0f} s each; store built in {store_s:.1f} s, "
        f"Label Studio first boot {boot_s:.1f} s, annotation set-up {annotate_s:.1f} s)"
    )
    emit(
        {
            "bench": "audit_push",
            "n_pairs": len(pairs),
            "n_tasks": n_tasks,
            "n_annotations": n_ann,
            "push_s": round(push_s, 2),
            "render_s": round(render_s, 2),
            "render_share_of_push": round(render_share, 3),
            "render_share_max": RENDER_SHARE_MAX,
            "sync_s": round(sync_s, 2),
            "target_s": TARGET_S,
            "baseline_push_tasks_per_s": round(base_push_rate, 1),
            "push_ratio_vs_baseline": round(push_rate / base_push_rate, 2),
            "baseline_sync_annotations_per_s": round(base_sync_rate, 1),
            "sync_ratio_vs_baseline": round(sync_rate / base_sync_rate, 2),
            "n_changed": n_changed,
            "incremental_sync_s": round(inc_s, 2),
            "incremental_tasks_read": inc["tasks_read"],
            "full_sync_unchanged_s": round(full_s, 2),
            "full_vs_incremental": round(full_s / inc_s, 2),
            "labelstudio_boot_s": round(boot_s, 1),
            "profiled": args.profile,
            "smoke": args.smoke,
        },
        args.json_out,
    )


if __name__ == "__main__":
    main()
