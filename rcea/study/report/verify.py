"""``rcea report verify BUNDLE``: re-derive every published number from the bundle alone.

A bundle (``rcea.study.report.publish``) carries, next to ``report.json``, the inputs every
number is computed from (``inputs.json``: per-trajectory sufficient statistics, the frozen
partition, the producer measurements, the audited pairs with their labels, the estimator
settings, the software version), the rarefaction draws (``rarefaction.json``), the frozen
rubric (``rubric.toml``) and the hashes (``hashes.json``). :func:`verify_bundle` checks,
without a store or Label Studio:

* every file's SHA-256 against ``hashes.json`` (and no unlisted file);
* the record-set hash from the rows, the partition hash from the partition, the rubric
  hash from ``rubric.toml``, the judge hash against the report's validity state;
* the whole report, recomputed by :func:`rcea.study.report.compute.compute_report` (the same
  ``rcea/audits/`` functions, the same seeds — every bootstrap CI is redrawn) and compared
  field by field with ``report.json``: exact for counts, strings, flags and hashes,
  ``FLOAT_RTOL`` relative for floats;
* the rarefaction draws: those stored equal those drawn again from the stored seed, the
  mode labels they index equal those the partition gives, and retention recomputed from
  the stored draws equals the published one;
* the pair-audit gate, re-evaluated with :func:`rcea.audits.gates.evaluate_gate` from the
  audited pairs (A, B, adjudicated and automatic labels) and the rubric's thresholds;
* every attempt on the record (``inputs.json`` ``audit_events``, a hash chain): each
  decided attempt's outcome and gate or acceptance values re-derived from that attempt's
  own labels (``attempt_labels``: :func:`rcea.study.report.attempts.rederive`);
* the judge calibration, from its held-out items (human label, judge verdict) when the
  bundle carries them (else listed as not re-derived);
* the estimator settings against the rubric's ``[estimators]`` (deviations declared);
* the ed25519 signature of ``hashes.json`` when a public key is given.

Every mismatch is named (file, field path or quantity, published and recomputed values).
"""

from __future__ import annotations

import hashlib
import json
import math
from collections import Counter
from dataclasses import dataclass, field
from html import escape, unescape
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from rcea import __version__
from rcea.audits.calibration import calibration_figures
from rcea.audits.modes import rarefied_retention
from rcea.audits.partition import partition_hash
from rcea.audits.rubric import parse_rubric
from rcea.pipeline.llm import canonical_json
from rcea.study.report.attempts import chain_problems, label_key, pair_gate, rederive
from rcea.study.report.compute import compute_report, mode_labels_from_rows
from rcea.study.report.html import changes_text
from rcea.study.report.publication import (
    CHANGED_LABEL,
    ENTROPY_ONLY_LABEL,
    display_label,
    evidence_lines,
    publication_scope,
    refusal_reasons,
    strip_audited,
)
from rcea.study.report.rows import record_set_hash
from rcea.study.report.schema import StudyReport, report_json
from rcea.study.report.sections import RetentionSection
from rcea.study.report.signing import SignatureError, verify_signature

#: Relative tolerance of a float comparison (counts, strings and hashes are exact).
FLOAT_RTOL = 1e-9
#: Files a bundle may hold that ``hashes.json`` does not list.
UNHASHED = ("hashes.json", "signature.json")
#: At most this many mismatches per compared tree are named (the count is always given).
MAX_NAMED = 200


