"""Pydantic models of the JSON replies the codebook prompts ask for."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class _Reply(BaseModel):
    model_config = ConfigDict(extra="ignore")


class InducedMode(_Reply):
    name: str = Field(min_length=1)
    criterion: str = ""
    examples: list[str] = Field(default_factory=list)


class InduceReply(_Reply):
    modes: list[InducedMode]


class MergedMode(_Reply):
    name: str = Field(min_length=1)
    criterion: str = ""
    merged_from: list[str] = Field(default_factory=list)


class MergeReply(_Reply):
    modes: list[MergedMode] = Field(min_length=1)


class ItemAssignment(_Reply):
    item: str
    mode: str
    confidence: float = Field(ge=0.0, le=1.0)
    new_name: str | None = None
    new_criterion: str | None = None
    rationale: str | None = None


class AssignReply(_Reply):
    assignments: list[ItemAssignment]
