"""``rcea import trainlog``: the entropy and accuracy traces of a run trained elsewhere, from
its TensorBoard event files (as verl's and TRL's TensorBoard loggers write them) or TRL's
``trainer_state.json`` ``log_history`` (docs/stats.md, docs/estimators.md item 18).

The key mapping is explicit and recorded with the traces (``mapping``). Detected, unless
a key is given:

* **verl** (TensorBoard, its ``Tracking`` logger: raw keys): global entropy
  ``actor/entropy``; accuracy every ``val-core/<source>/acc/mean@N`` (``reward`` where a
  source has no ``acc``; the largest N), one benchmark per data source;
* **TRL** (TensorBoard, ``train/`` and ``eval/`` prefixes): ``train/entropy``; accuracy
  ``eval/reward``, else ``train/reward``;
* **TRL trainer_state.json** (``log_history``): ``entropy``; ``eval_reward``, else
  ``reward``;
* everywhere the success- and failure-conditioned token entropies of the live metrics,
  ``rcea/token_entropy_success`` / ``rcea/token_entropy_failure`` (TRL: under ``train/``).

``train/reward`` / ``reward`` is the training batch's mean reward, not a validation
accuracy: the mapping then says ``accuracy_kind: training reward``. A value logged as NaN
(an undefined step) is kept as undefined; the law's pairing skips it.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rcea.pipeline.event_curves import EVENTS_GLOB, event_dirs, read_scalars

STATE_FILE = "trainer_state.json"
VERL_ENTROPY = "actor/entropy"
VERL_VAL = re.compile(r"^val-core/(?P<source>.+)/(?P<var>acc|reward)/mean@(?P<n>\d+)$")
SUCCESS, FAILURE = "rcea/token_entropy_success", "rcea/token_entropy_failure"

Points = list[tuple[int, float | None]]


class TrainLogError(ValueError):
    """A log that cannot be read or mapped; the message names the file and the key."""


@dataclass
class TrainLog:
    """The mapped traces of one run's log."""

    source: str
    flavour: str
    mapping: dict[str, Any]
    entropy: dict[str, Points] = field(default_factory=dict)
    accuracy: dict[str, Points] = field(default_factory=dict)

    @property
    def last_step(self) -> int:
        steps = [s for pts in (*self.entropy.values(), *self.accuracy.values()) for s, _ in pts]
        return max(steps) if steps else 0

    def curve_points(self) -> list[dict[str, Any]]:
        """Training-curve points: ``step``, ``progress`` (step / last step), ``entropy`` and
        the ``rcea/`` split where mapped; undefined values omitted."""
        names = {"global": "entropy", "success": SUCCESS, "failure": FAILURE}
        by_step: dict[int, dict[str, Any]] = {}
        last = self.last_step or 1
        for kind, pts in self.entropy.items():
            for s, v in pts:
                point = by_step.setdefault(s, {"step": s, "progress": s / last})
                if v is not None and math.isfinite(v):
                    point[names[kind]] = v
        return [by_step[s] for s in sorted(by_step)]

    def accuracy_points(self) -> dict[str, list[dict[str, Any]]]:
        """Benchmark → accuracy-trace points (``step``, ``progress``, ``accuracy``)."""
        last = self.last_step or 1
        return {
            bench: [
                {"step": s, "progress": s / last, "accuracy": v}
                for s, v in sorted(pts)
                if v is not None and math.isfinite(v)
            ]
            for bench, pts in self.accuracy.items()
        }

    def trace_rows(
        self, run: str, model: str, *, seed: int | None = None, n_params: float | None = None
    ) -> list[dict[str, Any]]:
        """Rows of a TRACE file (``rcea stats entropy-law``): R = the mean over the mapped
        benchmarks at the steps every one has."""
        acc = self.accuracy_points()
        per = [{p["step"]: p["accuracy"] for p in pts} for pts in acc.values()]
        common = set.intersection(*(set(p) for p in per)) if per else set()
        cols = {"global": "entropy", "success": "entropy_success", "failure": "entropy_failure"}
        rows: dict[int, dict[str, Any]] = {}
        for kind, pts in self.entropy.items():
            for s, v in pts:
                if v is not None and math.isfinite(v):
                    rows.setdefault(s, {})[cols[kind]] = v
        for s in common:
            rows.setdefault(s, {})["accuracy"] = sum(p[s] for p in per) / len(per)
        out = []
        for s in sorted(rows):
            row: dict[str, Any] = {"run": run, "model": model, "step": s}
            if seed is not None:
                row["seed"] = seed
            if n_params is not None:
                row["n_params"] = n_params
            out.append(row | rows[s])
        return out


def _scalars_of(path: Path) -> tuple[dict[str, Points], str]:
    """Every scalar of the newest event folder under ``path`` (or of the event file's)."""
    if path.is_file():
        folder = path.parent
    else:
        dirs = event_dirs(path)
        if not dirs:
            raise TrainLogError(f"{path}: no TensorBoard event files ({EVENTS_GLOB})")
        folder = dirs[-1]
    try:
        raw = read_scalars(folder)
    except RuntimeError as exc:
        raise TrainLogError(str(exc)) from None
    return {
        tag: [(s, v if math.isfinite(v) else None) for s, v in vals] for tag, vals in raw.items()
    }, str(folder)