@dataclass
class Verification:
    """The outcome of :func:`verify_bundle`."""

    bundle: str
    n_checked: int = 0
    mismatches: list[str] = field(default_factory=list)
    not_rederived: list[str] = field(default_factory=list)
    signature: str = "unsigned"
    #: the rcea-audit version that wrote the bundle (its inputs.json), and the one checking it
    software: str | None = None
    verified_with: str = __version__

    @property
    def ok(self) -> bool:
        return not self.mismatches

    def summary(self) -> str:
        if not self.ok:
            return (
                f"FAILED: {len(self.mismatches)} mismatch(es) in {self.bundle} "
                f"({self.n_checked} values checked)"
            )
        extra = f"; not re-derived: {', '.join(self.not_rederived)}" if self.not_rederived else ""
        return (
            f"OK: {self.n_checked} values re-derived from {self.bundle} match "
            f"(signature: {self.signature}) (written by rcea-audit {self.software or '?'}, "
            f"verified with {self.verified_with}){extra}"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "bundle": self.bundle,
            "n_checked": self.n_checked,
            "mismatches": self.mismatches,
            "not_rederived": self.not_rederived,
            "signature": self.signature,
            "software": self.software,
            "verified_with": self.verified_with,
            "summary": self.summary(),
        }


class BundleError(ValueError):
    """The directory is not a readable bundle (a file is missing or not JSON)."""


# --------------------------------------------------------------------------- comparison


def _num(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool)


def compare(published: Any, recomputed: Any, path: str, out: list[str]) -> int:
    """Append a line per difference between ``published`` and ``recomputed`` (JSON
    values) to ``out``, naming ``path``; returns the number of leaf values compared.
    Floats compare to ``FLOAT_RTOL`` relative, everything else exactly."""
    if isinstance(published, dict) and isinstance(recomputed, dict):
        n = 0
        for k in sorted(set(published) | set(recomputed), key=str):
            sub = f"{path}.{k}" if path else str(k)
            if k not in published:
                out.append(f"{sub}: missing from the bundle (recomputed {_short(recomputed[k])})")
            elif k not in recomputed:
                out.append(f"{sub}: in the bundle ({_short(published[k])}) but not recomputed")
            else:
                n += compare(published[k], recomputed[k], sub, out)
        return n
    if isinstance(published, list) and isinstance(recomputed, list):
        if len(published) != len(recomputed):
            out.append(f"{path}: {len(published)} item(s) published, {len(recomputed)} recomputed")
            return 1
        return sum(
            compare(a, b, f"{path}[{i}]", out)
            for i, (a, b) in enumerate(zip(published, recomputed, strict=True))
        )
    if (
        _num(published)
        and _num(recomputed)
        and (isinstance(published, float) or isinstance(recomputed, float))
    ):
        if not math.isclose(published, recomputed, rel_tol=FLOAT_RTOL, abs_tol=0.0):
            out.append(f"{path}: published {published!r}, recomputed {recomputed!r}")
        return 1
    if type(published) is not type(recomputed) or published != recomputed:
        out.append(f"{path}: published {_short(published)}, recomputed {_short(recomputed)}")
    return 1


def _short(v: Any) -> str:
    text = json.dumps(v, default=str)
    return text if len(text) <= 80 else text[:77] + "..."


def _jsonable(obj: Any) -> Any:
    return json.loads(json.dumps(obj, allow_nan=False, default=str))


def _where(q: dict[str, Any]) -> str:
    parts = [f"{k}={q[k]}" for k in ("run", "model", "step", "key") if q.get(k) is not None]
    return f"{q['name']} ({', '.join(parts)})" if parts else str(q["name"])


def _quantity_names(report: dict[str, Any], lines: list[str]) -> list[str]:
    """Rewrite ``quantities[i].field`` paths as the quantity's name and checkpoint."""
    qs = report.get("quantities") or []
    out = []
    for line in lines:
        if line.startswith("quantities["):
            i = int(line[len("quantities[") : line.index("]")])
            if i < len(qs) and isinstance(qs[i], dict) and "name" in qs[i]:
                rest = line[line.index("]") + 1 :].lstrip(".")
                line = f"quantity {_where(qs[i])} {rest}"
        out.append(line)
    return out


# --------------------------------------------------------------------------- the bundle


