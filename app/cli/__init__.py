"""The ``rcea`` command line (Typer). One module per command group."""

from __future__ import annotations

import typer

from app.cli import (
    audit_cmd,
    codebook_cmd,
    data_cmd,
    demo_cmd,
    import_cmd,
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
import_cmd.register(app)
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
    """The ``rcea`` entry point: owner-only files (umask 077, so the store, caches,
    artifacts, bundles and logs are 0600/0700), URLs in log records masked, and an
    unreachable external service reported as one line, never a traceback (exit 3)."""
    import os
    import sys

    from app.cli.common import service_error
    from pipeline.launch import close_process_group
    from pipeline.safety import PRIVATE_UMASK, install_log_masking

    os.umask(PRIVATE_UMASK)
    install_log_masking()
    try:
        app()
    except Exception as exc:  # noqa: BLE001 - re-raised unless it is a service failure
        line = service_error(exc)
        if line is None:
            raise
        typer.echo(f"error: {line}", err=True)
        sys.exit(3)
    finally:
        # a rank of `accelerate launch` must not leave its process group to the
        # interpreter's teardown (SIGABRT in gloo's threads: pipeline/launch.py)
        close_process_group()
