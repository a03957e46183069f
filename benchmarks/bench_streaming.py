"""Streaming at scale: records/s and peak RSS of each store-bound stage against N.

Synthetic records shaped like a study: a probe set of ``PROBE_QUESTIONS`` questions
sampled at every checkpoint (two runs per step, steps 0, 10, 20, …; N grows by adding
steps, as a longer study does), 20 records per question and checkpoint (10 verifier
successes, 10 failures), short texts distinct at every step, no token arrays. They go
through the four stages that read or write every record, each in its own ``rcea``
process on a SQLite store in a temporary directory, so that its peak RSS is its own
(``os.wait4``'s ``ru_maxrss`` of that child):

* ``rcea ingest`` of the JSONL file;
* ``rcea judge run`` (an ``openai`` judge, every success asked once) against the local
  fake OpenAI-compatible server (tests/support/fake_llm.py, no latency, answering ``valid``);
* ``rcea codebook assign`` (two passes, 10 trajectories per call) against the same server,
  after an unmeasured setup (oracle induce, merge and freeze of every question's codebook);
* ``rcea report build`` (``--n-boot`` small: the estimators are not what is measured).

``--sizes 10000,100000`` runs the whole chain at each size and reports, per stage, the
peak-RSS ratio largest/smallest size: flat memory means a ratio near 1 for 10× records.
The server runs in its own process (its CPU competes with the client on a small machine).

Run: ``python benchmarks/bench_streaming.py [--sizes 100000,1000000]``. ``--smoke`` runs
two tiny sizes in seconds (``make test`` runs it so that the script cannot rot).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
from common import add_json_out, emit  # benchmarks/common.py

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

PER_QUESTION = 20
#: Questions of the probe set sampled at every checkpoint (a 640-question probe).
PROBE_QUESTIONS = 640
N_FAILED = 10
STRATEGIES = (["direct", "distribute", "factor", "direct"] * 5)[: PER_QUESTION - N_FAILED]
STAGES = ("ingest", "judge", "assign", "report")

SERVER = """
import json, sys, uvicorn
from tests.support.fake_llm import FakeLLM

def responder(task, messages):
    if task == "judge.validity":
        return json.dumps({"verdict": "valid", "rationale": "each step checked"})
    return None

server = FakeLLM(port=int(sys.argv[1]))
server.responder = responder
app = server.app()
uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
"""

SETUP = """
import sys
from pathlib import Path
from rcea.study.codebook import freeze_codebooks, induce, merge
from rcea.study.store import make_engine, session_scope
from rcea.pipeline.codebook import OracleBackend
from tests.support.fake_llm import strategy_of

engine = make_engine(sys.argv[1])
oracle = OracleBackend(strategy_of)
induce(engine, study="bench", backend=oracle, actor="bench", batch_size=20)
merge(engine, study="bench", backend=oracle, actor="bench")
with session_scope(engine) as s:
    freeze_codebooks(s, study="bench", actor="bench")
