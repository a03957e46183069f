"""Every benchmark runs in ``make test`` in its smoke mode (tiny sizes, seconds), so that a
refactor cannot break one unnoticed (``make bench`` runs the full sizes). Each script must
exit 0 and end with its one JSON line of figures, marked ``"smoke": true``; the same figures
go to its ``--json-out`` file, and the benchmarks page's row renders from them (so a renamed
figure breaks here, not in the next ``make bench``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from benchmarks.figures import FORMATS, rows_of
from tests.support.labelstudio_fixture import LabelStudioHandle

REPO = Path(__file__).resolve().parents[2]
BENCHMARKS = sorted(p.name for p in (REPO / "benchmarks").glob("bench_*.py"))
NEEDS_TORCH = {"bench_probe_entropy.py", "bench_training.py"}
NEEDS_LABELSTUDIO = {"bench_audit_push.py", "bench_webhook_flood.py"}


def run_smoke(script: str, *extra: str) -> dict:  # type: ignore[type-arg]
    env = {k: v for k, v in os.environ.items() if not k.startswith("RCEA_")}
    env["PYTHONPATH"] = str(REPO)
    name = script.removeprefix("bench_").removesuffix(".py")
    with tempfile.TemporaryDirectory() as tmp:
        stored = Path(tmp) / "results" / f"{name}.json"
        out = subprocess.run(
            [sys.executable, str(REPO / "benchmarks" / script), "--smoke", *extra,
             "--json-out", str(stored)],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )  # fmt: skip
        assert out.returncode == 0, (
            f"{script} --smoke failed:\n{out.stdout[-3000:]}{out.stderr[-3000:]}"
        )
        result = json.loads(stored.read_text())
    last = out.stdout.strip().splitlines()[-1]
    figures = json.loads(last)
    assert figures["bench"] == name
    assert figures["smoke"] is True
    # the stored result: the same figures, with when and under what load
    assert result["figures"] == figures and result["source"] == "make bench"
    assert result["bench"] == name and result["measured_at"].endswith(" UTC")
    # a smoke result is refused by the page; its figures still render the page's row
    with pytest.raises(ValueError, match="smoke"):
        rows_of(result)
    rows = FORMATS[name]({**figures, "smoke": False})
    assert rows and all(len(r) == 4 and all(isinstance(c, str) and c for c in r) for r in rows)
    assert rows[0][0].startswith(f"`{script}`")
    return figures


def test_every_benchmark_is_covered() -> None:
    """A new benchmark gets a smoke run here without anyone adding it by hand."""
    assert len(BENCHMARKS) >= 7
    assert {"bench_audit_push.py", "bench_ingest.py"} <= set(BENCHMARKS)


@pytest.mark.parametrize("script", [b for b in BENCHMARKS if b not in NEEDS_LABELSTUDIO])
def test_benchmark_smoke(script: str) -> None:
    if script in NEEDS_TORCH:
        pytest.importorskip("torch")
        pytest.importorskip("transformers")
    run_smoke(script)


@pytest.mark.slow
def test_audit_push_benchmark_smoke(labelstudio_pool: list[LabelStudioHandle]) -> None:
    """The push/sync benchmark against two of the session's Label Studio servers (one
    per person): 58 pairs, 116 tasks, every annotation synced (the script checks)."""
    a, b = labelstudio_pool[:2]
    figures = run_smoke(
        "bench_audit_push.py",
        "--labelstudio-url", a.url, "--labelstudio-token", a.token,
        "--labelstudio-url", b.url, "--labelstudio-token", b.token,
    )  # fmt: skip
    assert (figures["n_pairs"], figures["n_tasks"], figures["n_annotations"]) == (58, 116, 116)
    assert figures["render_s"] >= 0 and figures["render_share_max"] == 0.2


@pytest.mark.slow
def test_webhook_flood_benchmark_smoke(labelstudio_pool: list[LabelStudioHandle]) -> None:
    """The flood benchmark against two of the session's servers (A floods, B labels):
    every one of B's labels recorded live, no errors (``/health``'s latency is a figure of
    the full run, not of a smoke run on a loaded test machine)."""
    a, b = labelstudio_pool[:2]
    figures = run_smoke(
        "bench_webhook_flood.py",
        "--labelstudio-url", a.url, "--labelstudio-token", a.token,
        "--labelstudio-url", b.url, "--labelstudio-token", b.token,
    )  # fmt: skip
    assert figures["n_notifications"] == 20 and figures["b_labels"] == 3
    assert figures["b_recorded_live"] == 3 and figures["n_errors"] == 0
    assert figures["n_429"] >= 10  # every 150-id notification is refused
    assert figures["health_max_s"] > 0 and figures["health_n"] >= 1
