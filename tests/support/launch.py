"""``rcea`` in subprocesses on CPU, alone or as the ranks of ``accelerate launch`` (the
sharded probe tests): one environment per store, one torch thread per process so that one
and several processes add floats in the same order."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

from rcea.annotation.file_lock import file_lock
from tests.support.helpers import free_port

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
#: One ``accelerate launch`` at a time on this machine (the sharded probe tests and the
#: distributed training test): two launches from two xdist workers at once ended with a
#: rank aborting (SIGABRT), and two launches on two cores only slow each other down.
LAUNCH_LOCK = Path(tempfile.gettempdir()) / "rcea-tests-accelerate-launch.lock"


def cpu_env(db: Path, data_dir: Path) -> dict[str, str]:
    """The environment of an ``rcea`` run on the SQLite store ``db``, no GPU."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RCEA_")}
    return {
        **env,
        "RCEA_DATABASE_URL": f"sqlite:///{db}",
        "RCEA_DATA_DIR": str(data_dir),
        "OMP_NUM_THREADS": "1",  # one torch thread per process: the same float order
        "PYTHONPATH": str(ROOT),
        "CUDA_VISIBLE_DEVICES": "",
    }


def run_rcea(
    args: list[str], env: dict[str, str], processes: int = 1, timeout: float = 600
) -> subprocess.CompletedProcess[str]:
    """``rcea ARGS`` in one process, or under ``accelerate launch`` with ``processes``
    ranks; asserts it exits 0."""
    if processes == 1:
        cmd = [str(BIN / "rcea"), *args]
    else:
        cmd = [
            str(BIN / "accelerate"), "launch", "--multi_gpu",
            "--num_processes", str(processes), "--main_process_port", str(free_port()),
            str(BIN / "rcea"), *args,
        ]  # fmt: skip
    if processes == 1:
        res = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    else:
        with file_lock(LAUNCH_LOCK):
            res = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    assert res.returncode == 0, res.stderr[-4000:]
    return res
