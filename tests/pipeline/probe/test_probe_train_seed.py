"""Training seeds through the probe (docs/estimators.md item 17): a checkpoint is (run,
model, training seed, step); the seed comes from each run dir's run.json (``rcea train run
--train-seeds`` writes it) or from ``[checkpoints] train_seed`` / ``--train-seed``, and a
contradiction is refused. Two seeds of one run at one step are two checkpoints: their own
files and resume keys, records, trajectory ids, transitions and measurements."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from rcea.pipeline.probe import (  # noqa: E402
    ConfigError,
    run_bench,
    run_covariance,
    run_entropy,
    run_sample,
    training_curve,
)
from rcea.pipeline.probe.common import trajectory_id  # noqa: E402
from rcea.pipeline.probe.config import (  # noqa: E402
    Checkpoint,
    checkpoint_train_seed,
    parse_config,
    resolve_checkpoints,
)
from rcea.pipeline.probe.covariance import transition_label, transitions  # noqa: E402
from rcea.pipeline.probe.evaluate import passk_checkpoints  # noqa: E402
from rcea.pipeline.records import read_records  # noqa: E402
from tests.support.probe import save_policy  # noqa: E402


def _run_dir(path: Path, base: Path, objective: str, train_seed: int | None, seed: int) -> Path:
    """A finished training run dir as ``rcea train run`` leaves it (10 steps, one saved
    checkpoint): run.json with the objective, the base and the training seed."""
    save_policy(path / "checkpoint-10", seed=seed, perturb=1e-3, base=base)
    meta: dict[str, Any] = {
        "config": {"objective": objective, "model": {"path": str(base)},
                   "training": {"max_steps": 10}},
        "result": {"steps": 10},
    }  # fmt: skip
    if train_seed is not None:
        meta["train_seed"] = train_seed
    (path / "run.json").write_text(json.dumps(meta))
    (path / "curves.jsonl").write_text(
        "".join(json.dumps({"step": s, "progress": s / 10, "entropy": 1.0 - s / 20}) + "\n"
                for s in (5, 10))
    )  # fmt: skip
    return path


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("seeds")
    base = save_policy(root / "base", seed=3)
    return {
        "base": base,
        "grpo0": _run_dir(root / "grpo" / "train-seed-0", base, "grpo", 0, seed=11),
        "grpo1": _run_dir(root / "grpo" / "train-seed-1", base, "grpo", 1, seed=12),
        "dapo": _run_dir(root / "dapo", base, "dapo", None, seed=13),
    }


def _cfg(runs: dict[str, Path], names: list[str], **checkpoints: Any) -> Any:
    return parse_config(
        {
            "probe": {"seed": 5, "k": 2, "max_new_tokens": 12, "torch_threads": 1},
            "questions": {"source": "toy", "split": "probe", "n": 2},
            "covariance": {"questions": 2, "trajectories": 2, "positions": 4},
            "bench": {
                "max_new_tokens": 12,
                "sets": [{"name": "ev", "split": "eval", "n": 2}],
                "passk": {"n": 2, "k": [1, 2]},
            },
            "checkpoints": {
                "run_dirs": [str(runs[n]) for n in names],
                "milestones": [0.0, 1.0],
                "model": "tiny",
                **checkpoints,
            },
        }
    )


def test_run_json_seeds_make_two_checkpoints_of_one_run_and_step(runs: dict[str, Path]) -> None:
    cks = resolve_checkpoints(_cfg(runs, ["grpo0", "grpo1", "dapo"], base_run="base"))
    assert [c.key for c in cks] == [
        ("base", None, "tiny", 0),
        ("dapo", None, "tiny", 10),
        ("grpo", 0, "tiny", 10),
        ("grpo", 1, "tiny", 10),
    ]
    labels = [c.label for c in cks]
    assert labels == [
        "base--tiny--step0",
        "dapo--tiny--step10",  # unseeded: the label it had before training seeds
        "grpo--train-seed-0--tiny--step10",
        "grpo--train-seed-1--tiny--step10",
    ]
    # without a shared base each seed's step 0 is its own (no duplicate-key error)
    cks = resolve_checkpoints(_cfg(runs, ["grpo0", "grpo1"]))
    assert [c.key for c in cks] == [
        ("grpo", 0, "tiny", 0), ("grpo", 0, "tiny", 10),
        ("grpo", 1, "tiny", 0), ("grpo", 1, "tiny", 10),
    ]  # fmt: skip
    # one chain of transitions and one pass@k endpoint per seed
    assert [transition_label(a, b) for a, b in transitions(cks)] == [
        "grpo/train-seed-0/tiny/0->10",
        "grpo/train-seed-1/tiny/0->10",
    ]
    assert [c.key for c in passk_checkpoints(cks) if c.step] == [
        ("grpo", 0, "tiny", 10),
        ("grpo", 1, "tiny", 10),
    ]
    # trajectory ids differ across seeds, and are the old ones without a seed
    a, b = cks[1], cks[3]
    assert trajectory_id(5, a, "q", 0) != trajectory_id(5, b, "q", 0)
    plain = Checkpoint(a.path, a.run, a.model, a.step)
    assert trajectory_id(5, plain, "q", 0) == trajectory_id(
        5, Checkpoint("x", "grpo", "tiny", 10, 1.0, 10), "q", 0
    )


def test_train_seed_option_sets_a_missing_seed_and_refuses_a_contradiction(
    runs: dict[str, Path], tmp_path: Path
) -> None:
    cks = resolve_checkpoints(_cfg(runs, ["dapo"], train_seed=7))
    assert {c.train_seed for c in cks} == {7}
    same = resolve_checkpoints(_cfg(runs, ["grpo1"], train_seed=1))
    assert {c.train_seed for c in same} == {1}
    with pytest.raises(ConfigError) as err:
        resolve_checkpoints(_cfg(runs, ["grpo0"], train_seed=1))
    msg = str(err.value)
    assert "run.json" in msg and "training seed 0" in msg and "is 1" in msg
    assert "\n" not in msg
    with pytest.raises(ConfigError, match=r"\[checkpoints\] train_seed: must be an integer"):
        _cfg(runs, ["dapo"], train_seed=-1)
    # a listed checkpoint: its own train_seed, else the option, else its run dir's run.json
    ck = str(runs["grpo1"] / "checkpoint-10")
    listed = _cfg(runs, [], list=[{"path": ck, "run": "g", "model": "m", "step": 10}])
    assert [c.train_seed for c in resolve_checkpoints(listed)] == [1]
    bad = _cfg(runs, [], list=[{"path": ck, "run": "g", "model": "m", "step": 10,
                                "train_seed": 4}])  # fmt: skip
    with pytest.raises(ConfigError, match="training seed 1, but"):
        resolve_checkpoints(bad)
    other = str(runs["base"])
    assert (
        resolve_checkpoints(
            _cfg(
                runs,
                [],
                list=[{"path": other, "run": "b", "model": "m", "step": 0, "train_seed": 4}],
            )  # fmt: skip
        )[0].train_seed
        == 4
    )
    # probe score's checkpoint: the run.json next to it, or the option
    assert checkpoint_train_seed(Path(ck), None) == 1
    assert checkpoint_train_seed(runs["grpo1"], 1) == 1
    assert checkpoint_train_seed(runs["base"], 3) == 3
    with pytest.raises(ConfigError, match="records training seed 1, but --train-seed is 2"):
        checkpoint_train_seed(Path(ck), 2)


def test_training_curve_carries_the_run_json_seed(runs: dict[str, Path]) -> None:
    assert training_curve(runs["grpo1"], model="tiny").train_seed == 1
    assert training_curve(runs["dapo"], model="tiny").train_seed is None
    assert training_curve(runs["dapo"], model="tiny", train_seed=2).train_seed == 2
    with pytest.raises(ConfigError, match="training seed 1, but --train-seed is 0"):
        training_curve(runs["grpo1"], model="tiny", train_seed=0)


def test_stages_carry_the_seed_into_records_transitions_and_measurements(
    runs: dict[str, Path], tmp_path: Path
) -> None:
    cfg = _cfg(runs, ["grpo0", "grpo1"], base_run="base")
    out = tmp_path / "out"
    res = run_sample(cfg, out, progress=False)
    assert res.units_run == 3 * 2  # base + two seeds' step 10, 2 questions each
    cols = read_records(out / "records.jsonl").columns
    by_seed: dict[Any, set[str]] = {}
    for run, seed, tid in zip(cols["run"], cols["train_seed"], cols["trajectory_id"],
                              strict=True):  # fmt: skip
        by_seed.setdefault((run, seed), set()).add(tid)
    assert set(by_seed) == {("base", None), ("grpo", 0), ("grpo", 1)}
    assert not by_seed[("grpo", 0)] & by_seed[("grpo", 1)]
    # resume keys hold the seed: a rerun finds all three checkpoints done
    again = run_sample(cfg, out, progress=False)
    assert again.units_run == 0 and again.units_skipped == 6
    # a third seed at the same step is new work, not "already done"
    manifest = json.loads((out / "manifest.json").read_text())
    assert set(manifest["done"]["sample"]) == {
        "base--tiny--step0",
        "grpo--train-seed-0--tiny--step10",
        "grpo--train-seed-1--tiny--step10",
    }

    run_entropy(cfg, out, progress=False)
    cov = run_covariance(cfg, out, progress=False)
    got = {(m.kind, m.run, m.train_seed, m.step) for m in cov.measurements}
    assert got == {
        (kind, "grpo", seed, 10)
        for kind in ("covariance_transition", "tail", "tail_trajectories")
        for seed in (0, 1)
    } | {("tail", "base", None, 0), ("tail_trajectories", "base", None, 0)}
    transitions_ = {m.payload["transition"] for m in cov.measurements
                    if m.kind == "covariance_transition"}  # fmt: skip
    assert transitions_ == {"grpo/train-seed-0/tiny/0->10", "grpo/train-seed-1/tiny/0->10"}
    assert "train_seed" in (out / "TRANSITIONS.csv").read_text().splitlines()[0]

    bench = run_bench(cfg, out / "bench", progress=False)
    kinds = {(m.kind, m.run, m.train_seed, m.step) for m in bench.measurements}
    for seed in (0, 1):
        assert ("greedy_accuracy", "grpo", seed, 10) in kinds
        assert ("passk", "grpo", seed, 10) in kinds
        assert ("accuracy_trace", "grpo", seed, -1) in kinds
    assert ("passk", "base", None, 0) in kinds
