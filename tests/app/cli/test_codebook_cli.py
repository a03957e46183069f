"""``rcea codebook ...`` in-process: the whole cycle with the oracle backend, the
researcher steps, blinded queue output, refusals with clear messages."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from rcea.app.cli import app
from tests.support.codebook_study import PHASE1, PHASE2
from tests.support.fake_llm import MODEL, RUNS, domain_records
from tests.support.helpers import write_jsonl

runner = CliRunner()
ORACLE = ["--backend", "oracle", "--oracle", "tests.support.fake_llm:strategy_of"]


def rcea(*args: str, code: int = 0):  # type: ignore[no-untyped-def]
    out = runner.invoke(app, list(args))
    assert out.exit_code == code, out.output
    return out


def rcea_json(*args: str):  # type: ignore[no-untyped-def]
    return json.loads(rcea(*args, "--json").output)


def test_codebook_cli_cycle(tmp_path: Path) -> None:
    rcea("ingest", str(write_jsonl(tmp_path / "a.jsonl", domain_records(questions=PHASE1))),
         "--study", "s")  # fmt: skip
    # Without an endpoint the openai backend says what to set.
    out = rcea("codebook", "induce", "--study", "s", code=1)
    assert "RCEA_LLM_BASE_URL" in out.output
    assert "MODULE:FUNCTION" in rcea("codebook", "induce", "--study", "s", "--backend",
                                     "oracle", code=1).output  # fmt: skip

    # Items wait in the researcher queue: `run` says so and exits 3 (README).
    run = json.loads(
        rcea("codebook", "run", "--study", "s", *ORACLE, "--sample", "6", "--json", code=3).output
    )
    assert run["exit_code"] == 3 and run["researcher_queue"] == 2
    assert "2 item(s) wait in the researcher queue" in run["waiting"]
    plain = rcea("codebook", "run", "--study", "s", *ORACLE, "--sample", "6", code=3).output
    assert "not finished (exit 3): 2 item(s) wait in the researcher queue" in plain
    assert [r["stage"] for r in run["stages"]] == ["induce", "merge", "assign", "reconcile"]
    assert run["n_frozen_now"] == 3
    shown = rcea_json("codebook", "show", "--study", "s")
    assert [(c["question_id"], c["status"], c["version"]) for c in shown] == [
        ("q00", "frozen", 1),
        ("q01", "frozen", 1),
        ("q02", "frozen", 1),
    ]
    edit = rcea("codebook", "edit", "rename", "m1", "--study", "s", "--question", "q00",
                "--name", "x", code=1)  # fmt: skip
    assert "frozen" in edit.output and "extension review" in edit.output

    queue = rcea_json("codebook", "queue", "--study", "s")
    assert len(queue) == 2 and all("boxed" in q["text"] for q in queue)
    text = rcea("codebook", "queue", "--study", "s").output
    for leak in (*RUNS, MODEL, "-s0-", "trajectory_id"):
        assert leak not in text
    assert all(set(q) == {"dispute_id", "question_id", "reasons", "arbitration",
                          "arbitration_confidence", "text"} for q in queue)  # fmt: skip
    blocked = rcea("codebook", "export", "--study", "s", code=1)
    assert "researcher queue" in blocked.output and "--allow-incomplete" in blocked.output
    for q in queue:
        rcea("codebook", "resolve", str(q["dispute_id"]), "--study", "s", "--uncertain")

    rcea("ingest", str(write_jsonl(tmp_path / "b.jsonl",
         domain_records(questions=PHASE2, step=100, start_k=50))), "--study", "s")  # fmt: skip
    assert (
        rcea_json("codebook", "assign", "--study", "s", *ORACLE)["n_run"] == 2
    )  # 5 new, 1 per pass
    rec = rcea_json("codebook", "reconcile", "--study", "s", *ORACLE)
    assert rec["details"]["arbitration"]["new"] == 3
    (ext,) = rcea_json("codebook", "extend", "--study", "s")
    assert ext["question_id"] == "q00" and ext["proposals"][0]["name"] == "factor"
    assert ext["proposals"][0]["n_trajectories"] == 3 and len(ext["proposals"][0]["examples"]) == 2
    approved = rcea_json("codebook", "approve", str(ext["extension_id"]), "--study", "s",
                         "--reason", "new method", *ORACLE)  # fmt: skip
    assert approved["version"] == 2 and approved["assign"]["n_run"] == 2
    assert approved["reconcile"]["details"]["settled_by_passes"] == 3
    shown = {c["question_id"]: c for c in rcea_json("codebook", "show", "--study", "s")}
    assert shown["q00"]["parent_version"] == 1 and "new method" in shown["q00"]["reason"]

    exported = rcea_json("codebook", "export", "--study", "s")
    assert exported["n_uncertain"] == 2 and exported["n_modes"] == 7
    assert Path(exported["parquet"]).exists()
    status = rcea("codebook", "status", "--study", "s").output
    assert "settled" in status and "frozen codebooks" in status
    # The pair audit can lock the exported partition like any other.
    assert "unchanged:" in rcea("codebook", "export", "--study", "s").output


def test_backend_options_default_to_the_settings(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """``--backend``/``--oracle`` default to the settings ``RCEA_CODEBOOK_*`` (the view's
    backend); a value on the command line wins."""
    from rcea.study.settings import get_settings

    rcea("ingest", str(write_jsonl(tmp_path / "a.jsonl", domain_records(questions=PHASE1))),
         "--study", "s")  # fmt: skip
    monkeypatch.setenv("RCEA_CODEBOOK_BACKEND", "oracle")
    get_settings.cache_clear()
    assert "--backend oracle needs --oracle" in rcea("codebook", "induce", "--study", "s",
                                                     code=1).output  # fmt: skip
    assert "RCEA_LLM_BASE_URL" in rcea("codebook", "induce", "--study", "s", "--backend",
                                       "openai", code=1).output  # fmt: skip
    monkeypatch.setenv("RCEA_CODEBOOK_ORACLE", ORACLE[-1])
    get_settings.cache_clear()
    assert rcea("codebook", "induce", "--study", "s", "--json").exit_code == 0
