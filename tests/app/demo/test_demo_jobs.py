"""The demo's ``rcea`` jobs, forked from a fork server that imported torch, transformers and
TRL once (rcea/app/demo/context.py): each behaves as the same command typed in a shell — its
JSON answer, exit code, stderr in the step's log, the environment of the moment it
starts — and writes byte-identical files; a killed job is gone."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import psutil
import pytest

from rcea.app.demo.context import DemoStepError, RceaJob


def _ctx(tmp_path: Path) -> SimpleNamespace:
    """What RceaJob reads of a demo context: the work dir (for the logs)."""
    return SimpleNamespace(work=tmp_path / "work")


def _wait(job: RceaJob) -> object:
    job.start()
    while job.poll() is None:
        time.sleep(0.05)
    return job.result()


def test_a_job_answers_logs_and_sees_the_environment_of_its_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ctx = _ctx(tmp_path)
    for name in ("first", "second"):  # the second job is forked after the server started
        monkeypatch.setenv("RCEA_DATA_DIR", str(tmp_path / name))
        job = RceaJob(ctx, ["config"], "config")  # type: ignore[arg-type]
        answer = _wait(job)
        assert isinstance(answer, dict) and answer["data_dir"] == str(tmp_path / name)
    log = (ctx.work / "logs" / "config.log").read_text()
    assert log.count("rcea config --json\n") == 2 and log.count("# exit 0 after") == 2
    assert not job._out.exists()  # the stdout file is removed once read


def test_a_failing_job_names_its_exit_code_and_its_error(tmp_path: Path) -> None:
    job = RceaJob(_ctx(tmp_path), ["stats", "passk", str(tmp_path / "none.csv")], "bad")  # type: ignore[arg-type]
    with pytest.raises(DemoStepError) as err:
        _wait(job)
    assert "exited 2" in str(err.value) or "exited 1" in str(err.value), str(err.value)
    assert "none.csv" in str(err.value)  # the command's own message, from its log


def test_a_killed_job_is_gone(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path)
    job = RceaJob(
        ctx,  # type: ignore[arg-type]
        ["train", "build-base", "--out", str(tmp_path / "b"), "--sft-steps", "100000"],
        "long",
    )
    job.start()
    pid = job.proc.pid  # type: ignore[union-attr]
    time.sleep(1.0)
    assert job.poll() is None and psutil.pid_exists(pid)
    job.kill()
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    assert not job._out.exists()


@pytest.mark.slow
def test_a_forked_job_writes_what_a_fresh_process_writes(tmp_path: Path) -> None:
    """The same warm start forked and as a fresh ``rcea`` process: identical weights."""
    pytest.importorskip("torch")
    args = ["train", "build-base", "--sft-steps", "20", "--seed", "0", "--threads", "1"]
    _wait(RceaJob(_ctx(tmp_path), [*args, "--out", str(tmp_path / "forked")], "base"))  # type: ignore[arg-type]
    exe = Path(sys.executable).parent / "rcea"
    fresh = subprocess.run(
        [str(exe), *args, "--out", str(tmp_path / "fresh"), "--json"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert fresh.returncode == 0, fresh.stderr[-2000:]
    for name in ("model.safetensors", "config.json", "tokenizer.json"):
        assert (tmp_path / "forked" / name).read_bytes() == (tmp_path / "fresh" / name).read_bytes()
    forked = json.loads((tmp_path / "forked" / "rcea_base.json").read_text())
    assert forked["final_loss"] == json.loads(fresh.stdout)["final_loss"]