"""


def generate(path: Path, n: int) -> int:
    """About ``n`` records, rounded to whole probe sets (``PROBE_QUESTIONS`` questions ×
    ``PER_QUESTION`` at each of two runs per step), written line by line."""
    from tests.support.fake_llm import domain_records

    n_q = max(1, min(PROBE_QUESTIONS, n // PER_QUESTION))
    n_steps = max(1, round(n / (n_q * PER_QUESTION)))
    written = 0
    with path.open("w", encoding="utf-8") as fh:
        for si in range(n_steps):
            step = 10 * si
            for qi in range(n_q):
                q = f"q{qi:07d}"
                a, b, c = 2 + qi % 50, 3 + 2 * (qi % 50), 4 + qi % 7
                recs = domain_records(questions={q: list(STRATEGIES)}, n_failed=N_FAILED, step=step)
                for r in recs:
                    # every text distinct, at every step
                    r["text"] += f"\nCheck: {qi}, {step} and {r['seed']}, fine."
                    r["question"] = f"Compute ({a}+{b})*{c}. [{qi}]"
                    r.pop("validity", None)
                    r.pop("mode", None)
                    fh.write(json.dumps(r) + "\n")
                    written += 1
    return written


def start_server(port: int) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(
        [sys.executable, "-c", SERVER, str(port)],
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


def run_child(args: list[str], env: dict[str, str], cwd: Path) -> tuple[float, float, str]:
    """Run a child; return (seconds, its peak RSS in MB, its stdout)."""
    out_path = cwd / "child.out"
    with out_path.open("w") as out:
        t0 = time.perf_counter()
        proc = subprocess.Popen(args, env=env, cwd=cwd, stdout=out, stderr=subprocess.PIPE)
        _, status, usage = os.wait4(proc.pid, 0)
        dt = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    err = proc.stderr.read().decode() if proc.stderr else ""
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(args[3:6])} failed ({proc.returncode}):\n{err[-3000:]}")
    return dt, usage.ru_maxrss / 1024, out_path.read_text()


def chain(root: Path, n: int, port: int, concurrency: int, n_boot: int, until: str) -> dict:  # type: ignore[type-arg]
    root.mkdir(parents=True)
    src = root / "records.jsonl"
    n = generate(src, n)
    db = f"sqlite:///{root / 'store.db'}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("RCEA_")}
    env.update(
        RCEA_DATABASE_URL=db,
        RCEA_DATA_DIR=str(root / "data"),
        RCEA_LLM_BASE_URL=f"http://127.0.0.1:{port}/v1",
        RCEA_LLM_MODEL="fake",
        RCEA_LLM_API_KEY="k",
        RCEA_ACTOR="bench",
        PYTHONPATH=str(ROOT),
    )
    rcea = [sys.executable, "-c", "from rcea.app.cli import main; main()"]
    n_success = n // PER_QUESTION * len(STRATEGIES)
    out: dict = {"n": n, "n_successes": n_success}  # type: ignore[type-arg]
    sec, rss, _ = run_child([*rcea, "ingest", str(src), "--study", "bench"], env, root)
    out["ingest"] = {"seconds": sec, "peak_rss_mb": rss, "records": n}
    if until == "ingest":
        return _rates(out, until)
    run_child([*rcea, "judge", "freeze", "--name", "bench-judge", "--model", "fake"], env, root)
    sec, rss, text = run_child(
        [*rcea, "judge", "run", "--study", "bench", "--judge", "bench-judge",
         "--concurrency", str(concurrency), "--json"],
        env, root,
    )  # fmt: skip
    judged = json.loads(text)
    if judged["n_valid"] != n_success:
        raise SystemExit(f"judge: {judged['n_valid']} valid of {n_success}")
    out["judge"] = {"seconds": sec, "peak_rss_mb": rss, "records": n_success}
    if until == "judge":
        return _rates(out, until)
    t0 = time.perf_counter()
    run_child([sys.executable, "-c", SETUP, db], env, root)
    out["codebook_setup_s"] = time.perf_counter() - t0
    sec, rss, text = run_child(
        [*rcea, "codebook", "assign", "--study", "bench", "--concurrency", str(concurrency),
         "--batch-size", "10", "--json"],
        env, root,
    )  # fmt: skip
    assigned = json.loads(text)
    if assigned.get("n_failed"):
        raise SystemExit(f"assign: {assigned['n_failed']} failed calls")
    out["assign"] = {"seconds": sec, "peak_rss_mb": rss, "records": n_success}
    if until == "assign":
        return _rates(out, until)
    sec, rss, _ = run_child(
        [*rcea, "report", "build", "--study", "bench", "--n-boot", str(n_boot), "--json"],
        env, root,
    )  # fmt: skip
    out["report"] = {"seconds": sec, "peak_rss_mb": rss, "records": n}
    return _rates(out, until)


def _rates(out: dict, until: str) -> dict:  # type: ignore[type-arg]
    for stage in STAGES[: STAGES.index(until) + 1]:
        m = out[stage]
        m["records_per_s"] = m["records"] / m["seconds"]
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="100000,1000000", help="record counts, comma-separated")
    ap.add_argument("--records", type=int, default=None, help="one size only")
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--n-boot", type=int, default=20)
    ap.add_argument("--smoke", action="store_true", help="tiny sizes: does it still run?")
    ap.add_argument(
        "--until", choices=STAGES, default="report", help="last stage to run (each needs the last)"
    )
    add_json_out(ap)
    args = ap.parse_args()
    stages = STAGES[: STAGES.index(args.until) + 1]
    sizes = [args.records] if args.records else [int(s) for s in args.sizes.split(",")]
    if args.smoke:
        sizes = [200, 600]
    from tests.support.helpers import free_port

    port = free_port()
    server = start_server(port)
    runs = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for n in sizes:
                runs.append(
                    chain(Path(tmp) / f"n{n}", n, port, args.concurrency, args.n_boot, args.until)
                )
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=30)
    print(f"{'stage':<10}{'records':>10}{'seconds':>10}{'records/s':>12}{'peak RSS MB':>13}")
    for r in runs:
        for stage in stages:
            m = r[stage]
            print(
                f"{stage:<10}{m['records']:>10}{m['seconds']:>10.1f}"
                f"{m['records_per_s']:>12.0f}{m['peak_rss_mb']:>13.0f}"
            )
        if "codebook_setup_s" in r:
            print(f"(codebook setup, not measured: {r['codebook_setup_s']:.0f} s)")
    small, big = runs[0], runs[-1]
    ratio = {s: big[s]["peak_rss_mb"] / small[s]["peak_rss_mb"] for s in stages}
    print(
        f"peak RSS ratio {big['n']:,} / {small['n']:,} records: "
        + ", ".join(f"{s} {ratio[s]:.2f}" for s in stages)
    )
    figures: dict = {  # type: ignore[type-arg]
        "bench": "streaming",
        "smoke": args.smoke,
        "sizes": [r["n"] for r in runs],
        "concurrency": args.concurrency,
        "n_boot": args.n_boot,
        "until": args.until,
    }
    for r in runs:
        for stage in stages:
            figures[f"{stage}_records_per_s_{r['n']}"] = round(r[stage]["records_per_s"], 1)
            figures[f"{stage}_peak_rss_mb_{r['n']}"] = round(r[stage]["peak_rss_mb"])
    for stage in stages:
        figures[f"{stage}_rss_ratio"] = round(ratio[stage], 2)
    emit(figures, args.json_out)


if __name__ == "__main__":
    main()
