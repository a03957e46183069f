"""The table of ``docs/benchmarks.md``, rendered from the stored benchmark results.

``make bench`` runs every ``benchmarks/bench_*.py`` with ``--json-out
benchmarks/results/<name>.json``, then ``python -m benchmarks.figures`` rewrites the part
of ``docs/benchmarks.md`` between the two ``generated`` markers (the hand-written notes
around it stay). A result is either

* measured: written by the script itself (``"source": "make bench"``, its ``figures``
  line, date and 1-minute load average), rendered by this module's row for that
  benchmark; or
* carried over: figures recorded by hand from earlier runs before results were stored
  (``"source": "carried over"``, the table ``rows`` as they were published, with the
  date and load as stated then).

``--check`` exits 1 when the page differs from what the results render (a test runs it).
Smoke results (tiny sizes, figures that mean nothing) are refused.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
PAGE = ROOT / "docs" / "benchmarks.md"
BEGIN = "<!-- begin generated table: `python -m benchmarks.figures` from benchmarks/results/ -->"
END = "<!-- end generated table -->"
CARRIED = "carried over"

Row = tuple[str, str, str, str]  # bench, figure, baseline / ratio, target


def _met(ok: bool) -> str:
    return "met" if ok else "**not met**"


def _ingest(f: dict[str, Any]) -> list[Row]:
    rate, rss = f["records_per_s"], f["peak_rss_mb"]
    return [
        (
            f"`bench_ingest.py`: {f['n']:,} records with {f['tokens_per_record']}-float token "
            "arrays (Parquet) into SQLite",
            f"{rate:,} records/s; peak RSS {rss / 1024:.2f} GB",
            f"row-by-row `session.add`: {f['baseline_records_per_s']:,} records/s → "
            f"**{f['ratio_vs_baseline']:.1f}×**",
            f"≥ 20,000 records/s ({_met(rate >= 20_000)}), RSS < 1.5 GB ({_met(rss < 1536)})",
        )
    ]


def _audits_entropy(f: dict[str, Any]) -> list[Row]:
    vec, ratio = f["paired_vectorised_s"], f["paired_speed_ratio"]
    return [
        (
            f"`bench_audits_entropy.py`: paired bootstrap, B = {f['n_boot']:,}, "
            "200 questions × 64 samples",
            f"{vec:.2f} s",
            f"Python-loop reference (B = {f['paired_loop_n_boot_measured']}, scaled): "
            f"{f['paired_loop_s_scaled']:.1f} s → **≈ {ratio:.0f}×**",
            f"< 1 s, ≥ 10× ({_met(vec < 1 and ratio >= 10)})",
        ),
        (
            f"same: rarefied retention, {f['retention_questions']} questions × "
            f"{f['retention_draws']} draws, B = {f['n_boot']:,}",
            f"{f['retention_s']:.2f} s",
            "—",
            f"< 2 s ({_met(f['retention_s'] < 2)})",
        ),
    ]


def _audits_covariance(f: dict[str, Any]) -> list[Row]:
    pair = [r for r in f["results"] if r["kernel"] == "pair"]
    rates = [r["positions_per_s"] for r in pair]
    peaks = [r["peak_extra_mb"] for r in f["results"]]
    positions = ", ".join(f"{r['positions']:,}" for r in pair)
    bound = f["peak_bound_mb"]
    return [
        (
            f"`bench_audits_covariance.py`: exact covariance kernels, {f['vocab']:,}-token "
            f"vocabulary, {f['dtype']}",
            f"{min(rates):,.0f}–{max(rates):,.0f} positions/s (predicted + observed in one "
            f"pass); peak extra memory ≤ {max(peaks):,.0f} MB at {positions} positions",
            "memory flat in positions",
            f"≤ {bound:,.0f} MB ({_met(max(peaks) <= bound)})",
        )
    ]


def _audit_push(f: dict[str, Any]) -> list[Row]:
    target = f["target_s"]
    rows = [
        (
            f"`bench_audit_push.py`: push {f['n_pairs']:,} pairs to two projects "
            f"({f['n_tasks']:,} tasks)",
            f"{f['push_s']:.1f} s",
            f"one task per request: {f['baseline_push_tasks_per_s']:.1f} tasks/s → "
            f"**{f['push_ratio_vs_baseline']:.0f}×**",
            f"< {target:.0f} s ({_met(f['push_s'] < target)})",
        ),
        (
            f"same: sync {f['n_annotations']:,} annotations (first sync: full)",
            f"{f['sync_s']:.1f} s",
            f"per-task annotation listing: {f['baseline_sync_annotations_per_s']:.1f}/s → "
            f"**{f['sync_ratio_vs_baseline']:.1f}×**",
            f"< {target:.0f} s ({_met(f['sync_s'] < target)})",
        ),
    ]
    if f.get("n_changed"):
        rows.append(
            (
                f"same: incremental sync after {f['n_changed']:,} changed annotations",
                f"**{f['incremental_sync_s']:.1f} s** ({f['incremental_tasks_read']:,} tasks read)",
                f"full sync of the same audit in the same run: {f['full_sync_unchanged_s']:.1f} s"
                f" → **{f['full_vs_incremental']:.1f}×**",
                f"≤ 5 % changed in < {target:.0f} s ({_met(f['incremental_sync_s'] < target)})",
            )
        )
    return rows


def _codebook_assign(f: dict[str, Any]) -> list[Row]:
    share = f["sigkill_repeated_share"]
    return [
        (
            f"`bench_codebook_assign.py`: assign {f['n']:,} trajectories (2 passes, 10 per "
            f"call) against the local fake endpoint with {f['latency_ms']:.0f} ms latency",
            f"{f['traj_per_s_c16']:,.0f} trajectories/s at concurrency 16",
            f"concurrency 1: {f['traj_per_s_c1']:,.0f}/s → **{f['speedup']:.1f}×**",
            f"≥ 10× ({_met(f['speedup'] >= 10)})",
        ),
        (
            "same: resume after `kill -9` at ≈ 50 %",
            f"{f['sigkill_repeated_calls']:,} of {f['resume_planned_calls']:,} calls repeated "
            f"({share:.1%})",
            "only calls in flight repeat",
            f"< 1 % ({_met(share < 0.01)})",
        ),
    ]


def _training(f: dict[str, Any]) -> list[Row]:
    speeds = f["steps_per_s"].values()
    over = {k: v for k, v in f["overhead_vs_grpo"].items() if k != "grpo"}
    worst = max(over, key=over.__getitem__)
    return [
        (
            f"`bench_training.py`: tiny policy, {f['threads']} thread(s)",
            f"{min(speeds):.1f}–{max(speeds):.1f} steps/s per objective",
            f"loss overhead vs `grpo`: ≤ {over[worst]:.2f}× (`{worst}`)",
            f"≤ {f['target_overhead']}× ({_met(over[worst] <= f['target_overhead'])})",
        ),
        *_training_live(f),
    ]


def _training_live(f: dict[str, Any]) -> list[Row]:
    live = f.get("live")
    if not live:
        return []
    share, rss = live["callback_share_of_step"], live["peak_rss_ratio_on_off"]
    target = live.get("target_callback_share", 0.03)
    return [
        (
            f"`bench_training.py`: live `rcea/` numbers (docs/training-live.md), `grpo`, "
            f"median of {live['rounds']} interleaved on/off runs",
            f"callback {live['callback_ms_per_step']:.2f} ms per step = "
            f"**{share:.1%}** of a {live['step_ms_off']:.0f} ms step; peak RSS "
            f"{live['peak_rss_mb_on']:.0f} vs {live['peak_rss_mb_off']:.0f} MB",
            f"callback off: step time {live['step_ratio_on_off']:.3f}× (whole-step timing, "
            f"machine noise included), peak RSS **{rss:.3f}×**",
            f"≤ {target:.0%} per step ({_met(share <= target)}), "
            f"≤ {live['target_rss_ratio']}× RSS ({_met(rss <= live['target_rss_ratio'])})",
        )
    ]


def _probe_entropy(f: dict[str, Any]) -> list[Row]:
    res = f["results"]
    ours, fwd, trl = res["chunked"], res["forward"], res["trl"]
    ratio = f["throughput_vs_forward"]
    threads = f"{f['threads']} thread" + ("s" if f["threads"] != 1 else "")
    return [
        (
            f"`bench_probe_entropy.py`: teacher-forced entropy, {f['tokens']:,} tokens, "
            f"vocab {f['vocab']:,}, chunk {f['chunk']} × vocabulary tile {f['tile']:,}, "
            f"{threads}, median of {f['reps']} interleaved rounds "
            f"(load {f['load_before']} → {f['load_after']})",
            f"{ours['tokens_per_s']:,.0f} tokens/s; peak extra {ours['peak_extra_mb']:.0f} MB",
            f"forward, logits of the scored positions only: {fwd['tokens_per_s']:,.0f} tokens/s"
            f" → **{ratio:.2f}×**; TRL (`entropy_from_logits` + `selective_log_softmax`): "
            f"{trl['tokens_per_s']:,.0f} tokens/s ({f['trl_vs_forward']:.2f}× forward) → "
            f"chunked **{f['vs_trl']:.2f}×** TRL; full-matrix `log_softmax`: "
            f"{f['full_vs_forward']:.2f}×; forward with logits at every position: "
            f"{f['forward_all_vs_forward']:.2f}×",
            f"≥ 0.8× forward ({_met(ratio >= 0.8)}), peak ≤ forward + one chunk "
            f"({_met(bool(f['memory_target_met']))})",
        )
    ]


def _sequential_gate(f: dict[str, Any]) -> list[Row]:
    wrong = max(v for v in f["wrong_settled_share"].values())
    exp = f["expected_share_of_plan"]
    passing, failing = exp.get("clear_pass"), exp.get("clear_fail")
    shown = ", ".join(
        f"{v:.0%} clearly {k.removeprefix('clear_')}ing" for k, v in exp.items() if v is not None
    )
    ok = wrong <= 0.05 and all(v is None or v <= 0.6 for v in (passing, failing))
    return [
        (
            f"`bench_sequential_gate.py`: {f['n_audits']:,} simulated audits of "
            f"{f['n_planned_pairs']:,} planned pairs ({f['plan'].get('spending', '')})",
            f"{f['seconds']:.0f} s; settled against the truth ≤ {wrong:.2%} of audits per "
            "requirement",
            f"pairs labelled until the gate settled, share of the fixed plan: {shown}",
            f"≤ 5 % wrong, ≤ 60 % of the plan ({_met(ok)})",
        )
    ]


def _calibration_design(f: dict[str, Any]) -> list[Row]:
    judges = f["judges"]
    issue, bad = judges["issue_judge"], judges["bad_judge"]
    good = f["min_pass_rate_good"]
    ok = good >= 0.9 and f["max_pass_rate_bad"] <= 0.05
    return [
        (
            f"`bench_calibration_design.py`: {f['reps']:,} simulated calibrations per judge "
            f"of the default design ({f['design']['size']} items, {f['design']['held_out']} "
            "held out, default thresholds on the population basis)",
            f"{f['seconds']:.0f} s; judges of ≥ 95 % population accuracy pass in ≥ "
            f"{good:.1%}; the issue's judge (accuracy {issue['truth']['accuracy']:.3f}) "
            f"{issue['pass_rate_population']:.1%}; a judge of accuracy "
            f"{bad['truth']['accuracy']:.2f} {bad['pass_rate_population']:.1%}",
            f"the same labels on the balanced basis: the issue's judge passes "
            f"{issue['pass_rate_balanced']:.1%}",
            f"good judges ≥ 90 %, bad ≤ 5 % ({_met(ok)})",
        )
    ]


def _streaming(f: dict[str, Any]) -> list[Row]:
    sizes = f["sizes"]
    small, big = sizes[0], sizes[-1]
    labels = {
        "ingest": "`rcea ingest` (JSONL)",
        "judge": (
            f"`rcea judge run` (fake endpoint, concurrency {f['concurrency']}; "
            "rate per verifier success, half the records)"
        ),
        "assign": (
            f"`rcea codebook assign` (fake endpoint, concurrency {f['concurrency']}; "
            "rate per verifier success)"
        ),
        "report": f"`rcea report build` (`--n-boot {f['n_boot']}`)",
    }
    rows: list[Row] = []
    for i, (stage, label) in enumerate(labels.items()):
        ratio = f[f"{stage}_rss_ratio"]
        figure = "; ".join(
            f"{n:,} records: {f[f'{stage}_records_per_s_{n}']:,.0f}/s, "
            f"peak RSS {f[f'{stage}_peak_rss_mb_{n}']:,} MB"
            for n in sizes
        )
        head = (
            f"`bench_streaming.py`: {label}, synthetic short-text records, SQLite, one "
            "process per stage"
            if i == 0
            else f"same: {label}"
        )
        # sizes are rounded to whole probe sets: 102,400 / 998,400 is "10×" (9.75×)
        if big >= 9.5 * small:
            target = f"flat: ratio ≤ 1.3 at ≈ 10× records ({_met(ratio <= 1.3)})"
        else:
            target = f"flat: ratio ≤ 1.3 at ≈ 10× records (not judged: {big / small:.0f}× records)"
        if big < 950_000:
            target += f"; 10^6 not measured (largest {big:,})"
        rows.append(
            (head, figure, f"peak RSS {big:,} / {small:,} records: **{ratio:.2f}×**", target)
        )
    return rows


def _webhook_flood(f: dict[str, Any]) -> list[Row]:
    live, n_b = f["b_recorded_live"], f["b_labels"]
    hmax, target = f["health_max_s"], f["health_target_s"]
    each = f["n_notifications"] // len(f["ids_per_notification"])
    sizes = " and ".join(f"{each} of {n} ids" for n in f["ids_per_notification"])
    return [
        (
            f"`bench_webhook_flood.py`: annotator A posts {f['n_notifications']} concurrent "
            f"notifications ({sizes}) to A's webhook path while B labels {n_b} tasks; real "
            "Label Studio servers, `rcea serve` (one process), `/health` probed every 50 ms",
            f"B's labels recorded live: **{live} of {n_b}**; `/health` during the flood: max "
            f"{hmax:.3f} s, p95 {f['health_p95_s']:.3f} s ({f['n_200']} queued, "
            f"{f['n_429']} refused with 429, {f['n_errors']} errors)",
            f"`/health` with no flood, same run: p95 {f['health_idle_p95_s']:.3f} s → "
            f"**{f['health_p95_vs_idle']:.1f}×**",
            f"all of B's labels live ({_met(live == n_b)}), `/health` < {target:.0f} s "
            f"({_met(hmax < target)}), no errors ({_met(f['n_errors'] == 0)})",
        )
    ]


def _verifier(f: dict[str, Any]) -> list[Row]:
    worst = max(f["ordinary_s"], f["unclosed_s"], f["nested_s"])
    verl = (
        f"; verl's `last_boxed_only_string` on the ordinary text: {f['verl_ordinary_s']:.4f} s"
        f" → {f['ratio_vs_verl']:.1f}×"
        if f.get("verl_ordinary_s") is not None
        else ""
    )
    return [
        (
            f"`bench_verifier.py`: `extract_boxed` on {f['size_chars']:,}-character texts "
            "(ordinary, unclosed `\\boxed{` repeated, nested and closed)",
            f"{f['ordinary_s']:.4f} s / {f['unclosed_s']:.3f} s / {f['nested_s']:.4f} s",
            f"the previous scan on unclosed `\\boxed{{` at {f['previous_kb']} KB: "
            f"{f['previous_unclosed_s']:.2f} s (×{f['previous_growth']:.1f} per doubling) → "
            f"**{f['ratio_vs_previous']:,.0f}×**{verl}",
            f"< 1 s per 1 MB text, any shape ({_met(worst < 1)})",
        )
    ]


FORMATS: dict[str, Callable[[dict[str, Any]], list[Row]]] = {
    "ingest": _ingest,
    "audits_entropy": _audits_entropy,
    "audits_covariance": _audits_covariance,
    "audit_push": _audit_push,
    "codebook_assign": _codebook_assign,
    "training": _training,
    "probe_entropy": _probe_entropy,
    "sequential_gate": _sequential_gate,
    "calibration_design": _calibration_design,
    "streaming": _streaming,
    "webhook_flood": _webhook_flood,
    "verifier": _verifier,
}


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def _when(res: dict[str, Any]) -> str:
    if res.get("source") == CARRIED:
        return _cell(f"*carried over*: {res['measured']}; load {res['load']}")
    load = res.get("load")
    return _cell(
        f"{res['measured_at']}, load {load if load is not None else '?'}, {res['cpus']} CPUs"
    )


def rows_of(res: dict[str, Any]) -> list[Row]:
    """A result's table rows: as published (carried over) or rendered from its figures."""
    if res.get("source") == CARRIED:
        return [tuple(r) for r in res["rows"]]  # type: ignore[misc]
    figures = res["figures"]
    if figures.get("smoke"):
        raise ValueError(
            f"{res['bench']}: a --smoke result (tiny sizes) is not a figure to publish"
        )
    return FORMATS[res["bench"]](figures)


