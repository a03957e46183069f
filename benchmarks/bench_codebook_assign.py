"""Codebook assignment throughput and resume cost against a local OpenAI-compatible
server with 50 ms simulated latency per call.

Figures: trajectories/s and calls/s of `assign` (two passes, 10 trajectories per call) at
concurrency 1 and 16, and their ratio (target >= 10x); then a `rcea codebook assign`
process at concurrency 16 is killed with SIGKILL once half of its calls are served and
rerun: the share of calls sent twice (target < 1%; what a SIGKILL can lose is the calls in
flight, at most the concurrency); the same with SIGTERM, which `rcea` turns into a graceful
stop that finishes and records the calls in flight. The server (tests/support/fake_llm.py)
runs in its own process and answers from the synthetic domain's oracle. The concurrency-1
rate is measured on a prefix of the questions (``--n-serial``) and compared as a rate. CPU
per call (client process + server process) is printed too: at concurrency 16 the rate is
bound by CPU on a small machine, not by the 50 ms latency.
Run: ``make bench`` or ``python benchmarks/bench_codebook_assign.py [--n 10000]``.
``--smoke`` runs 200 trajectories with 300 ms latency in seconds (``make test`` runs it so
that the script cannot rot); its figures mean nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import httpx
from common import add_json_out, emit  # benchmarks/common.py

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

PER_QUESTION = 20
STRATEGIES = ["direct", "distribute", "factor", "direct", "distribute"] * 4


def prepare(root: Path, n: int) -> tuple[Path, list[str]]:
    """A SQLite store with n accepted trajectories and frozen (oracle-built) codebooks."""
    from rcea.pipeline.codebook import OracleBackend
    from rcea.study.codebook import freeze_codebooks, induce, merge
    from rcea.study.records.ingest import ingest_file
    from rcea.study.store import make_engine, session_scope, upgrade
    from tests.support.fake_llm import domain_records, strategy_of

    questions = {f"q{i:04d}": STRATEGIES[:PER_QUESTION] for i in range(n // PER_QUESTION)}
    recs = domain_records(questions=questions, n_failed=0, unique=True)
    src = root / "records.jsonl"
    with src.open("w") as fh:
        for r in recs:
            fh.write(json.dumps(r) + "\n")
    db = root / "prepared.db"
    engine = make_engine(f"sqlite:///{db}")
    upgrade(engine)
    ingest_file(engine, src, study="bench", artifacts_dir=root / "art", data_dir=root)
    oracle = OracleBackend(strategy_of)
    induce(engine, study="bench", backend=oracle, actor="bench", batch_size=20)
    merge(engine, study="bench", backend=oracle, actor="bench")
    with session_scope(engine) as s:
        freeze_codebooks(s, study="bench", actor="bench")
    engine.dispose()
    return db, sorted(questions)


def start_server(port: int, latency: float) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.support.fake_llm",
            "--port",
            str(port),
            "--latency",
            str(latency),
        ],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    for _ in range(400):
        try:
            httpx.get(f"http://127.0.0.1:{port}/health", timeout=1)
            return proc
        except httpx.HTTPError:
            time.sleep(0.05)
    raise RuntimeError("server did not start")


def served(port: int) -> list[dict]:  # type: ignore[type-arg]
    calls = httpx.get(f"http://127.0.0.1:{port}/_calls", timeout=30).json()
    return [c for c in calls if c["status"] == 200 and c["task"] == "codebook.assign"]


def cpu_seconds(pid: int | None = None) -> float:
    """CPU time (user + system) of this process, or of ``pid`` (Linux /proc)."""
    if pid is None:
        r = resource.getrusage(resource.RUSAGE_SELF)
        return r.ru_utime + r.ru_stime
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measure(
    prepared: Path,
    root: Path,
    port: int,
    concurrency: int,
    questions: list[str] | None,
    server_pid: int,
) -> dict:  # type: ignore[type-arg]
    import openai  # noqa: F401  (imported before the clock starts)

    from rcea.study.codebook import BackendOptions, assign, make_backend
    from rcea.study.settings import Settings
    from rcea.study.store import make_engine

    name = f"c{concurrency}"
    db = root / f"{name}.db"
    shutil.copy(prepared, db)
    settings = Settings(
        data_dir=root / name,
        llm_base_url=f"http://127.0.0.1:{port}/v1",
        llm_model="fake",
        llm_api_key="k",
    )
    be = make_backend(settings, BackendOptions(kind="openai", concurrency=concurrency))
    engine = make_engine(f"sqlite:///{db}")
    engine.connect().close()
    cpu0, srv0 = cpu_seconds(), cpu_seconds(server_pid)
    t0 = time.perf_counter()
    report = assign(
        engine, study="bench", backend=be, actor="bench", batch_size=10,
        concurrency=concurrency, questions=questions,
    )  # fmt: skip
    dt = time.perf_counter() - t0
    cpu, srv = cpu_seconds() - cpu0, cpu_seconds(server_pid) - srv0
    engine.dispose()
    n = (len(questions) if questions else 0) * PER_QUESTION
    calls = max(1, report.n_run)
    return {
        "calls": report.n_run,
        "seconds": dt,
        "n": n,
        "failed": report.n_failed,
        "client_cpu_ms_per_call": 1000 * cpu / calls,
        "server_cpu_ms_per_call": 1000 * srv / calls,
    }


def resume_cost(prepared: Path, root: Path, port: int, n_calls: int, sig: signal.Signals) -> dict:  # type: ignore[type-arg]
    db = root / f"resume-{sig.name}.db"
    shutil.copy(prepared, db)
    env = {k: v for k, v in os.environ.items() if not k.startswith("RCEA_")}
    env.update(
        RCEA_DATABASE_URL=f"sqlite:///{db}",
        RCEA_DATA_DIR=str(root / f"resume-{sig.name}"),
        RCEA_LLM_BASE_URL=f"http://127.0.0.1:{port}/v1",
        RCEA_LLM_MODEL="fake",
        RCEA_LLM_API_KEY="k",
        PYTHONPATH=str(ROOT),
    )
    cmd = [
        sys.executable, "-c", "from rcea.app.cli import main; main()", "codebook", "assign",
        "--study", "bench", "--backend", "openai", "--concurrency", "16", "--batch-size", "10",
        "--actor", "bench",
    ]  # fmt: skip
    base = len(served(port))
    proc = subprocess.Popen(
        cmd, env=env, cwd=root, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    while len(served(port)) - base < n_calls // 2:
        if proc.poll() is not None:
            raise RuntimeError("assign finished before it could be interrupted")
        time.sleep(0.02)
    proc.send_signal(sig)
    proc.wait()
    time.sleep(0.2)
    at_kill = len(served(port)) - base
    rerun = subprocess.run(cmd, env=env, cwd=root, stdout=subprocess.DEVNULL, check=True)
    assert rerun.returncode == 0
    calls = served(port)[base:]
    counts = Counter(c["key"] for c in calls)
    repeated = sum(v - 1 for v in counts.values())
    return {
        "planned_calls": n_calls,
        "served_before_kill": at_kill,
        "served_total": len(calls),
        "repeated": repeated,
        "distinct": len(counts),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=10_000, help="accepted trajectories")
    ap.add_argument("--n-serial", type=int, default=2_000, help="prefix for concurrency 1")
    ap.add_argument("--latency", type=float, default=0.05)
    ap.add_argument("--smoke", action="store_true", help="tiny sizes: does it still run?")
    add_json_out(ap)
    args = ap.parse_args()
    if args.smoke:  # slow calls, so that the kill still lands halfway through the run
        args.n, args.n_serial, args.latency = 200, 40, 0.3
    from tests.support.helpers import free_port

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        prepared, questions = prepare(root, args.n)
        port = free_port()
        server = start_server(port, args.latency)
        try:
            serial_q = questions[: max(1, args.n_serial // PER_QUESTION)]
            one = measure(prepared, root, port, 1, serial_q, server.pid)
            sixteen = measure(prepared, root, port, 16, questions, server.pid)
            n_calls = sixteen["calls"]
            killed = resume_cost(prepared, root, port, n_calls, signal.SIGKILL)
            stopped = resume_cost(prepared, root, port, n_calls, signal.SIGTERM)
        finally:
            server.send_signal(signal.SIGTERM)
            server.wait(timeout=30)
    rate1 = one["n"] / one["seconds"]
    rate16 = sixteen["n"] / sixteen["seconds"]
    share = killed["repeated"] / killed["planned_calls"]
    share_term = stopped["repeated"] / stopped["planned_calls"]
    head = ("traj.", "calls", "seconds", "traj/s", "calls/s", "CPU ms/call")
    print(f"{'assign (2 passes, 10/call)':<28}" + "".join(f"{h:>10}" for h in head[:-1]), end="")
    print(f"{head[-1]:>14}")
    for label, m in (("concurrency 1", one), ("concurrency 16", sixteen)):
        cpu = f"{m['client_cpu_ms_per_call']:.1f}+{m['server_cpu_ms_per_call']:.1f}"
        print(
            f"{label:<28}{m['n']:>10}{m['calls']:>10}{m['seconds']:>10.1f}"
            f"{m['n'] / m['seconds']:>10.0f}{m['calls'] / m['seconds']:>10.1f}{cpu:>14}"
        )
    print(
        f"speed-up 16 vs 1: {rate16 / rate1:.1f}x "
        f"(target >= 10x; {args.latency * 1000:.0f} ms per call)"
    )
    for label, r, sh in (("SIGKILL", killed, share), ("SIGTERM", stopped, share_term)):
        print(
            f"resume after {label} at {r['served_before_kill']}/{r['planned_calls']} calls: "
            f"{r['repeated']} repeated ({sh:.2%}; target < 1%), {r['distinct']} distinct calls"
        )
    emit(
        {
            "bench": "codebook_assign",
            "smoke": args.smoke,
            "n": sixteen["n"],
            "latency_ms": args.latency * 1000,
            "traj_per_s_c1": round(rate1, 1),
            "traj_per_s_c16": round(rate16, 1),
            "speedup": round(rate16 / rate1, 2),
            "client_cpu_ms_per_call_c16": round(sixteen["client_cpu_ms_per_call"], 2),
            "server_cpu_ms_per_call_c16": round(sixteen["server_cpu_ms_per_call"], 2),
            "resume_planned_calls": killed["planned_calls"],
            "sigkill_repeated_calls": killed["repeated"],
            "sigkill_repeated_share": round(share, 5),
            "sigterm_repeated_calls": stopped["repeated"],
        },
        args.json_out,
    )


if __name__ == "__main__":
    main()
