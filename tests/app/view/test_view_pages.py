"""Every page of the Streamlit view through ``AppTest`` on three stores — empty, ingested
records only, and a full study (codebook cycle with a pending extension request, a pair
audit with labels and a disagreement, measurements) built with the real domain functions —
plus the Audit page's approve/reject buttons against the domain's own result, and the
login that guards all of it (nothing shown, nothing decided before a researcher logs in;
decisions recorded under the logged-in name)."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from scipy import stats
from sklearn.metrics import f1_score
from sqlmodel import select
from streamlit.testing.v1 import AppTest
from typer.testing import CliRunner

from rcea.annotation.payloads import ParsedAnnotation
from rcea.app.cli import app as cli_app
from rcea.app.view.data import report as report_data
from rcea.study.codebook import (
    final_labels,
    list_extensions,
    researcher_queue,
)
from rcea.study.logins import add_researcher, logins_path
from rcea.study.pair_audit.gate import gate_status, record_final_gate
from rcea.study.pair_audit.labels import record_annotation
from rcea.study.pair_audit.sampling import audit_pairs, get_audit
from rcea.study.settings import Settings, get_settings
from rcea.study.store import list_events, open_store, require_study, session_scope
from rcea.study.store.models import AuditTask, CodebookVersion
from tests.support.fake_llm import MODEL
from tests.support.helpers import fake_person
from tests.support.view_store import (
    _phase,
    full_store,
    observed,
)

ORACLE = "tests.support.fake_llm:strategy_of"
MAIN = Path(__file__).resolve().parents[3] / "rcea" / "app" / "view" / "main.py"
PAGES = ("overview.py", "entropy.py", "modes.py", "covariance.py", "seeds.py", "audit.py")
RESEARCHERS = ("tester", "carol", "dave")
PASSWORD = "correct horse battery"


def ingested_store(tmp: Path) -> Settings:
    """Study ``s`` with records only: base step 0 and checkpoint step 100."""
    settings = Settings(data_dir=tmp / "data")
    _phase(settings, tmp, 0)
    _phase(settings, tmp, 100)
    return settings


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Data dirs of the three stores, built once for the module."""
    out = {}
    for name, build in (("ingested", ingested_store), ("full", full_store)):
        tmp = tmp_path_factory.mktemp(name)
        build(tmp)
        out[name] = tmp / "data"
    out["empty"] = tmp_path_factory.mktemp("empty") / "data"
    for data in out.values():
        for name in RESEARCHERS:
            add_researcher(logins_path(Settings(data_dir=data)), name, PASSWORD)
    return out


def use_store(monkeypatch: pytest.MonkeyPatch, data: Path) -> None:
    monkeypatch.setenv("RCEA_DATA_DIR", str(data))
    get_settings.cache_clear()


def login(at: AppTest, name: str, password: str = PASSWORD) -> AppTest:
    """Fill and submit the view's login form, as a researcher in the browser does."""
    at.text_input(key="login_name").set_value(name)
    at.text_input(key="login_password").set_value(password)
    return at.button(key="login_submit").click().run()


def app_at(page: str, researcher: str = "tester", **state: Any) -> AppTest:
    """The app run once on the entry page, logged in as ``researcher`` through the login
    form, then switched to ``page`` and run again."""
    at = AppTest.from_file(str(MAIN), default_timeout=120)
    at.session_state["n_boot"] = 200
    for k, v in state.items():
        at.session_state[k] = v
    at.run()
    login(at, researcher)
    if page != PAGES[0]:
        at.switch_page(page).run()
    return at


def no_exception(at: AppTest) -> None:
    assert not at.exception, [e.value for e in at.exception]


def frame_with(at: AppTest, column: str) -> pd.DataFrame:
    """The first data frame on the page that has ``column``."""
    for df in at.dataframe:
        if column in df.value.columns:
            return df.value
    raise AssertionError(f"no data frame with a {column!r} column")