def load_results(directory: Path = RESULTS) -> list[dict[str, Any]]:
    """The stored results in the table's order (unknown benchmarks last, by name)."""
    found = {
        p.stem: json.loads(p.read_text(encoding="utf-8")) for p in sorted(directory.glob("*.json"))
    }
    order = [n for n in FORMATS if n in found] + sorted(set(found) - set(FORMATS))
    return [found[n] for n in order]


def table(results: list[dict[str, Any]]) -> str:
    out = [
        "| bench | figure | baseline / ratio | target | measured |",
        "|---|---|---|---|---|",
    ]
    for res in results:
        when = _when(res)  # on the benchmark's first row; its "same: …" rows share it
        for i, row in enumerate(rows_of(res)):
            cells = (*row, when if i == 0 else "″")
            out.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    missing = [n for n in FORMATS if n not in {r["bench"] for r in results}]
    text = "\n".join(out) + "\n"
    if missing:
        text += "\nNo stored result yet: " + ", ".join(f"`bench_{n}.py`" for n in missing)
        text += " (`make bench` records one).\n"
    return text


def render(page: str, results: list[dict[str, Any]]) -> str:
    """``page`` with the part between the markers replaced by the table."""
    if page.count(BEGIN) != 1 or page.count(END) != 1 or page.index(BEGIN) > page.index(END):
        raise ValueError(f"the page needs exactly one pair of markers:\n{BEGIN}\n{END}")
    head, rest = page.split(BEGIN)
    _, tail = rest.split(END)
    return f"{head}{BEGIN}\n\n{table(results)}\n{END}{tail}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="compare instead of writing")
    ap.add_argument("--results", type=Path, default=RESULTS)
    ap.add_argument("--page", type=Path, default=PAGE)
    args = ap.parse_args(argv)
    page = args.page.read_text(encoding="utf-8")
    new = render(page, load_results(args.results))
    if args.check:
        if new != page:
            print(f"{args.page} is stale: run `python -m benchmarks.figures`", file=sys.stderr)
            return 1
        return 0
    if new != page:
        args.page.write_text(new, encoding="utf-8")
    print(f"{args.page}: table from {len(load_results(args.results))} stored result(s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
