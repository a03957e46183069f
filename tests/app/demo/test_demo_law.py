"""The embedded demo shows the entropy–performance law (docs/estimators.md item 18) for its
six objectives at its two scales — fast: the report section is built from measurements
shaped exactly as the demo records them (a training-curve entropy every step, the base
model's ``n_params``, greedy accuracy at every checkpoint saved every ``eval_steps``), not
by training.

Checked: with the default size every run's law has 20 paired points and its early fit
(the first 15 % of steps) the three it needs, so it predicts the rest; with 2 sizes the
scaling says in words that it needs 3; the quick size's early window holds no point and
says so; the lines ``rcea demo`` prints (:func:`law_summary`) and the ordering sentence
say what the section finds."""

from __future__ import annotations

import math
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from rcea.app.demo.config import DEFAULT, OBJECTIVES, QUICK, DemoSizes
from rcea.app.view.law_frames import scaling_table
from rcea.study.report.entropy_law import entropy_law_section, law_summary
from rcea.study.report.law_sections import EntropyLawSection

#: Non-embedding parameters of the demo's scales (tests/pipeline/policy/test_model_size.py
#: checks the counter on the saved models): total less the 99-token embedding.
N_PARAMS = {"tiny-s": 314_880 - 99 * 96, "tiny-m": 801_280 - 99 * 128}


def demo_measurements(sizes: DemoSizes) -> tuple[list[dict[str, Any]], ...]:
    """Training curves, accuracy traces, checkpoints and greedy rows as the demo's
    ``measure`` step records them; the entropy falls along each run and R follows the
    law R = −a·exp(H) + b with a little noise (a per objective, so endpoints differ)."""
    rng = np.random.default_rng(0)
    curves, traces, checkpoints, greedy = [], [], [], []
    saved = list(range(0, sizes.train_steps + 1, sizes.eval_steps))
    for model in sizes.models:
        for i, run in enumerate(OBJECTIVES):
            h0, h1 = 0.35 + 0.02 * i, 0.08 + 0.03 * i
            entropy = {
                s: h0 + (h1 - h0) * s / sizes.train_steps for s in range(1, sizes.train_steps + 1)
            }
            curves.append(
                {"run": run, "model": model, "payload": {
                    "points": [{"step": s, "progress": s / sizes.train_steps, "entropy": h}
                               for s, h in entropy.items()],
                    "n_params": N_PARAMS[model]}}
            )  # fmt: skip
            law = {s: 1.4 - 0.9 * math.exp(entropy.get(s, h0)) for s in saved}
            acc = {s: float(np.clip(v + rng.normal(0, 0.01), 0, 1)) for s, v in law.items()}
            traces.append(
                {"run": run, "model": model, "key": "toy-eval", "payload": {
                    "points": [{"step": s, "accuracy": a} for s, a in acc.items()]}}
            )  # fmt: skip
            for step in (0, *sizes.milestones):
                checkpoints.append(
                    {"run": run, "model": model, "step": step,
                     "reported": step == sizes.train_steps}
                )  # fmt: skip
                greedy.append(
                    {"run": run, "model": model, "step": step,
                     "accuracy": {"toy-eval": acc[step]}, "macro_accuracy": acc[step]}
                )  # fmt: skip
    return curves, traces, checkpoints, greedy


