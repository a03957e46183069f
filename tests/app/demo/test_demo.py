"""``rcea demo``'s pieces without training: sizes and rubrics, the state file, the step
runner (skip finished, blocked), the SIMULATED annotators' error draws,
and the Ctrl-C path of ``rcea demo --serve`` against the session Label Studio server."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import psutil
import pytest

from rcea.app.demo.config import DEFAULT, QUICK, SIZES, rubric_toml
from rcea.app.demo.context import DemoContext, DemoStepError, Step
from rcea.app.demo.simulate import flip
from rcea.app.demo.state import DemoState, DemoStateError
from rcea.app.demo.steps import plan, run_steps
from rcea.audits.rubric import parse_rubric
from tests.support.helpers import free_port
from tests.support.labelstudio_fixture import LabelStudioHandle


def test_sizes_and_rubrics() -> None:
    assert DEFAULT.milestones == [50, 100] and QUICK.milestones == [16]
    assert SIZES == {"default": DEFAULT, "quick": QUICK}
    assert QUICK.study_name(simulate=True) == "toy-quick-sim"
    assert DEFAULT.study_name(simulate=False) == "toy"
    rubrics = {s.name: parse_rubric(rubric_toml(s)) for s in (DEFAULT, QUICK)}
    for s in (DEFAULT, QUICK):
        r = rubrics[s.name]
        assert r.name == s.rubric_name and r.version == "1"
        assert (r.pairs.pairs_per_question, r.pairs.n_questions) == (
            s.pairs_per_question,
            s.n_pair_questions,
        )
        assert (r.calibration.size, r.calibration.held_out) == (
            s.calibration_size,
            s.calibration_held_out,
        )
        assert r.estimators.n_min == s.n_min
        # The paper's gate thresholds are kept.
        assert r.gate.human_human_macro_f1_min == 0.85 and r.gate.automatic_coverage_min == 0.95
    assert rubrics["default"].content_hash() != rubrics["quick"].content_hash()
    # Same sizes → same text → same hash: a re-run's freeze is a no-op.
    assert parse_rubric(rubric_toml(QUICK)).content_hash() == rubrics["quick"].content_hash()


def test_state_round_trip_and_corrupt_file(tmp_path: Path) -> None:
    path = tmp_path / "demo" / "state.json"
    assert DemoState.load(path) is None
    st = DemoState(path=path, size="quick", simulate=True, study="toy-quick-sim", seed=0)
    st.mark_done("base", seconds=1.234, result={"path": "x"})
    again = DemoState.load(path)
    assert again is not None and again.is_done("base") and not again.is_done("train")
    assert again.result("base") == {"path": "x"} and again.steps["base"]["seconds"] == 1.23
    assert (again.size, again.simulate, again.study) == ("quick", True, "toy-quick-sim")
    path.write_text("{not json")
    with pytest.raises(DemoStateError, match="--fresh"):
        DemoState.load(path)


def test_simulated_error_draws() -> None:
    keys = [f"pair-{i}" for i in range(20_000)]
    a = {k for k in keys if flip(0, "A", k, 0.02)}
    b = {k for k in keys if flip(0, "B", k, 0.02)}
    assert 0.017 < len(a) / len(keys) < 0.023 and 0.017 < len(b) / len(keys) < 0.023
    # Independent per annotator: the overlap is about rate², not the whole set.
    assert len(a & b) < 30
    # Deterministic, order-free, and seed-dependent.
    assert a == {k for k in reversed(keys) if flip(0, "A", k, 0.02)}
    assert a != {k for k in keys if flip(1, "A", k, 0.02)}
    assert not any(flip(0, "A", k, 0.0) for k in keys[:1000])
    assert all(flip(0, "A", k, 1.0) for k in keys[:1000])


def _ctx(tmp_path: Path, lines: list[str]) -> DemoContext:
    from rcea.study.settings import Settings

    state = DemoState(path=tmp_path / "state.json", size="quick", simulate=False, study="t", seed=0)
    return DemoContext(
        cfg=Settings(data_dir=tmp_path / "data"),
        sizes=QUICK,
        simulate=False,
        serve=False,
        state=state,
        work=tmp_path,
        echo=lines.append,
    )


def test_runner_skips_finished_steps_and_reports_missing_ones(tmp_path: Path) -> None:
    calls: list[str] = []

    def work(name: str):  # type: ignore[no-untyped-def]
        def run(ctx: DemoContext) -> dict:
            calls.append(name)
            ctx.say(f"working on {name}")
            return {"made": name}

        return run

    steps = [
        Step("one", "first step", work("one")),
        Step("two", "after a step not in the plan", work("two"), ("zero",)),
        Step("three", "after two", work("three"), ("two",)),
        Step("four", "after one", work("four"), ("one",)),
    ]
    lines: list[str] = []
    status = run_steps(_ctx(tmp_path, lines), steps)
    assert status == {
        "one": "done",
        "two": "skipped",
        "three": "skipped",
        "four": "done",
    }
    assert calls == ["one", "four"]
    assert lines[0] == "[1/4] first step …" and lines[1] == "      working on one"
    assert lines[2].startswith("[1/4] first step … done in ") and lines[2].endswith(" s")
    assert lines[3] == "[2/4] after a step not in the plan … skipped: needs zero"
    assert lines[4] == "[3/4] after two … skipped: needs two"
    saved = json.loads((tmp_path / "state.json").read_text())
    assert set(saved["steps"]) == {"one", "four"}
    assert saved["steps"]["four"]["result"] == {"made": "four"}

    # A second run (new process: state read back) skips what finished.
    lines2: list[str] = []
    ctx2 = _ctx(tmp_path, lines2)
    ctx2.state = DemoState.load(tmp_path / "state.json")  # type: ignore[assignment]
    status2 = run_steps(ctx2, steps)
    assert status2["one"] == status2["four"] == "done-earlier"
    assert calls == ["one", "four"]
    assert lines2[0] == "[1/4] first step … done earlier (skipped)"


def test_plans_order_their_dependencies() -> None:
    people = [s.name for s in plan(simulate=False)]
    sim = plan(simulate=True)
    assert "simulate-pairs" not in people and "gate" not in people
    assert [s.name for s in sim][-4:] == ["simulate-pairs", "gate", "simulate-validity", "report"]
    assert all("SIMULATED" in s.title for s in sim if s.name.startswith("simulate"))
    names = [s.name for s in sim]
    for s in sim:  # dependencies come earlier in the plan
        assert all(names.index(a) < names.index(s.name) for a in s.after), s.name


def _finished_state(data_dir: Path) -> None:
    """A demo state with every step of the quick, non-simulated plan finished."""
    st = DemoState(
        path=data_dir / "demo" / "toy-quick" / "state.json",
        size="quick",
        simulate=False,
        study="toy-quick",
        seed=0,
    )
    for s in plan(simulate=False):
        st.steps[s.name] = {"done": True, "seconds": 0.0, "result": {}}
    st.save()


def _wait(predicate, timeout: float, what: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.2)


@pytest.mark.slow
def test_ctrl_c_stops_what_the_demo_started_and_nothing_else(
    labelstudio_pool: list[LabelStudioHandle], tmp_path: Path
) -> None:
    from rcea.app.demo.audits import PEOPLE
    from tests.support.labelstudio_fixture import register_people

    data = tmp_path / "data"
    _finished_state(data)
    # The demo's people already have running servers (the pool): reused, never stopped.
    register_people(data, labelstudio_pool, list(PEOPLE.values()))
    api_port, view_port = free_port(), free_port()
    env = {
        **os.environ,
        "RCEA_DATA_DIR": str(data),
        "RCEA_API_PORT": str(api_port),
        "RCEA_VIEW_PORT": str(view_port),
    }
    exe = Path(sys.executable).parent / "rcea"
    out = tmp_path / "demo.out"
    with out.open("w") as fh:
        proc = subprocess.Popen(
            [str(exe), "demo", "--quick", "--serve"], stdout=fh, stderr=subprocess.STDOUT, env=env
        )
    try:
        _wait(lambda: "Ctrl-C stops" in out.read_text(), 60, "the demo to serve")
        _wait(lambda: _healthy(f"http://127.0.0.1:{api_port}/health"), 60, "the API to answer")
        children = psutil.Process(proc.pid).children(recursive=True)
        assert len(children) >= 2, [c.cmdline() for c in children]
        text = out.read_text()
        assert "done earlier (skipped)" in text and "view          http://127.0.0.1" in text
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=60) == 130
    finally:
        if proc.poll() is None:
            proc.kill()
    gone, alive = psutil.wait_procs(children, timeout=20)
    assert not alive, [c.cmdline() for c in alive]
    assert not _healthy(f"http://127.0.0.1:{api_port}/health")
    # The people's Label Studio servers ran before the demo: reused, not stopped.
    assert all(_healthy(f"{h.url}/health/") for h in labelstudio_pool)
    assert "stopped" not in out.read_text()


def _healthy(url: str) -> bool:
    try:
        return httpx.get(url, timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def test_a_failing_step_is_named_and_stays_unfinished(tmp_path: Path) -> None:
    def boom(ctx: DemoContext) -> dict:
        raise ValueError("no such partition")

    steps = [Step("ok", "fine", lambda ctx: {}), Step("bad", "breaks", boom)]
    lines: list[str] = []
    ctx = _ctx(tmp_path, lines)
    with pytest.raises(DemoStepError, match=r"step bad \(breaks\) failed: ValueError: no such"):
        run_steps(ctx, steps)
    assert ctx.state.is_done("ok") and not ctx.state.is_done("bad")


def test_fresh_starts_over_under_a_new_study_name(tmp_path: Path) -> None:
    from rcea.app.cli.demo_cmd import demo_context
    from rcea.study.records.ingest import ingest_file
    from rcea.study.settings import Settings
    from rcea.study.store import open_store
    from tests.support.helpers import make_record, write_jsonl

    cfg = Settings(data_dir=tmp_path / "data")
    cfg.ensure_data_dir()
    first = demo_context(cfg, QUICK, simulate=False, serve=False, fresh=False)
    assert first.study == "toy-quick" and first.state.sizes["probe_k"] == QUICK.probe_k
    first.state.mark_done("base", seconds=1.0, result={})
    (first.work / "base").mkdir()
    # The study now exists in the (append-only) store.
    ingest_file(
        open_store(cfg),
        write_jsonl(tmp_path / "r.jsonl", [make_record(0)]),
        study="toy-quick",
        artifacts_dir=cfg.artifacts_dir,
        data_dir=cfg.data_dir,
    )
    resumed = demo_context(cfg, QUICK, simulate=False, serve=False, fresh=False)
    assert resumed.study == "toy-quick" and resumed.state.is_done("base")
    fresh = demo_context(cfg, QUICK, simulate=False, serve=False, fresh=True)
    assert fresh.study == "toy-quick-2" and not fresh.state.is_done("base")
    assert not (fresh.work / "base").exists() and fresh.work == first.work
    simulated = demo_context(cfg, QUICK, simulate=True, serve=False, fresh=False)
    assert simulated.study == "toy-quick-sim" and simulated.work != first.work


# --------------------------------------------------------------------------- two scales


def test_default_size_defines_two_policy_scales_and_quick_one() -> None:
    from rcea.app.demo.config import TINY_M, TINY_S

    assert DEFAULT.models == ["tiny-s", "tiny-m"] and DEFAULT.scales == (TINY_S, TINY_M)
    assert QUICK.models == ["tiny-s"]
    # The two scales differ in size: wider and deeper.
    assert (TINY_S.hidden_size, TINY_S.intermediate_size, TINY_S.num_hidden_layers) == (96, 256, 3)
    assert (TINY_M.hidden_size, TINY_M.intermediate_size, TINY_M.num_hidden_layers) == (128, 384, 4)
    assert TINY_M.build_args() == [
        "--hidden-size", "128", "--intermediate-size", "384", "--layers", "4",
        "--heads", "4", "--kv-heads", "2",
    ]  # fmt: skip
    # The small scale is the tiny model's default shape.
    from rcea.pipeline.policy.model import TINY_DEFAULTS

    assert {k: TINY_DEFAULTS[k] for k in ("hidden_size", "intermediate_size")} == {
        "hidden_size": 96,
        "intermediate_size": 256,
    }
    assert DEFAULT.to_dict()["scales"][1] == {
        "label": "tiny-m",
        "hidden_size": 128,
        "intermediate_size": 384,
        "num_hidden_layers": 4,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
    }
    json.dumps(DEFAULT.to_dict())  # the state file holds it


class _Recording:
    """Stands in for the ``rcea`` subprocesses of the study steps only: records every
    command line and writes the files the real command would leave (a base's report and
    config, a run's run.json + checkpoints, a scale's records) so the next step finds
    them. Store work (probe-set binding, ingest) runs for real."""

    def __init__(self, ctx: DemoContext) -> None:
        self.ctx, self.calls = ctx, []  # type: list[list[str]]
        ctx.rcea_many = self.rcea_many  # type: ignore[method-assign]

    def rcea_many(self, jobs, *, workers, on_done=None):  # type: ignore[no-untyped-def]
        assert workers in (1, self.ctx.sizes.train_workers)
        out = []
        for job in jobs:
            self.calls.append(job.args)
            res = self._fake(job.args)
            if on_done is not None:
                on_done(job, res)
            out.append(res)
        return out

    def _fake(self, args: list[str]) -> dict:
        def opt(name: str) -> str:
            return args[args.index(name) + 1]

        if args[:2] == ["train", "build-base"]:
            out = Path(opt("--out"))
            out.mkdir(parents=True)
            (out / "config.json").write_text("{}")
            n = int(opt("--hidden-size")) * 1000
            (out / "rcea_base.json").write_text(
                json.dumps({"n_parameters": n, "evaluation": {"accuracy": 0.4, "modes": 3}})
            )
        elif args[:2] == ["train", "run"]:
            import tomllib

            cfg = tomllib.loads(Path(opt("--config")).read_text())
            rd = Path(opt("--out"))
            steps = cfg["training"]["max_steps"]
            save = cfg["training"]["save_steps"]
            for step in [*range(save, steps, save), None]:
                d = rd / (f"checkpoint-{step}" if step else "final")
                d.mkdir(parents=True)
                (d / "config.json").write_text("{}")
            cfg["objective"] = opt("--objective")
            (rd / "run.json").write_text(json.dumps({"config": cfg, "result": {"steps": steps}}))
            return {"steps": steps, "last": {"entropy": 0.5}}
        elif args[:2] == ["probe", "entropy"]:
            from rcea.pipeline.probe.config import load_config, resolve_checkpoints
            from tests.support.helpers import make_record, write_jsonl

            cfg = load_config(opt("--config"))
            recs = [
                make_record(
                    i,
                    trajectory_id=f"{ck.label}-{i}",
                    run=ck.run,
                    model=ck.model,
                    step=ck.step,
                )
                for ck in resolve_checkpoints(cfg)
                for i in range(2)
            ]
            out = Path(opt("--out"))
            out.mkdir(parents=True, exist_ok=True)
            write_jsonl(out / "records.jsonl", recs)
        return {"ok": True}


def test_study_steps_train_probe_ingest_and_measure_both_scales(tmp_path: Path) -> None:
    """The study steps at the default size: a base per scale with its shape, the six
    objectives at each scale from that scale's base, one probe config per scale whose
    checkpoints carry the scale's label (its own shared base (base, label, 0)), both
    scales' records in one study, and every measurement command per scale."""
    from sqlmodel import select

    from rcea.app.demo.study import (
        PROBE_SEED,
        probe_config,
        step_base,
        step_ingest,
        step_measure,
        step_probe,
        step_train,
    )
    from rcea.pipeline.probe.config import load_config, resolve_checkpoints, run_checkpoints
    from rcea.study.store import open_store, session_scope
    from rcea.study.store.models import Event, Trajectory

    lines: list[str] = []
    ctx = _ctx(tmp_path / "work", lines)
    ctx.sizes = DEFAULT
    ctx.cfg.ensure_data_dir()
    rec = _Recording(ctx)
    objectives = ["grpo", "dapo", "clip_cov", "kl_cov", "gtpo", "ep_grpo"]

    base = step_base(ctx)
    assert [c[:2] for c in rec.calls] == [["train", "build-base"]] * 2
    for call, (label, hidden, layers) in zip(
        rec.calls, [("tiny-s", "96", "3"), ("tiny-m", "128", "4")], strict=True
    ):
        assert call[call.index("--out") + 1] == str(ctx.work / label / "base")
        assert call[call.index("--hidden-size") + 1] == hidden
        assert call[call.index("--layers") + 1] == layers
    assert base["scales"]["tiny-m"]["n_parameters"] == 128_000
    assert step_base(ctx) == base and len(rec.calls) == 2  # built earlier: no new job

    rec.calls.clear()
    runs = step_train(ctx)
    assert len(rec.calls) == 12
    trained = []
    for call in rec.calls:
        import tomllib

        cfg = tomllib.loads(Path(call[call.index("--config") + 1]).read_text())
        objective = call[call.index("--objective") + 1]
        label = Path(call[call.index("--out") + 1]).parts[-3]
        assert cfg["model"]["path"] == str(ctx.work / label / "base")
        # a checkpoint every eval_steps: each is a point of the run's accuracy trace
        assert cfg["training"]["max_steps"] == 100 and cfg["training"]["save_steps"] == 5
        trained.append((label, objective))
    assert trained == [(m, o) for m in ("tiny-s", "tiny-m") for o in objectives]
    assert set(runs["runs"]) == {"tiny-s", "tiny-m"}
    assert any("(12/12) tiny-m ep_grpo: 100 steps" in line for line in lines)

    keys: dict[str, set] = {}
    for label in ("tiny-s", "tiny-m"):
        sc = next(s for s in DEFAULT.scales if s.label == label)
        cfg = load_config(probe_config(ctx, sc))
        assert cfg.checkpoints.model == label and cfg.probe.seed == PROBE_SEED
        keys[label] = {(c.run, c.model, c.step) for c in resolve_checkpoints(cfg)}
        assert keys[label] == {("base", label, 0)} | {
            (o, label, s) for o in objectives for s in (50, 100)
        }
        # the accuracy trace (item 18's R) covers every saved checkpoint: 21 per run
        trace = run_checkpoints(cfg.checkpoints.run_dirs[0], "all", model=label)
        assert [c.step for c in trace] == list(range(0, 101, 5))

    rec.calls.clear()
    probed = step_probe(ctx)
    assert [(c[1], Path(c[c.index("--out") + 1]).parent.name) for c in rec.calls] == [
        ("sample", "tiny-s"),
        ("sample", "tiny-m"),
        ("entropy", "tiny-s"),
        ("entropy", "tiny-m"),
    ]
    assert all(("--study" in c) == (c[1] == "sample") for c in rec.calls)
    assert probed["n_checkpoints"] == 26 and set(probed["records"]) == {"tiny-s", "tiny-m"}
    ctx.state.mark_done("probe", seconds=0.0, result=probed)
    step_ingest(ctx)
    step_probe(ctx)  # a re-run does not record the probe set twice
    with session_scope(open_store(ctx.cfg)) as s:
        events = s.exec(select(Event).where(Event.kind == "probe.probe_set")).all()
        assert len(events) == 1 and events[0].payload["probe_seed"] == PROBE_SEED
        stored = {(t.run, t.model, t.step) for t in s.exec(select(Trajectory)).all()}
    assert stored == keys["tiny-s"] | keys["tiny-m"] and len(stored) == 26

    rec.calls.clear()
    assert step_measure(ctx)["models"] == ["tiny-s", "tiny-m"]
    curves = [c for c in rec.calls if c[1] == "curves"]
    assert [c[c.index("--model") + 1] for c in curves] == ["tiny-s", "tiny-m"]
    for c in curves:
        label = c[c.index("--model") + 1]
        assert c[-6:] == [str(ctx.work / label / "runs" / o) for o in objectives]
    assert [(c[1], Path(c[c.index("--config") + 1]).parent.name) for c in rec.calls[2:]] == [
        ("bench", "tiny-s"),
        ("bench", "tiny-m"),
        ("covariance", "tiny-s"),
        ("covariance", "tiny-m"),
    ]


def test_a_state_made_with_other_sizes_is_refused(tmp_path: Path) -> None:
    """A demo state written before the default trained two scales (or with any other
    sizes) cannot be resumed: its files are laid out for other sizes."""
    from rcea.app.cli.demo_cmd import demo_context
    from rcea.study.settings import Settings

    cfg = Settings(data_dir=tmp_path / "data")
    cfg.ensure_data_dir()
    first = demo_context(cfg, DEFAULT, simulate=False, serve=False, fresh=False)
    old = {k: v for k, v in first.state.sizes.items() if k != "scales"}
    first.state.sizes = old
    first.state.save()
    with pytest.raises(DemoStateError, match=r"other default sizes \(changed: scales\).*--fresh"):
        demo_context(cfg, DEFAULT, simulate=False, serve=False, fresh=False)
    again = demo_context(cfg, DEFAULT, simulate=False, serve=False, fresh=True)
    assert again.state.sizes["scales"][1]["label"] == "tiny-m"
