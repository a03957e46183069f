"""`rcea stats entropy-law` / `entropy-order` on files, checked against scipy and the
library function on the same inputs (docs/stats.md)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from scipy import stats as sps
from typer.testing import CliRunner

from rcea.app.cli import app

runner = CliRunner()
SIZES = (("0.5B", 0.5e9, 0.05, 0.60), ("1.5B", 1.5e9, 0.07, 0.70), ("7B", 7e9, 0.10, 0.85))


def _json(args: list[str]) -> dict:
    out = runner.invoke(app, [*args, "--json"])
    assert out.exit_code == 0, out.output
    return json.loads(out.stdout)


def _entropy(step: int) -> float:
    return 1.2 * math.exp(-step / 50.0) + 0.2


def _trace_rows(noise: float = 0.005) -> list[dict]:
    """Entropy every 4 steps, accuracy every 6 (uneven logging), three sizes."""
    rng = np.random.default_rng(3)
    rows = []
    for model, n, a, b in SIZES:
        for step in range(0, 241, 2):
            row: dict = {"run": "grpo", "model": model, "step": step, "n_params": n}
            if step % 4 == 0:
                h = _entropy(step)
                row |= {"entropy": h, "entropy_success": 0.8 * h, "entropy_failure": 1.3 * h}
            if step % 6 == 0:
                h = _entropy(step - step % 4)  # the latest logged entropy at or before
                row["accuracy"] = -a * math.exp(h) + b + float(rng.normal(0, noise))
            if len(row) > 5:
                rows.append(row)
    return rows


def _write_csv(path: Path, rows: list[dict]) -> Path:
    cols = [
        "run",
        "model",
        "step",
        "entropy",
        "accuracy",
        "entropy_success",
        "entropy_failure",
        "n_params",
    ]
    lines = [",".join(cols)]
    for r in rows:
        lines.append(",".join("" if r.get(c) is None else str(r[c]) for c in cols))
    path.write_text("\n".join(lines) + "\n")
    return path


def test_entropy_law_csv_matches_linregress_per_run(tmp_path: Path) -> None:
    rows = _trace_rows()
    data = _json(["stats", "entropy-law", str(_write_csv(tmp_path / "t.csv", rows))])
    assert data["fit_fraction"] == 0.15
    by = {r["model"]: r for r in data["runs"]}
    for model, _, a, _b in SIZES:
        acc = [r for r in rows if r["model"] == model and "accuracy" in r]
        h = np.array([_entropy(r["step"] - r["step"] % 4) for r in acc])
        y = np.array([r["accuracy"] for r in acc])
        ref = sps.linregress(np.exp(h), y)
        got = by[model]
        for key in ("a", "b", "r2", "rmse", "ceiling", "early_fit_rmse"):
            assert key in got
        assert got["a"] == pytest.approx(-ref.slope, rel=1e-9)
        assert got["b"] == pytest.approx(ref.intercept, rel=1e-9)
        assert got["r2"] == pytest.approx(ref.rvalue**2, rel=1e-9)
        assert got["ceiling"] == pytest.approx(ref.intercept + ref.slope, rel=1e-9)
        assert got["a"] == pytest.approx(a, abs=0.01)
        early = np.array([r["step"] <= 0.15 * 240 for r in acc])
        e = sps.linregress(np.exp(h[early]), y[early])
        pred = e.intercept + e.slope * np.exp(h[~early])
        assert got["early_fit_rmse"] == pytest.approx(
            math.sqrt(np.mean((pred - y[~early]) ** 2)), rel=1e-9
        )
        assert set(got["entropies"]) == {"global", "success", "failure"}
    (sc,) = data["scaling"]
    assert sc["largest"] == "7B" and sc["predicted_ceiling"] is not None
    assert data["comparison"]["best"] in ("global", "success", "failure")
    assert (
        "predicted performance best" in data["comparison"]["sentence"]
        or "tied" in (data["comparison"]["sentence"])
    )


def test_entropy_law_jsonl_fit_fraction_and_text(tmp_path: Path) -> None:
    rows = _trace_rows()
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    data = _json(["stats", "entropy-law", str(path), "--fit-fraction", "0.3", "--points"])
    run = data["runs"][0]
    assert run["entropies"]["global"]["cutoff_step"] == pytest.approx(0.3 * 240)
    pts = run["entropies"]["global"]["points"]
    assert all(es <= s for es, s in zip(pts["entropy_steps"], pts["steps"], strict=True))
    out = runner.invoke(app, ["stats", "entropy-law", str(path)])
    assert out.exit_code == 0 and "ceiling" in out.output and "grpo:7B" in out.output


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("run,model,step,entropy\n", "line 1: missing column(s) accuracy"),
        ("run,model,step,entropy,accuracy\ng,7B,x,0.5,\n", "line 2: step: expected a number"),
        ("run,model,step,entropy,accuracy\ng,7B,1,0.5,1.5\n", "line 2: accuracy: must lie in"),
        ("run,model,step,entropy,accuracy\ng,7B,1,abc,\n", "line 2: entropy: expected a number"),
        (
            "run,model,step,entropy,accuracy,n_params\ng,7B,1,0.5,,7e9\ng,7B,2,0.4,,8e9\n",
            "line 3: n_params: 8e+09 differs",
        ),
        (
            "run,model,step,entropy,accuracy\ng,7B,1,0.5,0.2\ng,7B,1,0.5,0.3\n",
            "line 3: accuracy: a second value at step 1",
        ),
    ],
)
def test_entropy_law_bad_input_names_file_line_field(
    tmp_path: Path, text: str, message: str
) -> None:
    path = tmp_path / "bad.csv"
    path.write_text(text)
    out = runner.invoke(app, ["stats", "entropy-law", str(path)])
    assert out.exit_code == 1 and f"{path}:" in out.output and message in out.output
    js = runner.invoke(app, ["stats", "entropy-law", str(path), "--json"])
    body = json.loads(js.stdout)
    assert js.exit_code == 1 and body["ok"] is False and message in body["error"]


def test_entropy_law_bad_jsonl_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text('{"run":"g","model":"7B","step":0,"entropy":0.5,"accuracy":null}\n{oops\n')
    js = runner.invoke(app, ["stats", "entropy-law", str(path), "--json"])
    assert js.exit_code == 1 and f"{path}:line 2: invalid JSON" in json.loads(js.stdout)["error"]


def test_entropy_order_matches_scipy_and_enumeration(tmp_path: Path) -> None:
    ent = [0.10, 0.35, 0.20, 0.50, 0.42, 0.30]
    greedy = [0.55, 0.41, 0.52, 0.38, 0.44, 0.47]
    passk = [0.80, 0.86, 0.83, 0.88, 0.79, 0.84]
    lines = ["run,model,entropy,greedy_accuracy,pass_at_k,failed"]
    for i, (h, g, p) in enumerate(zip(ent, greedy, passk, strict=True)):
        lines.append(f"r{i},7B,{h},{g},{p},")
    lines.append("broken,7B,0.9,0.01,0.02,true")
    lines.append("r0,3B,0.2,0.3,0.5,")
    path = tmp_path / "e.csv"
    path.write_text("\n".join(lines) + "\n")
    data = _json(["stats", "entropy-order", str(path)])
    res = data["by_model"]["7B"]
    assert res["excluded"] == ["broken"]
    metrics = {m["metric"]: m for m in res["metrics"]}
    assert set(metrics) == {"greedy_accuracy", "pass_at_k"}
    ref = sps.kendalltau(ent, greedy, variant="b")
    assert metrics["greedy_accuracy"]["kendall_tau"] == pytest.approx(ref.statistic, abs=1e-12)
    # no ties: the exact permutation null is Kendall's exact null distribution
    exact = sps.kendalltau(ent, greedy, method="exact").pvalue
    assert metrics["greedy_accuracy"]["p_value"] == pytest.approx(exact, abs=1e-12)
    assert data["by_model"]["3B"]["metrics"][0]["p_value"] is None  # one run
    assert data["kendall_tau"] is None  # two scales: per model only
    assert len(res["rank_table"]) == 6
    one = tmp_path / "one.csv"
    one.write_text("\n".join(lines[:7]) + "\n")
    single = _json(["stats", "entropy-order", str(one)])
    assert single["kendall_tau"]["greedy_accuracy"] == pytest.approx(ref.statistic)
    assert set(single["p_value"]) == {"greedy_accuracy", "pass_at_k"}
    out = runner.invoke(app, ["stats", "entropy-order", str(one)])
    assert out.exit_code == 0 and "tau_b" in out.output and "r3" in out.output


def test_entropy_order_bad_input(tmp_path: Path) -> None:
    path = tmp_path / "e.csv"
    path.write_text("run,model,entropy\nr,7B,0.1\n")
    js = runner.invoke(app, ["stats", "entropy-order", str(path), "--json"])
    assert js.exit_code == 1 and "needs at least one of" in json.loads(js.stdout)["error"]
    path.write_text("run,model,entropy,pass_at_k\nr,7B,0.1,0.5\nr,7B,0.2,0.6\n")
    js = runner.invoke(app, ["stats", "entropy-order", str(path), "--json"])
    assert "line 3: run r, model 7B already on line 2" in json.loads(js.stdout)["error"]
    path.write_text("run,model,entropy,pass_at_k,failed\nr,7B,0.1,0.5,maybe\n")
    js = runner.invoke(app, ["stats", "entropy-order", str(path), "--json"])
    assert "line 2: failed: expected true/false" in json.loads(js.stdout)["error"]


def test_scaling_needs_three_distinct_sizes(tmp_path: Path) -> None:
    rows = _trace_rows()
    for r in rows:  # 0.5B and 1.5B now claim one size
        if r["model"] == "1.5B":
            r["n_params"] = 0.5e9
    data = _json(["stats", "entropy-law", str(_write_csv(tmp_path / "t.csv", rows))])
    (sc,) = data["scaling"]
    assert sc["predicted_ceiling"] is None and "share one n_params" in sc["reason"]
    two = [r for r in _trace_rows() if r["model"] != "0.5B"]
    data = _json(["stats", "entropy-law", str(_write_csv(tmp_path / "t2.csv", two))])
    (sc,) = data["scaling"]
    assert sc["predicted_ceiling"] is None and "needs 3" in sc["reason"]
