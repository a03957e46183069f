"""``build_report`` on a store made here: its numbers equal ``rcea stats ...`` on the same
records/CSVs and independent numpy/scipy references; the checkpoint policy; the README's
JSON keys match the report."""

from __future__ import annotations

import csv
import json
import math
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from scipy import stats as sps
from typer.testing import CliRunner

from rcea.app.cli import app as cli
from rcea.study.records.ingest import ingest_file
from rcea.study.report.build import build_report
from rcea.study.report.publication import ENTROPY_ONLY_LABEL
from rcea.study.report.schema import report_json
from rcea.study.store import require_study, session_scope
from rcea.study.store.measurements import record_measurement
from tests.support.helpers import write_jsonl
from tests.support.report_study import (
    FAILED_RUN,
    N_BOOT,
    N_Q,
    PER_Q,
    RUNS,
    STEPS,
    make_report_study,
    report_records,
)

README_PART = Path(__file__).resolve().parents[3] / "docs" / "reports.md"


# --------------------------------------------------------------------------- study


def build(engine, study: str = "rep", **kw: Any) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    with session_scope(engine) as s:
        return report_json(build_report(s, study=study, n_boot=N_BOOT, **kw))


def cli_json(*args: str) -> dict[str, Any]:
    res = CliRunner().invoke(cli, [*args, "--json"])
    assert res.exit_code == 0, res.output
    return json.loads(res.output)


def ckpt(rep: dict[str, Any], run: str, step: int) -> dict[str, Any]:
    return next(c for c in rep["checkpoints"] if (c["run"], c["step"]) == (run, step))


# --------------------------------------------------------------------------- numbers


def test_numbers_equal_rcea_stats(engine, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    # ids in reverse file order: the report follows ingest order, as `rcea stats` does
    records = make_report_study(engine, tmp_path, reverse_ids=True)
    rep = build(engine)
    json.dumps(rep, allow_nan=False)  # JSON-ready, no NaN

    # items 1-3: every key of `rcea stats entropy` (same records, same order)
    for run, step in (("grpo", 10), ("clipcov", 0)):
        ref = cli_json(
            "stats",
            "entropy",
            str(records),
            "--run",
            run,
            "--step",
            str(step),
            "--n-boot",
            str(N_BOOT),
        )
        for key in ("questions", "run", "model", "step"):
            ref.pop(key)
        assert ckpt(rep, run, step)["entropy"] == ref

    # item 5: retention of every checkpoint
    ref = cli_json("stats", "retention", str(records), "--n-boot", str(N_BOOT))
    assert ref["results"], ref
    for row in ref["results"]:
        run, step, model = row.pop("run"), row.pop("step"), row.pop("model")
        assert model == "tiny" and row.pop("error") is None
        assert row["base"] == {"run": run, "model": "tiny", "step": 0}
        assert ckpt(rep, run, step)["retention"] == row
    assert all(ckpt(rep, r, 0)["retention"] is None for r in RUNS)

    # item 8: pass@k recomputed from the stored per-question counts
    for p in rep["passk"]:
        assert p["recomputed"]
        path = tmp_path / "passk.csv"
        with session_scope(engine) as s:
            from rcea.study.store.measurements import list_measurements

            m = next(
                m
                for m in list_measurements(s, study_id=rep["study_id"], kind="passk")
                if (m.run, m.step) == (p["run"], p["step"])
            )
            qs = m.payload["questions"]
        with path.open("w", newline="") as fh:
            w = csv.writer(fh)
            w.writerow(["question_id", "n", "c"])
            w.writerows([q["question_id"], q["n"], q["c"]] for q in qs)
        ref = cli_json("stats", "passk", str(path), "--k", "1,4,8")
        assert p["pass_at_k"] == ref["pass_at_k"] and p["n_questions"] == ref["n_questions"]

    # item 6: covariance fit with the failed run excluded
    cov = rep["covariance"]
    path = tmp_path / "transitions.csv"
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["transition", "predicted", "observed", "run", "model"])
        w.writerows(
            [t["transition"], repr(t["predicted"]), repr(t["observed"]), t["run"], t["model"]]
            for t in cov["transitions"]
        )
    ref = cli_json("stats", "covfit", str(path), "--exclude-run", FAILED_RUN)
    assert cov["pooled"] == ref["pooled"] and cov["groups"] == ref["groups"]
    assert cov["excluded_runs"] == [FAILED_RUN] and cov["pooled"]["n"] == 6