def _read_json(bundle: Path, name: str) -> Any:
    path = bundle / name
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise BundleError(
            f"{path}: missing (not a bundle written by `rcea report publish`, or one "
            "written before bundles carried their inputs)"
        ) from None
    except json.JSONDecodeError as exc:
        raise BundleError(f"{path}: not JSON ({exc})") from None


def rows_with_partition(inputs: dict[str, Any], partition: list[list[Any]] | None) -> None:
    """Give every row ``in_partition`` and ``partition_mode`` from the bundle's partition
    triples (question id, trajectory id, mode or null)."""
    if partition is None:
        return
    assigned = {t: m for _, t, m in partition}
    for r in inputs["rows"]:
        r["in_partition"] = r["trajectory_id"] in assigned
        r["partition_mode"] = assigned.get(r["trajectory_id"])


def verify_bundle(bundle: Path, *, public_key: Path | None = None) -> Verification:
    """Re-derive every number of ``bundle`` (see the module docstring). Raises
    :class:`BundleError` when a required file or key is missing."""
    try:
        return _verify(Path(bundle), public_key)
    except KeyError as exc:
        raise BundleError(f"{bundle}: a required key is missing: {exc}") from None


def _verify(bundle: Path, public_key: Path | None) -> Verification:
    bundle = Path(bundle)
    if not bundle.is_dir():
        raise BundleError(f"{bundle}: not a directory")
    res = Verification(bundle=str(bundle))
    bad = res.mismatches
    hashes = _read_json(bundle, "hashes.json")
    report = _read_json(bundle, "report.json")
    data = _read_json(bundle, "inputs.json")
    res.software = (data.get("software") or {}).get("version")

    # 1. files
    listed = hashes.get("files") or {}
    on_disk = {str(p.relative_to(bundle)): p for p in sorted(bundle.rglob("*")) if p.is_file()}
    for name, digest in sorted(listed.items()):
        res.n_checked += 1
        if name not in on_disk:
            bad.append(f"file {name}: listed in hashes.json but missing")
            continue
        got = hashlib.sha256(on_disk[name].read_bytes()).hexdigest()
        if got != digest:
            bad.append(f"file {name}: sha256 recorded {digest}, recomputed {got}")
    for name in sorted(set(on_disk) - set(listed) - set(UNHASHED)):
        bad.append(f"file {name}: not listed in hashes.json")

    # 2. signature
    res.signature = _check_signature(bundle, public_key, bad)

    inputs = data["inputs"]
    table = inputs["rows"]
    try:
        inputs["rows"] = [dict(zip(table["columns"], v, strict=True)) for v in table["values"]]
    except (KeyError, TypeError, ValueError) as exc:
        raise BundleError(f"{bundle / 'inputs.json'}: inputs.rows is malformed ({exc})") from None
    partition = data.get("partition")
    rows_with_partition(inputs, partition)
    pair = report["audits"]["pair"]

    # 3. input hashes
    def same(label: str, recorded: Any, recomputed: Any) -> None:
        res.n_checked += 1
        if recorded != recomputed:
            bad.append(f"{label}: recorded {recorded}, recomputed {recomputed}")

    rs = record_set_hash(inputs["rows"])
    same("record_set_hash (report.json)", report.get("record_set_hash"), rs)
    same("record_set_hash (hashes.json)", hashes.get("record_set_hash"), rs)
    if partition is not None:
        ph = partition_hash([tuple(t) for t in partition])
        same("partition_hash (report.json audits.pair)", pair.get("partition_hash"), ph)
        if hashes.get("partition_hash") is not None:
            same("partition_hash (hashes.json)", hashes["partition_hash"], ph)
    elif hashes.get("partition_hash") is not None:
        bad.append("partition_hash: hashes.json names a partition the bundle does not carry")
    if data.get("codebook"):
        cb = data["codebook"]
        digest = hashlib.sha256(canonical_json(cb["versions"]).encode()).hexdigest()
        same("codebook hash (partition source)", cb["source"], f"codebook:{digest[:16]}")
    spec = None
    if (bundle / "rubric.toml").exists():
        spec = parse_rubric((bundle / "rubric.toml").read_text(encoding="utf-8"))
        rh = spec.content_hash()
        same("rubric_hash (report.json audits.pair)", pair.get("rubric_hash"), rh)
        if hashes.get("rubric_hash") is not None:
            same("rubric_hash (hashes.json)", hashes["rubric_hash"], rh)
        _check_estimators(spec, report["parameters"], bad, res)
    elif hashes.get("rubric_hash") is not None:
        bad.append("rubric_hash: hashes.json names a rubric the bundle does not carry")
    val = report["audits"]["validity"]
    if hashes.get("judge_hash") is not None:
        same(
            "judge_hash (report.json rcea.audits.validity)",
            val.get("judge_hash"),
            hashes["judge_hash"],
        )
        same(
            "judge_hash (inputs.json validity_status)",
            inputs["validity_status"].get("judge_hash"),
            hashes["judge_hash"],
        )

    # 3b. the audit record: the event chain whole, its head the one hashes.json names
    if "audit_events" in inputs or "audit_events_head" in hashes:
        entries = inputs.get("audit_events") or []
        res.n_checked += 1
        bad.extend(chain_problems(entries))
        head = entries[-1]["hash"] if entries else None
        same("audit_events_head (hashes.json)", hashes.get("audit_events_head"), head)

    # 4. the report: typed, then recomputed
    try:
        StudyReport.model_validate(report)
    except ValidationError as exc:
        for err in exc.errors()[:20]:
            loc = ".".join(str(x) for x in err["loc"])
            bad.append(f"report.json {loc}: does not match the StudyReport schema ({err['msg']})")
    try:
        again = report_json(compute_report(inputs, include_draws=True))
    except Exception as exc:  # noqa: BLE001 - any failure on edited inputs is a finding
        bad.append(f"report: cannot be recomputed from inputs.json ({type(exc).__name__}: {exc})")
        return res
    draws = {
        (c["run"], c["model"], c["step"]): c["retention"].pop("draws")
        for c in again["checkpoints"]
        if c["retention"] and "draws" in c["retention"]
    }
    entropy_only = bool(data.get("entropy_only"))
    if entropy_only:
        again = strip_audited(again)
    again["scope"] = publication_scope(again, ENTROPY_ONLY_LABEL)
    again["simulated"] = report.get("simulated")  # an event, not a number: carried
    if "entropy_law" not in report:  # a bundle written before item 18's section
        again.pop("entropy_law", None)
        again["quantities"] = [q for q in again["quantities"] if q["section"] != "entropy_law"]
    again["generated_at"] = report.get("generated_at")
    # items 15-17: absent from earlier bundles
    for key in ("realization", "mode_tail", "mode_covariance", "replicates"):
        if key not in report and key in again:
            if again.pop(key) is None:  # nothing to re-derive (mode_covariance: None)
                continue
            again["quantities"] = [q for q in again["quantities"] if q["section"] != key]
            if "insufficient_evidence" in again:
                again["insufficient_evidence"] = evidence_lines(again["quantities"])
            res.not_rederived.append(f"{key} (the bundle was written before it was reported)")
    lines: list[str] = []
    res.n_checked += compare(report, _jsonable(again), "", lines)
    bad.extend(_quantity_names(report, lines)[:MAX_NAMED])
    if len(lines) > MAX_NAMED:
        bad.append(f"... and {len(lines) - MAX_NAMED} more differences in report.json")
    _check_attempts(again.get("attempts") or [], inputs.get("attempt_labels"), res)
    _check_changes_shown(bundle, again.get("attempts") or [], res)
    _check_marks_shown(bundle, again["quantities"], res)
    if not entropy_only:
        for reason in refusal_reasons(again):
            bad.append(f"publishes a number that is not publishable: {reason}")

    # 5. rarefaction draws
    if (bundle / "rarefaction.json").exists():
        _check_rarefaction(
            _read_json(bundle, "rarefaction.json"), again, draws, inputs, report, res
        )
    elif any(c.get("retention") for c in report["checkpoints"]):
        bad.append("rarefaction.json: missing although the bundle publishes retention")

    # 6. gate and calibration
    if (bundle / "gate.json").exists():
        _check_coverages(data.get("audit"), partition, res)
        _check_gate(_read_json(bundle, "gate.json"), data.get("audit"), spec, pair, res)
    if (bundle / "calibration.json").exists():
        _check_calibration(_read_json(bundle, "calibration.json"), val, res)
    return res


