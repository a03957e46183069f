"""RCEA Audit: reward-conditioned entropy allocation studies with blinded human audits.

One namespace for the whole product: ``rcea.audits`` (pure statistics), ``rcea.annotation``
(Label Studio), ``rcea.pipeline`` (producers), ``rcea.study`` (every rule on the store) and
``rcea.app`` (the shell: CLI, API, view, demo), layered in that order
(docs/development.md).

``__version__`` has one source, ``[project] version`` in pyproject.toml: the installed
distribution's metadata, or for a checkout run without installing, the file itself."""

from __future__ import annotations

import tomllib
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

DISTRIBUTION = "rcea-audit"


def _version() -> str:
    try:
        return version(DISTRIBUTION)
    except PackageNotFoundError:
        pyproject = Path(__file__).resolve().parents[1] / "pyproject.toml"
        with pyproject.open("rb") as f:
            return str(tomllib.load(f)["project"]["version"])


__version__ = _version()

__all__ = ["DISTRIBUTION", "__version__"]