def chart_marks(at: AppTest) -> list[set[str]]:
    """The mark types of every Altair chart on the page (a layered chart: all layers)."""
    out = []
    for chart in at.get("vega_lite_chart"):
        spec = json.loads(chart.proto.spec)
        spec = spec.get("spec", spec)  # a faceted chart: its inner spec
        layers = spec.get("layer", [spec])
        out.append({(lay["mark"]["type"] if isinstance(lay["mark"], dict) else lay["mark"])
                    for lay in layers})  # fmt: skip
    return out


def chart_specs(at: AppTest) -> list[dict[str, Any]]:
    """The Vega-Lite spec of every Altair chart on the page."""
    return [json.loads(chart.proto.spec) for chart in at.get("vega_lite_chart")]


def x_encodings(spec: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        lay["encoding"]["x"] for lay in spec.get("layer", [spec]) if "x" in lay.get("encoding", {})
    ]


def column_config(at: AppTest, column: str) -> dict[str, Any]:
    """The column configuration of the first data frame with ``column``."""
    for df in at.dataframe:
        if column in df.value.columns:
            return json.loads(df.proto.columns or "{}")
    raise AssertionError(f"no data frame with a {column!r} column")


def assert_every_checkpoint_labelled(at: AppTest, checkpoints: list[str]) -> None:
    """The ratio/retention chart: an ordinal x axis sorted in the given order, one label
    per checkpoint, and no label dropped on overlap."""
    (spec,) = [s for s in chart_specs(at) if "facet" not in s and any(
        (lay["mark"]["type"] if isinstance(lay["mark"], dict) else lay["mark"]) == "errorbar"
        for lay in s.get("layer", [s]))]  # fmt: skip
    xs = x_encodings(spec)
    assert xs and all(x["field"] == "checkpoint" and x["type"] == "ordinal" for x in xs)
    for x in xs:
        assert x["sort"] == checkpoints
        assert x["axis"]["values"] == checkpoints and x["axis"]["labelOverlap"] is False


def records(data: Path) -> pd.DataFrame:
    """The fixture's records as ingested (read back from its JSONL files, not the store)."""
    files = sorted(data.parent.glob("step*.jsonl"))
    return pd.concat([pd.read_json(f, lines=True) for f in files], ignore_index=True)


