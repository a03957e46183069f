"""`rcea train ...`: build-base, run (both spellings), objectives, eval, and clear errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

pytest.importorskip("trl")

from rcea.app.cli import app  # noqa: E402
from tests.support.product_helpers import read_curves  # noqa: E402

runner = CliRunner()
pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning", "ignore::UserWarning")


def _config(tmp_path: Path, model: Path, **extra: str) -> Path:
    body = f"""
[model]
path = "{model}"

[objective]
name = "grpo"

[training]
output_dir = "{tmp_path / "out"}"
max_steps = 2
learning_rate = 1e-4
per_device_train_batch_size = 8
num_generations = 4
max_completion_length = 40
save_steps = 1
torch_threads = 1
"""
    for key, value in extra.items():
        body += f"{key} = {value}\n"
    path = tmp_path / "cfg.toml"
    path.write_text(body)
    return path


@pytest.fixture(scope="module")
def quick_base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("cli") / "base"
    res = runner.invoke(
        app,
        [
            "train", "build-base", "--out", str(out), "--sft-steps", "5",
            "--eval-questions", "2", "--eval-k", "2", "--threads", "1", "--json",
        ],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    assert data["ok"] and data["sft_steps"] == 5 and 300_000 <= data["n_parameters"] <= 2_000_000
    assert {"accuracy", "boxed_rate", "modes"} <= set(data["evaluation"])
    return out


def test_build_base_saves_a_loadable_hf_model(quick_base: Path) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(quick_base)
    tok = AutoTokenizer.from_pretrained(quick_base)
    assert model.config.model_type == "qwen2" and model.config.vocab_size == len(tok)
    text = "(3+4)*5\n3 + 4 = 7\n\\boxed{35}"
    assert tok.decode(tok(text)["input_ids"]) == text  # one token per character, round trip
    assert len(tok(text)["input_ids"]) == len(text)
    assert (quick_base / "rcea_base.json").exists()
    res = runner.invoke(app, ["train", "build-base", "--out", str(quick_base)])
    assert res.exit_code == 1 and "exists and is not empty" in res.output


def test_run_and_root_spelling_write_curves_and_checkpoints(
    quick_base: Path, tmp_path: Path
) -> None:
    cfg = _config(tmp_path, quick_base)
    res = runner.invoke(app, ["train", "run", "--config", str(cfg), "--json"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    assert data["ok"] and data["steps"] == 2 and data["objective"] == "grpo"
    curves = read_curves(data["curves"])
    assert [c["progress"] for c in curves] == [0.5, 1.0]
    out = tmp_path / "out"
    assert (out / "checkpoint-1").is_dir() and (out / "checkpoint-2").is_dir()
    assert (out / "final" / "config.json").exists() and (out / "run.json").exists()
    # `rcea train --config` runs too; options override the file
    res = runner.invoke(app, ["train", "--config", str(cfg), "--json"])
    assert res.exit_code == 0, res.output
    res = runner.invoke(
        app,
        [
            "train", "run", "--config", str(cfg), "--objective", "dapo", "--max-steps", "1",
            "--out", str(tmp_path / "dapo"),
        ],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    assert "dapo: 1 steps" in res.output
    run = json.loads((tmp_path / "dapo" / "run.json").read_text())
    assert run["config"]["objective_params_resolved"]["epsilon_high"] == 0.28


def test_objectives_lists_six_with_supplement_defaults() -> None:
    res = runner.invoke(app, ["train", "objectives", "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert out["preset"] == "rcea-supplement"
    data = {n: {k: v["value"] for k, v in p.items()} for n, p in out["objectives"].items()}
    assert list(data) == ["grpo", "dapo", "clip_cov", "kl_cov", "gtpo", "ep_grpo"]
    assert data["grpo"]["epsilon"] == data["grpo"]["epsilon_high"] == 0.2
    assert (data["clip_cov"]["lb"], data["clip_cov"]["ub"]) == (1.0, 5.0)
    assert data["gtpo"]["entropy_coef"] == 0.1
    assert data["gtpo"]["threshold_rule"] == "calibrated"
    assert (data["ep_grpo"]["gate_coef"], data["ep_grpo"]["progress_weight"]) == (3.0, 0.2)
    assert data["ep_grpo"]["bucket_rule"] == "position"
    assert data["kl_cov"]["kl_coef"] == 0.5
    # every value names its source; blanks say so
    sources = [v["source"] for p in out["objectives"].values() for v in p.values()]
    assert all(sources) and any(s.startswith("blank:") for s in sources)


def test_authors_preset_is_each_methods_recipe() -> None:
    res = runner.invoke(app, ["train", "objectives", "--preset", "authors", "--json"])
    assert res.exit_code == 0, res.output
    obj = {
        n: {k: v["value"] for k, v in p.items()}
        for n, p in json.loads(res.stdout)["objectives"].items()
    }
    assert (obj["clip_cov"]["epsilon"], obj["clip_cov"]["epsilon_high"]) == (1.0, 1.0)
    assert obj["clip_cov"]["loss_agg"] == obj["kl_cov"]["loss_agg"] == "token_mean"
    assert (obj["kl_cov"]["kl_coef"], obj["kl_cov"]["k_ratio"]) == (1.0, 2e-3)
    assert (obj["gtpo"]["threshold_rule"], obj["gtpo"]["entropy_threshold"]) == ("absolute", 0.7)
    assert obj["dapo"]["clip_ratio_c"] == 10.0
    assert obj["clip_cov"]["remove_zero_variance"] and obj["kl_cov"]["remove_zero_variance"]
    res = runner.invoke(app, ["train", "objectives", "--preset", "mine", "--json"])
    assert res.exit_code != 0 and "unknown preset" in res.output


def test_preset_resolution_and_record() -> None:
    """Preset, then [objectives.NAME], then [objective.params]; the run record names the
    preset and every resolved value's source."""
    from rcea.pipeline.training.config import ConfigError, parse_config
    from rcea.pipeline.training.objectives import default_params

    base = {"model": {"path": "m"}, "objective": {"name": "kl_cov", "preset": "authors"}}
    cfg = parse_config({**base, "objectives": {"kl_cov": {"k_ratio": 0.2}}})
    assert cfg.preset == "authors"
    assert cfg.resolved_params()["kl_coef"] == 1.0 and cfg.resolved_params()["k_ratio"] == 0.2
    assert set(cfg.resolved_params()) == set(default_params("kl_cov"))
    rec = cfg.to_dict()
    assert rec["objective_preset"] == "authors"
    assert rec["objective_params_sources"]["k_ratio"] == "[objectives.kl_cov]"
    assert "ppo_kl_coef 1" in rec["objective_params_sources"]["kl_coef"]
    default = parse_config({"model": {"path": "m"}, "objective": {"name": "kl_cov"}})
    assert default.preset == "rcea-supplement" and default.resolved_params()["kl_coef"] == 0.5
    with pytest.raises(ConfigError, match="unknown preset"):
        parse_config({"model": {"path": "m"}, "objective": {"name": "grpo", "preset": "x"}})
    from rcea.pipeline.training.objectives import OBJECTIVES, make_objective
    from rcea.pipeline.training.presets import PRESETS, preset_params

    for preset in PRESETS:  # every parameter of every objective, and valid together
        for name in OBJECTIVES:
            assert set(preset_params(preset, name)) == set(default_params(name))
            make_objective(name, **preset_params(preset, name))


