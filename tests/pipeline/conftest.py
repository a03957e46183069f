"""A tiny base policy built once per test session: the quick demo's tiny-s base
(``rcea train build-base`` with ``rcea.app.demo.config.QUICK``'s recipe: 1,200 warm-start steps,
seed 0, one thread), good enough for GRPO to be in the entropy-collapse regime that the
KL-Cov check needs. It is the session's demo cache entry of that recipe
(:mod:`rcea.app.demo.cache`), so the demo tests and these share one warm start, whichever
runs first."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def tiny_base(tmp_path_factory: pytest.TempPathFactory, demo_cache_dir: Path) -> Path:
    pytest.importorskip("trl")
    from rcea.app.demo import cache
    from rcea.app.demo.config import QUICK, TINY_S
    from rcea.app.demo.study import base_recipe

    work = tmp_path_factory.mktemp("base")
    out = work / "tiny"
    recipe = base_recipe(QUICK, TINY_S)
    with cache.entries([("base", recipe)], root=demo_cache_dir) as (entry,):
        assert entry is not None
        if not entry.fetch(out, work):
            exe = Path(sys.executable).parent / "rcea"
            args = [str(exe), "train", "build-base", "--out", str(out), *recipe["build_base"]]
            res = subprocess.run(
                [*args, "--force", "--json"], capture_output=True, text=True, timeout=900
            )
            assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
            entry.store(out, work, recipe)
    return out
