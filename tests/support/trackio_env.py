"""trackio, for the test that reads the ``rcea/`` numbers back from trackio's own storage:
``make install`` puts it in ``.trackio-site`` (--no-deps: trackio 0.43 pins ``pillow<13``,
yet it imports and logs on the project's Pillow 13; ``rcea train run`` appends the folder to
``sys.path`` itself, :mod:`rcea.pipeline.training.reporting`). ``require_trackio`` returns the
folder, or skips with the reason — and fails instead where the run requires trackio (``CI``
or ``RCEA_REQUIRE_TRACKIO=1``)."""

from __future__ import annotations

from pathlib import Path

from rcea.pipeline.training.reporting import TRACKIO_SITE
from tests.support.helpers import service_missing


def require_trackio() -> Path:
    """:data:`TRACKIO_SITE`, where trackio is installed."""
    if not (TRACKIO_SITE / "trackio").is_dir():
        service_missing("trackio", f"no trackio in {TRACKIO_SITE}; `make install` puts it there")
    return TRACKIO_SITE
