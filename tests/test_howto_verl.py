"""docs/how-to-verl.md, followed word for word: every command block the page marks
``<!-- walked: … -->`` is read from the page itself, in order, and each command runs
exactly as written through the real ``rcea`` executable in a fresh working directory —
the only substitution is the rollout directory the page names, which the test writes.

The study is verl-written (tests/support/verl_study.py: verl's own dump writer, DAPO ±1
scores, uneven successes per question, one empty completion, 8 samples per question);
the LLM endpoint is the local fake (tests/support/fake_llm.py, set through the
``RCEA_LLM_*`` variables of the page's step 3), answering the judge from the study's
ground truth and the codebook from its strategies. ``rcea serve &`` runs in the
background as the page says; the people's Label Studio servers are started by the page's
own ``rcea labelstudio add-annotator`` (and ``rcea audit adjudicate``, for the
adjudicator) from .venv-labelstudio. Scripted people — annotators a and b, adjudicator r
— log in to their OWN server with the login those commands printed and label every task
from the generator's ground truth (B disagrees on one pair, so adjudication has work).

Before each command that advances the study, ``rcea status`` must name it as NEXT. The
walk ends with a verified bundle, every command having exited 0, and nothing burnt: one
judge version, one rubric, one calibration, one accepted-set check and one audit, none
abandoned or failed."""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from rcea.annotation.server import default_executable
from tests.support import verl_study as vs
from tests.support.fake_llm import FakeLLM
from tests.support.helpers import free_port, free_port_run, service_missing

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "how-to-verl.md"
MARK = "<!-- walked: tests/test_howto_verl.py runs this block as written -->"
#: the rollout directory the page imports; the test writes the study there instead
ROLLOUTS = "/runs/grpo-qwen1.5b/validation"
STUDY = "qwen-grpo"
#: 40 questions at two checkpoints: enough judge-accepted successes (120) for the page's
#: accepted-set check (100) beside the calibration, few pairs (192) to label
SHAPE = vs.Shape(steps=(0, 40), base=(0, 1, 1, 1, 3) * 8)

#: commands before which `rcea status` must name the same command as NEXT
ADVANCING = {
    "import verl",
    "judge run",
    "audit rubric init",
    "judge calibrate sample",
    "judge calibrate push",
    "judge calibrate report",
    "judge accepted sample",
    "judge accepted push",
    "judge accepted report",
    "codebook run",
    "codebook export",
    "audit sample",
    "audit push",
    "audit adjudicate",
    "report publish",
    "report verify",
}
#: a sync may find every label already delivered by the webhooks: NEXT is then the page's
#: next command
SYNCS = {"judge calibrate sync", "judge accepted sync", "audit sync"}


def walked_commands(text: str) -> list[str]:
    """Every command of the marked ``bash`` blocks, in page order; a line ending in ``\\``
    continues on the next."""
    out: list[str] = []
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line.strip() != MARK:
            continue
        assert lines[i + 1].strip() == "```bash", f"line {i + 2}: a walked block must follow"
        j, pending = i + 2, ""
        while lines[j].strip() != "```":
            cur = lines[j].rstrip()
            j += 1
            if cur.endswith("\\"):
                pending += cur[:-1].strip() + " "
                continue
            cmd = (pending + cur.strip()).strip()
            pending = ""
            if cmd:
                out.append(cmd)
    return out


def path_of(command: str) -> str:
    """The command's subcommand words (``judge calibrate sample``)."""
    words = []
    for tok in shlex.split(command, comments=True)[1:]:
        if not re.fullmatch(r"[a-z][a-z-]*", tok):
            break
        words.append(tok)
    return " ".join(words)


@dataclass
class Person:
    email: str
    url: str = ""
    password: str = ""
    done: set[int] = field(default_factory=set)  # task ids labelled


def validity_truth(data: dict[str, Any]) -> str:
    """The study's ground truth for a validity task: a guess is not a valid process."""
    return "invalid" if str(data["solution"]).startswith("I guess.") else "valid"


def strategy_of(text: str) -> str:
    return "expand" if text.startswith("Expand ") else "direct"


def pair_truth(data: dict[str, Any]) -> str:
    return "same" if strategy_of(data["left"]) == strategy_of(data["right"]) else "different"


def _result(data: dict[str, Any], wrong: bool) -> list[dict[str, Any]]:
    """The annotation of one task from the ground truth (``wrong``: the other answer)."""
    if "pair" in data:
        label = pair_truth(data)
        if wrong:
            label = "different" if label == "same" else "same"
        return [{"from_name": "strategy", "to_name": "left", "type": "choices",
                 "value": {"choices": [label]}}]  # fmt: skip
    choice = {"valid": "valid", "invalid": "fatal error"}[validity_truth(data)]
    return [{"from_name": "validity", "to_name": "solution", "type": "choices",
             "value": {"choices": [choice]}}]  # fmt: skip