def test_eval_reports_oracle_metrics(quick_base: Path) -> None:
    res = runner.invoke(
        app, ["train", "eval", "--model", str(quick_base), "--n", "3", "--k", "2", "--json"]
    )
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    assert data["n_questions"] == 3 and data["k"] == 2 and 0 <= data["accuracy"] <= 1


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"lr": "0.1"}, "[training]: unknown key(s) lr"),
        ({"num_iterations": '"two"'}, "[training].num_iterations: expected int"),
        ({"temperature": "true"}, "[training].temperature: expected float"),
    ],
)
def test_config_errors_name_the_table_and_key(
    quick_base: Path, tmp_path: Path, extra: dict[str, str], message: str
) -> None:
    cfg = _config(tmp_path, quick_base, **extra)
    res = runner.invoke(app, ["train", "run", "--config", str(cfg)])
    assert res.exit_code == 1
    assert message in res.output and str(cfg) in res.output


def test_other_errors_are_clear(quick_base: Path, tmp_path: Path) -> None:
    res = runner.invoke(app, ["train", "run", "--config", str(tmp_path / "nope.toml"), "--json"])
    assert res.exit_code == 1
    assert json.loads(res.stdout) == {
        "ok": False,
        "error": f"{tmp_path / 'nope.toml'}: no such file",
    }
    cfg = _config(tmp_path, quick_base)
    res = runner.invoke(app, ["train", "run", "--config", str(cfg), "--objective", "ppo"])
    assert res.exit_code == 1 and "unknown objective 'ppo'" in res.output
    cfg2 = _config(tmp_path, tmp_path / "missing-model")
    res = runner.invoke(app, ["train", "run", "--config", str(cfg2)])
    assert res.exit_code == 1 and "not a model directory" in res.output
    bad = tmp_path / "bad.toml"
    bad.write_text('[model]\npath = "x"\n[objective]\nname = "kl_cov"\nparams = {k = 0.1}\n')
    res = runner.invoke(app, ["train", "run", "--config", str(bad)])
    assert res.exit_code == 1 and "unknown parameter(s) k for objective 'kl_cov'" in res.output
    res = runner.invoke(app, ["train"])
    assert res.exit_code == 0 and "build-base" in res.output and "run" in res.output


