"""What the view shows, as plain pandas frames and dicts (kept apart from Streamlit so the
reads are testable without it): one module per page (``overview``, ``audit``, ``modes``;
``report`` for the report pages). Every function opens its own session and asks the
``rcea.study`` functions the CLI and the API ask; nothing here queries the store itself
(tests/test_layering.py holds the shell to that).

``settings=None`` means the process settings (``RCEA_*`` environment / ``.env``).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.engine import Engine

from rcea.study.settings import Settings, get_settings
from rcea.study.store import open_store, session_scope
from rcea.study.store.repository import store_stamp

_ENGINES: dict[str, Engine] = {}


def engine(settings: Settings | None = None) -> Engine:
    """One migrated engine per database URL for the life of the process (the view reruns
    its scripts on every interaction; migrating each time would dominate)."""
    settings = settings or get_settings()
    url = settings.resolved_database_url
    if url not in _ENGINES:
        _ENGINES[url] = open_store(settings)
    return _ENGINES[url]


def database_key(settings: Settings | None = None) -> str:
    """The database URL, for cache keys (two stores never share a cached value)."""
    return (settings or get_settings()).resolved_database_url


def version_stamp(study: str | None, settings: Settings | None = None) -> tuple[int, ...]:
    """A cheap stamp that changes whenever anything the view shows of ``study`` may have
    changed (:func:`rcea.study.store.repository.store_stamp`). A measurement replaced in
    place keeps its id, so cached reads also expire after a short TTL."""

    with session_scope(engine(settings)) as s:
        return store_stamp(s, study=study)


def example(t: Any, tid: str) -> dict[str, Any]:
    """One example trajectory with its provenance (this is the researcher's view)."""
    if t is None:
        return {"trajectory_id": tid, "missing": True}
    return {
        "trajectory_id": tid,
        "run": t.run,
        "model": t.model,
        "step": t.step,
        "seed": t.seed,
        "reward": t.reward,
        "text": t.text,
    }