def label_everything(person: Person, *, flip_first_pair: bool = False) -> int:
    """Log in to the person's own server as them; label every task they have not
    labelled, from the ground truth (``flip_first_pair``: answer the first pair task
    wrongly), a few at a time as several browser tabs would. Returns the number posted."""
    from rcea.annotation.accounts import login_session

    with closing(login_session(person.url, person.email, person.password)) as web:
        projects = web.get("/api/projects/", params={"page_size": 1000})
        assert projects.status_code == 200, projects.text
        body = projects.json()
        todo: list[tuple[int, list[dict[str, Any]]]] = []
        for project in body["results"] if isinstance(body, dict) else body:
            page = web.get("/api/tasks/", params={"project": project["id"], "page_size": 10_000})
            assert page.status_code == 200, page.text
            for task in page.json()["tasks"]:
                if task["id"] in person.done or task.get("total_annotations"):
                    continue
                wrong = flip_first_pair and "pair" in task["data"]
                flip_first_pair = flip_first_pair and not wrong
                todo.append((task["id"], _result(task["data"], wrong)))

        def post(item: tuple[int, list[dict[str, Any]]]) -> None:
            r = web.post(
                f"/api/tasks/{item[0]}/annotations/", json={"result": item[1], "lead_time": 1.0}
            )
            assert r.status_code == 201, r.text
            person.done.add(item[0])

        with ThreadPoolExecutor(max_workers=4) as pool:
            list(pool.map(post, todo))
    return len(todo)


def judge_reply(task: str, messages: list[dict[str, str]]) -> str | None:
    """The validity judge as a chat model: the study's ground truth."""
    if task != "judge.validity":
        return None  # the codebook prompts: the fake's own policy (strategies by keyword)
    user = messages[-1]["content"]
    solution = re.search(r"<solution>\n(.*?)\n</solution>", user, re.DOTALL)
    assert solution is not None
    ok = vs.judge_verdict("", solution.group(1))
    return json.dumps({"verdict": "valid" if ok else "invalid", "rationale": "checked"})