def _check_estimators(spec: Any, par: dict[str, Any], bad: list[str], res: Verification) -> None:
    """Settings not declared as deviations must be the rubric's ``[estimators]``."""
    declared = set(par.get("deviations_from_rubric") or [])
    est = spec.estimators
    actual = sorted(
        k
        for k in ("seed", "n_boot", "k_min", "n_min", "n_draws", "confidence")
        if par.get(k) != getattr(est, k)
    )
    res.n_checked += 1
    if par.get("estimators_from", "").startswith("rubric") and set(actual) != declared:
        bad.append(
            f"parameters.deviations_from_rubric: declared {sorted(declared)}, "
            f"recomputed from rubric.toml {actual}"
        )
    if par.get("estimators_from", "").startswith("rubric") and "min_evidence" in par:
        res.n_checked += 1
        if _jsonable(par["min_evidence"]) != _jsonable(est.min_evidence()):
            bad.append(
                f"parameters.min_evidence: published {_short(par['min_evidence'])}, "
                f"the rubric.toml floors are {_short(est.min_evidence())}"
            )


def _check_rarefaction(
    entries: list[dict[str, Any]],
    again: dict[str, Any],
    draws: dict[tuple[str, str, int], dict[str, Any]],
    inputs: dict[str, Any],
    report: dict[str, Any],
    res: Verification,
) -> None:
    bad = res.mismatches
    has_verdicts = any(r["reward"] == 1 and r["validity"] is not None for r in inputs["rows"])
    modes = mode_labels_from_rows(inputs["rows"], inputs["pair"], has_verdicts)
    published = {
        (c["run"], c["model"], c["step"]): c["retention"]
        for c in report["checkpoints"]
        if c.get("retention")
    }
    seen = set()
    for i, e in enumerate(entries):
        key = (e["run"], e["model"], e["step"])
        where = f"rarefaction.json[{i}] ({e['run']}, {e['model']}, step {e['step']})"
        seen.add(key)
        if key not in published:
            bad.append(f"{where}: no published retention for this checkpoint")
            continue
        b = e["base"]
        lines: list[str] = []
        res.n_checked += compare(
            e["base_labels"],
            _jsonable(modes.get((b["run"], b["model"], b["step"]), {})),
            f"{where}.base_labels",
            lines,
        )
        res.n_checked += compare(
            e["checkpoint_labels"],
            _jsonable(modes.get(key, {})),
            f"{where}.checkpoint_labels",
            lines,
        )
        res.n_checked += compare(
            e["draws"],
            _jsonable(draws.get(key, {})),
            f"{where}.draws (stored vs drawn from the seed {e['settings'].get('seed')})",
            lines,
        )
        s = e["settings"]
        try:
            r = rarefied_retention(
                e["base_labels"],
                e["checkpoint_labels"],
                stored_draws=e["draws"],
                seed=s["seed"],
                n_min=s["n_min"],
                n_draws=s["n_draws"],
                n_boot=s["n_boot"],
                confidence=s["confidence"],
            )
            # typed like the report's own section (the base is the published one: it is
            # checked against the recomputed report above)
            again = RetentionSection.of(r, _base_of(published[key])).to_json()
        except (ValueError, KeyError, IndexError, TypeError) as exc:
            lines.append(f"{where}: retention cannot be recomputed from the stored draws ({exc})")
        else:
            pub = published[key]
            res.n_checked += compare(
                pub, _jsonable(again), f"{where} retention from stored draws", lines
            )
            res.n_checked += compare(
                e["retention"], pub.get("retention"), f"{where}.retention", lines
            )
        bad.extend(lines[:MAX_NAMED])
    for key in sorted(set(published) - seen):
        bad.append(f"rarefaction.json: no draws for the published retention of {key}")


