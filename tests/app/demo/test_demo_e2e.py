"""``rcea demo --quick --simulate-annotators --no-serve`` end to end against the session
Label Studio server: it reaches a passing final pair gate, a completed validity
calibration and a published bundle whose numbers equal ``rcea stats`` on the same
records; a second run skips every finished step."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.support.helpers import free_port

pytestmark = pytest.mark.slow
ENTROPY_KEYS = (
    "mean_outcome_entropy",
    "mean_token_entropy",
    "mean_sequence_entropy",
    "mean_conditional_entropy_success",
    "mean_conditional_entropy_failure",
    "broad_ratio",
    "coverage_success",
    "coverage_failure",
    "n_paired_questions",
    "paired_ratio",
    "paired_ci_low",
    "paired_ci_high",
    "direction_share",
    "sign_test_p",
)
RETENTION_KEYS = ("retention", "ci_low", "ci_high", "n_eligible", "n_denominator")


def _rcea(env: dict[str, str], *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    exe = Path(sys.executable).parent / "rcea"
    return subprocess.run(
        [str(exe), *args], capture_output=True, text=True, env=env, timeout=timeout
    )


def _close(a: Any, b: Any) -> bool:
    if a is None or b is None:
        return a is b
    return a == pytest.approx(b, rel=1e-9, abs=1e-12)


def test_quick_simulated_demo_publishes_and_resumes(tmp_path: Path, demo_cache_dir: Path) -> None:
    """The demo as `make demo` runs it: it starts one Label Studio server per person
    itself (three: SIMULATED A, B and adjudicator) and, with --no-serve, stops them when
    it ends. The one demo test on this path; the others use the session's pool. Its
    base, training runs and probe output come from the session's demo cache when an
    earlier test built the same recipe (and go there otherwise)."""
    data = tmp_path / "data"
    env = {
        **os.environ,
        "RCEA_DATA_DIR": str(data),
        "RCEA_LABELSTUDIO_URL": f"http://127.0.0.1:{free_port()}",
        "RCEA_DEMO_CACHE_DIR": str(demo_cache_dir),
    }
    try:
        _demo_run_and_checks(env, data, tmp_path)
    finally:
        _rcea(env, "labelstudio", "stop")


def _demo_run_and_checks(env: dict[str, str], data: Path, tmp_path: Path) -> None:
    began = time.monotonic()
    run = _rcea(env, "demo", "--quick", "--simulate-annotators", "--no-serve", timeout=1800)
    first_seconds = time.monotonic() - began
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
    out = run.stdout
    lines = out.splitlines()

    # --- SIMULATED everywhere the simulation speaks
    assert lines[0].startswith("SIMULATED RUN:")
    # the demo started its own three servers and, with --no-serve, stopped them again
    assert "Label Studio: 3 server(s) started" in out, out[-3000:]
    assert "stopped 3 Label Studio server(s) started by this demo" in out, out[-3000:]
    status = _rcea(env, "labelstudio", "status", "--json")
    servers = json.loads(status.stdout)["servers"]
    assert len(servers) == 3 and not any(s["healthy"] for s in servers), servers
    about_sims = [ln for ln in lines if "sim-a" in ln or "adjudicator" in ln.lower()]
    assert about_sims and all("SIMULATED" in ln for ln in about_sims), about_sims
    assert "final gate PASSED" in out and "calibration complete" in out

    work = data / "demo" / "toy-quick-sim"
    state = json.loads((work / "state.json").read_text())
    steps = state["steps"]
    assert state["study"] == "toy-quick-sim" and state["simulate"] is True
    assert steps["gate"]["result"]["status"] == "passed"
    assert steps["simulate-validity"]["result"]["status"] == "complete"
    assert steps["simulate-pairs"]["result"]["simulated"] is True
    # the sequential gate settles (at the latest at its last look), and says so; the
    # hidden repeats were labelled. Which look depends on the trained policies' samples,
    # i.e. on the CPU's float kernels (look 2 on one machine, 3 on another); the settling
    # rule itself is tested on fixed labels (test_demo_sequential.py).
    sim_pairs = steps["simulate-pairs"]["result"]
    assert sim_pairs["settled_at_look"] in (1, 2, 3), sim_pairs["looks"]
    at = sim_pairs["settled_at_look"]
    assert f"sequential plan: the gate was settled at look {at} of 3" in out
    # before the last look the demo also says that the plan allows stopping there
    assert (f"settled (settled_pass) at look {at} of 3, before the last look" in out) == (at < 3)
    assert sim_pairs["hidden_repeats_labelled"] == {"A": 14, "B": 14}
    bundle = Path(steps["report"]["result"]["bundle"])
    assert bundle.parent.name == "bundles-SIMULATED"
    assert (bundle.parent / "SIMULATED.txt").read_text().startswith("SIMULATED")

    # --- the store agrees: gate.final passed, calibration completed, simulation recorded
    from rcea.study.settings import Settings
    from rcea.study.store import list_events, open_store, require_study, session_scope
    from rcea.study.validity_audit.status import validity_status

    eng = open_store(Settings(data_dir=data))
    with session_scope(eng) as s:
        st = require_study(s, name="toy-quick-sim")
        gates = list_events(s, kind="gate.final", study_id=st.id)
        assert [g.payload["status"] for g in gates] == ["passed"]
        looks = list_events(s, kind="gate.interim", study_id=st.id)
        settled = [e.payload["look"] for e in looks if e.payload["decision"] == "settled_pass"]
        assert settled and settled[0] == sim_pairs["settled_at_look"] and settled[-1] == 3
        assert validity_status(s, study_id=st.id)["status"] == "calibrated"
        sims = list_events(s, kind="demo.simulated", study_id=st.id)
        whats = {e.payload["what"] for e in sims}
        # "calibrated" needs the accepted-set check too (docs/validity-audit.md)
        assert whats == {
            "pair-audit labels",
            "validity calibration labels",
            "accepted-set check labels",
        }
        assert all(e.payload["simulated"] is True for e in sims)
        published = list_events(s, kind="report.publish", study_id=st.id)
        assert len(published) == 1 and "SIMULATED" in published[0].actor
    eng.dispose()

    _bundle_equals_stats(env, work, bundle, tmp_path)

    # --- the bundle verifies on its own (no store: RCEA_DATABASE_URL points nowhere),
    # including the calibration, re-derived from its held-out items
    bare = {**env, "RCEA_DATA_DIR": str(tmp_path / "nowhere")}
    ver = _rcea(bare, "report", "verify", str(bundle), "--json")
    body = json.loads(ver.stdout)
    assert ver.returncode == 0 and body["ok"], body["mismatches"][:20]
    assert body["not_rederived"] == [] and body["n_checked"] > 1000
    cal = json.loads((bundle / "calibration.json").read_text())
    assert cal["items"] and {i["human"] for i in cal["items"]} <= {"valid", "invalid"}

    # --- a second run skips every finished step
    began = time.monotonic()
    again = _rcea(env, "demo", "--quick", "--simulate-annotators", "--no-serve")
    assert again.returncode == 0, again.stdout + again.stderr
    step_lines = [ln for ln in again.stdout.splitlines() if ln.startswith("[")]
    assert len(step_lines) == len(steps) and all(
        ln.endswith("done earlier (skipped)") for ln in step_lines
    ), step_lines
    assert time.monotonic() - began < 30
    assert f"bundle          SIMULATED {bundle}" in again.stdout
    print(f"quick simulated demo: {first_seconds:.0f} s")


def _bundle_equals_stats(env: dict[str, str], work: Path, bundle: Path, tmp_path: Path) -> None:
    """The bundle's entropy, retention and pass@k numbers equal `rcea stats` on the demo's
    record files."""
    report = json.loads((bundle / "report.json").read_text())
    assert report["scope"].split(";")[0] == "full (audited)"  # ";": insufficient evidence
    assert report["simulated"] is True
    assert "SIMULATED" in (bundle / "report.html").read_text()
    assert json.loads((bundle / "hashes.json").read_text())["simulated"] is True
    assert report["audits"]["pair"]["status"] == "passed"
    assert report["audits"]["validity"]["status"] == "calibrated"
    params = report["parameters"]
    # --quick trains one policy scale, tiny-s: its files are under <work>/tiny-s/.
    probe_records = work / "tiny-s" / "probe" / "records.jsonl"
    final_records = work / "records-final.jsonl"
    checkpoints = report["checkpoints"]
    # The shared base (run "base", step 0) and the six runs at their one quick milestone.
    assert len(checkpoints) == 7 and {c["step"] for c in checkpoints} == {0, 16}
    assert [c["run"] for c in checkpoints if c["step"] == 0] == ["base"]
    assert {c["model"] for c in checkpoints} == {"tiny-s"}
    for ck in (checkpoints[0], checkpoints[-1]):
        res = _rcea(
            env,
            "stats",
            "entropy",
            str(probe_records),
            "--run",
            ck["run"],
            "--step",
            str(ck["step"]),
            "--k-min",
            str(params["k_min"]),
            "--n-boot",
            str(params["n_boot"]),
            "--seed",
            str(params["seed"]),
            "--json",
        )
        assert res.returncode == 0, res.stdout + res.stderr
        mine = json.loads(res.stdout)
        for key in ENTROPY_KEYS:
            assert _close(ck["entropy"][key], mine[key]), (ck["run"], key)

    res = _rcea(
        env,
        "stats",
        "retention",
        str(final_records),
        "--base-step",
        str(params["base_step"]),
        "--n-min",
        str(params["n_min"]),
        "--n-draws",
        str(params["n_draws"]),
        "--n-boot",
        str(params["n_boot"]),
        "--seed",
        str(params["seed"]),
        "--json",
    )
    assert res.returncode == 0, res.stdout + res.stderr
    stats = {(r["run"], r["step"]): r for r in json.loads(res.stdout)["results"]}
    compared = 0
    for ck in checkpoints:
        if ck["retention"] is None:
            continue
        mine = stats[(ck["run"], ck["step"])]
        for key in RETENTION_KEYS:
            assert _close(ck["retention"][key], mine[key]), (ck["run"], key)
        compared += ck["retention"]["retention"] is not None
    assert compared >= 3, "too few checkpoints with a retention value to compare"

    assert report["passk"], "no pass@k rows in the bundle"
    from rcea.study.settings import Settings
    from rcea.study.store import open_store, require_study, session_scope
    from rcea.study.store.measurements import list_measurements

    eng = open_store(Settings(data_dir=Path(env["RCEA_DATA_DIR"])))
    with session_scope(eng) as s:
        st = require_study(s, name=report["study"])
        counts = {
            (m.run, m.model, m.step, m.key): m.payload["questions"]
            for m in list_measurements(s, study_id=st.id, kind="passk")
        }
    eng.dispose()
    for row in report["passk"]:
        csv_path = tmp_path / f"passk-{row['run']}-{row['step']}.csv"
        with csv_path.open("w", newline="") as fh:
            w = csv.writer(fh)
            w.writerow(["question_id", "n", "c"])
            for q in counts[(row["run"], row["model"], row["step"], row["benchmark"])]:
                w.writerow([q["question_id"], q["n"], q["c"]])
        ks = ",".join(str(k) for k in sorted(int(k.split("_")[-1]) for k in row["pass_at_k"]))
        res = _rcea(env, "stats", "passk", str(csv_path), "--k", ks, "--json")
        assert res.returncode == 0, res.stdout + res.stderr
        for key, value in json.loads(res.stdout)["pass_at_k"].items():
            assert _close(row["pass_at_k"][key], value), (row["run"], key)