class Walk:
    """The working directory, the environment and the background processes of the walk."""

    def __init__(self, work: Path, llm: FakeLLM) -> None:
        self.work = work
        base = free_port_run(6)
        self.env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("RCEA_")},
            "PATH": f"{ROOT / '.venv' / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}",
            "PYTHONPATH": str(ROOT),
            "RCEA_DATA_DIR": str(work / "rcea-data"),
            "RCEA_LLM_BASE_URL": llm.base_url,
            "RCEA_LLM_MODEL": "Qwen/Qwen2.5-72B-Instruct",
            "RCEA_LLM_API_KEY": "test-key",
            "RCEA_API_PORT": str(free_port()),
            "RCEA_LABELSTUDIO_URL": f"http://127.0.0.1:{base}",
            "RCEA_LABELSTUDIO_BIN": str(default_executable()),
        }
        self.background: list[subprocess.Popen[bytes]] = []
        self.log: list[tuple[str, int, str]] = []

    def sh(self, command: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["bash", "-c", command], cwd=self.work, env=self.env, capture_output=True,
            text=True, timeout=timeout,
        )  # fmt: skip

    def run(self, command: str) -> str:
        """One command of the page, as written; it must exit 0."""
        if command.split("#")[0].rstrip().endswith("&"):
            self.start_background(command)
            return ""
        began = time.monotonic()
        proc = self.sh(command)
        out = proc.stdout + proc.stderr
        self.log.append((command, proc.returncode, f"{time.monotonic() - began:.1f}s"))
        assert proc.returncode == 0, f"`{command}` exited {proc.returncode}:\n{out[-4000:]}"
        return out

    def start_background(self, command: str) -> None:
        """``rcea serve &``: its own process group, stopped by :meth:`stop`; the walk goes
        on once it answers."""
        line = command.split("#")[0].rstrip().removesuffix("&")
        proc = subprocess.Popen(
            ["bash", "-c", f"exec {line}"], cwd=self.work, env=self.env,
            stdout=subprocess.DEVNULL, stderr=(self.work / "serve.log").open("wb"),
            start_new_session=True,
        )  # fmt: skip
        self.background.append(proc)
        url = f"http://127.0.0.1:{self.env['RCEA_API_PORT']}/health"
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            assert proc.poll() is None, (self.work / "serve.log").read_text()[-3000:]
            try:
                if httpx.get(url, timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise AssertionError(f"`{command}` did not answer at {url}")

    def status(self) -> dict[str, Any]:
        proc = self.sh(f"rcea status --study {STUDY} --json")
        assert proc.returncode == 0, proc.stdout + proc.stderr
        return json.loads(proc.stdout)  # type: ignore[no-any-return]

    def next_command(self) -> str:
        steps = self.status()["steps"]
        return next(s["command"] for s in steps if s["command"] and not s["optional"])

    def stop(self) -> None:
        for proc in self.background:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
        self.sh("rcea labelstudio stop", timeout=120)


@pytest.fixture
def walk(tmp_path: Path) -> Iterator[Walk]:
    if not default_executable().exists():
        service_missing(
            "labelstudio", f"no label-studio at {default_executable()}; `make install` creates it"
        )
    with FakeLLM() as llm:
        llm.responder = judge_reply
        w = Walk(tmp_path / "work", llm)
        w.work.mkdir()
        try:
            yield w
        finally:
            w.stop()


def test_walked_blocks_are_the_documented_path() -> None:
    """The page marks the blocks of the walk and they run from import to verify."""
    commands = walked_commands(PAGE.read_text(encoding="utf-8"))
    paths = [path_of(c) for c in commands]
    assert paths[0] == "import verl" and ROLLOUTS in commands[0]
    assert paths[-2:] == ["report publish", "report verify"]
    assert set(paths) >= ADVANCING, ADVANCING - set(paths)
    assert [c for c in commands if c.split("#")[0].rstrip().endswith("&")] == [
        next(c for c in commands if path_of(c) == "serve")
    ]


@pytest.mark.slow
def test_the_how_to_reaches_a_verified_bundle_word_for_word(walk: Walk, tmp_path: Path) -> None:
    commands = walked_commands(PAGE.read_text(encoding="utf-8"))
    vs.write_validation_dump(tmp_path / "rollouts", shape=SHAPE)
    people: dict[str, Person] = {}
    adjudicator: Person | None = None
    for i, command in enumerate(commands):
        path = path_of(command)
        if path in ADVANCING or "--final" in command:
            assert path_of(walk.next_command()) == path, (command, walk.status())
        elif path in SYNCS:
            after = path_of(commands[i + 1])
            assert path_of(walk.next_command()) in {path, after}, (command, walk.status())
        out = walk.run(command.replace(ROLLOUTS, str(tmp_path / "rollouts")))
        if path == "labelstudio add-annotator":
            email = shlex.split(command, comments=True)[3]
            login = re.search(r"log in at: (\S+)/user/login/", out)
            password = re.search(r"password:\s+(\S+)", out)
            assert login and password, out
            people[email] = Person(email, login.group(1), password.group(1))
        elif path in {"judge calibrate push", "judge accepted push", "audit push"}:
            # a and b label at the same time; b gets one pair wrong (adjudication has work)
            with ThreadPoolExecutor(max_workers=2) as pool:
                flips = [path == "audit push" and e == "b@lab.org" for e in people]
                done = pool.map(
                    lambda p, f: label_everything(p, flip_first_pair=f), people.values(), flips
                )
                assert all(n > 0 for n in done), path
        elif path == "audit adjudicate":
            login = re.search(r"adjudication \((\S+)\): (\S+)/projects/\d+", out)
            password = re.search(r"new login for the adjudicator: \S+ / (\S+)", out)
            assert login and password, out
            adjudicator = Person(login.group(1), login.group(2), password.group(1))
            assert label_everything(adjudicator) >= 1
        elif path == "report publish":
            published = walk.status()
    assert adjudicator is not None and adjudicator.email == "r@lab.org"
    # the bundle the page's pattern verified is the one publish wrote (and status names)
    bundles = list((walk.work / "reports").glob(f"{STUDY}-*/"))
    assert len(bundles) == 1
    verify = next(s for s in published["steps"] if s["track"] == "verify")
    assert Path(verify["command"].removeprefix("rcea report verify ")) == bundles[0].resolve()
    _nothing_burnt(walk)


def _nothing_burnt(walk: Walk) -> None:
    """One judge version, rubric, calibration, accepted-set check and audit; none
    abandoned, failed or re-drawn; the calibration and the final gate passed."""
    from sqlmodel import select

    from rcea.study import events
    from rcea.study.settings import Settings
    from rcea.study.store import list_events, open_store, session_scope
    from rcea.study.store.models import Audit, JudgeVersion, Rubric, ValidityCheck

    engine = open_store(Settings(data_dir=Path(walk.env["RCEA_DATA_DIR"])))
    try:
        with session_scope(engine) as s:
            assert len(s.exec(select(JudgeVersion)).all()) == 1
            assert len(s.exec(select(Rubric)).all()) == 1
            assert len(s.exec(select(Audit)).all()) == 1
            kinds = sorted(c.kind for c in s.exec(select(ValidityCheck)).all())
            assert kinds == ["accepted", "calibration"]
            for kind in (events.CALIBRATION_ABANDON, events.ACCEPTED_ABANDON,
                         events.AUDIT_ABANDON):  # fmt: skip
                assert not list_events(s, kind=kind), kind
            for kind in (events.CALIBRATION_COMPLETED, events.ACCEPTED_COMPLETED):
                done = list_events(s, kind=kind)
                assert done and all(e.payload["acceptance"]["passed"] for e in done), kind
            gates = [e.payload for e in list_events(s, kind=events.GATE_FINAL)]
            assert len(gates) == 1 and gates[0]["status"] == "passed", gates
    finally:
        engine.dispose()
    steps = walk.status()["steps"]
    assert not [s for s in steps if "FAILED" in s["state"]], steps
    assert [s["track"] for s in steps if s["command"] and not s["optional"]] == ["verify"]


if __name__ == "__main__":  # pragma: no cover - print the walk
    sys.stdout.write("\n".join(walked_commands(PAGE.read_text(encoding="utf-8"))) + "\n")
