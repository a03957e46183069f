"""The Seeds page (docs/estimators.md item 17) through ``AppTest`` on a study with three
training seeds and one with a single seed: each estimator of the report's ``replicates``
section per (run, model, step) — each seed's point, the mean with its interval — as one
faceted chart and one table whose mean and SD are numpy's over the seeds' values; with one
seed, the section's words and no chart."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest

from rcea.app.view.data import report as report_data
from rcea.study.logins import add_researcher, logins_path
from rcea.study.settings import Settings, get_settings
from rcea.study.store import open_store
from tests.study.report.test_report_replicates import K_MIN, PASS_K, SEEDS, _study

MAIN = Path(__file__).resolve().parents[3] / "rcea" / "app" / "view" / "main.py"
PASSWORD = "correct horse battery"
N_BOOT = 200


def seeds_page(tmp: Path, monkeypatch: pytest.MonkeyPatch, seeds: tuple[int, ...]) -> AppTest:
    """Study ``sd`` with ``seeds``, the Seeds page run logged in."""
    settings = Settings(data_dir=tmp / "data")
    _study(open_store(settings), tmp, seeds=seeds)
    add_researcher(logins_path(settings), "tester", PASSWORD)
    monkeypatch.setenv("RCEA_DATA_DIR", str(settings.data_dir))
    get_settings.cache_clear()
    at = AppTest.from_file(str(MAIN), default_timeout=120)
    at.session_state["n_boot"] = N_BOOT
    at.session_state["k_min"] = K_MIN
    at.run()
    at.text_input(key="login_name").set_value("tester")
    at.text_input(key="login_password").set_value(PASSWORD)
    at.button(key="login_submit").click().run()
    at.switch_page("seeds.py").run()
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, [e.value for e in at.error]
    return at


def table(at: AppTest) -> pd.DataFrame:
    (frame,) = [d.value for d in at.dataframe if "estimator" in d.value.columns]
    return frame


def test_three_seeds_chart_and_table(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    at = seeds_page(tmp_path, monkeypatch, SEEDS)
    rep = report_data.report("sd", n_boot=N_BOOT, k_min=K_MIN)
    assert rep.replicates is not None
    (group,) = [g for g in rep.replicates.groups if g.step == 10]

    frame = table(at)
    rows = frame[frame["step"] == 10].set_index("estimator")
    estimators = {"paired_ratio", "retention", "within_mode_entropy",
                  "pass_at_1 (toy)", f"pass_at_{PASS_K} (toy)"}  # fmt: skip
    assert set(rows.index) == estimators
    for q in group.quantities:
        name = q.quantity + (f" ({q.benchmark})" if q.benchmark else "")
        values = [v.value for v in q.seeds]
        row = rows.loc[name]
        assert row["n_seeds"] == len(SEEDS)
        assert row["mean"] == pytest.approx(np.mean(values), rel=1e-12)
        assert row["between_seed_sd"] == pytest.approx(np.std(values, ddof=1), rel=1e-12)
        assert (row["ci_low"], row["ci_high"]) == (q.ci_low, q.ci_high)
        assert row["per_seed"] == "; ".join(
            f"{s}: {v:.4g}" for s, v in zip(SEEDS, values, strict=True)
        )
    # the mean's label as the paper tables mark it: no gate, the mode numbers are blocked
    assert rows.loc["retention", "label"].startswith("not publishable: ")
    assert rows.loc[f"pass_at_{PASS_K} (toy)", "label"] == "entropy-only (no audit)"
    assert rows.loc["paired_ratio", "label"] == "insufficient evidence"  # 6 questions < 10

    (spec,) = [json.loads(c.proto.spec) for c in at.get("vega_lite_chart")]
    assert spec["facet"]["row"]["field"] == "estimator"
    marks = [lay["mark"] for lay in spec["spec"]["layer"]]
    kinds = [m["type"] if isinstance(m, dict) else m for m in marks]
    assert kinds == ["errorbar", "point", "point"]
    assert not any("Single seed" in i.value for i in at.info)
    assert any("grpo [train seed 2]" in c.value for c in at.caption)


def test_one_seed_says_so_in_words(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    at = seeds_page(tmp_path, monkeypatch, (7,))
    (info,) = [i.value for i in at.info]
    assert info.startswith("Single seed: no (run, model, step) has two or more training seeds")
    assert not at.get("vega_lite_chart")
    frame = table(at)
    assert set(frame["label"]) == {"single seed"} and frame["between_seed_sd"].isna().all()
    assert frame["n_seeds"].max() == 1
