"""The demo walkthrough (:mod:`rcea.study.progress`): the researcher's next command at
every stage, the per-role lines, and the store reader on a fresh store."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from rcea.study.progress import (
    CalibrationProgress,
    PairProgress,
    Progress,
    Project,
    Where,
    next_commands,
    read_progress,
    walkthrough,
)

ADJ = "adjudicator@rcea.local"
NRC = "--no-receiver-check"  # the demo serves its own receiver
PAIR = PairProgress(
    audit="toy-pairs",
    n_pairs=24,
    labelled={"A": 24, "B": 24},
    n_needing_adjudication=5,
    n_adjudication_pushed=5,
    n_adjudicated=5,
    final_gate=None,
    projects=[
        Project("A", "annotator-a@rcea.local", "http://127.0.0.1:8081/projects/1", 24),
        Project("B", "annotator-b@rcea.local", "http://127.0.0.1:8082/projects/1", 24),
    ],
)
CAL = CalibrationProgress(
    calibration="toy-validity",
    double=False,
    n_items=20,
    n_unlabelled=0,
    n_needing_adjudication=0,
    n_adjudication_pushed=0,
    n_adjudicated=0,
    n_reference=20,
    completed=True,
    projects=[
        Project("annotator-1", "annotator-a@rcea.local", "http://127.0.0.1:8081/projects/2", 20),
    ],
)


def _cmds(p: Progress) -> list[str | None]:
    return [c.command for c in next_commands(p, ADJ)]


def test_pair_stages_in_order() -> None:
    p = Progress("toy", replace(PAIR, labelled={"A": 3, "B": 0}), CAL, None)
    steps = next_commands(p, ADJ)
    assert steps[0].command == "rcea audit sync --audit toy-pairs"
    assert steps[0].state == "labelling: A 3/24, B 0/24"
    assert "annotators A and B" in (steps[0].waits_for or "")
    # Labelled, adjudication needed, none pushed → adjudicate with the adjudicator's e-mail.
    p = Progress("toy", replace(PAIR, n_adjudication_pushed=0, n_adjudicated=0), CAL, None)
    assert _cmds(p)[0] == f"rcea audit adjudicate --audit toy-pairs --adjudicator {ADJ} {NRC}"
    # More disagreements than the pushed project holds (labels changed) → extend it.
    p = Progress("toy", replace(PAIR, n_adjudication_pushed=3, n_adjudicated=3), CAL, None)
    assert _cmds(p)[0] == f"rcea audit adjudicate --audit toy-pairs --adjudicator {ADJ} {NRC}"
    # Pushed, 2/5 decided → sync after the adjudicator.
    p = Progress("toy", replace(PAIR, n_adjudicated=2), CAL, None)
    steps = next_commands(p, ADJ)
    assert (steps[0].command, steps[0].state) == (
        "rcea audit sync --audit toy-pairs",
        "adjudication: 2/5",
    )
    # All decided, no gate.final yet → the final gate.
    p = Progress("toy", PAIR, CAL, None)
    assert _cmds(p)[0] == "rcea audit gate --final --audit toy-pairs"
    # Nothing to adjudicate → the final gate directly.
    p = Progress("toy", replace(PAIR, n_needing_adjudication=0, n_adjudicated=0), CAL, None)
    assert _cmds(p)[0] == "rcea audit gate --final --audit toy-pairs"
    # Recorded → the track is done and the report is publishable.
    p = Progress("toy", replace(PAIR, final_gate="passed"), CAL, None)
    assert _cmds(p) == [None, None, "rcea report publish --study toy"]


def test_calibration_stages_in_order() -> None:
    done_pair = replace(PAIR, final_gate="passed")
    cal = replace(CAL, completed=False, n_unlabelled=12, n_reference=8)
    steps = next_commands(Progress("toy", done_pair, cal, None), ADJ)
    assert steps[1].command == "rcea judge calibrate sync --calibration toy-validity"
    assert steps[1].state == "labelling: 8/20 held-out items labelled"
    assert steps[2].command is None  # publishing waits for the calibration
    cal = replace(CAL, completed=False)
    assert _cmds(Progress("toy", done_pair, cal, None))[1] == (
        "rcea judge calibrate report --calibration toy-validity"
    )
    # Two annotators per item: disagreements are adjudicated first.
    cal = replace(CAL, completed=False, double=True, n_needing_adjudication=4, n_reference=16)
    assert _cmds(Progress("toy", done_pair, cal, None))[1] == (
        f"rcea judge calibrate adjudicate --calibration toy-validity --adjudicator {ADJ} {NRC}"
    )
    cal = replace(cal, n_adjudication_pushed=4, n_adjudicated=1)
    assert _cmds(Progress("toy", done_pair, cal, None))[1] == (
        "rcea judge calibrate sync --calibration toy-validity"
    )
    cal = replace(cal, n_adjudicated=4, n_reference=20)
    assert _cmds(Progress("toy", done_pair, cal, None))[1] == (
        "rcea judge calibrate report --calibration toy-validity"
    )


def test_the_accepted_set_check_comes_before_publishing() -> None:
    """ "Calibrated" needs the accepted-set check too (docs/validity-audit.md): after the
    calibration, the walkthrough waits for A and B to label it, then reports it, and only
    then says the report is ready."""
    done_pair = replace(PAIR, final_gate="passed")
    cal = replace(CAL, accepted="toy-judge-accepted", accepted_items=60,
                  accepted_labelled={"A": 60, "B": 12})  # fmt: skip
    steps = next_commands(Progress("toy", done_pair, cal, None), ADJ)
    assert steps[1].command == "rcea judge accepted sync --check toy-judge-accepted"
    assert "B 12/60" in steps[1].state and "A and B" in (steps[1].waits_for or "")
    assert steps[2].command is None  # publishing waits for the accepted-set check
    cal = replace(cal, accepted_labelled={"A": 60, "B": 60})
    assert _cmds(Progress("toy", done_pair, cal, None))[1:] == [
        "rcea judge accepted report --check toy-judge-accepted",
        None,
    ]
    cal = replace(cal, accepted_completed=True)
    assert _cmds(Progress("toy", done_pair, cal, None)) == [
        None, None, "rcea report publish --study toy"]  # fmt: skip


def test_publish_and_after() -> None:
    failed = replace(PAIR, final_gate="failed")
    steps = next_commands(Progress("toy", failed, CAL, None), ADJ)
    assert steps[0].state == "final gate FAILED"
    assert steps[2].command == "rcea report publish --study toy --entropy-only"
    steps = next_commands(Progress("toy", replace(PAIR, final_gate="passed"), CAL, "/b/x"), ADJ)
    assert [s.command for s in steps] == [None, None, None]
    assert steps[2].state == "published: /b/x"
    # Nothing pushed yet: the demo itself is the next command; names are shell-quoted.
    assert _cmds(Progress("my study", None, None, None)) == ["rcea demo", "rcea demo", None]
    p = Progress("my study", replace(PAIR, final_gate="passed"), CAL, None)
    assert _cmds(p)[2] == "rcea report publish --study 'my study'"


def _where(tmp_path: Path) -> Where:
    return Where(
        people={"A": "annotator-a@rcea.local", "B": "annotator-b@rcea.local", "adjudicator": ADJ},
        servers={
            "annotator-a@rcea.local": "http://127.0.0.1:8081",
            "annotator-b@rcea.local": "http://127.0.0.1:8082",
            ADJ: "http://127.0.0.1:8083",
        },
        logins_file=tmp_path / "demo-logins.json",
        view_url="http://127.0.0.1:8501",
        view_login=str(tmp_path / "demo-view-login.json"),
    )


def test_walkthrough_lines_per_role(tmp_path: Path) -> None:
    p = Progress(
        "toy",
        replace(PAIR, labelled={"A": 24, "B": 10}),
        replace(CAL, completed=False, n_unlabelled=20, n_reference=0),
        None,
    )
    text = "\n".join(walkthrough(p, _where(tmp_path)))
    logins = tmp_path / "demo-logins.json"
    assert "  annotator A — annotator-a@rcea.local\n" in text
    assert f"    open http://127.0.0.1:8081/user/login/ (password: {logins}, mode 0600)" in text
    assert (
        "    label each pair same/different strategy: http://127.0.0.1:8081/projects/1 "
        "(24 labelled)"
    ) in text
    assert "    label each answer's validity: http://127.0.0.1:8081/projects/2" in text
    assert "    open http://127.0.0.1:8083/user/login/" in text
    assert "nothing to label yet: the researcher pushes the adjudication" in text
    assert f"the researcher — view http://127.0.0.1:8501 (login: {tmp_path}" in text
    # The first command is NEXT, the others "then"; exactly one NEXT.
    assert text.count("NEXT:") == 1
    assert "      NEXT: rcea audit sync --audit toy-pairs" in text
    assert "      then: rcea judge calibrate sync --calibration toy-validity" in text
    done = Progress("toy", replace(PAIR, final_gate="passed"), CAL, "/b/x")
    text = "\n".join(walkthrough(done, _where(tmp_path)))
    assert "NEXT" not in text and "done: every step is finished" in text


def test_read_progress_on_a_store_without_the_demo(engine) -> None:  # type: ignore[no-untyped-def]
    from rcea.study.store import session_scope

    with session_scope(engine) as s:
        p = read_progress(s, study="nope", audit="nope-pairs", calibration="nope-validity")
    assert p == Progress("nope", None, None, None)
    assert _cmds(p) == ["rcea demo", "rcea demo", None]


def test_demo_status_cli_reads_the_state_and_never_runs_the_demo(
    tmp_path: Path, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    from typer.testing import CliRunner

    import rcea.app.cli.demo_cmd as demo_cmd
    from rcea.app.cli import app
    from rcea.app.demo.state import DemoState

    def _never(*a: object, **k: object) -> None:
        raise AssertionError("`rcea demo status` ran the demo")

    monkeypatch.setattr(demo_cmd, "run_steps", _never)
    data = tmp_path / "data"  # the autouse fixture's RCEA_DATA_DIR
    r = CliRunner().invoke(app, ["demo", "status"])
    assert r.exit_code != 0 and "run `rcea demo` (or `make demo`) first" in r.output
    DemoState(
        path=data / "demo" / "toy" / "state.json",
        size="default",
        simulate=False,
        study="toy",
        seed=0,
    ).save()
    r = CliRunner().invoke(app, ["demo", "status"])
    assert r.exit_code == 0, r.output
    assert r.output.startswith("walkthrough — study toy")
    assert f"(password: {data.resolve() / 'demo-logins.json'}, mode 0600)" in r.output
    assert "      NEXT: rcea demo\n" in r.output


def test_audit_gate_text_shows_human_human_macro_f1_in_the_preliminary_stage(capsys) -> None:  # type: ignore[no-untyped-def]
    from sklearn.metrics import f1_score

    from rcea.app.cli.audit_cmd import print_gate_status
    from rcea.audits.gates import evaluate_gate
    from rcea.audits.thresholds import GateThresholds

    a = ["same", "different", "same", "same", "different", "same", "different", "same"]
    b = ["same", "same", "same", "different", "different", "same", "different", "same"]
    report = evaluate_gate(
        [f"p{i}" for i in range(8)],
        a,
        b,
        None,
        [None] * 8,
        0.9,
        GateThresholds(),
        stage="preliminary",
    ).to_dict()
    print_gate_status(
        {
            "audit": "toy-pairs",
            "status": "pending",
            "n_pairs": 24,
            "progress": {"A": 8, "B": 8, "adjudicator": 0},
            "n_needing_adjudication": 2,
            "rubric_hash": "r" * 64,
            "partition_hash": "p" * 64,
            "report": report,
        }
    )
    out = capsys.readouterr().out
    expected = f1_score(a, b, average="macro")
    assert f"  {'human_human_macro_f1':<28}{expected:>10.4g}\n" in out
    assert "gate (preliminary): preliminary (not gated)" in out
    assert "automatic coverage source: the audit's locked partition" in out


def test_demo_relays_the_latest_tqdm_bar_of_its_subprocess(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    import io

    from tqdm import tqdm

    from rcea.app.demo.context import BarRelay, last_bar

    buf = io.StringIO()
    with tqdm(total=40, desc="warm start", file=buf, mininterval=0, ascii=True) as bar:
        for _ in range(25):
            bar.update(1)
    text = buf.getvalue()
    assert text.count("\r") >= 25  # tqdm redraws after carriage returns
    shown = last_bar(text)
    assert shown is not None and shown.startswith("warm start") and "25/40" in shown
    assert last_bar("loading the model\nstill loading\n") is None
    log = tmp_path / "step.log"
    log.write_text("$ rcea train build-base --json\n")
    relay = BarRelay()
    relay.show(log)  # nothing new yet: nothing drawn
    with log.open("a") as fh:
        fh.write(text)
    relay.show(log)
    relay.clear()
    err = capsys.readouterr().err
    assert f"\r\x1b[K      {shown}" in err and err.endswith("\r\x1b[K")


def test_rcea_progress_forces_bars_under_json(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from rcea.app.cli.common import progress_forced

    monkeypatch.delenv("RCEA_PROGRESS", raising=False)
    assert not progress_forced()
    monkeypatch.setenv("RCEA_PROGRESS", "1")
    assert progress_forced()
