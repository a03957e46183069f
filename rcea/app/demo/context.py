"""What every demo step sees and uses: the context (settings, sizes, options, state, work
dir), ``rcea`` subprocesses with logs (:class:`RceaJob`), the :class:`Step` record, and
checks whether a command exists in this build.

The demo's jobs are forked from one server process per demo run (``multiprocessing``'s
fork server) that has imported torch, transformers, TRL and the ``rcea`` command modules
once (:data:`PRELOAD`): a fresh ``rcea train run`` spends 7–8 s of CPU importing TRL's
trainer and a probe stage 5–6 s importing transformers' Qwen2 model before doing any
work, which for the quick demo's 16-step runs is most of their cost. A forked job is
otherwise what a fresh ``rcea ARGS`` process is: its own process, the demo's environment
and working directory, stdout to a file, stderr to the step's log, its exit code, killed
on Ctrl-C or failure (docs/tutorial.md "How the demo runs its commands")."""

from __future__ import annotations

import atexit
import functools
import json
import multiprocessing
import os
import runpy
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.context import BaseContext
from pathlib import Path
from typing import Any

from rcea.app.demo.config import DemoSizes
from rcea.app.demo.state import DemoState
from rcea.study.store import open_store

DEMO_ACTOR = "rcea-demo"


class DemoStepError(RuntimeError):
    """A step failed; the message says which command and shows its error output."""


@dataclass
class DemoContext:
    """What every step sees: settings, sizes, options, the state and the work dir."""

    cfg: Any
    sizes: DemoSizes
    simulate: bool
    serve: bool
    state: DemoState
    work: Path
    echo: Callable[[str], None]
    started_people: list[str] = field(default_factory=list)  # servers this run started
    last_seconds: float = 0.0
    notes: dict[str, Any] = field(default_factory=dict)

    @property
    def study(self) -> str:
        return self.state.study

    @property
    def audit_name(self) -> str:
        return f"{self.study}-pairs"

    @property
    def calibration_name(self) -> str:
        return f"{self.study}-validity"

    @property
    def accepted_name(self) -> str:
        # not "<study>-accepted": the simulated study's name ends in "-sim", and "sim-a" is
        # how the demo's output names its simulated annotator A
        return f"{self.study}-judge-accepted"

    def say(self, line: str) -> None:
        """A progress line under the current step (marked SIMULATED when simulating)."""
        self.echo(f"      {line}")

    def engine(self) -> Any:
        return open_store(self.cfg)

    def rcea(self, *args: str, log: str, as_json: bool = True) -> Any:
        """Run ``rcea ARGS [--json]`` (same interpreter, same environment); return the
        parsed JSON (or None). stderr is appended to ``<work>/logs/<log>.log``."""
        job = RceaJob(self, list(args), log, as_json)
        (result,) = self.rcea_many([job], workers=1)
        self.last_seconds = job.seconds
        return result

    def rcea_many(
        self,
        jobs: list[RceaJob],
        *,
        workers: int,
        on_done: Callable[[RceaJob, Any], None] | None = None,
    ) -> list[Any]:
        """Run ``jobs`` with at most ``workers`` at a time; results in job order. On any
        failure or interruption the jobs still running are killed (and reaped) first."""
        pending, running, results = list(jobs), [], {}  # type: ignore[var-annotated]  # filled with the started jobs below
        relay = BarRelay() if sys.stderr.isatty() else None
        try:
            while pending or running:
                while pending and len(running) < workers:
                    job = pending.pop(0)
                    job.start()
                    running.append(job)
                for job in [j for j in running if j.poll() is not None]:
                    running.remove(job)
                    if relay is not None:
                        relay.clear()
                    results[id(job)] = job.result()
                    if on_done is not None:
                        on_done(job, results[id(job)])
                if relay is not None and len(running) == 1:
                    relay.show(running[0].log)
                time.sleep(0.1)
        finally:
            if relay is not None:
                relay.clear()
            for job in running:
                job.kill()
        return [results[id(j)] for j in jobs]


def last_bar(text: str) -> str | None:
    """The latest tqdm bar in a chunk of a subprocess's stderr (tqdm redraws a bar after
    a carriage return; a bar has the ``n/total`` or ``it/s`` counter), or None."""
    for piece in reversed(text.replace("\n", "\r").split("\r")):
        piece = piece.strip()
        if piece and ("it/s" in piece or "s/it" in piece or "|" in piece) and "/" in piece:
            return piece
    return None


class BarRelay:
    """Shows the latest tqdm bar of the one running ``rcea`` subprocess (its stderr goes
    to the step's log; the subprocesses run with ``$RCEA_PROGRESS=1``) on the demo's own
    terminal, redrawn in place under the step's line: the same bars the commands draw
    when run by hand."""

    def __init__(self) -> None:
        self.offsets: dict[Path, int] = {}
        self.shown = False

    def show(self, log: Path) -> None:
        try:
            with log.open("rb") as fh:
                # from where the log stood when this job was first seen (earlier runs'
                # output is not replayed)
                fh.seek(self.offsets.setdefault(log, fh.seek(0, 2)))
                chunk = fh.read()
                self.offsets[log] = fh.tell()
        except OSError:
            return
        bar = last_bar(chunk.decode("utf-8", errors="replace"))
        if bar:
            sys.stderr.write("\r\033[K      " + bar[:150])
            sys.stderr.flush()
            self.shown = True

    def clear(self) -> None:
        if self.shown:
            sys.stderr.write("\r\033[K")
            sys.stderr.flush()
            self.shown = False


