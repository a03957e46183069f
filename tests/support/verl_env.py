"""verl itself, for the tests that use it as a peer (its rollout dumps, ``core_algos``,
``DataProto``): ``make install`` puts it in ``.verl-site`` (--no-deps: verl pins an older
transformers, yet the modules the tests import run on the project's). ``import_verl``
puts that folder on ``sys.path`` and imports the module, or skips with the reason — and
fails instead where the run requires verl (``CI`` or ``RCEA_REQUIRE_VERL=1``)."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import ModuleType

from tests.support.helpers import service_missing

VERL_SITE = Path(__file__).resolve().parents[2] / ".verl-site"


def import_verl(module: str = "verl") -> ModuleType:
    """``module`` from the installed verl (e.g. ``verl.trainer.ppo.core_algos``)."""
    if not (VERL_SITE / "verl").is_dir():
        service_missing("verl", f"no verl in {VERL_SITE}; `make install` puts it there")
    if str(VERL_SITE) not in sys.path:
        sys.path.append(str(VERL_SITE))  # appended: the project's own packages win
    return importlib.import_module(module)
