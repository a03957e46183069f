"""Triton, for the tests of the GPU path's fold kernels without a GPU: ``make install`` puts
it in ``.triton-site`` (--no-deps, its own folder: ≈ 1 GB the CPU-only environment does not
otherwise need; CUDA builds of torch ship their own). ``import_triton_interpreted`` puts that
folder on ``sys.path`` and imports Triton in interpreter mode (``TRITON_INTERPRET=1`` set
before it is first imported: Triton wraps its own library functions then), so that its kernels run
on CPU tensors with the CPU torch; or skips with the reason — and fails instead where the
run requires Triton (``CI`` or ``RCEA_REQUIRE_TRITON=1``)."""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path
from types import ModuleType

import pytest

from tests.support.helpers import service_missing

TRITON_SITE = Path(__file__).resolve().parents[2] / ".triton-site"


def import_triton_interpreted() -> ModuleType:
    """``triton``, imported (once per process) with its interpreter on; skips on a machine
    with CUDA."""
    torch = pytest.importorskip("torch")
    if "triton" not in sys.modules and torch.cuda.is_available():
        # the interpreter would be Triton's mode for the whole process, the gpu-marked
        # tests' compiled kernels included
        pytest.skip("a CUDA device is present: the gpu-marked tests run the compiled kernels")
    if "triton" not in sys.modules:
        if not (TRITON_SITE / "triton").is_dir():
            service_missing("triton", f"no triton in {TRITON_SITE}; `make install` puts it there")
        if str(TRITON_SITE) not in sys.path:
            sys.path.append(str(TRITON_SITE))  # appended: the project's own packages win
        # left set for the process: Triton reads it again when it first launches a kernel
        # (its gluon modules load then); subprocesses of tests lack .triton-site anyway
        os.environ["TRITON_INTERPRET"] = "1"
        importlib.import_module("triton.language")
    from rcea.pipeline.probe.triton_folds import interpreter_active

    if not interpreter_active():
        service_missing("triton", "triton was imported before, without its interpreter")
    return sys.modules["triton"]
