"""The benchmarks page's table, rendered from stored results (``python -m benchmarks.figures``):
measured results through each benchmark's row, carried-over ones verbatim, the notes around
the table kept, smoke results refused, a stale page found by ``--check``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.figures import BEGIN, END, FORMATS, RESULTS, load_results, main, render, table

INGEST = {
    "bench": "ingest",
    "smoke": False,
    "n": 100_000,
    "tokens_per_record": 512,
    "records_per_s": 19_500,
    "peak_rss_mb": 1_100,
    "baseline_records_per_s": 2_500,
    "ratio_vs_baseline": 7.8,
}
MEASURED = {
    "bench": "ingest",
    "source": "make bench",
    "measured_at": "2026-12-02 10:00 UTC",
    "load": 0.4,
    "cpus": 2,
    "python": "3.11.7",
    "figures": INGEST,
}
CARRIED = {
    "bench": "training",
    "source": "carried over",
    "measured": "on or before 2026-12-01",
    "load": "≈ 2–3",
    "rows": [["`bench_training.py`: x", "3 steps/s", "≤ 1.1× | a", "≤ 1.3× (met)"]],
}


def test_a_measured_result_renders_its_row() -> None:
    text = table([MEASURED])
    assert text.splitlines()[2] == (
        "| `bench_ingest.py`: 100,000 records with 512-float token arrays (Parquet) into SQLite"
        " | 19,500 records/s; peak RSS 1.07 GB"
        " | row-by-row `session.add`: 2,500 records/s → **7.8×**"
        " | ≥ 20,000 records/s (**not met**), RSS < 1.5 GB (met)"
        " | 2026-12-02 10:00 UTC, load 0.4, 2 CPUs |"
    )
    fast = {**MEASURED, "figures": {**INGEST, "records_per_s": 20_000, "peak_rss_mb": 1_600}}
    assert "≥ 20,000 records/s (met), RSS < 1.5 GB (**not met**)" in table([fast])


def test_a_carried_over_result_renders_verbatim_and_missing_ones_are_named() -> None:
    lines = table([CARRIED]).splitlines()
    assert lines[2] == (
        "| `bench_training.py`: x | 3 steps/s | ≤ 1.1× \\| a | ≤ 1.3× (met)"
        " | *carried over*: on or before 2026-12-01; load ≈ 2–3 |"
    )
    assert lines[-1].startswith("No stored result yet: `bench_ingest.py`, ")
    assert "`bench_training.py`" not in lines[-1]


def test_a_smoke_result_is_refused() -> None:
    smoke = {**MEASURED, "figures": {**INGEST, "smoke": True}}
    with pytest.raises(ValueError, match="--smoke"):
        table([smoke])


def test_render_keeps_the_notes_and_check_finds_a_stale_page(tmp_path: Path) -> None:
    results = tmp_path / "results"
    results.mkdir()
    (results / "ingest.json").write_text(json.dumps(MEASURED))
    page = tmp_path / "bench.md"
    page.write_text(f"# B\n\nbefore\n\n{BEGIN}\nold table\n{END}\n\nafter\n")
    assert main(["--check", "--results", str(results), "--page", str(page)]) == 1
    assert main(["--results", str(results), "--page", str(page)]) == 0
    new = page.read_text()
    assert new.startswith("# B\n\nbefore\n\n" + BEGIN + "\n\n| bench |")
    assert new.endswith(END + "\n\nafter\n") and "old table" not in new
    assert "19,500 records/s" in new
    assert main(["--check", "--results", str(results), "--page", str(page)]) == 0
    assert render(new, load_results(results)) == new
    with pytest.raises(ValueError, match="markers"):
        render("no markers", [])


def test_every_benchmark_has_a_row_and_a_stored_result() -> None:
    scripts = {p.stem.removeprefix("bench_") for p in RESULTS.parent.glob("bench_*.py")}
    assert set(FORMATS) == scripts
    assert {r["bench"] for r in load_results()} == scripts


def test_the_streaming_rows_name_both_sizes_and_the_ratio() -> None:
    from benchmarks.figures import _streaming

    f = {"bench": "streaming", "smoke": False, "sizes": [100_000, 200_000], "concurrency": 32}
    f["n_boot"] = 20
    for i, stage in enumerate(("ingest", "judge", "assign", "report")):
        for n in f["sizes"]:
            f[f"{stage}_records_per_s_{n}"] = 1000.0 * (i + 1)
            f[f"{stage}_peak_rss_mb_{n}"] = 200 + (n // 100_000) * 10 * i
        f[f"{stage}_rss_ratio"] = [1.0, 1.05, 1.29, 1.31][i]
    rows = _streaming(f)
    assert [r[0].split(":")[0] for r in rows] == ["`bench_streaming.py`", "same", "same", "same"]
    assert rows[1][1] == (
        "100,000 records: 2,000/s, peak RSS 210 MB; 200,000 records: 2,000/s, peak RSS 220 MB"
    )
    assert rows[1][2] == "peak RSS 200,000 / 100,000 records: **1.05×**"
    assert rows[2][3] == (
        "flat: ratio ≤ 1.3 at ≈ 10× records (not judged: 2× records); "
        "10^6 not measured (largest 200,000)"
    )
    f["sizes"] = [100_000, 1_000_000]
    for stage in ("ingest", "judge", "assign", "report"):
        f[f"{stage}_records_per_s_1000000"] = 1.0
        f[f"{stage}_peak_rss_mb_1000000"] = 1
    rows = _streaming(f)
    assert rows[0][3] == "flat: ratio ≤ 1.3 at ≈ 10× records (met)"
    assert rows[3][3] == "flat: ratio ≤ 1.3 at ≈ 10× records (**not met**)"
    # sizes rounded to whole probe sets (102,400 / 998,400: 9.75×) count as 10× and 10^6
    f["sizes"] = [102_400, 998_400]
    for stage in ("ingest", "judge", "assign", "report"):
        for n in f["sizes"]:
            f[f"{stage}_records_per_s_{n}"] = 1.0
            f[f"{stage}_peak_rss_mb_{n}"] = 1
    assert _streaming(f)[0][3] == "flat: ratio ≤ 1.3 at ≈ 10× records (met)"
    f["sizes"] = [102_400, 512_000]
    for stage in ("ingest", "judge", "assign", "report"):
        f[f"{stage}_records_per_s_512000"] = 1.0
        f[f"{stage}_peak_rss_mb_512000"] = 1
    assert _streaming(f)[0][3] == (
        "flat: ratio ≤ 1.3 at ≈ 10× records (not judged: 5× records); "
        "10^6 not measured (largest 512,000)"
    )


def test_the_probe_entropy_row_names_the_forward_floor_and_trl() -> None:
    res = {"tokens_per_s": 0.0, "peak_extra_mb": 0.0}
    figures = {
        "bench": "probe_entropy",
        "smoke": False,
        "tokens": 1024,
        "vocab": 151_936,
        "chunk": 128,
        "tile": 1024,
        "threads": 1,
        "reps": 7,
        "load_before": 9.6,
        "load_after": 10.2,
        "results": {
            "forward": {**res, "tokens_per_s": 1_000.4},
            "forward_all": {**res, "tokens_per_s": 950.0},
            "trl": {**res, "tokens_per_s": 400.0},
            "full": {**res, "tokens_per_s": 450.0},
            "chunked": {"tokens_per_s": 850.2, "peak_extra_mb": 170.4},
        },
        "throughput_vs_forward": 0.8498,
        "vs_trl": 2.1255,
        "trl_vs_forward": 0.3998,
        "full_vs_forward": 0.4498,
        "forward_all_vs_forward": 0.9496,
        "memory_target_met": True,
    }
    (row,) = FORMATS["probe_entropy"](figures)
    assert row == (
        "`bench_probe_entropy.py`: teacher-forced entropy, 1,024 tokens, vocab 151,936, "
        "chunk 128 × vocabulary tile 1,024, 1 thread, median of 7 interleaved rounds "
        "(load 9.6 → 10.2)",
        "850 tokens/s; peak extra 170 MB",
        "forward, logits of the scored positions only: 1,000 tokens/s → **0.85×**; TRL "
        "(`entropy_from_logits` + `selective_log_softmax`): 400 tokens/s (0.40× forward) → "
        "chunked **2.13×** TRL; full-matrix `log_softmax`: 0.45×; forward with logits at "
        "every position: 0.95×",
        "≥ 0.8× forward (met), peak ≤ forward + one chunk (met)",
    )
    slow = {**figures, "throughput_vs_forward": 0.66, "memory_target_met": False, "threads": 2}
    (row,) = FORMATS["probe_entropy"](slow)
    assert "2 threads" in row[0] and "→ **0.66×**" in row[2]
    assert row[3] == "≥ 0.8× forward (**not met**), peak ≤ forward + one chunk (**not met**)"