def _base_of(retention: dict[str, Any]) -> tuple[Any, ...]:
    base = retention.get("base") or {}
    return tuple(base.get(k) for k in ("run", "model", "step"))


def _check_gate(
    gate: dict[str, Any],
    audit: dict[str, Any] | None,
    spec: Any,
    pair: dict[str, Any],
    res: Verification,
) -> None:
    """Re-evaluate the final gate from the audited pairs."""

    bad = res.mismatches
    lines: list[str] = []
    res.n_checked += compare(gate, pair, "gate.json vs report.json audits.pair", lines)
    bad.extend(lines)
    if audit is None:
        bad.append("gate.json: the bundle carries no audited pairs (inputs.json audit)")
        return
    if spec is None:
        bad.append("gate.json: the bundle carries no rubric.toml to take the thresholds from")
        return
    try:
        data = pair_gate(
            audit,
            spec,
            rubric_hash=pair.get("rubric_hash"),
            partition_hash=pair.get("partition_hash"),
        )
    except ValueError as exc:
        bad.append(f"gate: cannot be re-evaluated from the audited pairs ({exc})")
        return
    status = "passed" if data["passed"] else "failed"
    res.n_checked += 1
    if gate.get("status") != status:
        bad.append(f"gate.status: published {gate.get('status')}, recomputed {status}")
    lines = []
    res.n_checked += compare(gate.get("gate"), _jsonable(data), "gate.json gate", lines)
    bad.extend(lines[:MAX_NAMED])


