"""What every demo step sees and uses: the context (settings, sizes, options, state, work
dir), ``rcea`` subprocesses with logs (:class:`RceaJob`), the :class:`Step` record, and
checks whether a command exists in this build."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from app.demo.config import DemoSizes
from app.demo.state import DemoState
from study.store import open_store

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
        pending, running, results = list(jobs), [], {}
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


class RceaJob:
    """One ``rcea`` subprocess: stdout to a temporary file (read when it exits), stderr
    appended to ``<work>/logs/<log>.log`` with the command line and the duration."""

    def __init__(self, ctx: DemoContext, args: list[str], log: str, as_json: bool = True):
        self.args, self.as_json, self.seconds = args, as_json, 0.0
        logs = ctx.work / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        self.log = logs / f"{log}.log"
        exe = Path(sys.executable).parent / "rcea"
        self.cmd = [str(exe), *args, *(["--json"] if as_json else [])]
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self._began = time.monotonic()
        self._err = self.log.open("a", encoding="utf-8")
        self._err.write(f"$ {' '.join(self.cmd)}\n")
        self._err.flush()
        self._out = tempfile.TemporaryFile()  # noqa: SIM115 - closed in result() or kill()

        env = {**os.environ, "RCEA_PROGRESS": "1"}  # bars on stderr (relayed by BarRelay)
        self.proc = subprocess.Popen(self.cmd, stdout=self._out, stderr=self._err, env=env)

    def poll(self) -> int | None:
        assert self.proc is not None
        return self.proc.poll()

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self._close()

    def _close(self) -> None:
        self._err.close()
        self._out.close()

    def result(self) -> Any:
        assert self.proc is not None
        self.seconds = time.monotonic() - self._began
        self._out.seek(0)
        stdout = self._out.read().decode("utf-8", errors="replace")
        self._err.write(f"# exit {self.proc.returncode} after {self.seconds:.1f} s\n")
        self._close()
        what = f"`rcea {' '.join(self.args)}`"
        if self.proc.returncode != 0:
            tail = self.log.read_text(encoding="utf-8").splitlines()[-15:]
            raise DemoStepError(
                f"{what} exited {self.proc.returncode}: "
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
