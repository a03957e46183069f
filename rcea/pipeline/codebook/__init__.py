"""The question-local codebook pipeline (docs/codebook.md).

Pure domain code: prompts, reply schemas, backends (``openai``, ``oracle``) and the rules
of induction, merging, assignment, reconciliation and extension. The store-side
orchestration lives in ``rcea.study.codebook``.
"""

from rcea.pipeline.codebook.backends import (
    CodebookBackend,
    OpenAIBackend,
    OracleBackend,
    StrategyFn,
)
from rcea.pipeline.codebook.logic import (
    DEFAULT_CONFIDENCE_THRESHOLD,
    ItemLabel,
    Proposal,
    arbitration_status,
    candidate_ids,
    candidates_from_induction,
    dispute_reasons,
    edit_modes,
    extend_modes,
    group_proposals,
    labels_from_reply,
    modes_from_merge,
)
from rcea.pipeline.codebook.model import (
    INVALID,
    NEW,
    NONE,
    UNCERTAIN,
    BlindItem,
    Candidate,
    CodebookError,
    Mode,
    codebook_hash,
    handles,
    modes_from_json,
    modes_to_json,
    plan_batches,
)
from rcea.pipeline.codebook.prompts import prompt_set_id

__all__ = [
    "DEFAULT_CONFIDENCE_THRESHOLD",
    "INVALID",
    "NEW",
    "NONE",
    "UNCERTAIN",
    "BlindItem",
    "Candidate",
    "CodebookBackend",
    "CodebookError",
    "ItemLabel",
    "Mode",
    "OpenAIBackend",
    "OracleBackend",
    "Proposal",
    "StrategyFn",
    "arbitration_status",
    "candidate_ids",
    "candidates_from_induction",
    "codebook_hash",
    "dispute_reasons",
    "edit_modes",
    "extend_modes",
    "group_proposals",
    "handles",
    "labels_from_reply",
    "modes_from_json",
    "modes_to_json",
    "modes_from_merge",
    "plan_batches",
    "prompt_set_id",
]
