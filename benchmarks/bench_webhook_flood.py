"""One annotator's webhook flood against a real Label Studio: does anyone else notice?

Annotator A, with A's own webhook secret (readable on A's own server), posts 40
concurrent notifications of 150 made-up annotation ids, and 40 of 100, to A's path of the
real rcea API (``rcea serve``, its own process, on a SQLite store), while annotator B labels
``--b-labels`` tasks on B's own Label Studio through B's login session and ``/health`` is
probed every 50 ms. Label Studio gives a webhook 1 s and never retries, so a label is
*recorded live* only if B's own notification is read back: the API's background sync is
off here, and no sync runs before the count.

Figures: B's labels recorded live (count, of how many, within ``LIVE_S`` of the last
label), ``/health`` latency during the flood (max, p95), and the flood's answers (200:
queued, 429: refused, anything else: an error). Baseline, same run: ``/health`` with no
flood (p95), as the ratio flood p95 / idle p95. Targets (docs/labelstudio.md, "Webhooks"):
all of B's labels live, ``/health`` max < 1 s.

Run: ``make bench`` or ``python benchmarks/bench_webhook_flood.py``; it starts two Label
Studio servers (A, B) in a temp dir, or uses ``--labelstudio-url``/``--labelstudio-token``
twice (A, then B). ``--smoke`` (``make test``, against the test session's servers): 10
notifications of each size, B labels 3 tasks.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from contextlib import closing
from pathlib import Path
from typing import Any

from bench_audit_push import RunningServer, build_store, choice_result, free_port
from common import add_json_out, emit  # benchmarks/common.py

ROOT = Path(__file__).resolve().parents[1]
SECRET = "bench-webhook-flood-secret"
PASSWORD = "bench-annotator-pass-1"
LIVE_S = 10.0  # a label read back within this of B's last label counts as live
HEALTH_TARGET_S = 1.0


#: the /health prober's process: GET every 50 ms until the stop file exists (a ``.ready``
#: file beside it once probing); prints the latencies (s) as one JSON line; a non-200
#: answer counts as 999 s
PROBER = """
import json, sys, time, pathlib, httpx
url, stop = sys.argv[1], pathlib.Path(sys.argv[2])
out = []
while not stop.exists():
    t0 = time.perf_counter()
    try:
        ok = httpx.get(url, timeout=30).status_code == 200
    except httpx.HTTPError:
        ok = False
    out.append(time.perf_counter() - t0 if ok else 999.0)
    stop.with_suffix(".ready").touch()
    time.sleep(0.05)
