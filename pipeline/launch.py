"""What a process started by ``accelerate launch`` / ``torchrun`` needs to know and do.

``WORLD_SIZE`` says how many processes the launch has. Whoever initialises
torch.distributed (accelerate for sharded probing, Transformers' ``Trainer`` for training)
must also destroy its process group before the interpreter shuts down: gloo's worker
threads otherwise outlive it and a rank that exits without the call can die with
``terminate called without an active exception`` (SIGABRT), failing the whole launch
although its work was done (pytorch/pytorch#190489). :func:`close_process_group` does
that; the ``rcea`` entry point calls it after every command and :func:`current_shard`
registers it at exit for callers of the Python API.
"""

from __future__ import annotations

import atexit
import os
import sys


def world_size() -> int:
    """Processes of this launch (``WORLD_SIZE``, set by accelerate launch / torchrun)."""
    return int(os.environ.get("WORLD_SIZE", "1") or 1)


def close_process_group() -> bool:
    """Destroy torch.distributed's default process group if this process has one (a local
    operation: no collective, so a rank can call it whatever the others are doing).
    Returns whether there was one. Never imports torch itself."""
    dist = sys.modules.get("torch.distributed")
    if dist is None or not dist.is_available() or not dist.is_initialized():
        return False
    dist.destroy_process_group()
    return True


_registered = False


def close_process_group_at_exit() -> None:
    """Register :func:`close_process_group` to run at interpreter exit (once)."""
    global _registered
    if not _registered:
        atexit.register(close_process_group)
        _registered = True