def _state_scalars(path: Path) -> dict[str, Points]:
    try:
        state = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise TrainLogError(f"{path}:line {exc.lineno}: invalid JSON ({exc.msg})") from None
    history = state.get("log_history") if isinstance(state, dict) else None
    if not isinstance(history, list):
        raise TrainLogError(f"{path}: no log_history list (not a TRL/transformers trainer state)")
    out: dict[str, Points] = {}
    for i, entry in enumerate(history):
        if not isinstance(entry, dict) or "step" not in entry:
            raise TrainLogError(f"{path}: log_history[{i}]: no step")
        for key, value in entry.items():
            if key in ("step", "epoch") or isinstance(value, bool):
                continue
            if isinstance(value, int | float):
                v = float(value)
                out.setdefault(key, []).append(
                    (int(entry["step"]), v if math.isfinite(v) else None)
                )
    return out


def _verl_accuracy(tags: Sequence[str]) -> list[str]:
    """One ``val-core`` key per data source: ``acc`` over ``reward``, the largest N."""
    best: dict[str, tuple[int, int, str]] = {}
    for tag in tags:
        m = VERL_VAL.match(tag)
        if m is None:
            continue
        rank = (1 if m["var"] == "acc" else 0, int(m["n"]), tag)
        if m["source"] not in best or rank > best[m["source"]]:
            best[m["source"]] = rank
    return [best[s][2] for s in sorted(best)]


def _detect(scalars: dict[str, Points], state: bool) -> tuple[str, dict[str, Any]]:
    tags = set(scalars)
    if state:
        acc = ["eval_reward"] if "eval_reward" in tags else ["reward"] if "reward" in tags else []
        return "trl-state", {
            "global": "entropy" if "entropy" in tags else None,
            "success": SUCCESS if SUCCESS in tags else None,
            "failure": FAILURE if FAILURE in tags else None,
            "accuracy": acc,
            "accuracy_kind": "validation" if acc == ["eval_reward"] else "training reward",
        }
    if VERL_ENTROPY in tags or any(VERL_VAL.match(t) for t in tags):
        return "verl", {
            "global": VERL_ENTROPY if VERL_ENTROPY in tags else None,
            "success": SUCCESS if SUCCESS in tags else None,
            "failure": FAILURE if FAILURE in tags else None,
            "accuracy": _verl_accuracy(sorted(tags)),
            "accuracy_kind": "validation",
        }
    acc = (
        ["eval/reward"]
        if "eval/reward" in tags
        else ["train/reward"]
        if "train/reward" in tags
        else []
    )
    return "trl", {
        "global": "train/entropy" if "train/entropy" in tags else None,
        "success": f"train/{SUCCESS}" if f"train/{SUCCESS}" in tags else None,
        "failure": f"train/{FAILURE}" if f"train/{FAILURE}" in tags else None,
        "accuracy": acc,
        "accuracy_kind": "validation" if acc == ["eval/reward"] else "training reward",
    }


def _bench_name(key: str) -> str:
    m = VERL_VAL.match(key)
    return m["source"] if m else key.replace("/", "_")


def read_trainlog(
    path: str | Path,
    *,
    entropy_key: str | None = None,
    accuracy_keys: Sequence[str] = (),
    success_key: str | None = None,
    failure_key: str | None = None,
) -> TrainLog:
    """Read ``path`` (a folder with event files, an event file, or a ``trainer_state.json``
    / a folder holding one) and map its keys (module docstring; a given key wins and is
    recorded as given). Raises :class:`TrainLogError` when no entropy or accuracy key maps
    or a given key is not in the log."""
    p = Path(path)
    if not p.exists():
        raise TrainLogError(f"{p}: no such file or directory")
    state_file = p if p.is_file() and p.name.endswith(".json") else p / STATE_FILE
    if state_file.is_file() and not (p.is_dir() and any(p.rglob(EVENTS_GLOB))):
        scalars, source, is_state = _state_scalars(state_file), str(state_file), True
    else:
        (scalars, source), is_state = _scalars_of(p), False
    flavour, mapping = _detect(scalars, is_state)
    given = {
        "global": entropy_key,
        "success": success_key,
        "failure": failure_key,
    }
    mapping["given"] = []
    for kind, key in given.items():
        if key is not None:
            mapping[kind] = key
            mapping["given"].append(kind)
    if accuracy_keys:
        mapping["accuracy"] = list(accuracy_keys)
        mapping["accuracy_kind"] = "given"
        mapping["given"].append("accuracy")
    known = sorted(scalars)
    for kind in ("global", "success", "failure"):
        key = mapping[kind]
        if key is not None and key not in scalars:
            raise TrainLogError(
                f"{source}: {kind} entropy key {key!r} is not in the log "
                f"(scalar keys: {', '.join(known[:30])}{' ...' if len(known) > 30 else ''})"
            )
    for key in mapping["accuracy"]:
        if key not in scalars:
            raise TrainLogError(f"{source}: accuracy key {key!r} is not in the log")
    if mapping["global"] is None:
        raise TrainLogError(
            f"{source}: no entropy key found ({flavour}); name it with --entropy-key "
            f"(scalar keys: {', '.join(known[:30])})"
        )
    if not mapping["accuracy"]:
        raise TrainLogError(
            f"{source}: no accuracy key found ({flavour}); name it with --accuracy-key"
        )
    log = TrainLog(source=source, flavour=flavour, mapping=mapping)
    for kind in ("global", "success", "failure"):
        if mapping[kind] is not None:
            log.entropy[kind] = sorted(scalars[mapping[kind]])
    for key in mapping["accuracy"]:
        pts = sorted(scalars[key])
        bad = [(s, v) for s, v in pts if v is not None and not 0.0 <= v <= 1.0]
        if bad:
            raise TrainLogError(
                f"{source}: accuracy key {key!r} at step {bad[0][0]}: {bad[0][1]} is not in "
                "[0, 1] (not an accuracy; name the right key with --accuracy-key)"
            )
        log.accuracy[_bench_name(key)] = pts
    return log
