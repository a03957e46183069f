"""The Training page (docs/training-live.md) reads runs' TensorBoard event files: the frame
holds what was written (undefined steps as gaps, never 0), and the page renders the split
and the outcome entropy per objective and model through ``AppTest``."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

pytest.importorskip("tensorboard")
torch = pytest.importorskip("torch")

from streamlit.testing.v1 import AppTest  # noqa: E402

from rcea.app.view import training_runs as tr  # noqa: E402
from rcea.study.logins import add_researcher, logins_path  # noqa: E402
from rcea.study.settings import Settings, get_settings  # noqa: E402
from tests.support.training_events import write_run  # noqa: E402

MAIN = Path(__file__).resolve().parents[3] / "rcea" / "app" / "view" / "main.py"


def test_frames_hold_the_event_values(tmp_path: Path) -> None:
    root = tmp_path / "runs"
    write_run(root / "a", "grpo")
    write_run(root / "b", "kl_cov")
    dirs = tr.run_dirs(root)
    assert dirs == [root / "a", root / "b"]
    frame = tr.live_frame(dirs)
    a = frame[frame["run"] == "grpo"].sort_values("step")
    assert a["model"].unique().tolist() == ["base-tiny"]
    assert a["progress"].tolist() == [0.25, 0.5, 0.75]
    assert a["entropy"].tolist() == pytest.approx([1.5, 1.4, 1.1])
    assert math.isnan(a["rcea/token_entropy_success"].tolist()[1])
    split = tr.split_frame(frame)
    succ = split[(split["series"] == "grpo · base-tiny") & (split["quantity"] == "successful")]
    assert succ["step"].tolist() == [1, 3]  # the undefined step is a gap, not 0
    assert tr.latest_frame(frame)["rcea/outcome_entropy"].tolist() == pytest.approx([0.4, 0.4])


def test_training_page_renders_the_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data = tmp_path / "data"
    write_run(data / "runs" / "grpo", "grpo")
    add_researcher(logins_path(Settings(data_dir=data)), "tester", "correct horse battery")
    monkeypatch.setenv("RCEA_DATA_DIR", str(data))
    get_settings.cache_clear()
    at = AppTest.from_file(str(MAIN), default_timeout=120)
    at.run()
    at.text_input(key="login_name").set_value("tester")
    at.text_input(key="login_password").set_value("correct horse battery")
    at.button(key="login_submit").click().run()
    at.switch_page("training.py").run()
    assert not at.exception, [e.value for e in at.exception]
    charts = [json.loads(c.proto.spec) for c in at.get("vega_lite_chart")]
    assert len(charts) == 2  # the split and the outcome entropy
    (latest,) = [d.value for d in at.dataframe if "rcea/outcome_entropy" in d.value.columns]
    assert latest["run"].tolist() == ["grpo"] and latest["step"].tolist() == [3]


def test_same_objective_and_model_in_two_dirs_stay_two_series(tmp_path: Path) -> None:
    """The demo's layout: ``<scale>/runs/<objective>`` for each scale, one base name."""
    for scale in ("tiny-s", "tiny-m"):
        write_run(tmp_path / "demo" / scale / "runs" / "grpo", "grpo", "/w/base")
    dirs = tr.run_dirs(tmp_path)
    assert len(dirs) == 2
    series = sorted(tr.live_frame(dirs)["series"].unique())
    assert series == ["grpo · base (tiny-m/runs/grpo)", "grpo · base (tiny-s/runs/grpo)"]


def test_the_predicted_ceiling_is_drawn_and_labelled_a_prediction(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from torch.utils.tensorboard import SummaryWriter

    data = tmp_path / "data"
    run = data / "runs" / "grpo"
    write_run(run, "grpo")
    writer = SummaryWriter(log_dir=str(run / "runs" / "stamp"))  # the same event folder
    writer.add_scalar("train/rcea/entropy_law_ceiling", 0.62, 3)
    writer.close()
    add_researcher(logins_path(Settings(data_dir=data)), "tester", "correct horse battery")
    monkeypatch.setenv("RCEA_DATA_DIR", str(data))
    get_settings.cache_clear()
    at = AppTest.from_file(str(MAIN), default_timeout=120)
    at.run()
    at.text_input(key="login_name").set_value("tester")
    at.text_input(key="login_password").set_value("correct horse battery")
    at.button(key="login_submit").click().run()
    at.switch_page("training.py").run()
    assert not at.exception, [e.value for e in at.exception]
    assert "Predicted accuracy ceiling — a prediction" in [s.value for s in at.subheader]
    charts = [json.loads(c.proto.spec) for c in at.get("vega_lite_chart")]
    assert len(charts) == 3
    assert charts[2]["encoding"]["y"]["title"] == "predicted ceiling b − a (prediction)"
