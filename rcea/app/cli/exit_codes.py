"""Exit statuses of ``rcea`` commands, defined once (docs/trust-model.md "Exit codes").

A script or CI job tells these apart without parsing output; every command that has an
outcome also prints it under ``--json`` (``outcome`` and ``exit_code``)."""

from __future__ import annotations

OK = 0
"""the command did what was asked, and any gate or check it decided passed"""
ERROR = 1
"""an error in the input, the store or the request (the message names it)"""
REFUSED = 2
"""a refusal: `report publish` refuses a scope, `report verify` is not given a bundle,
usage errors (typer/click)"""
SERVICE_UNREACHABLE = 3
"""an external service (PostgreSQL, Label Studio, the LLM endpoint) did not answer;
also `labelstudio status` (a server is down) and `codebook run` (researcher queue)"""
CODEBOOK_RESEARCHER = 3
"""`codebook run`: items wait in the researcher queue or extension requests wait for
review (the same number as ``SERVICE_UNREACHABLE``: an existing contract of that command)"""
CODEBOOK_UNANSWERED = 4
"""`codebook run`: batches got no answer from the endpoint (rerun to retry)"""
FAILED = 5
"""a predeclared check was decided and FAILED: `audit gate --final`, `stats agreement`
at the final stage, `judge calibrate report` and `judge accepted report` when the
frozen acceptance thresholds are not met"""


def outcome_code(passed: bool | None) -> int:
    """``FAILED`` when a decided outcome did not pass, else ``OK`` (undecided: OK)."""
    return FAILED if passed is False else OK