def _check_attempts(
    listed: list[dict[str, Any]], labels: dict[str, Any] | None, res: Verification
) -> None:
    """Every decided attempt's outcome and values, re-derived from its own labels in
    ``inputs.json`` ``attempt_labels`` (bundles written before they were carried: listed
    as not re-derived)."""

    if labels is None:
        if listed:
            res.not_rederived.append(
                "attempt outcomes (the bundle carries the audit events, not their labels)"
            )
        return
    for a in listed:
        key = label_key(a["kind"], a["name"])
        where = f"attempt {key}"
        own = labels.get(key)
        if own is None:
            if a["outcome"] in ("passed", "failed"):
                res.mismatches.append(f"{where}: decided {a['outcome']}, its labels are missing")
            continue
        try:
            again = rederive(a, own)
        except (ValueError, KeyError, TypeError) as exc:
            res.mismatches.append(f"{where}: cannot be re-derived from its labels ({exc})")
            continue
        if again is None:
            continue
        lines: list[str] = []
        res.n_checked += compare(
            {"outcome": a["outcome"], "values": a["values"]},
            _jsonable(again),
            f"{where} (recorded vs re-derived from its labels)",
            lines,
        )
        res.mismatches.extend(lines[:MAX_NAMED])


def _check_changes_shown(bundle: Path, listed: list[dict[str, Any]], res: Verification) -> None:
    """Every attempt whose design changed after a failed attempt (re-derived from the
    audit events) is marked so on the bundle's page, with the difference."""
    changed = [a for a in listed if a.get("changed_after_failure")]
    if not changed:
        return
    page = bundle / "report.html"
    text = page.read_text(encoding="utf-8") if page.exists() else ""
    for a in changed:
        res.n_checked += 1
        if escape(changes_text(a)) not in text:
            res.mismatches.append(
                f"report.html: {a['kind']} {a['name']} was {CHANGED_LABEL} "
                f"({len(a['changed_after_failure'])} setting(s)) but the page does not show it"
            )


