"""The codebook cycle on the store (docs/codebook.md).

Automatic stages (:mod:`rcea.study.codebook.stages`): induce → merge → assign → reconcile, each
resumable. Researcher operations (:mod:`rcea.study.codebook.review`): draft edits, freeze, the
reconciliation queue, extension review. The final partition (:mod:`rcea.study.codebook.export`).
"""

from rcea.study.codebook.backend import BackendOptions, load_strategy_fn, make_backend
from rcea.study.codebook.blinding import PromptBlindingGuard, study_guard
from rcea.study.codebook.common import CodebookStageError, StageReport, excluded_trajectories
from rcea.study.codebook.exclude import exclude_trajectory
from rcea.study.codebook.export import cycle_status, export_partition, final_labels
from rcea.study.codebook.review import (
    CodebookFrozenError,
    decide_extension,
    edit_draft,
    freeze_codebooks,
    get_draft,
    list_extensions,
    request_extensions,
    researcher_queue,
    resolve_dispute,
)
from rcea.study.codebook.stages import assign, induce, merge, reconcile

__all__ = [
    "BackendOptions",
    "CodebookFrozenError",
    "CodebookStageError",
    "PromptBlindingGuard",
    "StageReport",
    "assign",
    "cycle_status",
    "decide_extension",
    "edit_draft",
    "exclude_trajectory",
    "excluded_trajectories",
    "export_partition",
    "final_labels",
    "freeze_codebooks",
    "get_draft",
    "induce",
    "list_extensions",
    "load_strategy_fn",
    "make_backend",
    "merge",
    "reconcile",
    "request_extensions",
    "researcher_queue",
    "resolve_dispute",
    "study_guard",
]
