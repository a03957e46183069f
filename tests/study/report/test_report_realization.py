"""The report's ``realization`` section (docs/estimators.md item 15) on a store made here.

Its numbers equal a plain-numpy computation written in this test from the same records
(C = R = 1, accepted, assigned a mode; K every sample); they are labelled like the mode
numbers (blocked until the partition's gate passes, audited after); a bundle carries
them and ``rcea report verify`` re-derives them and names a tampered one.
"""

from __future__ import annotations

import hashlib
import json
import math
import shutil
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from rcea.study.report.build import build_report
from rcea.study.report.publication import evidence_lines
from rcea.study.report.schema import report_json
from rcea.study.report.verify import verify_bundle
from rcea.study.store import session_scope
from tests.support.report_study import (
    JUDGE,
    N_BOOT,
    draw,
    final_gate,
    judge,
    make_report_study,
    publish,
    report_records,
)

Key = tuple[str, str, int]


def reference(records: list[dict[str, Any]], k_min: int) -> dict[Key, dict[str, Any]]:
    """Item 15 per checkpoint by hand: per question W(x), Ĥ(Z|C,x), Ĥ(Y|C,x), the token
    mixture; macro means over questions with K_C ≥ k_min."""
    by_q: dict[Key, dict[str, list[dict[str, Any]]]] = defaultdict(lambda: defaultdict(list))
    for r in records:
        by_q[(r["run"], r["model"], r["step"])][r["question_id"]].append(r)
    out: dict[Key, dict[str, Any]] = {}
    for key, questions in by_q.items():
        w, hz, hy, tok, per_q = [], [], [], [], {}
        for q, rows in questions.items():
            k = len(rows)
            c = [r for r in rows if r["reward"] == 1 and r["validity"] == 1 and r["mode"]]
            if len(c) < k_min:
                continue
            ell_c = np.array([r["seq_logprob"] for r in c])
            modes = sorted({r["mode"] for r in c})
            w_x = hz_x = tok_x = 0.0
            for z in modes:
                members = [r for r in c if r["mode"] == z]
                qz = len(members) / len(c)
                ell_z = np.array([r["seq_logprob"] for r in members])
                w_x += qz * (-ell_z.mean() + math.log(len(members) / k))
                hz_x -= qz * math.log(qz)
                tok_x += qz * np.mean([r["mean_token_entropy"] for r in members])
            w.append(w_x)
            hz.append(hz_x)
            hy.append(-ell_c.mean() + math.log(len(c) / k))
            tok.append(tok_x)
            per_q[q] = w_x
        out[key] = {
            "within_mode_entropy": float(np.mean(w)) if w else None,
            "mode_entropy": float(np.mean(hz)) if hz else None,
            "sequence_entropy": float(np.mean(hy)) if hy else None,
            "within_mode_token_entropy": float(np.mean(tok)) if tok else None,
            "n_eligible": len(w),
            "per_q": per_q,
        }
    return out


