"""A short CPU training run logs the ``rcea/`` numbers of every step through TRL's
``report_to``: TensorBoard's own reader finds every ``rcea/`` tag at every step in the event
files beside the checkpoints, ``rcea probe curves`` reads the same files, and the callback
also works on a plain ``trl.GRPOTrainer`` (docs/training-live.md)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

pytest.importorskip("trl")
pytest.importorskip("tensorboard")

from tensorboard.backend.event_processing.event_accumulator import (  # noqa: E402
    EventAccumulator,
)

from rcea.pipeline.event_curves import event_dirs  # noqa: E402
from rcea.pipeline.probe.curves import training_curve  # noqa: E402
from rcea.pipeline.training.config import parse_config  # noqa: E402
from rcea.pipeline.training.live_metrics import METRICS  # noqa: E402
from rcea.pipeline.training.run import run_training  # noqa: E402
from tests.support.small_base import build_small_base  # noqa: E402

pytestmark = [
    pytest.mark.slow,
    pytest.mark.filterwarnings("ignore::FutureWarning", "ignore::UserWarning"),
]
STEPS = 3


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_small_base(tmp_path_factory.mktemp("live") / "base")


def _config(base: Path, out: Path, objective: str = "grpo", **training: object):  # type: ignore[no-untyped-def]
    return parse_config(
        {
            "model": {"path": str(base)},
            "objective": {"name": objective},
            "training": {
                "output_dir": str(out),
                "max_steps": STEPS,
                "learning_rate": 5e-4,
                "per_device_train_batch_size": 8,
                "num_generations": 4,
                "max_completion_length": 16,
                "save_steps": STEPS,
                "seed": 3,
                "torch_threads": 1,
                "progress_bar": False,
                **training,
            },
        }
    )


def test_event_files_hold_every_rcea_tag_at_every_step(base: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    run_training(_config(base, out), progress=False)
    (events,) = event_dirs(out)
    assert events.parent == out / "runs"  # beside checkpoint-N/
    assert (out / f"checkpoint-{STEPS}").is_dir()
    acc = EventAccumulator(str(events), size_guidance={"scalars": 0})
    acc.Reload()
    tags = set(acc.Tags()["scalars"])
    for name in METRICS:
        values = acc.Scalars(f"train/{name}")
        assert [e.step for e in values] == list(range(1, STEPS + 1)), name
    assert "train/entropy" in tags  # TRL's global entropy, next to the split
    # outcome entropy is always defined; the report's curve reads the same files
    assert all(math.isfinite(e.value) for e in acc.Scalars("train/rcea/outcome_entropy"))
    (out / "curves.jsonl").unlink()  # the report's curve comes from the event files
    curve = training_curve(out, model="tiny")
    assert [p["step"] for p in curve.payload["points"]] == list(range(1, STEPS + 1))
    assert all("rcea/outcome_entropy" in p for p in curve.payload["points"])


def test_live_metrics_off_logs_none(base: Path, tmp_path: Path) -> None:
    out = tmp_path / "off"
    run_training(_config(base, out, live_metrics=False, max_steps=1), progress=False)
    acc = EventAccumulator(str(event_dirs(out)[0]))
    acc.Reload()
    assert not [t for t in acc.Tags()["scalars"] if t.startswith("train/rcea/")]


def test_plain_trl_trainer_with_the_callback(base: Path, tmp_path: Path) -> None:
    """Installed on TRL's own ``GRPOTrainer``, success is the first reward's value > 0.5."""
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOTrainer

    from rcea.pipeline.training.live_callback import RceaLiveCallback
    from rcea.pipeline.training.objectives import make_objective
    from rcea.pipeline.training.rewards import ToyReward
    from rcea.pipeline.training.run import build_dataset, grpo_args

    cfg = _config(base, tmp_path / "plain", max_steps=2)
    tokenizer = AutoTokenizer.from_pretrained(base)
    tokenizer.padding_side = "left"
    trainer = GRPOTrainer(
        model=AutoModelForCausalLM.from_pretrained(base),
        reward_funcs=[ToyReward()],
        args=grpo_args(cfg, make_objective("grpo"), progress=False),
        train_dataset=build_dataset(cfg, tokenizer),
        processing_class=tokenizer,
    )
    live = RceaLiveCallback().install(trainer)
    trainer.train()
    assert set(live.last) == set(METRICS)
    assert live.last["rcea/token_entropy"] > 0
    logged = [h for h in trainer.state.log_history if "loss" in h]
    assert len(logged) == 2
    acc = EventAccumulator(str(event_dirs(tmp_path / "plain")[0]))
    acc.Reload()
    assert {f"train/{m}" for m in METRICS} <= set(acc.Tags()["scalars"])
