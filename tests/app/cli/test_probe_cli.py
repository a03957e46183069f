"""`rcea probe ...` and the store, on SQLite and PostgreSQL: the probe-set binding of a
study, measurements (idempotent on rerun), training curves, status and clear errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

pytest.importorskip("torch")
pytest.importorskip("transformers")

from rcea.app.cli import app  # noqa: E402
from tests.support.probe import save_policy  # noqa: E402

runner = CliRunner()


@pytest.fixture(scope="module")
def two_policies(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    root = tmp_path_factory.mktemp("pol")
    p0 = save_policy(root / "a", seed=1)
    return [p0, save_policy(root / "b", seed=2, perturb=1e-3, base=p0)]


@pytest.fixture
def store(store_url: str, monkeypatch: pytest.MonkeyPatch) -> str:
    from rcea.study.settings import get_settings

    monkeypatch.setenv("RCEA_DATABASE_URL", store_url)
    get_settings.cache_clear()
    return store_url


def _config(tmp_path: Path, policies: list[Path]) -> Path:
    lines = [
        "[probe]\nk = 3\nmax_new_tokens = 12\ntorch_threads = 1",
        "[questions]\nn = 2",
        "[covariance]\nquestions = 2\ntrajectories = 2\npositions = 4",
        "[bench]\nmax_new_tokens = 12",
        '[[bench.sets]]\nname = "ev"\nsplit = "eval"\nn = 2',
        "[bench.passk]\nn = 2\nk = [1, 2]",
    ]
    for step, p in enumerate(policies):
        lines.append(f'[[checkpoints.list]]\npath = "{p}"\nrun = "r"\nmodel = "m"\nstep = {step}')
    path = tmp_path / "probe.toml"
    path.write_text("\n\n".join(lines) + "\n")
    return path


def _json(args: list[str], code: int = 0) -> dict:
    res = runner.invoke(app, [*args, "--json"])
    assert res.exit_code == code, res.output
    return json.loads(res.stdout)


def _measurements(study: str) -> list[tuple[str, str, str, int, str]]:
    from rcea.study.store import open_store, session_scope
    from rcea.study.store.measurements import list_measurements
    from rcea.study.store.repository import require_study

    with session_scope(open_store()) as s:
        st = require_study(s, name=study)
        return [
            (m.kind, m.run, m.model, m.step, m.key) for m in list_measurements(s, study_id=st.id)
        ]


def _seeded(study: str) -> set[tuple[str, str, int]]:
    """(kind, run, train_seed) of the study's measurements (train_seed -1: none)."""
    from rcea.study.store import open_store, session_scope
    from rcea.study.store.measurements import list_measurements
    from rcea.study.store.repository import require_study

    with session_scope(open_store()) as s:
        st = require_study(s, name=study)
        return {(m.kind, m.run, m.train_seed) for m in list_measurements(s, study_id=st.id)}


def _events(study: str) -> list[dict]:
    from rcea.study.store import list_events, open_store, session_scope
    from rcea.study.store.repository import require_study

    with session_scope(open_store()) as s:
        st = require_study(s, name=study)
        return [e.payload for e in list_events(s, kind="probe.probe_set", study_id=st.id)]


def test_study_binding_and_measurements(
    store: str, two_policies: list[Path], tmp_path: Path
) -> None:
    cfg = _config(tmp_path, two_policies)
    out = tmp_path / "out"
    common = ["--config", str(cfg), "--out", str(out)]
    data = _json(["probe", "sample", *common, "--study", "s1"])
    assert data["ok"] and data["units_run"] == 4 and "recorded" not in data
    assert _events("s1") == [{"probe_seed": 2027, "question_source": "toy:probe"}]

    # covariance needs the token artifacts of `entropy` first
    err = _json(["probe", "covariance", *common, "--study", "s1"], code=1)
    assert "rcea probe entropy" in err["error"]
    _json(["probe", "entropy", *common])
    cov = _json(["probe", "covariance", *common, "--study", "s1"])
    # one transition + the endpoint tail + its per-trajectory sums (item 16)
    assert cov["recorded"] == 3
    bench = _json(["probe", "bench", *common, "--study", "s1"])
    assert bench["recorded"] == 2 + 2  # greedy at 2 checkpoints + pass@k at base and endpoint
    before = _measurements("s1")
    assert sorted({m[0] for m in before}) == [
        "covariance_transition",
        "greedy_accuracy",
        "passk",
        "tail",
        "tail_trajectories",
    ]
    assert ("covariance_transition", "r", "m", 1, "") in before
    assert ("greedy_accuracy", "r", "m", 0, "ev") in before
    # rerun: nothing recomputed, measurements replaced, not duplicated; event not repeated
    again = _json(["probe", "bench", *common, "--study", "s1"])
    assert again["units_run"] == 0
    _json(["probe", "sample", *common, "--study", "s1"])
    assert _measurements("s1") == before
    assert len(_events("s1")) == 1

    # another probe-set seed: refused for the study and for the directory
    err = _json(
        [
            "probe",
            "sample",
            *common[:2],
            "--out",
            str(tmp_path / "o2"),
            "--seed",
            "9",
            "--study",
            "s1",
        ],
        code=1,
    )
    assert "probe-set seed 2027" in err["error"] and "seed 9" in err["error"]
    err = _json(["probe", "sample", *common, "--seed", "9"], code=1)
    assert "refusing to mix in seed 9" in err["error"]

    status = _json(["probe", "status", "--out", str(out)])
    assert status["probe_seed"] == 2027 and status["n_questions"] == 2
    assert status["done"]["sample"] == {"r--m--step0": 2, "r--m--step1": 2}