def test_section_equals_an_independent_computation(engine, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    make_report_study(engine, tmp_path)
    with session_scope(engine) as s:
        rep = report_json(build_report(s, study="rep", n_boot=N_BOOT))
    k_min = rep["parameters"]["k_min"]
    ref = reference(report_records(), k_min)
    section = rep["realization"]
    assert [(e["run"], e["model"], e["step"]) for e in section] == sorted(ref)
    n_retention = 0
    for e in section:
        key = (e["run"], e["model"], e["step"])
        got, want = e["report"], ref[key]
        assert got["n_eligible"] == want["n_eligible"] > 0
        for name in (
            "within_mode_entropy",
            "mode_entropy",
            "sequence_entropy",
            "within_mode_token_entropy",
        ):
            assert math.isclose(got[name], want[name], rel_tol=1e-9), (key, name)
        # the chain rule holds for the plug-in estimators (a software check)
        assert got["decomposition_residual"] < 1e-9
        assert got["token_mixture_residual"] < 1e-9
        assert math.isclose(
            got["sequence_entropy"], got["mode_entropy"] + got["within_mode_entropy"], rel_tol=1e-9
        )
        if e["step"] == 0:
            assert e["retention"] is None and e["base"] is None
            continue
        base = ref[(e["run"], e["model"], 0)]["per_q"]
        both = sorted(set(want["per_q"]) & set(base))
        ratios = [want["per_q"][q] / base[q] for q in both]
        assert e["base"] == {"run": e["run"], "model": e["model"], "step": 0}
        assert e["retention"]["n_both"] == len(both)
        if not ratios:
            assert e["retention"]["retention"] is None
            continue
        assert math.isclose(e["retention"]["retention"], float(np.mean(ratios)), rel_tol=1e-9)
        n_retention += 1
    assert n_retention > 0

    # labelled like the mode numbers: the same dependencies, blocked by the same gate
    qs = [q for q in rep["quantities"] if q["section"] == "realization"]
    modes = [q for q in rep["quantities"] if q["section"] == "modes"]
    assert {q["name"] for q in qs} >= {
        "realization_within_mode_entropy",
        "realization_mode_entropy",
        "realization_coverage",
        "realization_share_in_repeated_modes",
        "realization_retention",
    }
    assert {tuple(q["depends_on"]) for q in qs} == {tuple(q["depends_on"]) for q in modes}
    assert {q["blocked_by"] for q in qs} == {q["blocked_by"] for q in modes}
    assert all(not q["publishable"] and q["label"] != "entropy-only (no audit)" for q in qs)


def test_bundle_carries_it_and_verify_names_an_edit(engine, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    make_report_study(engine, tmp_path)
    judge(engine, calibrated_hash=JUDGE)
    final_gate(engine, draw(engine, tmp_path), passing=True)
    bundle = Path(publish(engine, tmp_path / "out")["bundle"])
    report = json.loads((bundle / "report.json").read_text())
    assert report["realization"]
    qs = [q for q in report["quantities"] if q["section"] == "realization"]
    assert qs and all(q["publishable"] for q in qs)
    # the gate passed: audited, unless below the predeclared floor (then never audited)
    assert all(q["label"] == ("insufficient evidence" if q["evidence"] else "audited") for q in qs)
    assert verify_bundle(bundle).ok

    out = tmp_path / "edited"
    shutil.copytree(bundle, out)
    i = next(i for i, e in enumerate(report["realization"]) if e["retention"])
    published = report["realization"][i]["report"]["within_mode_entropy"]
    report["realization"][i]["report"]["within_mode_entropy"] = published + 0.01
    (out / "report.json").write_text(json.dumps(report, indent=1))
    res = verify_bundle(out)
    assert not res.ok
    assert (
        f"realization[{i}].report.within_mode_entropy: published {published + 0.01!r}, "
        f"recomputed {published!r}" in res.mismatches
    )

    # a bundle written before the section existed (no key, no realization_* quantities,
    # hashes consistent) still verifies, and says what it did not re-derive
    old = tmp_path / "before"
    shutil.copytree(bundle, old)
    earlier = json.loads((bundle / "report.json").read_text())
    del earlier["realization"]
    earlier["quantities"] = [q for q in earlier["quantities"] if q["section"] != "realization"]
    earlier["insufficient_evidence"] = evidence_lines(earlier["quantities"])
    (old / "report.json").write_text(json.dumps(earlier, indent=1))
    hashes = json.loads((old / "hashes.json").read_text())
    hashes["files"]["report.json"] = hashlib.sha256((old / "report.json").read_bytes()).hexdigest()
    (old / "hashes.json").write_text(json.dumps(hashes, indent=1))
    res = verify_bundle(old)
    assert res.ok, res.mismatches
    assert "realization (the bundle was written before it was reported)" in res.not_rederived