def test_the_default_demo_shows_the_law_for_six_objectives_at_two_scales() -> None:
    assert DEFAULT.eval_steps == 5 and DEFAULT.save_steps % DEFAULT.eval_steps == 0
    curves, traces, checkpoints, greedy = demo_measurements(DEFAULT)
    sec = entropy_law_section(curves, traces, checkpoints, greedy, [], set())
    assert sec is not None and sec["error"] is None and not sec["without_trace"]
    assert len(sec["runs"]) == 12
    for r in sec["runs"]:
        law = r["entropies"]["global"]
        # 21 accuracy points (steps 0, 5, …, 100); step 0 precedes every logged entropy
        assert law["n"] == 20 and law["points"]["n_unpaired"] == 1
        assert law["n_early"] == 3 and law["cutoff_step"] == pytest.approx(15.0)
        assert r["a"] == pytest.approx(0.9, abs=0.15) and r["early_fit_rmse"] is not None
        assert r["n_params"] == N_PARAMS[r["model"]]
    # two sizes: the scaling entry of each objective says it needs three
    assert [e["run"] for e in sec["scaling"]] == sorted(OBJECTIVES)
    for e in sec["scaling"]:
        assert sorted(e["labels"]) == ["tiny-m", "tiny-s"] and e["a_fit"]["slope"] is None
        assert e["reason"] == "2 model size(s) with a fitted law; the scaling fit needs 3"
    lines = law_summary(sec)
    assert lines[0].startswith(
        "tiny-m (N = 788,608 non-embedding parameters): the law R = −a·exp(H) + b fitted "
        "for 6 of 6 run(s) (a +"
    )
    assert (
        "; the fit on the first 15% of steps predicted the rest for 6 of 6 (median RMSE"
        in (lines[1])
    )
    assert lines[1].startswith("tiny-s (N = 305,376 non-embedding parameters)")
    assert lines[2] == (
        f"Scaling across sizes, undefined for {', '.join(sorted(OBJECTIVES))}: 2 model size(s) "
        "with a fitted law; the scaling fit needs 3."
    )
    # the view's Entropy page: the scaling table says the same per objective
    view = SimpleNamespace(entropy_law=EntropyLawSection.model_validate(sec))
    table = scaling_table(view)  # type: ignore[arg-type]  # the page reads only entropy_law
    assert table["run"].tolist() == sorted(OBJECTIVES)
    assert set(table["sizes"]) == {"tiny-m (788,608), tiny-s (305,376)"}
    assert table["a_slope"].isna().all() and table["reason"].str.endswith("needs 3").all()
    # the ordering per scale over the six endpoints, in words
    assert set(sec["ordering"]["by_model"]) == {"tiny-s", "tiny-m"}
    for model in ("tiny-s", "tiny-m"):
        (greedy_order,) = [
            m for m in sec["ordering"]["by_model"][model]["metrics"]
            if m["metric"] == "greedy_accuracy"
        ]  # fmt: skip
        # R falls as H rises: endpoint entropy orders the six runs, τ-b = −1
        assert greedy_order["n"] == 6 and greedy_order["kendall_tau"] == pytest.approx(-1.0)
        assert (
            f"{model} greedy_accuracy: τ-b = -1.00, p = 0.003 (n = 6, ordered)"
            in (sec["ordering_sentence"])
        )


def test_with_two_failed_runs_the_sentence_says_no_ordering_could_reach_005() -> None:
    """As in the demo's run (docs/embedded-study.md): ep_grpo and gtpo failed at both
    scales, four endpoints remain, and 2/4! = 0.083 is the smallest exact p."""
    curves, traces, checkpoints, greedy = demo_measurements(DEFAULT)
    failed = {(o, m) for o in ("ep_grpo", "gtpo") for m in DEFAULT.models}
    sec = entropy_law_section(curves, traces, checkpoints, greedy, [], failed)
    assert sec is not None
    assert (
        "tiny-s greedy_accuracy: τ-b = -1.00, p = 0.083 (n = 4, did not order: with n = 4 "
        "the smallest attainable p is 0.083)" in sec["ordering_sentence"]
    )


def test_the_quick_demo_says_why_its_early_fit_is_undefined() -> None:
    assert QUICK.eval_steps == 4
    curves, traces, checkpoints, greedy = demo_measurements(QUICK)
    sec = entropy_law_section(curves, traces, checkpoints, greedy, [], set())
    assert sec is not None and len(sec["runs"]) == 6
    for r in sec["runs"]:
        law = r["entropies"]["global"]
        assert law["n"] == 4 and law["n_early"] == 0 and r["early_fit_rmse"] is None
        assert law["reason"] == "early fit: 0 point(s), the fit needs 3"
    assert sec["scaling"] == []  # one scale
    lines = law_summary(sec)
    assert lines[0].endswith(
        "; the fit on the first 15% of steps predicted the rest for 0 of 6; undefined where: "
        "early fit: 0 point(s), the fit needs 3."
    )
    assert lines[1].startswith("Scaling across sizes: none")


def test_the_demo_saves_a_checkpoint_every_eval_steps() -> None:
    with pytest.raises(ValueError, match="must divide save_steps"):
        DemoSizes(**{**DEFAULT.__dict__, "eval_steps": 7})
