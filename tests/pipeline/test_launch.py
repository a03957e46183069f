"""rcea.pipeline.launch: a launched rank destroys its process group before the interpreter's
teardown (gloo's threads otherwise can abort a rank whose work was done)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

import rcea.app.cli as cli
from rcea.pipeline import launch
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
    """On success and on failure (typer exits through SystemExit either way); only after
    a success does it wait for the other ranks first (after a failure they may never
    come)."""
    calls: list[bool] = []

    def close(*, synchronize: bool = False) -> bool:
        calls.append(synchronize)
        return False

    monkeypatch.setattr(cli, "close_process_group", close)  # where main looks it up
    for argv, code in ((["rcea", "--help"], 0), (["rcea", "no-such-command"], 2)):
        monkeypatch.setattr(sys, "argv", argv)
        with pytest.raises(SystemExit) as exc:
            cli.main()
        assert exc.value.code == code
    assert calls == [True, False]


def test_the_close_at_exit_is_registered_once(monkeypatch: pytest.MonkeyPatch) -> None:
    registered: list[object] = []
    monkeypatch.setattr(launch, "_registered", False)
    monkeypatch.setattr(launch.atexit, "register", registered.append)
    launch.close_process_group_at_exit()
    launch.close_process_group_at_exit()
    assert registered == [launch.close_process_group]


RANK = """
import json, sys, time
import torch.distributed as dist
from rcea.pipeline import launch
rank, port, late = int(sys.argv[1]), sys.argv[2], float(sys.argv[3])
dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
time.sleep(late)  # this rank finishes its command later
entered = time.time()
closed = launch.close_process_group(synchronize=True)
print(json.dumps({"entered": entered, "returned": time.time(), "closed": closed}))
"""


def test_a_synchronized_close_waits_for_every_rank_before_destroying() -> None:
    """Rank 0 finishes first; with ``synchronize`` it destroys its group only once rank 1
    has reached the end of its command too (a rank that tore its pairs down while its
    peer still used them made the peer abort)."""
    pytest.importorskip("torch.distributed")
    port = str(free_port())
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", RANK, str(rank), port, str(late)],
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, "OMP_NUM_THREADS": "1"},
        )
        for rank, late in ((0, 0.0), (1, 2.0))
    ]
    outs = [p.communicate(timeout=120)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    first, late = (json.loads(o.strip().splitlines()[-1]) for o in outs)
    assert first["closed"] and late["closed"]
    assert first["returned"] >= late["entered"] - 0.05  # it waited for the late rank
    assert first["returned"] - first["entered"] > 1.0
