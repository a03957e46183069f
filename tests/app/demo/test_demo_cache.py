"""The demo's opt-in recipe cache (``rcea.app.demo.cache``, ``$RCEA_DEMO_CACHE_DIR``): off by
default; with it, a second demo with equal recipes copies every base, run and probe output
instead of building it (paths rewritten to its own work dir), still runs the probe
commands that bind its study, and builds again whatever recipe differs."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from rcea.app.demo import cache
from rcea.app.demo.config import QUICK
from rcea.app.demo.context import DemoContext
from rcea.app.demo.state import DemoState


def _ctx(work: Path, lines: list[str], study: str = "t") -> DemoContext:
    from rcea.study.settings import Settings

    state = DemoState(path=work / "state.json", size="quick", simulate=False, study=study, seed=0)
    ctx = DemoContext(
        cfg=Settings(data_dir=work / "data"),
        sizes=QUICK,
        simulate=False,
        serve=False,
        state=state,
        work=work,
        echo=lines.append,
    )
    ctx.cfg.ensure_data_dir()
    return ctx


class _Recording:
    """Stands in for the study steps' ``rcea`` subprocesses: records each command line and
    leaves the files the real command would (a base's report, a run's run.json naming its
    base and its final checkpoint, a probe directory's records); store work is real."""

    def __init__(self, ctx: DemoContext) -> None:
        self.calls: list[list[str]] = []
        ctx.rcea_many = self.rcea_many  # type: ignore[method-assign]

    def rcea_many(self, jobs, *, workers, on_done=None):  # type: ignore[no-untyped-def]
        out = []
        for job in jobs:
            self.calls.append(job.args)
            res = self._fake(job.args)
            if on_done is not None:
                on_done(job, res)
            out.append(res)
        return out

    def _fake(self, args: list[str]) -> dict:
        import tomllib

        def opt(name: str) -> Path:
            return Path(args[args.index(name) + 1])

        if args[:2] == ["train", "build-base"]:
            opt("--out").mkdir(parents=True)
            (opt("--out") / "rcea_base.json").write_text(json.dumps({"n_parameters": 1}))
        elif args[:2] == ["train", "run"]:
            cfg = tomllib.loads(opt("--config").read_text())
            (opt("--out") / "final").mkdir(parents=True)
            (opt("--out") / "final" / "config.json").write_text("{}")
            (opt("--out") / "run.json").write_text(json.dumps({"config": cfg}))
            return {"steps": cfg["training"]["max_steps"]}
        elif args[:2] == ["probe", "entropy"]:
            opt("--out").mkdir(parents=True, exist_ok=True)
            (opt("--out") / "records.jsonl").write_text("")
        return {"ok": True}


def _study_half(ctx: DemoContext) -> None:
    from rcea.app.demo.study import step_base, step_probe, step_train

    for name, step in (("base", step_base), ("train", step_train), ("probe", step_probe)):
        ctx.state.mark_done(name, seconds=0.0, result=step(ctx))


def test_off_without_the_variable(tmp_path: Path) -> None:
    assert cache.cache_dir() is None  # _isolated_env cleared every RCEA_* variable
    with cache.entries([("base", {"x": 1})]) as found:
        assert found == [None]
    lines: list[str] = []
    ctx = _ctx(tmp_path / "work", lines)
    rec = _Recording(ctx)
    _study_half(ctx)
    assert sum(c[:2] == ["train", "build-base"] for c in rec.calls) == 1
    assert not any("demo cache" in line for line in lines)


def test_equal_recipes_build_once_and_copies_are_relocated(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "cache"
    monkeypatch.setenv(cache.ENV, str(root))
    first_lines: list[str] = []
    first = _ctx(tmp_path / "first", first_lines)
    built = _Recording(first)
    _study_half(first)
    kinds = sorted(p.name.split("-")[0] for p in root.iterdir() if p.is_dir())
    assert kinds == ["base"] + ["probe"] + ["run"] * 6
    assert sum(c[:2] == ["train", "run"] for c in built.calls) == 6

    lines: list[str] = []
    second = _ctx(tmp_path / "second", lines, study="another-study")
    copied = _Recording(second)
    _study_half(second)
    # nothing built again; the probe commands still run (they bind this study)
    assert [c[:2] for c in copied.calls] == [["probe", "sample"], ["probe", "entropy"]]
    assert "--study" in copied.calls[0] and "another-study" in copied.calls[0]
    text = "\n".join(lines)
    assert "tiny-s base policy: copied from the demo cache" in text
    assert text.count(": copied from the demo cache") == 1 + 6 + 1  # base, runs, probe
    assert "tiny-s probe output: copied from the demo cache" in text
    # a copy names its own work dir, never the builder's
    run_json = (second.work / "tiny-s" / "runs" / "grpo" / "run.json").read_text()
    assert str(second.work) in run_json and str(first.work) not in run_json
    assert json.loads(run_json)["config"]["model"]["path"] == str(second.work / "tiny-s" / "base")
    assert (second.work / "tiny-s" / "probe" / "records.jsonl").exists()

    # another recipe (a longer warm start) builds everything again
    third = _ctx(tmp_path / "third", [])
    third.sizes = replace(QUICK, sft_steps=QUICK.sft_steps + 1)
    rebuilt = _Recording(third)
    _study_half(third)
    assert sum(c[:2] == ["train", "build-base"] for c in rebuilt.calls) == 1
    assert sum(c[:2] == ["train", "run"] for c in rebuilt.calls) == 6


def test_recipe_keys_cover_the_recipe_and_the_code(monkeypatch: pytest.MonkeyPatch) -> None:
    a = cache.recipe_key("base", {"build_base": ["--seed", "0"]})
    assert a == cache.recipe_key("base", {"build_base": ["--seed", "0"]})
    assert a != cache.recipe_key("base", {"build_base": ["--seed", "1"]})
    assert a != cache.recipe_key("run", {"build_base": ["--seed", "0"]})
    monkeypatch.setattr(cache, "code_fingerprint", lambda: "other code")
    assert a != cache.recipe_key("base", {"build_base": ["--seed", "0"]})