def test_numbers_match_independent_references(engine, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    recs = report_records()
    make_report_study(engine, tmp_path)
    rep = build(engine)
    sel = [r for r in recs if (r["run"], r["step"]) == ("dapo", 20)]
    c = ckpt(rep, "dapo", 20)
    assert c["n"] == len(sel) and c["accuracy"] == pytest.approx(
        np.mean([r["reward"] for r in sel])
    )
    # outcome entropy: mean over questions of h_b(p̂₊)
    hb = []
    for q in range(N_Q):
        p = np.mean([r["reward"] for r in sel if r["question_id"] == f"q{q}"])
        hb.append(0.0 if p in (0, 1) else -p * math.log(p) - (1 - p) * math.log(1 - p))
    assert c["entropy"]["mean_outcome_entropy"] == pytest.approx(np.mean(hb), rel=1e-12)
    # validity: mean over questions with K₊ ≥ 8 of accepted / successes
    rates = []
    for q in range(N_Q):
        succ = [r for r in sel if r["question_id"] == f"q{q}" and r["reward"] == 1]
        if len(succ) >= 8:
            rates.append(np.mean([r["validity"] for r in succ]))
    assert c["validity"]["mean_validity_rate"] == pytest.approx(np.mean(rates), rel=1e-12)
    # mode entropy: N_eff = exp(-Σ q log q) over accepted, non-uncertain labels
    neff = []
    for q in range(N_Q):
        labels = [
            r["mode"]
            for r in sel
            if r["question_id"] == f"q{q}"
            and r["reward"] == 1
            and r["validity"] == 1
            and r["mode"] is not None
        ]
        if len(labels) >= 8:
            _, counts = np.unique(labels, return_counts=True)
            pr = counts / counts.sum()
            neff.append(math.exp(-(pr * np.log(pr)).sum()))
    assert c["modes"]["mean_n_eff"] == pytest.approx(np.mean(neff), rel=1e-12)
    # greedy macro accuracy = unweighted mean over benchmarks
    g = next(g for g in rep["greedy"] if (g["run"], g["step"]) == ("dapo", 20))
    assert g["macro_accuracy"] == pytest.approx(np.mean(list(g["accuracy"].values())))
    # association: scipy's Spearman over the non-failed methods at their reported step
    assoc = rep["association"]
    rows = [r for r in assoc["rows"] if r["run"] != FAILED_RUN]
    rho = sps.spearmanr([r["retention"] for r in rows], [r["pass_at_k"] for r in rows])[0]
    assert assoc["n"] == 3 and assoc["rho"] == pytest.approx(rho)
    assert assoc["excluded"] == [FAILED_RUN] and assoc["k"] == 8


def test_failed_run_checkpoint_policy(engine, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    make_report_study(engine, tmp_path)
    rep = build(engine)
    fail = {f["run"]: f for f in rep["failure"]}
    assert fail[FAILED_RUN]["failed"] and fail[FAILED_RUN]["checks"][0]["peak_step"] == 10
    # reported at the last stored checkpoint <= the peak step, the others at their last
    assert fail[FAILED_RUN]["reported_step"] == 10
    assert fail[FAILED_RUN]["reported_reason"] == "last pre-failure milestone"
    assert {fail[r]["reported_step"] for r in RUNS if r != FAILED_RUN} == {20}
    assert [c["step"] for c in rep["checkpoints"] if c["run"] == FAILED_RUN and c["reported"]] == [
        10
    ]
    # excluded from the covariance fit, kept and marked in the tail table
    assert all(FAILED_RUN not in t for t in rep["covariance"]["pooled"]["transitions"])
    assert rep["covariance"]["pooled"]["excluded_transitions"] == [
        f"{FAILED_RUN}:0->10",
        f"{FAILED_RUN}:10->20",
    ]
    marked = [e for e in rep["tail"]["endpoints"] if e["failed_run"]]
    assert {e["run"] for e in marked} == {FAILED_RUN} and len(marked) == len(STEPS)
    assert rep["tail"]["direction_counts"]["quantile_tail"]["n_endpoints"] == len(RUNS) * 3


def test_quantities_say_what_they_depend_on(engine, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    make_report_study(engine, tmp_path)
    rep = build(engine)
    assert rep["audits"]["pair"]["partition_source"] == "mode-column"
    assert rep["audits"]["validity"]["status"] == "no-judge"
    by_section: dict[str, set[tuple[str, ...]]] = {}
    for q in rep["quantities"]:
        by_section.setdefault(q["section"], set()).add(tuple(q["depends_on"]))
        assert q["publishable"] == (q["blocked_by"] is None)
        label = ENTROPY_ONLY_LABEL if not q["depends_on"] else "audited"
        assert q["label"] == ("insufficient evidence" if q["evidence"] else label)
    for section in ("checkpoints", "entropy", "greedy", "passk", "covariance", "tail", "failure"):
        assert by_section[section] == {()}, section
    assert by_section["validity"] == {("validity",)}
    for section in ("modes", "retention", "association"):
        assert by_section[section] == {("partition", "validity")}, section
    blocked = {q["blocked_by"] for q in rep["quantities"] if not q["publishable"]}
    assert any("mode column" in b and "no frozen judge" in b for b in blocked)
    assert all(q["publishable"] for q in rep["quantities"] if not q["depends_on"])


def test_checkpoint_without_token_entropies_says_why(engine, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    recs = report_records()[: N_Q * PER_Q]
    for r in recs[:3]:
        del r["mean_token_entropy"]
    path = write_jsonl(tmp_path / "x.jsonl", recs)
    ingest_file(engine, path, study="x", artifacts_dir=tmp_path / "art", data_dir=tmp_path)
    rep = build(engine, study="x")
    c = rep["checkpoints"][0]
    assert c["entropy"] is None and "3 trajectory(ies)" in c["entropy_error"]
    assert rep["covariance"] is None and rep["tail"] is None and rep["association"] is None


@pytest.mark.parametrize(
    ("kind", "payload", "message"),
    [
        ("covariance_transition", {"predicted": 0.1}, "payload lacks observed"),
        ("passk", {"k": [1], "questions": [{"n": 4}]}, "payload lacks questions[0].c"),
        (
            "accuracy_trace",
            {"points": [{"step": 2, "accuracy": 0.5}, {"step": 2, "accuracy": 0.4}]},
            "steps must be strictly increasing",
        ),
        (
            "tail",
            {
                **dict.fromkeys(
                    (
                        "quantile",
                        "n_tokens",
                        "n_trajectories",
                        "n_groups",
                        "n_zero_variance_groups",
                        "mean_logprob",
                        "mean_advantage",
                        "gap_failure_minus_success_pp",
                    ),
                    0,
                ),
                "success": {"share": 1},
                "failure": {},
                "budgets": [],
            },
            "malformed tail report",
        ),
    ],
)
def test_malformed_measurement_names_itself(engine, tmp_path: Path, kind, payload, message) -> None:  # type: ignore[no-untyped-def]
    path = write_jsonl(tmp_path / "x.jsonl", report_records()[: N_Q * PER_Q])
    ingest_file(engine, path, study="x", artifacts_dir=tmp_path / "art", data_dir=tmp_path)
    with session_scope(engine) as s:
        sid = require_study(s, name="x").id
        record_measurement(
            s, study_id=sid, kind=kind, run="grpo", model="tiny", step=10, payload=payload
        )
    with pytest.raises(ValueError, match=re.escape(message)) as err:
        build(engine, study="x")
    assert f"measurement {kind} (run='grpo' model='tiny' step=10" in str(err.value)


# --------------------------------------------------------------------------- report keys


KEYS_DOC = README_PART.parent / "report-keys.md"
#: objects whose keys are open (the producer's logged metrics, the calibration report)
OPEN = ("training_curves[].points[]", "audits.validity.report")


def _documented() -> set[str]:
    """Every key path of the generated docs/report-keys.md (``[]``: list items,
    ``{}``: the values of a mapping)."""
    text = KEYS_DOC.read_text(encoding="utf-8")
    return set(re.findall(r"^\s*\* `([^`]+)`:", text, flags=re.M))


def _paths(obj: Any, prefix: str, documented: set[str]) -> set[str]:
    """The key paths of ``obj`` spelled as in the docs: a dict whose children the docs
    list under ``prefix{}`` is a mapping (its keys are data: benchmarks, models, questions)."""
    out: set[str] = set()
    if prefix in OPEN:
        return out
    if isinstance(obj, dict):
        mapping = any(d.startswith(f"{prefix}{{}}.") for d in documented)
        for k, v in obj.items():
            p = f"{prefix}{{}}" if mapping else (f"{prefix}.{k}" if prefix else k)
            if not mapping:
                out.add(p)
            if any(
                d.startswith(f"{p}.") or d.startswith(f"{p}[]") or d.startswith(f"{p}{{}}")
                for d in documented
            ):
                out |= _paths(v, p, documented)
    elif isinstance(obj, list):
        for item in obj:
            out |= _paths(item, f"{prefix}[]", documented)
    return out


def test_generated_key_list_documents_every_report_key(engine, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """docs/report-keys.md (generated from the models; the README only links to it)
    names every key a real report has, at every depth, and nothing the report lacks at
    a level it fills."""
    make_report_study(engine, tmp_path)
    rep = build(engine)
    documented = _documented()
    assert len(documented) > 300
    actual = _paths(rep, "", documented)
    assert len(actual) > 250
    undocumented = sorted(actual - documented)
    assert not undocumented, f"report keys missing from docs/report-keys.md: {undocumented}"
    # the other direction: at every object the report fills, each documented key is there
    # (optional ones excepted: draws, scope, simulated, the changed-after-failure mark of an
    # unmarked quantity; gate fields of older events)
    parents = {p.rsplit(".", 1)[0] for p in actual if "." in p}
    optional = {
        "scope",
        "simulated",
        "checkpoints[].retention.draws",
        "quantities[].changed_after_failure",
    }
    absent = sorted(
        d
        for d in documented
        if "." in d
        and d.rsplit(".", 1)[0] in parents
        and d not in actual | optional
        and not d.rsplit(".", 1)[0].startswith(OPEN)
    )
    assert not absent, f"documented but absent from the report: {absent}"
    guide = README_PART.read_text(encoding="utf-8")
    section = guide.split("## Report JSON keys", 1)[1].split("\n## ", 1)[0]
    assert "(report-keys.md)" in section
    assert not re.search(r"^- `", section, flags=re.M), "the reports guide keeps its own key list"