def test_vllm_backend_needs_the_gpu_extra(two_policies: list[Path], tmp_path: Path) -> None:
    import importlib.util

    if importlib.util.find_spec("vllm") is not None:
        pytest.skip("vLLM is installed")
    cfg = _config(tmp_path, two_policies)
    args = ["probe", "sample", "--config", str(cfg), "--out", str(tmp_path / "o")]
    err = _json([*args, "--backend", "vllm"], code=1)
    assert "backend 'vllm' needs the gpu extra" in err["error"]
    err = _json([*args, "--backend", "tpu"], code=1)
    assert "[probe] backend: must be one of auto, transformers, vllm" in err["error"]


def test_curves_are_recorded_per_run(store: str, tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "run.json").write_text(json.dumps({"config": {"objective": "kl_cov"}}))
    lines = [{"step": s, "progress": s / 4, "entropy": 0.5 - 0.1 * s} for s in range(1, 5)]
    (run / "curves.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    data = _json(["probe", "curves", "--study", "c1", "--model", "3b", str(run)])
    assert data["runs"] == [{"run": "kl_cov", "train_seed": None, "model": "3b", "points": 4}]
    assert _measurements("c1") == [("training_curve", "kl_cov", "3b", -1, "")]
    # a training seed: from --train-seed for a run.json without one, else from run.json
    data = _json(["probe", "curves", "--study", "c1", "--model", "3b", "--train-seed", "2",
                  str(run)])  # fmt: skip
    assert data["runs"][0]["train_seed"] == 2
    (run / "run.json").write_text(json.dumps({"config": {"objective": "kl_cov"}, "train_seed": 5}))
    _json(["probe", "curves", "--study", "c1", "--model", "3b", str(run)])
    assert _seeded("c1") == {("training_curve", "kl_cov", -1), ("training_curve", "kl_cov", 2),
                             ("training_curve", "kl_cov", 5)}  # fmt: skip
    err = _json(["probe", "curves", "--study", "c1", "--train-seed", "4", str(run)], code=1)
    assert "training seed 5, but --train-seed is 4" in err["error"]
    (run / "curves.jsonl").write_text("{bad\n")
    err = _json(["probe", "curves", "--study", "c1", str(run)], code=1)
    assert "curves.jsonl:line 1: invalid JSON" in err["error"]


def test_config_errors_are_clear(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("[probe]\nk = 0\n")
    err = _json(["probe", "sample", "--config", str(bad), "--out", str(tmp_path / "o")], code=1)
    assert err["error"] == f"{bad}: [probe] k: must be >= 1, got 0"
    bad.write_text(
        '[questions]\nsource = "missing/math500.jsonl"\n[[checkpoints.list]]\n'
        f'path = "{tmp_path}"\nrun = "r"\nmodel = "m"\nstep = 0\n'
    )
    err = _json(["probe", "sample", "--config", str(bad), "--out", str(tmp_path / "o")], code=1)
    assert "missing/math500.jsonl: benchmark file not found; provide it" in err["error"]
    err = _json(["probe", "entropy", "--config", str(bad), "--out", str(tmp_path / "none")], code=1)
    assert "nothing sampled here yet; run `rcea probe sample` first" in err["error"]
    err = _json(["probe", "status", "--out", str(tmp_path / "none")], code=1)
    assert "no manifest" in err["error"]


def test_train_seed_reaches_the_records_and_the_measurements(
    store: str, two_policies: list[Path], tmp_path: Path
) -> None:
    """``--train-seed N`` on checkpoints without a run.json: the records carry it (so
    `rcea ingest` stores it), every recorded measurement carries it, and the report keys
    the run ``r [train seed N]``; another seed of the same (run, model, step) is new work
    in the same output directory."""
    from rcea.study.report.replicates import measurement_run

    cfg = _config(tmp_path, two_policies)
    out = tmp_path / "out"
    common = ["--config", str(cfg), "--out", str(out), "--study", "ts"]
    for seed in ("3", "4"):
        data = _json(["probe", "sample", *common, "--train-seed", seed])
        assert data["units_run"] == 4 and data["units_skipped"] == 0  # not "already done"
        _json(["probe", "entropy", *common[:4], "--train-seed", seed])
        _json(["probe", "covariance", *common, "--train-seed", seed])
        _json(["probe", "bench", *common, "--train-seed", seed])
    assert _json(["probe", "sample", *common, "--train-seed", "3"])["units_run"] == 0
    assert sorted(p.name for p in (out / "records").glob("*.jsonl")) == [
        f"r--train-seed-{t}--m--step{s}.jsonl" for t in (3, 4) for s in (0, 1)
    ]
    recs = [
        json.loads(x) for p in (out / "records").glob("*.jsonl") for x in p.read_text().splitlines()
    ]
    assert {(p.name.split("--")[1], r["train_seed"]) for p in (out / "records").glob("*.jsonl")
            for r in map(json.loads, p.read_text().splitlines())} == {
        ("train-seed-3", 3), ("train-seed-4", 4)
    }  # fmt: skip
    assert len({r["trajectory_id"] for r in recs}) == len(recs)  # no id shared by seeds
    got = _seeded("ts")
    assert {seed for _k, _r, seed in got} == {3, 4}
    for kind in ("covariance_transition", "tail", "greedy_accuracy", "passk"):
        assert {(kind, "r", 3), (kind, "r", 4)} <= got, kind
    assert {measurement_run(r, s) for _k, r, s in got} == {"r [train seed 3]", "r [train seed 4]"}
    err = _json(["probe", "sample", *common, "--train-seed", "-1"], code=1)
    assert "[checkpoints] train_seed: must be an integer" in err["error"]