print(json.dumps(out))
"""


def p95(xs: list[float]) -> float:
    return sorted(xs)[max(0, round(0.95 * len(xs)) - 1)]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--notifications", type=int, default=40, help="of each size, concurrent")
    ap.add_argument("--b-labels", type=int, default=10, help="tasks B labels during the flood")
    ap.add_argument("--smoke", action="store_true", help="tiny sizes: does it still run?")
    ap.add_argument("--labelstudio-url", action="append", default=[], help="twice: A, then B")
    ap.add_argument("--labelstudio-token", action="append", default=[], help="their tokens")
    add_json_out(ap)
    args = ap.parse_args()
    if args.smoke:
        args.notifications, args.b_labels = 10, 3
    if len(args.labelstudio_url) not in (0, 2) or len(args.labelstudio_token) != len(
        args.labelstudio_url
    ):
        raise SystemExit("give --labelstudio-url and --labelstudio-token twice (A, then B)")

    import httpx
    from sqlalchemy import select

    from rcea.annotation.accounts import login_session
    from rcea.annotation.people import People, person_webhook_secret
    from rcea.annotation.projects import WEBHOOK_SECRET_HEADER
    from rcea.annotation.server import LabelStudioServer, default_executable
    from rcea.study.labelling import WebhookTarget, ensure_member
    from rcea.study.pair_audit.push import push_audit
    from rcea.study.store import session_scope
    from rcea.study.store.models import Audit, AuditLabel, AuditTask

    with tempfile.TemporaryDirectory(prefix="rcea-bench-flood-") as tmp:
        root = Path(tmp)
        engine, audit_id = build_store(root, 30, 58)
        if args.labelstudio_url:
            servers: list[Any] = [RunningServer(u.rstrip("/")) for u in args.labelstudio_url]
            tokens = list(args.labelstudio_token)
        else:
            servers = [
                LabelStudioServer(root / f"ls-{r}", free_port(), executable=default_executable())
                for r in ("a", "b")
            ]
            for sv in servers:
                sv.start(600)
            tokens = [sv.credentials().token for sv in servers]
        suffix = uuid.uuid4().hex[:8]  # a shared server may hold earlier runs' people
        emails = {r: f"flood-{r.lower()}-{suffix}@rcea.test" for r in ("A", "B")}
        data_dir = root / "data"
        people = People(data_dir, "http://127.0.0.1:1")
        for (_role, email), sv, token in zip(emails.items(), servers, tokens, strict=True):
            people.add(email, url=sv.url, token=token)
        # the real API in its own process (`rcea serve`), as deployed: the flood's client
        # threads here do not share its interpreter; background sync off: live means live
        port = free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith("RCEA_")}
        env.update(
            RCEA_DATABASE_URL=f"sqlite:///{root / 'bench.db'}",
            RCEA_DATA_DIR=str(data_dir),
            RCEA_API_TOKEN="bench-token",
            RCEA_WEBHOOK_SECRET=SECRET,
            RCEA_SYNC_INTERVAL_S="0",
            PYTHONPATH=str(ROOT),
        )
        proc = subprocess.Popen(
            [sys.executable, "-c", "from rcea.app.cli import main; main()", "serve",
             "--port", str(port)],
            env=env, cwd=root, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT,
        )  # fmt: skip
        base = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 120
            while True:
                if proc.poll() is not None:
                    raise SystemExit(f"rcea serve exited with {proc.returncode}")
                try:
                    if httpx.get(f"{base}/health", timeout=2).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                if time.monotonic() > deadline:
                    raise SystemExit("rcea serve did not come up in 120 s")
                time.sleep(0.2)
            for email in emails.values():
                ensure_member(people, email, PASSWORD)
            with session_scope(engine) as s:
                push_audit(
                    s,
                    s.get(Audit, audit_id),
                    people,
                    annotators=emails,
                    webhook=WebhookTarget(f"{base}/webhooks/label-studio", SECRET),
                    actor="bench",
                )
                b_tasks = [
                    r.task_id
                    for r in s.exec(
                        select(AuditTask).where(
                            AuditTask.audit_id == audit_id, AuditTask.role == "B"
                        )
                    ).scalars()
                ][: args.b_labels]

            def start_prober(stop_file: Path) -> subprocess.Popen[str]:
                """/health probed from a process of its own (a monitor does not share the
                flood's client threads' interpreter), every 50 ms until ``stop_file``."""
                proc_ = subprocess.Popen(
                    [sys.executable, "-c", PROBER, f"{base}/health", str(stop_file)],
                    stdout=subprocess.PIPE,
                    text=True,
                )
                ready = stop_file.with_suffix(".ready")
                deadline_ = time.monotonic() + 60
                while not ready.exists() and proc_.poll() is None:
                    if time.monotonic() > deadline_:
                        raise SystemExit("the /health prober did not start in 60 s")
                    time.sleep(0.05)
                return proc_

            def stop_prober(proc_: subprocess.Popen[str], stop_file: Path) -> list[float]:
                stop_file.touch()
                out, _ = proc_.communicate(timeout=120)
                got = json.loads(out.strip().splitlines()[-1])
                if not got or max(got) >= 999:
                    raise SystemExit(f"/health failed or was not measured: {got[:5]}")
                return list(got)

            idle_stop = root / "idle.stop"
            idle_prober = start_prober(idle_stop)
            time.sleep(3.0)  # no flood: the baseline
            idle = stop_prober(idle_prober, idle_stop)
            a = people.require(emails["A"])
            hook = {WEBHOOK_SECRET_HEADER: person_webhook_secret(SECRET, a.slug)}
            codes: list[int] = []
            lock = threading.Lock()

            def flood(n_ids: int, k: int) -> None:
                body = {
                    "action": "ANNOTATIONS_DELETED",
                    "annotations": [{"id": 1_000_000 + 1000 * k + i} for i in range(n_ids)],
                }
                try:
                    code = httpx.post(
                        f"{base}/webhooks/label-studio/{a.slug}",
                        json=body,
                        headers=hook,
                        timeout=120,
                    ).status_code
                except httpx.HTTPError:
                    code = -1
                with lock:
                    codes.append(code)

            n = args.notifications
            flooders = [threading.Thread(target=flood, args=(150, k)) for k in range(n)]
            flooders += [threading.Thread(target=flood, args=(100, n + k)) for k in range(n)]
            stop_file = root / "probe.stop"
            prober = start_prober(stop_file)
            for t in flooders:
                t.start()
            ids: list[int] = []
            with closing(login_session(servers[1].url, emails["B"], PASSWORD)) as web:
                for task in b_tasks:
                    r = web.post(
                        f"/api/tasks/{task}/annotations/",
                        json={"result": choice_result("same"), "lead_time": 5.0},
                    )
                    if r.status_code != 201:
                        raise SystemExit(f"B's label: {r.status_code} {r.text[:200]}")
                    ids.append(r.json()["id"])
            labelled = time.monotonic()

            def live() -> int:
                with engine.connect() as conn:
                    rows = conn.execute(
                        select(AuditLabel.annotation_id).where(
                            AuditLabel.role == "B", AuditLabel.status == "counted"
                        )
                    ).all()
                return len({r[0] for r in rows} & set(ids))

            while live() < len(ids) and time.monotonic() - labelled < LIVE_S:
                time.sleep(0.1)
            b_live = live()
            for t in flooders:
                t.join(timeout=300)
            during = stop_prober(prober, stop_file)
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
            for sv in servers:
                sv.stop()
    errors = sum(c not in (200, 429) for c in codes)
    figures = {
        "bench": "webhook_flood",
        "smoke": args.smoke,
        "n_notifications": len(codes),
        "ids_per_notification": [150, 100],
        "n_200": codes.count(200),
        "n_429": codes.count(429),
        "n_errors": errors,
        "b_labels": len(ids),
        "b_recorded_live": b_live,
        "live_window_s": LIVE_S,
        "health_max_s": round(max(during), 4),
        "health_p95_s": round(p95(during), 4),
        "health_n": len(during),
        "health_idle_p95_s": round(p95(idle), 4),
        "health_p95_vs_idle": round(p95(during) / max(p95(idle), 1e-6), 2),
        "health_target_s": HEALTH_TARGET_S,
    }
    print(
        f"B: {b_live}/{len(ids)} labels recorded live; /health during the flood: max "
        f"{figures['health_max_s']:.3f} s, p95 {figures['health_p95_s']:.3f} s (idle p95 "
        f"{figures['health_idle_p95_s']:.3f} s); flood answers: {codes.count(200)} queued, "
        f"{codes.count(429)} refused (429), {errors} errors",
        flush=True,
    )
    if errors or b_live < len(ids) or figures["health_max_s"] >= HEALTH_TARGET_S:
        print("target missed: see docs/labelstudio.md, Webhooks", flush=True)
    emit(figures, args.json_out)


if __name__ == "__main__":
    main()
