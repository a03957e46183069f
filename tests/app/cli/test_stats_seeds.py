"""``rcea stats seeds RECORDS`` (docs/estimators.md item 17) and ``rcea stats mode-tail
RECORDS TAILS`` (item 16) on the seeded study of tests/study/report/test_report_replicates.py:
each equals the report's own section (``replicates``, ``mode_tail``) built from the same
records in a store; seeds' pass@k is checked against math.comb here; one seed says
"single seed" in words; bad inputs are refused in one line naming file, line and field,
as JSON under ``--json``."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

from rcea.app.cli import app
from rcea.study.records.ingest import ingest_file
from rcea.study.report.build import build_report
from rcea.study.report.schema import report_json
from rcea.study.store import require_study, session_scope
from rcea.study.store.measurements import list_measurements, record_measurement
from tests.study.report.test_report_replicates import (
    K_MIN,
    N_BOOT,
    SEEDS,
    STEPS,
    _add_tail_sums,
    _records,
)
from tests.support.helpers import write_jsonl

runner = CliRunner()
PASS_K = (1, 4)
REPORT_KW: dict[str, Any] = {"n_boot": N_BOOT, "k_min": K_MIN, "n_min": 4}


def _counts(recs: list[dict[str, Any]], seed: int, step: int) -> list[dict[str, Any]]:
    """Per question n (trajectories) and c (successes) of one seed's checkpoint."""
    out: dict[str, list[int]] = {}
    for r in recs:
        if r["train_seed"] == seed and r["step"] == step:
            nc = out.setdefault(r["question_id"], [0, 0])
            nc[0] += 1
            nc[1] += r["reward"]
    return [{"question_id": q, "n": n, "c": c} for q, (n, c) in sorted(out.items())]


def _study(
    engine, tmp_path: Path, seeds: tuple[int, ...] = SEEDS
) -> tuple[Path, list[dict[str, Any]]]:  # type: ignore[no-untyped-def]
    """The records file and a study of it whose pass@k measurements are the records' own
    counts (benchmark ``records``, as ``rcea stats seeds`` counts them)."""
    recs = _records(seeds)
    path = write_jsonl(tmp_path / "seeds.jsonl", recs)
    ingest_file(engine, path, study="sd", artifacts_dir=tmp_path / "art", data_dir=tmp_path)
    with session_scope(engine) as s:
        sid = require_study(s, name="sd").id
        for seed in seeds:
            for step in STEPS:
                record_measurement(
                    s,
                    study_id=sid,
                    kind="passk",
                    run="grpo",
                    model="tiny",
                    step=step,
                    key="records",
                    train_seed=seed,
                    payload={"k": list(PASS_K), "questions": _counts(recs, seed, step)},
                )
    return path, recs


def _report(engine) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    with session_scope(engine) as s:
        out = report_json(build_report(s, study="sd", **REPORT_KW))
    return json.loads(json.dumps(out))


def _seeds_cli(path: Path, report: dict[str, Any], *extra: str) -> Any:
    par = report["parameters"]
    args = ["stats", "seeds", str(path), "--k", ",".join(map(str, PASS_K))]
    for opt, name in (
        ("--k-min", "k_min"),
        ("--n-min", "n_min"),
        ("--n-draws", "n_draws"),
        ("--base-step", "base_step"),
        ("--base-run", "base_run"),
        ("--n-boot", "n_boot"),
        ("--seed", "seed"),
        ("--confidence", "confidence"),
    ):
        args += [opt, str(par[name])]
    return runner.invoke(app, [*args, *extra])