def _check_marks_shown(bundle: Path, quantities: list[dict[str, Any]], res: Verification) -> None:
    """Every audited number whose audit passed only after a change following a failed
    attempt (re-derived) carries the mark on the bundle's page: its label cell in the
    appendix reads ``audited — changed after a failed attempt: …`` as often as there are
    such numbers (report.json's own marks are compared with the recomputed report)."""
    wanted = Counter(escape(display_label(q)) for q in quantities if q.get("changed_after_failure"))
    if not wanted:
        return
    page = bundle / "report.html"
    text = page.read_text(encoding="utf-8") if page.exists() else ""
    for cell, n in sorted(wanted.items()):
        res.n_checked += n
        shown = text.count(f"<td>{cell}</td>")
        if shown < n:
            res.mismatches.append(
                f"report.html: {n - shown} of {n} audited number(s) whose audit passed "
                f"{CHANGED_LABEL} do not carry the mark ({unescape(cell)[:120]})"
            )


def _check_coverages(
    audit: dict[str, Any] | None, partition: list[list[Any]] | None, res: Verification
) -> None:
    """The gate's automatic coverage (over the whole locked partition) and audited
    coverage (over the audited questions), from the partition triples."""
    if audit is None or partition is None:
        return
    overall = sum(m is not None for _, _, m in partition) / len(partition) if partition else 0.0
    questions = {p["question_id"] for p in audit["pairs"]}
    rows = [m for q, _, m in partition if q in questions]
    audited = sum(m is not None for m in rows) / len(rows) if rows else None
    lines: list[str] = []
    res.n_checked += compare(
        {
            "automatic_coverage": audit["automatic_coverage"],
            "audited_coverage": audit["audited_coverage"],
        },
        {"automatic_coverage": overall, "audited_coverage": audited},
        "inputs.json audit (from the partition)",
        lines,
    )
    res.mismatches.extend(lines)


def _check_calibration(cal: dict[str, Any], val: dict[str, Any], res: Verification) -> None:
    bad = res.mismatches
    lines: list[str] = []
    shown = {k: v for k, v in cal.items() if k != "items"}
    res.n_checked += compare(
        shown, val, "calibration.json vs report.json rcea.audits.validity", lines
    )
    bad.extend(lines)
    items = cal.get("items")
    if not items:
        res.not_rederived.append(
            "judge calibration (the bundle carries its report, not its held-out items)"
        )
        return
    # the population figures from the verdict counts and bootstrap settings they record
    pop = (cal.get("report") or {}).get("population") or {}
    rep = calibration_figures(
        [i["human"] for i in items],
        [i["judge"] for i in items],
        pop.get("population"),
        n_boot=int(pop.get("n_boot", 10_000)),
        seed=int(pop.get("seed", 0)),
        confidence=float(pop.get("confidence", 0.95)),
    )
    if "population" not in (cal.get("report") or {}):  # written before population figures
        rep.pop("population")  # (a recorded null: no verdict counts, recomputed as null)
    lines = []
    res.n_checked += compare(cal.get("report"), _jsonable(rep), "calibration.json report", lines)
    bad.extend(lines[:MAX_NAMED])


# --------------------------------------------------------------------------- signatures


def _check_signature(bundle: Path, public_key: Path | None, bad: list[str]) -> str:
    sig_path = bundle / "signature.json"
    if not sig_path.exists():
        if public_key is not None:
            bad.append("signature: the bundle is unsigned but a public key was given")
        return "unsigned"
    if public_key is None:
        return "signed, not checked (no --key)"

    try:
        fp = verify_signature(bundle, public_key)
    except SignatureError as exc:
        bad.append(f"signature: {exc}")
        return "INVALID"
    return f"valid (ed25519 key {fp})"
