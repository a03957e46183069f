"""Probe config parsing, checkpoint milestones, and the local benchmark readers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rcea.pipeline.probe.config import ConfigError, load_config, parse_config, run_checkpoints
from rcea.pipeline.probe.questions import DatasetError, last_boxed, load_questions, read_benchmark


def _fake_run(root: Path, saved: list[int], max_steps: int, final: bool = True) -> Path:
    """A training run dir as `rcea train run` leaves it (only what resolution reads)."""
    base = root / "base"
    base.mkdir(parents=True)
    (base / "config.json").write_text("{}")
    run = root / "run"
    for s in saved:
        (run / f"checkpoint-{s}").mkdir(parents=True)
        (run / f"checkpoint-{s}" / "config.json").write_text("{}")
    if final:
        (run / "final").mkdir(parents=True)
        (run / "final" / "config.json").write_text("{}")
    (run / "checkpoint-99-broken").mkdir(parents=True)
    cfg = {
        "objective": "kl_cov",
        "model": {"path": str(base)},
        "training": {"max_steps": max_steps},
    }
    (run / "run.json").write_text(json.dumps({"config": cfg, "result": {"steps": max_steps}}))
    return run


def test_milestones_pick_the_nearest_saved_checkpoint(tmp_path: Path) -> None:
    run = _fake_run(tmp_path, [50, 100, 150, 200], 200)
    cks = run_checkpoints(run, [0, 0.25, 0.5, 0.6, 1.0], model="tiny")
    assert [(c.step, Path(c.path).name) for c in cks] == [
        (0, "base"),
        (50, "checkpoint-50"),
        (100, "checkpoint-100"),  # 0.5 and 0.6 (120) both pick 100: one entry
        (200, "checkpoint-200"),
    ]
    assert {c.run for c in cks} == {"kl_cov"} and cks[1].progress == 0.25
    assert cks[0].label == "kl_cov--tiny--step0"
    every = run_checkpoints(run, "all", model="m", run="custom")
    assert [c.step for c in every] == [0, 50, 100, 150, 200] and every[0].run == "custom"


def test_final_stands_in_for_an_unsaved_last_step(tmp_path: Path) -> None:
    run = _fake_run(tmp_path, [30], 64)
    cks = run_checkpoints(run, [0, 0.5, 1.0], model="tiny")
    assert [(c.step, Path(c.path).name) for c in cks] == [
        (0, "base"),
        (30, "checkpoint-30"),
        (64, "final"),
    ]


def test_a_shared_base_is_probed_once_and_starts_every_run(tmp_path: Path) -> None:
    from rcea.pipeline.probe.config import resolve_checkpoints
    from rcea.pipeline.probe.covariance import transition_label, transitions
    from rcea.pipeline.probe.evaluate import passk_checkpoints

    first = _fake_run(tmp_path, [50, 100], 100)
    second = tmp_path / "run2"
    (second / "checkpoint-100").mkdir(parents=True)
    (second / "checkpoint-100" / "config.json").write_text("{}")
    meta = json.loads((first / "run.json").read_text())
    meta["config"]["objective"] = "grpo"
    (second / "run.json").write_text(json.dumps(meta))
    checkpoints = {"run_dirs": [str(first), str(second)], "milestones": [0, 0.5, 1.0]}
    cfg = parse_config({"checkpoints": {**checkpoints, "base_run": "base"}})
    cks = resolve_checkpoints(cfg)
    assert [c.label for c in cks] == [
        "base--tiny--step0",
        "grpo--tiny--step100",
        "kl_cov--tiny--step50",
        "kl_cov--tiny--step100",
    ]
    pairs = [transition_label(a, b) for a, b in transitions(cks, "base")]
    assert pairs == ["grpo/tiny/0->100", "kl_cov/tiny/0->50", "kl_cov/tiny/50->100"]
    assert [c.label for c in passk_checkpoints(cks)] == [
        "base--tiny--step0",
        "grpo--tiny--step100",
        "kl_cov--tiny--step100",
    ]
    # without base_run each run has its own step-0 row
    own = resolve_checkpoints(parse_config({"checkpoints": checkpoints}))
    assert [c.label for c in own if c.step == 0] == ["grpo--tiny--step0", "kl_cov--tiny--step0"]


def test_config_errors_name_the_table_and_key(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"\[probe\] kk: unknown key"):
        parse_config({"probe": {"kk": 1}}, "c.toml")
    with pytest.raises(ConfigError, match=r"\[probe\] k: expected int"):
        parse_config({"probe": {"k": "8"}}, "c.toml")
    with pytest.raises(ConfigError, match=r"\[nope\]: unknown table"):
        parse_config({"nope": {}}, "c.toml")
    with pytest.raises(ConfigError, match=r"\[bench.passk\] k: max k 32 exceeds n 16"):
        parse_config({"bench": {"passk": {"k": [1, 32]}}}, "c.toml")
    with pytest.raises(ConfigError, match=r"milestones"):
        parse_config({"checkpoints": {"milestones": [0, 1.5]}}, "c.toml")
    with pytest.raises(ConfigError, match=r"#1: needs path, run, model, step and optionally"):
        parse_config({"checkpoints": {"list": [{"path": "x", "run": "r"}]}}, "c.toml")
    with pytest.raises(ConfigError, match="no such config file"):
        load_config(tmp_path / "missing.toml")


def test_cli_overrides_and_the_shipped_example() -> None:
    cfg = load_config(
        Path(__file__).parents[3] / "rcea/pipeline/probe/configs/toy.toml",
        **{
            "probe.k": 2,
            "questions.n": 5,
            "bench.passk.n": 4,
            "bench.passk.k": [1, 2],
            "covariance.positions": None,
        },
    )
    assert (cfg.probe.k, cfg.questions.n, cfg.bench.passk.n, cfg.bench.passk.k) == (2, 5, 4, [1, 2])
    assert cfg.probe.seed == 2027 and cfg.covariance.positions == 64  # None = not given
    assert (cfg.covariance.questions, cfg.covariance.trajectories) == (40, 4)
    assert [s.name for s in cfg.bench.sets] == ["toy-eval"]


# --------------------------------------------------------------------------- readers


def test_jsonl_benchmark_with_math_verify(tmp_path: Path) -> None:
    path = tmp_path / "mini.jsonl"
    rows = [
        {"unique_id": "a", "problem": "What is 1/2?", "answer": "\\frac{1}{2}"},
        {"unique_id": "b", "problem": "Compute 2+3.", "solution": "So $2+3=\\boxed{5}$."},
        {"unique_id": "c", "question": "Set?", "answer": "\\{1, 2\\}"},
    ]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    qs = read_benchmark(path)
    assert [q.question_id for q in qs] == ["a", "b", "c"]
    assert qs[0].prompt.startswith("What is 1/2?\n") and "\\boxed{}" in qs[0].prompt
    assert qs[1].reference == "5"
    assert qs[0].score("... so \\boxed{0.5}").reward == 1  # equivalent forms
    assert qs[0].score("\\boxed{\\dfrac{1}{2}}").reward == 1
    assert qs[0].score("\\boxed{1/3}").reward == 0
    assert qs[0].score("no box").reward == 0 and qs[0].score("no box").answer is None
    assert qs[1].score("first \\boxed{4} then \\boxed{5}").reward == 1  # the last box counts
    assert qs[2].score("\\boxed{\\{2, 1\\}}").reward == 1
    s = qs[1].score("\\boxed{5}")
    assert (s.validity, s.strategy) == (None, None)
    drawn = read_benchmark(path, n=2, seed=1)
    assert drawn == read_benchmark(path, n=2, seed=1) and len(drawn) == 2


def test_parquet_benchmark_and_default_ids(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "bench.parquet"
    pq.write_table(pa.table({"question": ["1+1?", "2+2?"], "answer": ["2", "4"]}), path)
    qs = load_questions(str(path), prompt_template="Q: {question}\nA:")
    assert [q.question_id for q in qs] == ["bench-0", "bench-1"]
    assert qs[1].prompt == "Q: 2+2?\nA:" and qs[1].score("\\boxed{4}").reward == 1


def test_reader_errors_name_file_row_and_column(tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match=r"math500.jsonl: benchmark file not found; provide it"):
        read_benchmark(tmp_path / "math500.jsonl")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"problem": "x", "answer": "1"}\n{"problem": "y"}\n')
    with pytest.raises(DatasetError, match=r"bad.jsonl:line 2: no answer"):
        read_benchmark(bad)
    bad.write_text('{"problem": "x", "solution": "no box"}\n')
    with pytest.raises(DatasetError, match=r"line 1: solution: no \\boxed"):
        read_benchmark(bad)
    bad.write_text(
        '{"id": 1, "problem": "x", "answer": "1"}\n{"id": 1, "problem": "y", "answer": "2"}\n'
    )
    with pytest.raises(DatasetError, match=r"line 2: id: duplicate question id '1'"):
        read_benchmark(bad)
    bad.write_text("not json\n")
    with pytest.raises(DatasetError, match=r"line 1: invalid JSON"):
        read_benchmark(bad)
    (tmp_path / "x.csv").write_text("a,b\n")
    with pytest.raises(DatasetError, match="unsupported"):
        read_benchmark(tmp_path / "x.csv")


def test_last_boxed_handles_nested_braces() -> None:
    assert last_boxed("\\boxed{\\frac{1}{2}} and \\boxed{x^{2}}") == "x^{2}"
    assert last_boxed("\\boxed{unclosed") is None and last_boxed("none") is None


def test_toy_source_uses_the_probe_split() -> None:
    from rcea.pipeline import toy

    qs = load_questions("toy", split="probe", n=None, seed=2027)
    assert len(qs) == 43
    question = toy.question_from_id(qs[0].question_id)
    strategy = question.strategies[0]
    s = qs[0].score(toy.render_trajectory(question, strategy))
    assert (s.reward, s.validity, s.strategy) == (1, 1, strategy)
    with pytest.raises(DatasetError, match="asked for n=99"):
        load_questions("toy", split="probe", n=99)
