"""The ``rcea`` command line (Typer). One module per command group."""

from __future__ import annotations

import typer

from app.cli import (
    audit_cmd,
    codebook_cmd,
    data_cmd,
    demo_cmd,
    judge_cmd,
    labelstudio_cmd,
    probe_cmd,
    report_cmd,
    serve_cmd,
    stats_cmd,
    train_cmd,
    view_cmd,
)

app = typer.Typer(
    name="rcea",
    help="RCEA Audit: reward-conditioned entropy studies with blinded human audits.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
data_cmd.register(app)
serve_cmd.register(app)
demo_cmd.register(app)
view_cmd.register(app)
stats_cmd.register(app)
audit_cmd.register(app)
labelstudio_cmd.register(app)
train_cmd.register(app)
codebook_cmd.register(app)
probe_cmd.register(app)
judge_cmd.register(app)
report_cmd.register(app)


def main() -> None:
    app()