@pytest.mark.parametrize("store", ["empty", "ingested", "full"])
@pytest.mark.parametrize("page", PAGES)
def test_page_renders(
    page: str, store: str, stores: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    use_store(monkeypatch, stores[store])
    at = app_at(page)
    no_exception(at)
    if store == "empty":
        assert any("No studies yet" in i.value for i in at.info)
    else:
        assert at.sidebar.selectbox[0].value == "s"
        assert not at.error, [e.value for e in at.error]


HH_FULL_STORE = 41 / 45  # F1_HH of full_store's preliminary gate over all pairs (pinned)


def test_overview_shows_gate_values_against_thresholds(
    stores: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    use_store(monkeypatch, stores["full"])
    at = app_at("overview.py")
    audits = frame_with(at, "human_human_macro_f1")
    assert audits["status"].tolist() == ["preliminary"]
    reqs = frame_with(at, "requirement")
    assert reqs["requirement"].tolist() == [
        "human_human_macro_f1",
        "automatic_macro_f1",
        "gap",
        "different_precision",
        "different_recall",
        "automatic_coverage",
    ]
    # the rubric's defaults; 12 pairs, one A/B disagreement (on a 'same' or 'different')
    assert reqs["threshold"].tolist() == [0.85, 0.85, 0.05, 0.80, 0.80, 0.95]
    assert reqs["passed"].isna().all()  # preliminary: reported, not gated
    hh = reqs.loc[reqs["requirement"] == "human_human_macro_f1", "value"].item()
    # full_store's labels: A = the automatic label, B the same except on pairs[1]
    engine = open_store(Settings(data_dir=stores["full"]))
    with session_scope(engine) as s:
        pairs = audit_pairs(s, audit_id=get_audit(s, study="s").id)
    engine.dispose()
    # F1_HH is over every pair both labelled (docs/estimators.md item 10), uncertain pairs included
    a = [p.automatic or "same" for p in pairs]
    flip = {"same": "different", "different": "same"}
    b = [flip[x] if p.id == pairs[1].id else x for p, x in zip(pairs, a, strict=True)]
    assert hh == pytest.approx(f1_score(a, b, average="macro"), abs=1e-12)
    assert hh == pytest.approx(HH_FULL_STORE, abs=1e-12)
    cp = frame_with(at, "accuracy")
    recs = records(stores["full"])
    expected = recs.groupby(["run", "step"])["reward"].mean()
    for row in cp.itertuples():
        assert row.accuracy == pytest.approx(expected[(row.run, row.step)])


def test_overview_shows_the_flow_per_checkpoint(
    stores: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The CONSORT-style flow of every checkpoint on the overview page; its first two
    stages counted here from the fixture's own JSONL files, not from the store."""
    use_store(monkeypatch, stores["full"])
    at = app_at("overview.py")
    no_exception(at)
    flow = frame_with(at, "imported")
    assert list(flow.columns) == [
        "checkpoint", "imported", "successes", "judged", "accepted", "assigned",
        "eligible: paired_ratio", "eligible: validity", "eligible: modes", "eligible: retention",
    ]  # fmt: skip
    recs = records(stores["full"])
    assert len(flow) == recs.groupby(["run", "step"]).ngroups
    for row in flow.itertuples():
        step = int(row.checkpoint.rsplit("@ ", 1)[1])
        run = row.checkpoint.split(" · ")[0]
        ck = recs[(recs["run"] == run) & (recs["step"] == step)]
        ok = ck[ck["reward"] == 1]
        assert row.imported == f"{len(ck)} / {ck['question_id'].nunique()}"
        assert row.successes == f"{len(ok)} / {ok['question_id'].nunique()}"


def test_entropy_page_ratios_match_an_independent_computation(
    stores: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The paired ratio per checkpoint is the geometric mean over questions of
    mean H_tok(failed) / mean H_tok(successful) — recomputed here from the records."""
    use_store(monkeypatch, stores["full"])
    at = app_at("entropy.py")
    ratios = frame_with(at, "paired_ratio")
    recs = records(stores["full"])
    for row in ratios.itertuples():
        ck = recs[(recs["run"] == row.run) & (recs["step"] == row.step)]
        per_q = ck.groupby(["question_id", "reward"])["mean_token_entropy"].mean().unstack()
        expected = math.exp(np.log(per_q[0] / per_q[1]).mean())
        assert row.paired_ratio == pytest.approx(expected, rel=1e-9)
        assert row.ci_low <= row.paired_ratio <= row.ci_high
    decomp = frame_with(at, "max |residual|")
    assert (decomp["max |residual|"].abs() < 1e-9).all()
    # tiny residuals in scientific notation, not truncated to 0.00000000000000
    residual_cfg = column_config(at, "max |residual|")
    assert residual_cfg["max |residual|"]["type_config"]["format"] == "%.2e"
    # every checkpoint of the ratio chart has its own axis label, in the frame's order
    with_ci = ratios.dropna(subset=["paired_ratio"])
    assert_every_checkpoint_labelled(at, list(dict.fromkeys(with_ci["checkpoint"])))
    # training traces on progress, then the ratio with CI error bars and the line y = 1,
    # then the entropy-performance law: points, fit, early prediction and its band
    assert chart_marks(at) == [{"line"}, {"errorbar", "point", "rule"}, {"area", "line", "point"}]
    law_spec = chart_specs(at)[2]
    assert law_spec["facet"]["column"]["field"] == "entropy"
    # the law of grpo_main: accuracy at steps 0, 50, 100 paired with the entropy logged at
    # the same steps (1 − 0.05·k at step 10·k), against scipy's OLS of R on exp(H)
    law = frame_with(at, "early_fit_rmse")
    row = law[law["run"].str.startswith("grpo_main")].iloc[0]
    ref = stats.linregress(np.exp([1.0, 0.75, 0.5]), [0.5, 0.6, 0.7])
    assert row["a"] == pytest.approx(-ref.slope) and row["b"] == pytest.approx(ref.intercept)
    assert row["ceiling"] == pytest.approx(ref.intercept + ref.slope)
    traces = json.loads(at.get("vega_lite_chart")[0].proto.spec)
    assert traces["encoding"]["x"]["field"] == "progress"
    assert at.selectbox(key="training_metric").options == ["entropy", "train.loss"]
    at.selectbox(key="training_metric").set_value("train.loss").run()
    no_exception(at)
    assert chart_marks(at)[0] == {"line"}


def test_modes_page_distribution_and_codebook_browser(
    stores: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    use_store(monkeypatch, stores["full"])
    at = app_at("modes.py")
    no_exception(at)
    assert any("Not publishable" in w.value for w in at.warning)
    retention = frame_with(at, "retention")
    assert sorted(retention["step"]) == [100, 100]
    shown_ret = retention.dropna(subset=["retention"])
    assert_every_checkpoint_labelled(at, list(dict.fromkeys(shown_ret["checkpoint"])))
    assert retention["retention"].notna().all()
    # Mode counts of q00 at the chosen checkpoint: the records' own mode column (the
    # partition was frozen from it), counted independently.
    at.selectbox(key="mode_q").set_value("q01").run()
    ckpt = at.selectbox(key="mode_ckpt").value
    shown = frame_with(at, "share")
    recs = records(stores["full"])
    run = ckpt.split(" · ")[0]
    sel = recs[(recs["question_id"] == "q01") & (recs["reward"] == 1)]
    at_ckpt = sel[(sel["run"] == run) & (sel["step"] == 100)]["mode"].fillna("uncertain")
    got = shown[shown["checkpoint"] == ckpt].set_index("mode")["count"].to_dict()
    assert got == at_ckpt.value_counts().to_dict()
    assert chart_marks(at) == [{"errorbar", "point", "rule"}, {"bar"}, {"bar"}]
    # Between-mode vs within-mode entropy (item 15): the report's own numbers, one bar
    # pair per checkpoint with both parts
    real = frame_with(at, "within_mode_entropy")
    rep_real = {
        (e.run, e.step): e.report
        for e in report_data.report("s", n_boot=200, seed=0, k_min=8).realization
    }
    assert len(real) == sum(r is not None for r in rep_real.values()) > 0
    for _, row in real.iterrows():
        want = rep_real[(row["run"], row["step"])]
        assert want is not None
        assert math.isclose(row["within_mode_entropy"], want.within_mode_entropy)
        assert math.isclose(row["mode_entropy"], want.mode_entropy)
    bars = chart_specs(at)[1]
    assert bars["encoding"]["xOffset"]["field"] == "part"
    # Codebook browser: q00 at v1 with its modes' example trajectories and provenance.
    assert at.selectbox(key="cb_q").value == "q00"
    assert at.radio(key="cb_v_q00").options == ["v1"]
    captions = " ".join(c.value for c in at.caption)
    assert "initial freeze" in captions and f"model {MODEL}" in captions
    modes = {e.label.split(" — ")[1] for e in at.expander if " — " in e.label}
    assert modes == {"direct", "distribute"}


def test_covariance_page_fit_matches_ols(
    stores: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The pooled fit is OLS of observed on predicted over the non-failed run only."""
    use_store(monkeypatch, stores["full"])
    at = app_at("covariance.py")
    fit = frame_with(at, "slope").set_index("scope").loc["pooled (non-failed)"]
    pred = np.array([-0.01 * (k + 1) for k in range(3)])  # grpo_main, slope 1.0
    obs = np.array([observed(p, k) for k, p in enumerate(pred)])
    slope, intercept = np.polyfit(pred, obs, 1)
    assert fit["n"] == 3
    assert fit["slope"] == pytest.approx(slope) and fit["intercept"] == pytest.approx(intercept)
    assert fit["pearson_r"] == pytest.approx(np.corrcoef(pred, obs)[0, 1])
    transitions = frame_with(at, "in_fit")
    assert transitions.groupby("run")["in_fit"].all().to_dict() == {
        "clipcov_ablation": False,
        "grpo_main": True,
    }
    assert any("clipcov_ablation" in w.value for w in at.warning)
    assert chart_marks(at) == [{"line", "point"}]  # identity line + points
    q99 = frame_with(at, "gap_pp")
    assert q99["failed_run"].tolist() == [True, False]  # kept and marked
    # the direction counts are a labelled table, not a bare collapsed JSON widget
    assert len(at.get("json")) == 0
    assert any("Direction counts" in m.value for m in at.markdown)
    counts = frame_with(at, "selection")
    assert len(counts) >= 1 and counts["selection"].notna().all()


def test_audit_page_progress_confusions_and_links(
    stores: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    use_store(monkeypatch, stores["full"])
    at = app_at("audit.py")
    progress = frame_with(at, "labelled").set_index("role")
    assert progress.loc["A", "labelled"] == progress.loc["A", "of"] == 12
    assert progress.loc["B", "labelled"] == 12
    assert progress.loc["adjudicator", "of"] == 1 and progress.loc["adjudicator", "labelled"] == 0
    dis = frame_with(at, "adjudication_task")
    assert len(dis) == 1 and dis["A"].item() != dis["B"].item()
    with session_scope(open_store(get_settings())) as s:
        pair = next(p for p in audit_pairs(s, audit_id=1) if p.pair_key == dis["pair_key"].item())
    assert dis["adjudication_task"].item() == (
        f"{fake_person('adjudicator').url}/projects/3/data?task={3000 + pair.id}"
    )
    titles = [m.value for m in at.markdown]
    assert "**A vs B (human–human)**" in titles and "**automatic vs B**" in titles
    assert chart_marks(at) == [{"bar"}] + [{"rect", "text"}] * 3  # progress, confusions
    assert {"approve-1", "reject-1"} <= _keys(at)


def test_audit_page_axes_adjudication_count_calibration_and_table_width(
    stores: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    use_store(monkeypatch, stores["full"])
    at = app_at("audit.py")
    no_exception(at)
    # the progress bars run from 0 to the pairs of the audit (no degenerate axis)
    (bars,) = [sp for sp in chart_specs(at) if sp.get("mark") in ("bar", {"type": "bar"})]
    assert bars["encoding"]["x"]["scale"]["domain"] == [0, 12]
    # one pair goes to adjudication and none is decided yet: 1 still needed
    metric = next(m for m in at.metric if m.label == "need adjudication")
    assert metric.value == "1"
    # the disagreement table fits the page: no trajectory-id columns shown
    dis = next(d for d in at.dataframe if "adjudication_task" in d.value.columns)
    shown = list(dis.proto.column_order)
    assert "pair_key" in shown and "adjudication_task" in shown
    assert "trajectory_a" not in shown and "trajectory_b" not in shown
    # validity calibration progress has its own section (none in this store)
    assert any(h.value == "Validity calibration" for h in at.header)
    assert any("No validity calibration yet" in c.value for c in at.caption)


def test_progress_bars_none_before_any_label_and_mode_names() -> None:
    from rcea.app.view.charts import mode_label, progress_bars

    zero = pd.DataFrame(
        {"role": ["A", "B", "adjudicator"], "labelled": [0, 0, 0], "of": [24, 24, 0]}
    )
    assert progress_bars(zero) is None
    some = zero.assign(labelled=[3, 0, 0])
    spec = progress_bars(some).to_dict()  # type: ignore[union-attr]
    assert spec["encoding"]["x"]["scale"]["domain"] == [0, 24]
    names = {"m1": "direct", "m2": "distribute"}
    assert [mode_label(m, names) for m in ("m1", "m2", "m3", "uncertain", "direct")] == [
        "direct (m1)",
        "distribute (m2)",
        "m3",
        "uncertain",
        "direct",
    ]


def test_overview_audit_summary_fits_the_page(
    stores: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    use_store(monkeypatch, stores["full"])
    at = app_at("overview.py")
    audits = next(d for d in at.dataframe if "human_human_macro_f1" in d.value.columns)
    shown = list(audits.proto.column_order)
    assert shown == [
        "audit", "status", "stage", "pairs", "human_human_macro_f1", "automatic_macro_f1",
        "gap", "different_precision", "different_recall", "automatic_coverage",
    ]  # fmt: skip
    cfg = json.loads(audits.proto.columns)
    assert cfg["human_human_macro_f1"]["label"] == "A–B F1"
    assert cfg["gap"]["type_config"]["format"] == "%.3f"


def _copy_full(stores: dict[str, Path], tmp_path: Path, name: str) -> Path:
    dest = tmp_path / name / "data"
    shutil.copytree(stores["full"], dest)
    return dest


def _codebook_state(data: Path) -> dict[str, Any]:
    """What approving changes, comparable between two stores."""
    with session_scope(open_store(Settings(data_dir=data))) as s:
        versions = s.exec(select(CodebookVersion).order_by(CodebookVersion.id)).all()
        return {
            "versions": [
                (v.question_id, v.version, v.content_hash, v.modes, v.reason, v.frozen_by)
                for v in versions
            ],
            "extensions": [
                (e.id, e.status, e.affected_trajectory_ids, e.decided_by, e.reason)
                for e in list_extensions(s, study="s")
            ],
            "events": [
                (e.kind, e.actor, e.payload.get("new_version"))
                for e in list_events(s)
                if e.kind.startswith("codebook.extension.") or e.kind == "codebook.freeze"
            ][-2:],
        }


def _labels(data: Path) -> dict[str, tuple[Any, ...]]:
    """Each accepted trajectory's final codebook outcome (which version assigned it)."""
    with session_scope(open_store(Settings(data_dir=data))) as s:
        study_id = require_study(s, name="s").id
        return {
            lab.trajectory_id: (lab.question_id, lab.version, lab.mode, lab.why)
            for lab in final_labels(s, study_id=study_id)
        }


def test_approve_in_the_view_equals_the_cli(
    stores: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Approving request #1 in the view leaves the store as `rcea codebook approve 1` does
    on a copy of the same store: a v2 of q00 whose parent is v1, the request approved with
    its affected trajectories, the same events — and, like the CLI, the affected
    trajectories reassigned against v2 (the view's backend from RCEA_CODEBOOK_*)."""
    view_data = _copy_full(stores, tmp_path, "view")
    cli_data = _copy_full(stores, tmp_path, "cli")
    before = _labels(view_data)
    use_store(monkeypatch, cli_data)
    out = CliRunner().invoke(
        cli_app,
        ["codebook", "approve", "1", "--study", "s", "--reason", "ok", "--backend", "oracle",
         "--oracle", ORACLE, "--actor", "carol", "--json"],
    )  # fmt: skip
    assert out.exit_code == 0, out.output
    assert json.loads(out.output)["assign"]["n_run"] > 0
    monkeypatch.setenv("RCEA_CODEBOOK_BACKEND", "oracle")  # settings read by use_store
    monkeypatch.setenv("RCEA_CODEBOOK_ORACLE", ORACLE)
    use_store(monkeypatch, view_data)
    at = app_at("audit.py", researcher="carol")
    at.text_input(key="reason-1").set_value("ok")
    at.button(key="approve-1").click().run()
    no_exception(at)
    assert any("refrozen as v2" in m.value and "reassigned" in m.value for m in at.success)
    assert "approve-1" not in _keys(at)  # decided: no buttons any more
    view_state, cli_state = _codebook_state(view_data), _codebook_state(cli_data)
    assert view_state == cli_state
    after = _labels(view_data)
    assert after == _labels(cli_data)
    moved = {t for t, lab in after.items() if lab[0] == "q00" and lab[1] == 2}
    assert moved and all(before[t][1] == 1 for t in moved)  # reassigned from v1 to v2
    q00 = [v for v in view_state["versions"] if v[0] == "q00"]
    assert [v[1] for v in q00] == [1, 2] and q00[1][3][-1]["name"] == "factor"
    assert view_state["extensions"][0][1] == "approved"
    assert view_state["events"][-1] == ("codebook.extension.approve", "carol", 2)
    # The browser now shows v2 with v1 as parent.
    at.switch_page("modes.py").run()
    assert at.radio(key="cb_v_q00").options == ["v2", "v1"]


def _keys(at: AppTest) -> set[str]:
    return {b.key for b in at.button}


def test_reject_in_the_view(
    stores: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = _copy_full(stores, tmp_path, "view")
    use_store(monkeypatch, data)
    at = app_at("audit.py", researcher="dave", actor="mallory")  # old sidebar key: ignored
    at.button(key="reject-1").click().run()
    no_exception(at)
    assert any("researcher queue" in m.value for m in at.success)
    assert "approve-1" not in _keys(at)
    with session_scope(open_store(get_settings())) as s:
        (ext,) = list_extensions(s, study="s")
        assert (ext.status, ext.decided_by) == ("rejected", "dave")
        ids = {t for p in ext.proposals for t in p["trajectory_ids"]}
        assert ids <= {d.trajectory_id for d in researcher_queue(s, study="s")}


def test_modes_page_says_audited_after_a_passing_final_gate(
    stores: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = _copy_full(stores, tmp_path, "gated")
    use_store(monkeypatch, data)
    with session_scope(open_store(get_settings())) as s:
        audit = get_audit(s, study="s")
        # the adjudicator decides the one disputed pair; the final gate's own report (the
        # report types it), recorded as passed
        task = s.exec(
            select(AuditTask).where(AuditTask.audit_id == audit.id, AuditTask.role == "adjudicator")
        ).one()
        ann = ParsedAnnotation(9001, task.task_id, task.project_id, 13, "same", None, False)
        record_annotation(s, audit, ann, source="test")
        gate = gate_status(s, audit, final=True)
        record_final_gate(s, audit, {**gate, "status": "passed"}, "r")
    at = app_at("modes.py")
    no_exception(at)
    assert not at.warning
    assert any("passed the final gate of audit s-audit-1" in m.value for m in at.success)
    overview = app_at("overview.py")
    assert frame_with(overview, "human_human_macro_f1")["status"].tolist() == ["passed"]


# ---------------------------------------------------------------------------- the login


def _shows_nothing(at: AppTest) -> None:
    """The login page only: no study, no data frame, chart or decision button."""
    no_exception(at)
    assert [t.value for t in at.title] == ["RCEA Audit — log in"]
    assert not at.dataframe and not at.get("vega_lite_chart")
    assert not at.sidebar.selectbox
    assert not {k for k in _keys(at) if k and k.startswith(("approve-", "reject-"))}
    assert not at.expander  # extension requests (with provenance) are not listed


@pytest.mark.parametrize("page", PAGES)
def test_not_logged_in_shows_no_data_and_no_decision_buttons(
    page: str, stores: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    use_store(monkeypatch, stores["full"])
    at = AppTest.from_file(str(MAIN), default_timeout=120)
    at.session_state["actor"] = "carol"  # the old sidebar field grants nothing
    at.run()
    _shows_nothing(at)
    if page != PAGES[0]:
        at.switch_page(page).run()
        _shows_nothing(at)


def test_wrong_password_and_unknown_name_are_refused(
    stores: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    use_store(monkeypatch, stores["full"])
    at = AppTest.from_file(str(MAIN), default_timeout=120).run()
    for name, password in (("carol", "wrong password"), ("mallory", PASSWORD), ("carol", "")):
        login(at, name, password)
        assert [e.value for e in at.error] == ["Wrong researcher name or password."]
        _shows_nothing(at)
    login(at, " carol ", PASSWORD)  # surrounding spaces are not part of the name
    no_exception(at)
    assert at.sidebar.selectbox[0].value == "s"
    assert any("Logged in as **carol**" in c.value for c in at.sidebar.caption)
    at.switch_page("audit.py").run()
    assert {"approve-1", "reject-1"} <= _keys(at)
    at.sidebar.button(key="logout").click().run()
    _shows_nothing(at)


def test_no_account_says_how_to_make_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    use_store(monkeypatch, tmp_path / "bare")
    at = AppTest.from_file(str(MAIN), default_timeout=120).run()
    assert any("rcea view add-researcher NAME" in w.value for w in at.warning)
    assert not at.text_input and not at.sidebar.selectbox


def test_decision_is_recorded_under_the_logged_in_researcher(
    stores: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """RCEA_ACTOR and a preset actor name change nothing: the event's actor and the
    request's decider are the researcher who logged in."""
    data = _copy_full(stores, tmp_path, "who")
    use_store(monkeypatch, data)
    monkeypatch.setenv("RCEA_ACTOR", "mallory")
    at = app_at("audit.py", researcher="dave", actor="mallory")
    at.text_input(key="reason-1").set_value("not a new mode")
    at.button(key="reject-1").click().run()
    no_exception(at)
    with session_scope(open_store(get_settings())) as s:
        (ext,) = list_extensions(s, study="s")
        assert (ext.status, ext.decided_by, ext.reason) == ("rejected", "dave", "not a new mode")
        (event,) = [e for e in list_events(s) if e.kind == "codebook.extension.reject"]
        assert event.actor == "dave"


def test_auth_none_applies_only_on_loopback(
    stores: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """RCEA_VIEW_AUTH=none skips the login only when the server listens on loopback; on
    every interface (Streamlit's default, empty address) the login still applies."""
    from streamlit import config

    use_store(monkeypatch, stores["full"])
    monkeypatch.setenv("RCEA_VIEW_AUTH", "none")
    monkeypatch.setenv("RCEA_ACTOR", "local-user")
    get_settings.cache_clear()
    old = config.get_option("server.address")
    try:
        for address in ("", "0.0.0.0", "192.168.1.20"):
            config.set_option("server.address", address)
            _shows_nothing(AppTest.from_file(str(MAIN), default_timeout=120).run())
        config.set_option("server.address", "127.0.0.1")
        at = AppTest.from_file(str(MAIN), default_timeout=120).run()
        no_exception(at)
        assert at.sidebar.selectbox[0].value == "s"
        assert any("Logged in as **local-user**" in c.value for c in at.sidebar.caption)
    finally:
        config.set_option("server.address", old)


OIDC_SECRETS = {
    "auth": {
        "redirect_uri": "http://localhost:8501/oauth2callback",
        "cookie_secret": "not-a-real-secret",
        "client_id": "rcea",
        "client_secret": "not-a-real-secret",
        "server_metadata_url": "https://idp.example/.well-known/openid-configuration",
    }
}


def test_oidc_login_through_st_login(
    stores: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """RCEA_VIEW_AUTH=oidc: without an [auth] section the view says what to configure;
    logged out it offers the identity provider's login only; logged in (AppTest's
    simulated ``st.user``) the pages work and a decision is recorded under the e-mail."""
    data = _copy_full(stores, tmp_path, "oidc")
    use_store(monkeypatch, data)
    monkeypatch.setenv("RCEA_VIEW_AUTH", "oidc")
    get_settings.cache_clear()
    at = AppTest.from_file(str(MAIN), default_timeout=120).run()
    assert any("[auth] section" in e.value for e in at.error)
    assert not at.dataframe and not at.sidebar.selectbox

    at = AppTest.from_file(str(MAIN), default_timeout=120)
    at.secrets = OIDC_SECRETS
    at.user = {"is_logged_in": False}
    at.run()
    _shows_nothing(at)
    assert _keys(at) == {"oidc_login"}

    at = AppTest.from_file(str(MAIN), default_timeout=120)
    at.secrets = OIDC_SECRETS
    at.user = {"is_logged_in": True, "email": "erin@lab.example", "name": "Erin"}
    at.session_state["n_boot"] = 200
    at.run()
    no_exception(at)
    assert any("Logged in as **erin@lab.example**" in c.value for c in at.sidebar.caption)
    at.switch_page("audit.py").run()
    at.button(key="reject-1").click().run()
    no_exception(at)
    with session_scope(open_store(get_settings())) as s:
        (ext,) = list_extensions(s, study="s")
        assert (ext.status, ext.decided_by) == ("rejected", "erin@lab.example")
