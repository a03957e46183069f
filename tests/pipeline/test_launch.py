"""pipeline.launch: a launched rank destroys its process group before the interpreter's
teardown (gloo's threads otherwise can abort a rank whose work was done)."""

from __future__ import annotations

import sys

import pytest

import app.cli as cli
from pipeline import launch
from tests.support.helpers import free_port


def test_world_size_reads_the_launchers_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    assert launch.world_size() == 1
    monkeypatch.setenv("WORLD_SIZE", "")
    assert launch.world_size() == 1
    monkeypatch.setenv("WORLD_SIZE", "4")
    assert launch.world_size() == 4


def test_close_destroys_an_initialised_group_once() -> None:
    dist = pytest.importorskip("torch.distributed")
    assert not dist.is_initialized()
    assert launch.close_process_group() is False  # nothing to close
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0, world_size=1
    )
    try:
        assert dist.is_initialized()
        assert launch.close_process_group() is True
        assert not dist.is_initialized()
        assert launch.close_process_group() is False
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def test_the_rcea_entry_point_closes_the_group_after_every_command(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """On success and on failure (typer exits through SystemExit either way)."""
    calls: list[int] = []
    # patched where the entry point looks it up
    monkeypatch.setattr(cli, "close_process_group", lambda: calls.append(1) or False)
    for argv, code in ((["rcea", "--help"], 0), (["rcea", "no-such-command"], 2)):
        monkeypatch.setattr(sys, "argv", argv)
        with pytest.raises(SystemExit) as exc:
            cli.main()
        assert exc.value.code == code
    assert calls == [1, 1]


def test_the_close_at_exit_is_registered_once(monkeypatch: pytest.MonkeyPatch) -> None:
    registered: list[object] = []
    monkeypatch.setattr(launch, "_registered", False)
    monkeypatch.setattr(launch.atexit, "register", registered.append)
    launch.close_process_group_at_exit()
    launch.close_process_group_at_exit()
    assert registered == [launch.close_process_group]
