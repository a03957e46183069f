"""What a process started by ``accelerate launch`` / ``torchrun`` needs to know and do.

``WORLD_SIZE`` says how many processes the launch has. Whoever initialises
torch.distributed (accelerate for sharded probing, Transformers' ``Trainer`` for training)
must also destroy its process group before the interpreter shuts down: gloo's worker
threads otherwise outlive it and a rank that exits without the call can die with
``terminate called without an active exception`` (SIGABRT), failing the whole launch
although its work was done (pytorch/pytorch#190489). :func:`close_process_group` does
that; the ``rcea`` entry point calls it after every command and :func:`current_shard`
registers it at exit for callers of the Python API.

Destroying alone was not enough: a rank that finished first tore its pairs down while
its peer was still in its last collective or its own teardown, and the peer aborted the
same way (seen on CPU/gloo in the test suite, about one launch in a few dozen). After a
command that succeeded on every rank, the entry point therefore waits for all ranks at a
barrier first (``synchronize=True``), so that no rank destroys its group while another
still uses it; after a failure it does not wait (the other ranks may never arrive, and
the launcher ends them anyway).
"""

from __future__ import annotations

import atexit
import logging
import os
import sys
from datetime import timedelta

log = logging.getLogger("rcea.launch")


def world_size() -> int:
    """Processes of this launch (``WORLD_SIZE``, set by accelerate launch / torchrun)."""
    return int(os.environ.get("WORLD_SIZE", "1") or 1)


#: How long a rank waits at the closing barrier for the others (gloo's monitored barrier
#: names the ranks that did not arrive; the group is destroyed either way).
CLOSE_BARRIER_TIMEOUT_S = 300.0


def close_process_group(*, synchronize: bool = False) -> bool:
    """Destroy torch.distributed's default process group if this process has one.
    With ``synchronize`` every rank first meets at a barrier (a collective: only when every
    rank reaches this call, i.e. after a command that succeeded everywhere); without it
    the call is local, so a rank can make it whatever the others are doing. Returns
    whether there was a group. Never imports torch itself."""
    dist = sys.modules.get("torch.distributed")
    if dist is None or not dist.is_available() or not dist.is_initialized():
        return False
    if synchronize and dist.get_world_size() > 1:
        try:
            if dist.get_backend() == "gloo":
                dist.monitored_barrier(timeout=timedelta(seconds=CLOSE_BARRIER_TIMEOUT_S))
            else:
                dist.barrier()
        except Exception:  # noqa: BLE001 - a rank that never came: destroy all the same
            log.warning("not every rank reached the end of the command", exc_info=True)
    dist.destroy_process_group()
    return True


_registered = False


def close_process_group_at_exit() -> None:
    """Register :func:`close_process_group` to run at interpreter exit (once)."""
    global _registered
    if not _registered:
        atexit.register(close_process_group)
        _registered = True
