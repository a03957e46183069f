"""Every codebook prompt, versioned, in one place.

A template's ``version`` changes whenever its text changes; the prompt-set id (name,
versions and a hash of the texts) is recorded with every frozen codebook and every batch,
and the request hash that keys the response cache covers the rendered text, so a changed
prompt can never be served an old reply.

Prompts show trajectories only as ``<solution id="T3">`` blocks: an opaque handle valid
inside one batch and the text, after the problem statement they answer (``<problem>``,
when the study stores one; version 2 of every template). Provenance (run, model, step,
seed), trajectory ids, question ids and automatic labels are never rendered (a test scans
every rendered prompt).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from string import Template

from rcea.pipeline.codebook.model import BlindItem, Candidate, Mode
from rcea.pipeline.llm import Messages, canonical_json

MODE_RULE = (
    "A mode is a shared decisive method and core sequence of operations. Differences in "
    "wording, notation, arithmetic detail or order of exposition never make a separate "
    "mode unless they change the underlying solution method."
)


@dataclass(frozen=True)
class PromptTemplate:
    name: str
    version: int
    system: str
    user: str

    @property
    def id(self) -> str:
        return f"{self.name}/v{self.version}"

    def render(self, **fields: str) -> Messages:
        return [
            {"role": "system", "content": Template(self.system).substitute(MODE_RULE=MODE_RULE)},
            {"role": "user", "content": Template(self.user).substitute(**fields)},
        ]


INDUCE = PromptTemplate(
    name="codebook.induce",
    version=2,
    system="""Task: codebook.induce
You help researchers build a codebook of solution strategies for ONE problem.
All solutions below answer the same problem and were judged correct.
$MODE_RULE
Propose the distinct modes you see. For each: a short name, an inclusion criterion that
states the decisive method and the core sequence of operations (so that someone else can
decide membership from the criterion alone), and the ids of the solutions that use it.
Reply with one JSON object only:
{"modes": [{"name": "...", "criterion": "...", "examples": ["T1", "T4"]}]}""",
    user="""${problem}Solutions ($n_items):

$items""",
)

MERGE = PromptTemplate(
    name="codebook.merge",
    version=2,
    system="""Task: codebook.merge
Candidate modes for ONE problem were proposed independently from different samples
of its solutions. Merge them into a codebook.
$MODE_RULE
Candidates that describe the same method under different names or wording are ONE mode.
Keep genuinely different methods apart. Every candidate should end up in exactly one mode.
Reply with one JSON object only:
{"modes": [{"name": "...", "criterion": "...", "merged_from": ["C1", "C3"]}]}""",
    user="""${problem}Candidate modes ($n_items):
<candidates>
$candidates
</candidates>""",
)

ASSIGN = PromptTemplate(
    name="codebook.assign",
    version=2,
    system="""Task: codebook.assign
Assign each solution of ONE problem to a mode of the frozen codebook below.
$MODE_RULE
Answer with the mode id, or "NEW" if the solution clearly uses a method no mode covers
(then add new_name and new_criterion), or "NONE" if no method can be identified.
Give a confidence between 0 and 1.
Reply with one JSON object only, one entry per solution:
{"assignments": [{"item": "T1", "mode": "m1", "confidence": 0.9}]}""",
    user="""${problem}Codebook:
<codebook>
$codebook
</codebook>

Solutions ($n_items):

$items""",
)

ARBITRATE = PromptTemplate(
    name="codebook.arbitrate",
    version=2,
    system="""Task: codebook.arbitrate
The solutions below, all to ONE problem, were hard to assign to the frozen codebook:
independent assignments disagreed, were unsure, or named no existing mode.
$MODE_RULE
Read each solution carefully and decide: a mode id, "NEW" (a method no mode covers; add
new_name and new_criterion) or "NONE" (no identifiable method). Give a confidence between
0 and 1 (below 0.7 sends the solution to a researcher) and a one-sentence rationale.
Reply with one JSON object only, one entry per solution:
{"assignments": [{"item": "T1", "mode": "m2", "confidence": 0.8, "rationale": "..."}]}""",
    user="""${problem}Codebook:
<codebook>
$codebook
</codebook>

Solutions ($n_items):

$items""",
)

TEMPLATES: dict[str, PromptTemplate] = {t.name: t for t in (INDUCE, MERGE, ASSIGN, ARBITRATE)}


def prompt_set_id() -> str:
    """``codebook-prompts:<template versions>:<hash of the texts>``."""
    texts = canonical_json({t.id: [t.system, t.user] for t in TEMPLATES.values()})
    digest = hashlib.sha256(texts.encode()).hexdigest()[:12]
    versions = ",".join(t.id for t in TEMPLATES.values())
    return f"codebook-prompts[{versions}]:{digest}"


def _problem_block(question: str | None) -> str:
    """The problem statement the solutions answer, or nothing when none is stored."""
    if question is None or not question.strip():
        return ""
    text = question.replace("</problem>", "</ problem>")
    return f"Problem:\n<problem>\n{text}\n</problem>\n\n"


def _items_block(items: Sequence[BlindItem]) -> str:
    blocks = []
    for item in items:
        text = item.text.replace("</solution>", "</ solution>")
        blocks.append(f'<solution id="{item.handle}">\n{text}\n</solution>')
    return "\n\n".join(blocks)


def _codebook_block(modes: Sequence[Mode]) -> str:
    return json.dumps([m.prompt_dict() for m in modes], ensure_ascii=False, indent=1)


def render_induce(items: Sequence[BlindItem], question: str | None = None) -> Messages:
    return INDUCE.render(
        problem=_problem_block(question), n_items=str(len(items)), items=_items_block(items)
    )


def render_merge(
    candidates: Sequence[tuple[str, Candidate]], question: str | None = None
) -> Messages:
    rows = [{"id": cid, "name": c.name, "criterion": c.criterion} for cid, c in candidates]
    return MERGE.render(
        problem=_problem_block(question),
        n_items=str(len(rows)),
        candidates=json.dumps(rows, ensure_ascii=False, indent=1),
    )


def render_assign(
    modes: Sequence[Mode], items: Sequence[BlindItem], question: str | None = None
) -> Messages:
    return ASSIGN.render(
        problem=_problem_block(question),
        codebook=_codebook_block(modes),
        n_items=str(len(items)),
        items=_items_block(items),
    )


def render_arbitrate(
    modes: Sequence[Mode], items: Sequence[BlindItem], question: str | None = None
) -> Messages:
    return ARBITRATE.render(
        problem=_problem_block(question),
        codebook=_codebook_block(modes),
        n_items=str(len(items)),
        items=_items_block(items),
    )
