"""A person who reads only the demo's own output can take the study from labelling to a
published bundle: ``rcea demo --quick --no-serve`` (people, not simulated), then a loop
that reads ``rcea demo status``, lets the role the walkthrough waits for label through
the Label Studio API (oracle annotators with the quick demo's seeded noise, logging in
with the e-mails and the logins file the walkthrough names), and runs exactly the
printed ``NEXT:`` command — until the walkthrough says every step is finished."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from rcea.app.demo.audits import PEOPLE
from tests.support.helpers import free_port
from tests.support.labelstudio_fixture import LabelStudioHandle, register_people

pytestmark = pytest.mark.slow
STUDY = "toy-quick"


def _rcea(env: dict[str, str], *args: str, timeout: float = 900) -> subprocess.CompletedProcess:
    exe = Path(sys.executable).parent / "rcea"
    return subprocess.run(
        [str(exe), *args], capture_output=True, text=True, env=env, timeout=timeout
    )


def _next(status: str) -> tuple[str | None, str | None]:
    """(the NEXT command, the 'after …' line of its track, if any) of a walkthrough."""
    lines = status.splitlines()
    for i, line in enumerate(lines):
        if line.strip().startswith("NEXT: "):
            after = lines[i - 1].strip() if lines[i - 1].strip().startswith("after ") else None
            return line.strip()[len("NEXT: ") :], after
    return None, None


def _label(data: Path, after: str, command: str) -> str:
    """Do what the walkthrough waits for, as the person it names."""
    from rcea.annotation.people import people_from_settings
    from rcea.app.demo.config import ORACLE, QUICK
    from rcea.app.demo.simulate import SimAccount, flip, pair_truth, post_side_by_side, todo_pairs
    from rcea.app.demo.study import VALIDITY_ORACLE
    from rcea.study.codebook import load_strategy_fn
    from rcea.study.settings import Settings
    from rcea.study.store import open_store, session_scope
    from rcea.study.validity_audit.simulate import simulate_validity_labels

    cfg = Settings(data_dir=data)
    eng = open_store(cfg)
    logins = json.loads((data / "demo-logins.json").read_text())
    emails = {
        "A": "annotator-a@rcea.local",
        "B": "annotator-b@rcea.local",
        "adjudicator": "adjudicator@rcea.local",
    }
    acct = {r: SimAccount(r, e, logins[e], 0) for r, e in emails.items()}
    audit = f"{STUDY}-pairs"
    try:
        if command.startswith("rcea audit sync"):
            truth = pair_truth(eng, audit, load_strategy_fn(ORACLE))
            roles = ("A", "B") if "annotators A and B" in after else ("adjudicator",)
            batches = []
            for role in roles:
                labels = {}
                for key, task in todo_pairs(eng, audit, role).items():
                    label = truth[key]
                    if role != "adjudicator" and flip(QUICK.seed, role, key, QUICK.annotator_error):
                        label = "different" if label == "same" else "same"
                    labels[task] = label
                batches.append((acct[role], labels))
            post_side_by_side(cfg, batches)  # each person on their own server, side by side
            return "pairs: " + ", ".join(roles)
        # a validity round: the calibration, then the accepted-set check of the same judge
        rounds = {
            "rcea judge calibrate sync": (f"{STUDY}-validity", "validity"),
            "rcea judge accepted sync": (f"{STUDY}-judge-accepted", "accepted-set check"),
        }
        for prefix, (name, what) in rounds.items():
            if command.startswith(prefix):
                with session_scope(eng) as s:
                    simulate_validity_labels(
                        s,
                        name,
                        people_from_settings(cfg),
                        {acct[r].email: acct[r].password for r in ("A", "B")},
                        load_strategy_fn(VALIDITY_ORACLE),
                        error_rate=QUICK.validity_error,
                        seed=QUICK.seed,
                    )
                return what
        raise AssertionError(f"the walkthrough waits for {after!r} before {command!r}")
    finally:
        eng.dispose()


def test_following_the_printed_next_commands_reaches_a_published_bundle(
    tmp_path: Path, labelstudio_pool: list[LabelStudioHandle], demo_cache_dir: Path
) -> None:
    """The three people are registered on the session's Label Studio pool (as servers
    run elsewhere), so the demo starts and stops none (``test_demo_e2e`` covers that);
    base, runs and probe output come from the session's demo cache when an earlier test
    built the same recipe."""
    data = tmp_path / "data"
    env = {
        **os.environ,
        "RCEA_DATA_DIR": str(data),
        "RCEA_LABELSTUDIO_URL": f"http://127.0.0.1:{free_port()}",
        "RCEA_DEMO_CACHE_DIR": str(demo_cache_dir),
        "PYTHONPATH": str(Path(__file__).resolve().parents[3]),
    }
    register_people(data, labelstudio_pool, list(PEOPLE.values()))
    try:
        run = _rcea(env, "demo", "--quick", "--no-serve")
        assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
        out = run.stdout
        # the demo's own last lines: the walkthrough per role with the first NEXT command
        assert f"walkthrough — study {STUDY}" in out
        for who in (
            "annotator A — annotator-a@rcea.local",
            "annotator B — annotator-b@rcea.local",
            "the adjudicator — adjudicator@rcea.local",
            "the researcher — view",
        ):
            assert who in out, who
        assert f"(password: {data.resolve() / 'demo-logins.json'}, mode 0600)" in out
        assert _next(out)[0] == f"rcea audit sync --audit {STUDY}-pairs"
        # the demo started no server (every person's answers) and so stopped none
        assert "server(s) started" not in out, out[-3000:]  # neither started nor stopped
        started = _rcea(env, "labelstudio", "start")  # what a person would run: a no-op
        assert started.returncode == 0, started.stdout + started.stderr

        followed: list[str] = []
        for _ in range(20):
            status = _rcea(env, "demo", "status", timeout=120)
            assert status.returncode == 0, status.stdout + status.stderr
            command, after = _next(status.stdout)
            if command is None:
                assert "done: every step is finished" in status.stdout, status.stdout
                break
            assert command != "rcea demo", status.stdout
            if after:
                followed.append("label " + _label(data, after, command))
            args = shlex.split(command)
            assert args[0] == "rcea"
            res = _rcea(env, *args[1:])
            assert res.returncode == 0, f"{command}:\n{res.stdout}\n{res.stderr}"
            followed.append(command)
        else:
            pytest.fail(f"the walkthrough never finished: {followed}")

        # every stage was reached through the printed commands, in order
        names = [c.split(" --")[0] for c in followed if c.startswith("rcea")]
        assert names[0] == "rcea audit sync" and names[-1] == "rcea report publish"
        for needed in ("rcea audit gate", "rcea judge calibrate sync",
                       "rcea judge calibrate report"):  # fmt: skip
            assert needed in names, followed
        assert names.index("rcea audit gate") < names.index("rcea report publish")
        final = _rcea(env, "demo", "status", timeout=120).stdout
        bundle = next(
            ln.split("published: ", 1)[1] for ln in final.splitlines() if "published: " in ln
        )
        assert Path(bundle).is_dir() and (Path(bundle) / "report.json").exists()
    finally:
        _rcea(env, "labelstudio", "stop")  # stops nothing: the pool's servers are external
