"""An opt-in cache of the demo's expensive, deterministic half — each scale's base policy,
each (scale, objective) training run, each scale's probe output — content-addressed by its
recipe, so that runs with equal recipes build once (the test suite's demo tests share one).

Off unless ``$RCEA_DEMO_CACHE_DIR`` names a directory: ``rcea demo`` then behaves exactly as
without it, except that a step first looks for its recipe there and copies the result
into the work dir instead of building it, and stores what it builds. Nothing is written
outside that directory and the work dir; the user's data dir never holds a cache.

A recipe is a JSON object: for a base, the ``rcea train build-base`` arguments (seed,
warm-start steps, threads, shape); for a run, the base's recipe key, the objective and the
training config (``train.toml``, with the work dir written as ``<work>``); for a probe
output, the probe config likewise and the recipe keys of the base and of every run it
probes. Every key also covers the source of ``rcea/pipeline/`` and the versions of torch,
transformers, TRL, PEFT and accelerate, so a changed trainer never reuses an old result.

Layout: ``DIR/<kind>-<key>/tree/`` (the directory as built, under the work dir it was
built in, recorded in ``meta.json``), ``DIR/<kind>-<key>.lock`` (held while one process
builds or copies; another process with the same recipe waits, then copies). Copying
rewrites the builder's work dir to the new one in the text files (JSON, JSONL, TOML,
Markdown) — ``run.json`` names its base, for instance — so a copy is what a build in
the new work dir writes, paths included (pickled trainer arguments aside, which nothing
reads back).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass
from functools import lru_cache
from importlib import metadata
from pathlib import Path
from typing import Any

from rcea.annotation.file_lock import file_lock

ENV = "RCEA_DEMO_CACHE_DIR"
RELOCATED_SUFFIXES = frozenset({".json", ".jsonl", ".toml", ".md"})
PACKAGES = ("torch", "transformers", "trl", "peft", "accelerate")
PIPELINE = Path(__file__).resolve().parents[2] / "pipeline"


def cache_dir() -> Path | None:
    """The cache directory of ``$RCEA_DEMO_CACHE_DIR``, or None (no caching)."""
    raw = os.environ.get(ENV, "").strip()
    return Path(raw).expanduser() if raw else None


@lru_cache(maxsize=1)
def code_fingerprint() -> str:
    """The hash of ``rcea/pipeline/``'s Python sources and the training packages' versions."""

    h = hashlib.sha256()
    for path in sorted(PIPELINE.rglob("*.py")):
        h.update(str(path.relative_to(PIPELINE)).encode() + b"\0" + path.read_bytes() + b"\0")
    for name in PACKAGES:
        try:
            version = metadata.version(name)
        except metadata.PackageNotFoundError:
            version = "-"
        h.update(f"{name}={version}\0".encode())
    return h.hexdigest()


def recipe_key(kind: str, recipe: dict[str, Any]) -> str:
    """The content address of a recipe (with the code fingerprint)."""
    blob = json.dumps({"kind": kind, "recipe": recipe, "code": code_fingerprint()}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:24]


def relative_to_work(text: str, work: Path) -> str:
    """``text`` with the work dir written as ``<work>`` (recipes do not depend on it)."""
    return text.replace(str(work), "<work>")


@dataclass(frozen=True)
class Entry:
    """One recipe's place in the cache (its lock held by :func:`entries`)."""

    root: Path
    kind: str
    key: str

    @property
    def path(self) -> Path:
        return self.root / f"{self.kind}-{self.key}"

    def exists(self) -> bool:
        return (self.path / "meta.json").exists()

    def fetch(self, dest: Path, work: Path) -> bool:
        """Copy the cached tree to ``dest`` (replacing it) with the builder's work dir
        rewritten to ``work``; False when the recipe is not cached."""
        if not self.exists():
            return False
        meta = json.loads((self.path / "meta.json").read_text(encoding="utf-8"))
        if dest.exists():
            shutil.rmtree(dest)
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copytree(self.path / "tree", dest)
        old = str(meta["work"])
        if old != str(work):
            for f in dest.rglob("*"):
                if f.suffix in RELOCATED_SUFFIXES and f.is_file():
                    text = f.read_text(encoding="utf-8")
                    if old in text:
                        f.write_text(text.replace(old, str(work)), encoding="utf-8")
        return True

    def store(self, src: Path, work: Path, recipe: dict[str, Any]) -> None:
        """Keep a copy of ``src`` (built under ``work``) for this recipe."""
        if self.exists():
            return
        tmp = self.path.with_name(f"{self.path.name}.tmp-{os.getpid()}")
        if tmp.exists():
            shutil.rmtree(tmp)
        shutil.copytree(src, tmp / "tree")
        meta = {"kind": self.kind, "key": self.key, "recipe": recipe, "work": str(work)}
        meta["stored_at"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        (tmp / "meta.json").write_text(json.dumps(meta, indent=2), encoding="utf-8")
        os.replace(tmp, self.path)


@contextlib.contextmanager
def entries(
    items: list[tuple[str, dict[str, Any]]], root: Path | None = None
) -> Iterator[list[Entry | None]]:
    """The cache entries of ``(kind, recipe)`` items in ``root`` (default: the directory
    of ``$RCEA_DEMO_CACHE_DIR``), each locked for the block (in key order, so processes
    never wait on each other in a cycle); Nones without a cache."""
    root = root or cache_dir()
    if root is None:
        yield [None] * len(items)
        return

    root.mkdir(parents=True, exist_ok=True)
    out = [Entry(root, kind, recipe_key(kind, recipe)) for kind, recipe in items]
    with contextlib.ExitStack() as stack:
        for name in sorted({f"{e.kind}-{e.key}" for e in out}):
            stack.enter_context(file_lock(root / f"{name}.lock"))
        yield list(out)