#: What the fork server imports before it forks a job (an ImportError skips a module: a
#: build without the ``train`` extra forks jobs that import what they need themselves).
PRELOAD: tuple[str, ...] = (
    "rcea.app.cli",
    "rcea.app.cli.train_cmd",
    "rcea.app.cli.probe_cmd",
    "rcea.app.cli.judge_cmd",
    "rcea.app.cli.report_cmd",
    "rcea.pipeline.training.run",
    "rcea.pipeline.training.trainer",
    "transformers.models.qwen2.modeling_qwen2",
)


@functools.cache
def job_context() -> BaseContext:
    """The fork-server context of this process's demo jobs (the server starts with the
    first job and ends with the demo; every POSIX system has one, and rcea needs POSIX
    for its file locks)."""
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(list(PRELOAD))
    return ctx


def run_forked(cmd: list[str], env: dict[str, str], stdout: str, stderr: str) -> None:
    """The body of a forked job: the ``rcea`` script ``cmd[0]`` run as ``__main__`` with
    the arguments ``cmd[1:]``, as a fresh process runs it, with this environment, stdout
    appended to ``stdout`` and stderr to ``stderr`` (the process exits with the command's
    exit code)."""
    sys.stdout.flush()
    sys.stderr.flush()
    os.environ.clear()
    os.environ.update(env)
    for fd, path in ((1, stdout), (2, stderr)):
        target = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        os.dup2(target, fd)
        os.close(target)
    sys.argv = list(cmd)
    try:
        # the console script imports rcea.app.cli.main (preloaded) and exits with its code
        runpy.run_path(cmd[0], run_name="__main__")
    finally:
        # multiprocessing ends a child with os._exit: run what an interpreter's exit runs
        # (log handlers, TensorBoard writers and the like flush there)
        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()


class RceaJob:
    """One ``rcea`` command in its own process (forked from the demo's fork server, see
    the module doc): stdout to a temporary file (read when it exits), stderr appended to
    ``<work>/logs/<log>.log`` with the command line and the duration."""

    def __init__(self, ctx: DemoContext, args: list[str], log: str, as_json: bool = True):
        self.args, self.as_json, self.seconds = args, as_json, 0.0
        logs = ctx.work / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        self.log = logs / f"{log}.log"
        exe = Path(sys.executable).parent / "rcea"
        self.cmd = [str(exe), *args, *(["--json"] if as_json else [])]
        self.proc: multiprocessing.process.BaseProcess | None = None

    def start(self) -> None:
        self._began = time.monotonic()
        self._err = self.log.open("a", encoding="utf-8")
        self._err.write(f"$ {' '.join(self.cmd)}\n")
        self._err.flush()
        fd, out = tempfile.mkstemp(prefix="rcea-job-", suffix=".out")
        os.close(fd)
        self._out = Path(out)  # removed in result() or kill()
        env = {**os.environ, "RCEA_PROGRESS": "1"}  # bars on stderr (relayed by BarRelay)
        self.proc = job_context().Process(  # type: ignore[attr-defined]  # job_context() is the fork-server context, which has Process (BaseContext's stub lacks it)
            target=run_forked,
            args=(self.cmd, env, str(self._out), str(self.log)),
            name=f"rcea {' '.join(self.args[:2])}",
        )
        self.proc.start()

    def poll(self) -> int | None:
        assert self.proc is not None
        return self.proc.exitcode

    def kill(self) -> None:
        if self.proc is not None:
            if self.proc.exitcode is None:
                self.proc.kill()
            self.proc.join()
        self._close()

    def _close(self) -> None:
        self._err.close()
        self._out.unlink(missing_ok=True)

    def result(self) -> Any:
        assert self.proc is not None
        self.seconds = time.monotonic() - self._began
        code = self.proc.exitcode
        stdout = self._out.read_bytes().decode("utf-8", errors="replace")
        self._err.write(f"# exit {code} after {self.seconds:.1f} s\n")
        self._close()
        what = f"`rcea {' '.join(self.args)}`"
        if code != 0:
            tail = self.log.read_text(encoding="utf-8").splitlines()[-15:]
            raise DemoStepError(
                f"{what} exited {code}: "
                + (stdout.strip()[-2000:] or "(no output)")
                + "\n  log tail:\n    "
                + "\n    ".join(tail)
                + f"\n  (full log: {self.log})"
            )
        if not self.as_json:
            return None
        try:
            return json.loads(stdout)
        except json.JSONDecodeError as exc:
            raise DemoStepError(f"{what} printed no JSON ({exc}): {stdout[-500:]}") from None


@dataclass(frozen=True)
class Step:
    name: str
    title: str
    run: Callable[[DemoContext], dict[str, Any]]
    after: tuple[str, ...] = ()


BRIEF_SKIP = frozenset({"ok", "stage", "out_dir", "seconds", "judge_hash", "note", "study"})


def brief(data: Any) -> str:
    """A one-line summary of a command's JSON answer: its first six scalar fields, without
    paths, hashes and timings (those are in the logs and the state file)."""
    if not isinstance(data, dict):
        return str(data)[:120]
    keys = [
        k
        for k, v in data.items()
        if isinstance(v, int | float | str) and k not in BRIEF_SKIP and len(str(v)) < 60
    ]
    return ", ".join(
        f"{k} {data[k]:.4g}" if isinstance(data[k], float) else f"{k} {data[k]}" for k in keys[:6]
    )
