"""The ``rcea`` command line (Typer). One module per command group, imported only when
one of its commands runs (:class:`LazyGroup`), so that ``rcea <group> …`` loads that
group's domain modules and no other: every command module imports what it needs at its
top, and starting ``rcea`` stays fast."""

from __future__ import annotations

import functools
import importlib
import inspect
import os
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import NoReturn

import click
import typer
from typer.core import TyperGroup
from typer.models import ParameterInfo

from rcea.app.cli import exit_codes
from rcea.app.cli.common import emit, service_error
from rcea.pipeline.launch import close_process_group
from rcea.pipeline.safety import PRIVATE_UMASK, install_log_masking

#: top-level command → the module whose ``register(app)`` defines it, in ``--help`` order.
#: ``tests/app/cli/test_cli.py`` checks this table against what each module registers.
COMMANDS: dict[str, str] = {
    "status": "rcea.app.cli.data_cmd",
    "validate": "rcea.app.cli.data_cmd",
    "ingest": "rcea.app.cli.data_cmd",
    "studies": "rcea.app.cli.data_cmd",
    "summary": "rcea.app.cli.data_cmd",
    "config": "rcea.app.cli.data_cmd",
    "db": "rcea.app.cli.data_cmd",
    "import": "rcea.app.cli.import_cmd",
    "export": "rcea.app.cli.import_cmd",
    "serve": "rcea.app.cli.serve_cmd",
    "demo": "rcea.app.cli.demo_cmd",
    "view": "rcea.app.cli.view_cmd",
    "stats": "rcea.app.cli.stats_cmd",
    "audit": "rcea.app.cli.audit_cmd",
    "labelstudio": "rcea.app.cli.labelstudio_cmd",
    "train": "rcea.app.cli.train_cmd",
    "codebook": "rcea.app.cli.codebook_cmd",
    "probe": "rcea.app.cli.probe_cmd",
    "judge": "rcea.app.cli.judge_cmd",
    "report": "rcea.app.cli.report_cmd",
}


@functools.cache
def module_commands(module: str) -> click.Group:
    """The click group of everything ``module.register`` adds (imported on first use)."""
    sub = typer.Typer(rich_markup_mode=None)
    importlib.import_module(module).register(sub)
    _readers_decide(sub)
    return typer.main.get_group(sub)  # type: ignore[return-value]  # typer re-exports click's Group under its own vendored types


def _readers_decide(group: typer.Typer) -> None:
    """Leave whether a path can be read to the command's own reader. Typer would refuse an
    unreadable file itself, as a usage error (three lines, exit 2, no JSON under
    ``--json``); the hardened reader (``rcea/audits/inputs.py``) names it in one line,
    ``FILE: cannot read: permission denied``, exit 1, ``{"ok": false, …}`` under
    ``--json`` — and in a verl directory it names the step file, which typer never sees."""
    for command in group.registered_commands:
        if command.callback is None:
            continue
        for parameter in inspect.signature(command.callback).parameters.values():
            if isinstance(parameter.default, ParameterInfo):
                parameter.default.readable = False
    for sub in group.registered_groups:
        if sub.typer_instance is not None:
            _readers_decide(sub.typer_instance)


class LazyGroup(TyperGroup):
    """The root group: its commands come from :data:`COMMANDS`, each module imported when
    one of its commands is looked up (``--help`` looks them all up)."""

    def list_commands(self, ctx: click.Context) -> list[str]:  # type: ignore[override]  # typer re-exports click's Group under its own vendored types
        return list(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:  # type: ignore[override]  # typer re-exports click's Group under its own vendored types
        module = COMMANDS.get(cmd_name)
        return None if module is None else module_commands(module).commands.get(cmd_name)


app = typer.Typer(
    rich_markup_mode=None,
    name="rcea",
    cls=LazyGroup,
    help="RCEA Audit: reward-conditioned entropy studies with blinded human audits.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.callback()
def _root() -> None:
    """RCEA Audit: reward-conditioned entropy studies with blinded human audits."""


def crash_log(exc: BaseException) -> Path | None:
    """Write ``exc``'s traceback to a new owner-only file ``rcea-error-TIME-….log`` in the
    temporary directory (``$TMPDIR``, else /tmp) and return its path; None when nothing
    could be written."""
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
    try:
        fd, name = tempfile.mkstemp(prefix=f"rcea-error-{stamp}-", suffix=".log")  # 0600
        path = Path(name)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(f"rcea {' '.join(sys.argv[1:])}\n")
            fh.write("".join(traceback.format_exception(exc)))
    except OSError:
        return None
    return path


def _one_line(message: str, code: int, **extra: str | None) -> NoReturn:
    """``error: …`` on stderr, or ``{"ok": false, "error": …}`` on stdout under ``--json``."""
    out = {"ok": False, "error": message, **extra}
    emit(out, "--json" in sys.argv[1:], lambda: typer.echo(f"error: {message}", err=True))
    sys.exit(code)


def _internal_error(exc: Exception) -> NoReturn:
    """An error no command expected: one line on stderr naming the log that holds the
    traceback (``{"ok": false, …}`` on stdout under ``--json``), exit ``ERROR``."""
    log = crash_log(exc)
    what = (str(exc).splitlines() or [""])[0][:200]
    where = f"the traceback is in {log}" if log else "no log could be written"
    message = (
        f"internal error ({type(exc).__name__}{': ' + what if what else ''}); {where}; "
        "please report it with that file"
    )
    _one_line(message, exit_codes.ERROR, log=None if log is None else str(log))


def main() -> None:
    """The ``rcea`` entry point: owner-only files (umask 077, so the store, caches,
    artifacts, bundles and logs are 0600/0700), URLs in log records masked, an
    unreachable external service reported as one line (exit 3), and any other error no
    command expected as one line naming the log of its traceback (exit 1)."""

    os.umask(PRIVATE_UMASK)
    install_log_masking()
    succeeded = False
    try:
        app()
    except SystemExit as done:  # typer ends every command with one
        succeeded = done.code in (0, None)
        raise
    except Exception as exc:  # noqa: BLE001 - the last resort: one line, never a traceback
        line = service_error(exc)
        if line is not None:
            _one_line(line, exit_codes.SERVICE_UNREACHABLE)
        if isinstance(exc, PermissionError):
            # the OS refused a path (a data dir or file another user owns): the user's fix,
            # not a bug of ours, so no traceback log
            _one_line(
                f"{exc.filename or 'a path'}: {exc.strerror or 'permission denied'}: "
                "rcea needs a data dir and files it may read and write as this user",
                exit_codes.ERROR,
            )
        _internal_error(exc)
    finally:
        # a rank of `accelerate launch` must not leave its process group to the
        # interpreter's teardown, nor tear it down while another rank still uses it
        # (SIGABRT in gloo's threads: rcea/pipeline/launch.py)
        close_process_group(synchronize=succeeded)
