"""The process-validity judge: verifier, versioned prompt template, backends, replies.

R = 1 certifies only the final answer; the judge decides whether a verifier-successful
trajectory contains a fatal reasoning error (``valid`` / ``invalid`` / ``unparseable``).
"""

from rcea.pipeline.judge.backends import (
    BACKENDS,
    INVALID,
    UNPARSEABLE,
    VALID,
    JudgeOutcome,
    JudgeReply,
    JudgeSpec,
    OpenAIJudge,
    OracleJudge,
    ValidityFn,
    parse_judge_reply,
)
from rcea.pipeline.judge.prompts import DEFAULT_TEMPLATE, JudgeTemplate, load_template
from rcea.pipeline.judge.verifier import (
    Verification,
    extract_boxed,
    math_equivalent,
    verify_math,
    verify_toy,
)

__all__ = [
    "BACKENDS",
    "DEFAULT_TEMPLATE",
    "INVALID",
    "UNPARSEABLE",
    "VALID",
    "JudgeOutcome",
    "JudgeReply",
    "JudgeSpec",
    "JudgeTemplate",
    "OpenAIJudge",
    "OracleJudge",
    "ValidityFn",
    "Verification",
    "extract_boxed",
    "load_template",
    "math_equivalent",
    "parse_judge_reply",
    "verify_math",
    "verify_toy",
]