def test_shipped_toy_config_parses() -> None:
    from rcea.pipeline.training.config import load_config

    path = Path(__file__).resolve().parents[3] / "rcea/pipeline/training/configs/toy.toml"
    for name in ("grpo", "dapo", "clip_cov", "kl_cov", "gtpo", "ep_grpo"):
        cfg = load_config(path, objective=name)
        assert cfg.objective == name
        assert cfg.training.per_device_train_batch_size % cfg.training.num_generations == 0


def test_cross_field_validation() -> None:
    from rcea.pipeline.training.config import ConfigError, parse_config

    base = {"model": {"path": "m"}, "objective": {"name": "grpo"}}
    with pytest.raises(ConfigError, match="must be a multiple of num_generations"):
        parse_config({**base, "training": {"per_device_train_batch_size": 12}})
    with pytest.raises(ConfigError, match=r"\[objectives.ppo\]: unknown objective"):
        parse_config({**base, "objectives": {"ppo": {}}})
    with pytest.raises(ConfigError, match="missing \\[model\\]"):
        parse_config({"objective": {"name": "grpo"}})
    cfg = parse_config({**base, "objectives": {"grpo": {"epsilon": 0.1}}})
    assert cfg.resolved_params()["epsilon"] == 0.1


def _qwen2_parameters(vocab: int, h: int, i: int, layers: int, heads: int, kv: int) -> int:
    """Qwen2 parameter count by hand: tied embedding; per layer q/k/v projections with
    bias, o projection without, a gated MLP (3 matrices) and two RMSNorms; a final norm."""
    hd = h // heads
    attn = (h * h + h) + 2 * (h * kv * hd + kv * hd) + h * h
    return vocab * h + layers * (attn + 3 * h * i + 2 * h) + h