def test_stats_seeds_equals_the_reports_replicates_section(engine, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    path, recs = _study(engine, tmp_path)
    report = _report(engine)
    out = _seeds_cli(path, report, "--json")
    assert out.exit_code == 0, out.output
    data = json.loads(out.stdout)
    rep = report["replicates"]
    for key in ("runs", "single_seed", "sentence", "groups"):
        assert data[key] == rep[key], key
    group = next(g for g in data["groups"] if g["step"] == 10)
    names = {q["quantity"] for q in group["quantities"]}
    assert names == {"paired_ratio", "retention", "within_mode_entropy", "pass_at_1", "pass_at_4"}
    # pass@4 per seed: macro over questions of 1 - C(n-c, 4)/C(n, 4), by hand
    passk = next(q for q in group["quantities"] if q["quantity"] == "pass_at_4")
    want = [
        np.mean(
            [1 - math.comb(q["n"] - q["c"], 4) / math.comb(q["n"], 4) for q in _counts(recs, s, 10)]
        )
        for s in SEEDS
    ]
    assert [v["value"] for v in passk["seeds"]] == pytest.approx(want, rel=1e-12)
    assert passk["between_seed_sd"] == pytest.approx(np.std(want, ddof=1), rel=1e-9)
    assert passk["benchmark"] == "records"
    assert data["settings"]["seed"] == report["parameters"]["seed"]
    assert data["settings"]["n_boot"] == N_BOOT and data["notes"] == []

    text = _seeds_cli(path, report)
    assert text.exit_code == 0, text.output
    assert "paired_ratio" in text.stdout and "seed 3:" in text.stdout
    assert f"bootstrap: {N_BOOT} replicates" in text.stdout


def test_one_seed_says_single_seed_in_words(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "one.jsonl", _records((7,)))
    out = runner.invoke(
        app, ["stats", "seeds", str(path), "--k", "1", "--k-min", "4", "--n-boot", "50"]
    )
    assert out.exit_code == 0, out.output
    assert out.stdout.startswith("single seed: no (run, model, step) has two or more")
    assert "single seed" in out.stdout.splitlines()[2]  # the interval column, in words
    data = json.loads(
        runner.invoke(
            app, ["stats", "seeds", str(path), "--k", "1", "--n-boot", "50", "--json"]
        ).stdout
    )
    assert data["single_seed"] and all(g["single_seed"] for g in data["groups"])


def test_a_file_without_train_seed_is_single_seed_and_says_why(tmp_path: Path) -> None:
    recs = [{k: v for k, v in r.items() if k != "train_seed"} for r in _records((1,))]
    path = write_jsonl(tmp_path / "plain.jsonl", recs)
    out = runner.invoke(app, ["stats", "seeds", str(path), "--n-boot", "50", "--json"])
    assert out.exit_code == 0, out.output
    data = json.loads(out.stdout)
    assert data["single_seed"] and data["groups"] == [] and data["runs"] == []
    assert any("no record carries a train_seed" in n for n in data["notes"])


@pytest.mark.parametrize(
    ("edit", "args", "message"),
    [
        (None, ["--k", "1,x"], "--k must be comma-separated integers"),
        (None, ["--k", "0"], "--k must list integers >= 1"),
        ("validity", [], "successful record(s) have no validity verdict"),
        ("step", [], ":line 3: step"),
    ],
)
def test_stats_seeds_refuses_bad_input_in_one_json_line(
    tmp_path: Path, edit: str | None, args: list[str], message: str
) -> None:
    recs = _records((1, 2))
    if edit == "validity":
        next(r for r in recs if r["reward"] == 1)["validity"] = None
    elif edit == "step":
        recs[2]["step"] = "ten"
    path = write_jsonl(tmp_path / "bad.jsonl", recs)
    out = runner.invoke(app, ["stats", "seeds", str(path), "--n-boot", "20", *args, "--json"])
    assert out.exit_code != 0
    err = json.loads(out.stdout)
    assert message in err["error"], err
    if edit != "step":  # the records reader lists every bad line, one a line
        assert "\n" not in err["error"]


# --------------------------------------------------------------------------- mode-tail


def _tail_file(engine, tmp_path: Path) -> Path:  # type: ignore[no-untyped-def]
    """The study's ``tail_trajectories`` measurements as ``rcea probe covariance`` writes
    them to ``covariance/tail_trajectories.jsonl`` (MeasurementRow.to_dict per line)."""
    with session_scope(engine) as s:
        sid = require_study(s, name="sd").id
        rows = [
            {
                "kind": m.kind,
                "payload": m.payload,
                "run": m.run,
                "model": m.model,
                "step": m.step,
                "key": m.key,
                "train_seed": None if m.train_seed is None or m.train_seed < 0 else m.train_seed,
            }
            for m in list_measurements(s, study_id=sid, kind="tail_trajectories")
        ]
    assert len(rows) == len(SEEDS)
    return write_jsonl(tmp_path / "tail_trajectories.jsonl", rows)


def test_stats_mode_tail_equals_the_reports_mode_tail_section(engine, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    path, recs = _study(engine, tmp_path)
    _add_tail_sums(engine, recs, SEEDS)
    tails = _tail_file(engine, tmp_path)
    report = _report(engine)
    out = runner.invoke(app, ["stats", "mode-tail", str(path), str(tails), "--json"])
    assert out.exit_code == 0, out.output
    got = json.loads(out.stdout)["endpoints"]
    want = report["mode_tail"]
    assert len(want) == len(SEEDS) and [e["run"] for e in got] == [e["run"] for e in want]
    for g, w in zip(got, want, strict=True):
        ratios = g.pop("question_ratios")
        assert g == {k: v for k, v in w.items() if k != "failed_run"}
        assert len(ratios) == w["n_question_ratios"]
        if ratios:  # the quartiles are those of the listed per-question ratios
            qs = np.quantile(list(ratios.values()), [0.25, 0.5, 0.75])
            assert w["question_ratio_quartiles"] == pytest.approx(qs.tolist(), rel=1e-12)
    assert all(e["concentration_ratio"] is not None for e in got)

    text = runner.invoke(app, ["stats", "mode-tail", str(path), str(tails)])
    assert text.exit_code == 0, text.output
    first = got[0]
    assert first["run"] in text.stdout and f"{first['concentration_ratio']:.4g}" in text.stdout


def _tail_line(**over: Any) -> dict[str, Any]:
    line: dict[str, Any] = {
        "kind": "tail_trajectories",
        "run": "grpo",
        "model": "tiny",
        "step": 10,
        "train_seed": 1,
        "payload": {
            "quantile": 0.99,
            "trajectory_id": ["a", "b"],
            "question_id": ["q0", "q0"],
            "reward": [1, 0],
            "n_tokens": [3, 4],
            "positive_mass": [0.5, 0.1],
            "tail_positive_mass": [0.5, 0.0],
            "tail_tokens": [1, 0],
        },
    }
    for key, value in over.items():
        if key in line["payload"]:
            line["payload"][key] = value
        else:
            line[key] = value
    return line


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        (None, ": no such file"),
        (b"\xff\xfe{}\n", "UTF-8"),
        (["{not json"], ":line 1: invalid JSON"),
        ([_tail_line(), _tail_line(step=-1)], ":line 2: step: expected an integer >= 0"),
        ([_tail_line(n_tokens=[3])], ":line 1: payload: the per-trajectory lists differ"),
        ([_tail_line(positive_mass=[0.5, "x"])], ":line 1: payload.positive_mass[1]"),
        ([_tail_line(reward=[1, 2])], ":line 1: payload.reward[1]: expected 0 or 1"),
        ([_tail_line(), _tail_line()], ":line 2: run: endpoint grpo [train seed 1] tiny"),
        ([_tail_line(model="huge")], ":line 1: endpoint grpo [train seed 1] huge step 10 has no"),
        ([_tail_line(kind="tail")], ":line 1: kind: expected 'tail_trajectories'"),
    ],
)
def test_stats_mode_tail_refuses_a_bad_tails_file_in_one_json_line(
    tmp_path: Path, lines: list[Any] | bytes | None, message: str
) -> None:
    path = write_jsonl(tmp_path / "r.jsonl", _records((1,)))
    tails = tmp_path / "t.jsonl"
    if isinstance(lines, bytes):
        tails.write_bytes(lines)
    elif lines is not None:
        write_jsonl(tails, lines)
    out = runner.invoke(app, ["stats", "mode-tail", str(path), str(tails), "--json"])
    assert out.exit_code != 0
    err = json.loads(out.stdout)["error"]
    assert str(tails) in err and message in err, err
    assert "\n" not in err
