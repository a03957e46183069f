"""The rules of the codebook cycle, as pure functions over replies and labels.

* turning an assignment reply into one label per trajectory (anything unusable becomes
  ``INVALID`` and goes to reconciliation — never a silent assignment);
* when a trajectory goes to reconciliation, and what an arbitration answer settles;
* building a draft codebook from merge replies, researcher edits of a draft, and
  extending a frozen codebook with approved new modes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from rcea.pipeline.codebook.model import (
    INVALID,
    NEW,
    NONE,
    Candidate,
    CodebookError,
    Mode,
    check_modes,
    next_mode_id,
    normalise_name,
)
from rcea.pipeline.codebook.schemas import AssignReply, InduceReply, MergeReply

DEFAULT_CONFIDENCE_THRESHOLD = 0.7


@dataclass(frozen=True)
class ItemLabel:
    trajectory_id: str
    label: str
    """a mode id, ``NEW``, ``NONE`` or ``INVALID``"""
    confidence: float | None
    proposal: dict[str, str] | None = None
    """for ``NEW``: the proposed name and criterion"""
    note: str | None = None
    rationale: str | None = None


def labels_from_reply(
    handle_to_tid: Mapping[str, str],
    reply: AssignReply | None,
    mode_ids: set[str],
    *,
    error: str | None = None,
) -> list[ItemLabel]:
    """One label per trajectory of the batch, in batch order."""
    if reply is None:
        note = f"no valid reply: {error or 'unknown error'}"
        return [ItemLabel(t, INVALID, None, note=note) for t in handle_to_tid.values()]
    answers: dict[str, list[Any]] = {}
    for a in reply.assignments:
        answers.setdefault(a.item.strip(), []).append(a)
    out = []
    for handle, tid in handle_to_tid.items():
        given = answers.get(handle, [])
        if not given:
            out.append(ItemLabel(tid, INVALID, None, note="no answer for this solution"))
            continue
        if len(given) > 1 and len({(a.mode, a.confidence) for a in given}) > 1:
            out.append(ItemLabel(tid, INVALID, None, note="conflicting answers"))
            continue
        a = given[0]
        mode = a.mode.strip()
        if mode.upper() in (NEW, NONE):
            mode = mode.upper()
        if mode not in mode_ids and mode not in (NEW, NONE):
            out.append(ItemLabel(tid, INVALID, a.confidence, note=f"unknown mode id {a.mode!r}"))
            continue
        proposal = None
        if mode == NEW:
            proposal = {
                "name": (a.new_name or "").strip() or "unnamed new mode",
                "criterion": (a.new_criterion or "").strip(),
            }
        out.append(ItemLabel(tid, mode, a.confidence, proposal, rationale=a.rationale))
    return out


def dispute_reasons(
    first: ItemLabel | None, second: ItemLabel | None, *, threshold: float
) -> list[str]:
    """Why a trajectory goes to reconciliation ([] = the two passes settle it)."""
    if first is None or second is None:
        return ["missing pass"]
    reasons = []
    if first.label != second.label:
        reasons.append("passes disagree")
    for lab in (first, second):
        if lab.label in (NEW, NONE, INVALID):
            reason = "invalid reply" if lab.label == INVALID else f"special label {lab.label}"
            if reason not in reasons:
                reasons.append(reason)
    confs = [lab.confidence for lab in (first, second) if lab.label != INVALID]
    if any(c is None or c < threshold for c in confs):
        reasons.append("low confidence")
    return reasons


def arbitration_status(label: ItemLabel, *, threshold: float) -> str:
    """``resolved`` (an existing mode), ``new`` (a provisional NEW, for extension review)
    or ``researcher`` (arbitration could not settle it)."""
    if label.label in (NONE, INVALID) or label.confidence is None:
        return "researcher"
    if label.confidence < threshold:
        return "researcher"
    return "new" if label.label == NEW else "resolved"


# --------------------------------------------------------------------------- drafts


def candidates_from_induction(
    replies: Sequence[tuple[Mapping[str, str], InduceReply]],
) -> list[Candidate]:
    """Candidates of all induction batches of one question; example handles are mapped
    back to trajectory ids (unknown handles dropped)."""
    out = []
    for handle_to_tid, reply in replies:
        for m in reply.modes:
            examples = tuple(handle_to_tid[h] for h in m.examples if h in handle_to_tid)
            out.append(Candidate(m.name.strip(), m.criterion.strip(), examples))
    return out


def candidate_ids(candidates: Sequence[Candidate]) -> list[tuple[str, Candidate]]:
    return [(f"C{i}", c) for i, c in enumerate(candidates, 1)]


def modes_from_merge(
    numbered: Sequence[tuple[str, Candidate]], reply: MergeReply, *, max_examples: int = 5
) -> list[Mode]:
    """A draft codebook (ids m1..mk in reply order). Modes with the same name are joined;
    examples come from the merged candidates."""
    by_id = dict(numbered)
    modes: list[Mode] = []
    by_name: dict[str, Mode] = {}
    for merged in reply.modes:
        examples: list[str] = []
        for cid in merged.merged_from:
            cand = by_id.get(cid.strip())
            if cand is not None:
                examples.extend(e for e in cand.examples if e not in examples)
        key = normalise_name(merged.name)
        if not key:
            continue
        if key in by_name:
            old = by_name[key]
            extra = [e for e in examples if e not in old.examples]
            by_name[key] = old.model_copy(
                update={"examples": (old.examples + extra)[:max_examples]}
            )
            modes = [by_name[key] if m.id == old.id else m for m in modes]
            continue
        mode = Mode(
            id=f"m{len(modes) + 1}",
            name=merged.name.strip(),
            criterion=merged.criterion.strip(),
            examples=examples[:max_examples],
        )
        by_name[key] = mode
        modes.append(mode)
    if not modes:
        raise CodebookError("the merge produced no mode")
    check_modes(modes)
    return modes


def _find(modes: Sequence[Mode], mode_id: str) -> Mode:
    for m in modes:
        if m.id == mode_id:
            return m
    known = ", ".join(m.id for m in modes) or "none"
    raise CodebookError(f"no mode {mode_id!r} in this codebook (modes: {known})")


def edit_modes(modes: Sequence[Mode], op: str, **args: Any) -> list[Mode]:
    """A researcher's edit of a draft: ``rename``, ``merge``, ``split``, ``add``, ``drop``.

    * ``rename(mode, name=None, criterion=None)``
    * ``merge(mode, into, name=None, criterion=None)`` — ``mode`` is absorbed by ``into``
    * ``split(mode, name, criterion, criterion_rest=None)`` — carves a new mode out of
      ``mode`` (whose criterion becomes ``criterion_rest`` when given)
    * ``add(name, criterion)``, ``drop(mode)``
    """
    out = [m.model_copy() for m in modes]
    if op == "rename":
        m = _find(out, args["mode"])
        update = {k: args[k] for k in ("name", "criterion") if args.get(k)}
        if not update:
            raise CodebookError("rename needs a new name or criterion")
        out = [m.model_copy(update=update) if x.id == m.id else x for x in out]
    elif op == "merge":
        src, dst = _find(out, args["mode"]), _find(out, args["into"])
        if src.id == dst.id:
            raise CodebookError("cannot merge a mode into itself")
        update: dict[str, Any] = {  # type: ignore[no-redef]  # each branch declares the update it builds
            "examples": dst.examples + [e for e in src.examples if e not in dst.examples],
            "note": f"merged {src.id} into {dst.id}",
        }
        update.update({k: args[k] for k in ("name", "criterion") if args.get(k)})
        out = [
            dst.model_copy(update=update) if x.id == dst.id else x for x in out if x.id != src.id
        ]
    elif op == "split":
        src = _find(out, args["mode"])
        new = Mode(
            id=next_mode_id(out),
            name=args["name"],
            criterion=args.get("criterion") or "",
            note=f"split from {src.id}",
        )
        if args.get("criterion_rest"):
            out = [
                x.model_copy(update={"criterion": args["criterion_rest"]}) if x.id == src.id else x
                for x in out
            ]
        out.append(new)
    elif op == "add":
        out.append(
            Mode(id=next_mode_id(out), name=args["name"], criterion=args.get("criterion") or "")
        )
    elif op == "drop":
        src = _find(out, args["mode"])
        out = [x for x in out if x.id != src.id]
        if not out:
            raise CodebookError("a codebook needs at least one mode")
    else:
        raise CodebookError(f"unknown edit {op!r} (rename, merge, split, add, drop)")
    check_modes(out)
    return out


# --------------------------------------------------------------------------- extensions


@dataclass
class Proposal:
    name: str
    criterion: str
    trajectory_ids: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "criterion": self.criterion,
            "trajectory_ids": self.trajectory_ids,
        }


def group_proposals(items: Sequence[tuple[str, Mapping[str, str] | None]]) -> list[Proposal]:
    """Group provisional NEW trajectories of one question by proposed name (ignoring case
    and punctuation); the most common criterion wording of a group is kept."""
    groups: dict[str, Proposal] = {}
    criteria: dict[str, dict[str, int]] = {}
    for tid, proposal in items:
        name = ((proposal or {}).get("name") or "unnamed new mode").strip()
        key = normalise_name(name) or "unnamed new mode"
        group = groups.setdefault(key, Proposal(name, ""))
        group.trajectory_ids.append(tid)
        crit = ((proposal or {}).get("criterion") or "").strip()
        if crit:
            counts = criteria.setdefault(key, {})
            counts[crit] = counts.get(crit, 0) + 1
    for key, group in groups.items():
        if criteria.get(key):
            group.criterion = max(criteria[key].items(), key=lambda kv: (kv[1], kv[0]))[0]
        group.trajectory_ids.sort()
    return sorted(groups.values(), key=lambda g: (-len(g.trajectory_ids), g.name))


def extend_modes(
    modes: Sequence[Mode], proposals: Sequence[Proposal], *, note: str, max_examples: int = 5
) -> list[Mode]:
    """The modes of a new version: every existing mode unchanged (ids keep their meaning)
    plus one new mode per proposal."""
    out = list(modes)
    for p in proposals:
        out.append(
            Mode(
                id=next_mode_id(out),
                name=p.name,
                criterion=p.criterion,
                examples=p.trajectory_ids[:max_examples],
                note=note,
            )
        )
    check_modes(out)
    return out