def test_build_base_shape_options_give_the_demo_scales(quick_base: Path, tmp_path: Path) -> None:
    """The demo's second scale (tiny-m: --hidden-size 128 --intermediate-size 384
    --layers 4) is built and recorded; its size matches the hand count, as the default
    shape (tiny-s) does; impossible shapes are refused naming the option."""
    from transformers import AutoConfig, AutoTokenizer

    vocab = len(AutoTokenizer.from_pretrained(quick_base))
    small = json.loads((quick_base / "rcea_base.json").read_text())
    assert small["model_shape"] == {
        "hidden_size": 96,
        "intermediate_size": 256,
        "num_hidden_layers": 3,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
    }
    assert small["n_parameters"] == _qwen2_parameters(vocab, 96, 256, 3, 4, 2)
    out = tmp_path / "tiny-m"
    res = runner.invoke(
        app,
        [
            "train", "build-base", "--out", str(out), "--sft-steps", "2",
            "--eval-questions", "2", "--eval-k", "2", "--threads", "1",
            "--hidden-size", "128", "--intermediate-size", "384", "--layers", "4", "--json",
        ],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    assert data["model_shape"] == {
        "hidden_size": 128,
        "intermediate_size": 384,
        "num_hidden_layers": 4,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
    }
    assert data["n_parameters"] == _qwen2_parameters(vocab, 128, 384, 4, 4, 2)
    assert data["n_parameters"] > 2.5 * small["n_parameters"]
    cfg = AutoConfig.from_pretrained(out)
    assert (cfg.hidden_size, cfg.intermediate_size, cfg.num_hidden_layers) == (128, 384, 4)
    assert json.loads((out / "rcea_base.json").read_text())["model_shape"] == data["model_shape"]
    for extra, message in [
        (["--hidden-size", "90"], "--hidden-size 90 is not divisible by --heads 4"),
        (["--hidden-size", "100"], "head size 25 (--hidden-size 100 / --heads 4) must be even"),
        (["--heads", "4", "--kv-heads", "3"], "--heads 4 is not divisible by --kv-heads 3"),
        (["--layers", "0"], "--layers must be >= 1, got 0"),
    ]:
        res = runner.invoke(app, ["train", "build-base", "--out", str(tmp_path / "x"), *extra])
        assert res.exit_code == 1 and message in res.output, res.output
        assert not (tmp_path / "x").exists()


def test_report_carries_the_preset_and_every_resolved_value(tmp_path: Path) -> None:
    """``probe curves`` reads run.json's preset and resolved values into the
    ``training_curve`` measurement; the report's training curve section types them."""
    from rcea.pipeline.probe.curves import training_curve
    from rcea.pipeline.training.config import parse_config
    from rcea.study.report.sections import TrainingCurve

    cfg = parse_config(
        {
            "model": {"path": "m"},
            "objective": {"name": "gtpo", "preset": "authors", "params": {"entropy_coef": 0.2}},
        }
    )
    (tmp_path / "run.json").write_text(json.dumps({"config": cfg.to_dict()}, default=str))
    (tmp_path / "curves.jsonl").write_text('{"step": 1, "progress": 1.0, "loss": 0.5}\n')
    row = training_curve(tmp_path, model="tiny")
    payload = row.payload
    assert payload["objective_preset"] == "authors"
    params = payload["objective_params"]
    assert set(params) == set(cfg.resolved_params())
    assert params["entropy_coef"] == {"value": 0.2, "source": "[objective.params]"}
    assert params["entropy_threshold"]["value"] == 0.7
    assert "ent_threshold 0.7" in params["entropy_threshold"]["source"]
    section = TrainingCurve(
        run="gtpo", model="tiny", points=payload["points"], preset="authors", params=params
    )
    assert section.params["threshold_rule"].value == "absolute"


def test_run_writes_trl_completions_that_import_with_rcea_import_trl(
    quick_base: Path, tmp_path: Path, engine, store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    import pyarrow.parquet as pq
    import sqlalchemy as sa

    from rcea.study.settings import get_settings
    from rcea.study.store import Trajectory

    res = runner.invoke(app, ["train", "run", "--config", str(_config(tmp_path, quick_base))])
    assert res.exit_code == 0, res.output
    assert "Prompt" not in res.output  # the parquet files only, no rich table
    files = sorted((tmp_path / "out" / "completions").glob("completions_*.parquet"))
    assert [f.name for f in files] == ["completions_00001.parquet", "completions_00002.parquet"]
    rows = [r for f in files for r in pq.read_table(f).to_pylist()]
    (reward,) = set(rows[0]) - {"step", "prompt", "completion", "advantage"}  # one reward func
    monkeypatch.setenv("RCEA_DATABASE_URL", store_url)
    get_settings.cache_clear()
    res = runner.invoke(
        app,
        ["import", "trl", str(tmp_path / "out"), "--study", "own", "--run", "grpo",
         "--model", "toy", "--json"],
    )  # fmt: skip
    data = json.loads(res.stdout)
    assert res.exit_code == 0, data
    assert data["n_imported_files"] == 2 and data["n_trajectories"] == len(rows)
    with sa.orm.Session(engine) as s:
        stored = list(s.scalars(sa.select(Trajectory)))
    assert sorted(t.reward for t in stored) == sorted(int(r[reward]) for r in rows)


def test_train_seeds_train_each_seed_into_its_dir_and_resume(
    quick_base: Path, tmp_path: Path
) -> None:
    """``--train-seeds 0,1``: one run per seed under OUT/train-seed-N, [training] seed = N,
    the seed in run.json (which the probe and `import trainlog` read); a rerun skips the
    finished seeds and trains only a new one."""
    cfg = _config(tmp_path, quick_base)
    out = tmp_path / "seeds"
    args = ["train", "run", "--config", str(cfg), "--out", str(out), "--max-steps", "1"]
    res = runner.invoke(app, [*args, "--train-seeds", "1,0", "--json"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    assert data["train_seeds"] == [1, 0]
    assert [(r["train_seed"], r["skipped"]) for r in data["runs"]] == [(1, False), (0, False)]
    for seed in (0, 1):
        run = json.loads((out / f"train-seed-{seed}" / "run.json").read_text())
        assert run["train_seed"] == seed
        assert run["config"]["training"]["seed"] == seed
        assert run["config"]["training"]["output_dir"] == str(out / f"train-seed-{seed}")
        assert (out / f"train-seed-{seed}" / "final" / "config.json").exists()
    # the probe's checkpoints of those dirs carry the seed without --train-seed
    from rcea.pipeline.probe.config import run_checkpoints

    cks = run_checkpoints(out / "train-seed-1", [0.0, 1.0], model="tiny")
    assert [(c.run, c.train_seed, c.step) for c in cks] == [("grpo", 1, 0), ("grpo", 1, 1)]
    # `rcea import trainlog` on a seed's event folder takes its seed from run.json
    events = data["runs"][0]["events"]
    assert events is not None and Path(events).is_relative_to(out / "train-seed-1")
    imp = runner.invoke(
        app, ["import", "trainlog", events, "--model", "tiny", "--out", str(tmp_path / "t.csv"),
              "--json"],
    )  # fmt: skip
    assert imp.exit_code == 0, imp.output
    assert json.loads(imp.stdout)["train_seed"] == 1
    assert ",1," in (tmp_path / "t.csv").read_text().splitlines()[1]  # the TRACE's seed
    imp = runner.invoke(
        app, ["import", "trainlog", events, "--model", "tiny", "--out", str(tmp_path / "u.csv"),
              "--train-seed", "0", "--json"],
    )  # fmt: skip
    assert imp.exit_code == 1
    assert "records training seed 1, but --train-seed is 0" in json.loads(imp.stdout)["error"]

    # rerun with one more seed: 0 and 1 are skipped, 2 trains; progress said per seed
    res = runner.invoke(app, [*args, "--train-seeds", "0,1,2"])
    assert res.exit_code == 0, res.output
    assert "train seed 0 (1/3): finished earlier" in res.output
    assert "train seed 1 (2/3): finished earlier" in res.output
    assert "train seed 2 (3/3): training into" in res.output
    assert (
        "3 training seed(s) under" in res.output and "1 trained, 2 finished earlier" in res.output
    )
    assert json.loads((out / "train-seed-2" / "run.json").read_text())["train_seed"] == 2


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--train-seeds", "0,,1"], "--train-seeds: expected comma-separated integers"),
        (["--train-seeds", "0,x"], "--train-seeds: 'x' is not an integer"),
        (["--train-seeds", "-2"], "--train-seeds: -2 is out of range"),
        (["--train-seeds", "3,3"], "--train-seeds: seed 3 is given twice"),
        (["--train-seeds", "0", "--seed", "4"], "--seed and --train-seeds both set"),
    ],
)
def test_bad_train_seed_lists_are_refused_in_one_line(
    tmp_path: Path, extra: list[str], message: str
) -> None:
    cfg = _config(tmp_path, tmp_path / "no-model")
    res = runner.invoke(app, ["train", "run", "--config", str(cfg), *extra, "--json"])
    assert res.exit_code == 1
    error = json.loads(res.stdout)["error"]
    assert message in error and "\n" not in error
    assert not (tmp_path / "out").exists()  # nothing trained


def test_a_seed_dir_of_another_seed_is_refused(quick_base: Path, tmp_path: Path) -> None:
    cfg = _config(tmp_path, quick_base)
    other = tmp_path / "out" / "train-seed-1"
    other.mkdir(parents=True)
    (other / "run.json").write_text(json.dumps({"train_seed": 7}))
    res = runner.invoke(app, ["train", "run", "--config", str(cfg), "--train-seeds", "1"])
    assert res.exit_code == 1
    assert "records training seed 7, not 1" in res.output


def test_train_seed_is_the_runs_seed_in_the_config() -> None:
    from rcea.pipeline.training.config import ConfigError, apply_overrides, parse_config

    base = {"model": {"path": "m"}, "objective": {"name": "grpo"}}
    cfg = parse_config(apply_overrides(base, train_seed=3))
    assert (cfg.training.seed, cfg.training.train_seed) == (3, 3)
    assert parse_config(base).training.train_seed is None
    with pytest.raises(ConfigError, match=r"train_seed \(3\) is the run's seed, but seed is 4"):
        parse_config({**base, "training": {"seed": 4, "train_seed": 3}})
    with pytest.raises(ConfigError, match="train_seed: must be in"):
        parse_config({**base, "training": {"seed": -1, "train_seed": -1}})
