"""TRL ``report_to`` integrations that need more than ``.venv``: trackio.

trackio 0.43 pins ``pillow<13`` while the project runs on Pillow 13 (on which trackio imports
and logs fine), so it is not in the ``train`` extra: ``make install`` puts it, with the
runtime dependencies ``.venv`` lacks, in the checkout's ``.trackio-site`` (``pip install
--no-deps --target``). :func:`ensure_report_to` makes it importable before the trainer
builds its reporting callbacks — Transformers looks trackio up with ``find_spec`` — and
turns a missing trackio into a :class:`ConfigError` before any model is loaded
(docs/training-live.md#trackio).
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Sequence
from pathlib import Path

from rcea.pipeline.training.config import ConfigError

#: where ``make install`` puts trackio (the checkout of an editable install)
TRACKIO_SITE = Path(__file__).resolve().parents[3] / ".trackio-site"
#: the trackio project ``rcea train run`` logs to (TrainingArguments' ``project``)
TRACKIO_PROJECT = "rcea"


def trackio_importable() -> bool:
    """True when trackio can be imported, after appending :data:`TRACKIO_SITE` to
    ``sys.path`` if trackio is not installed in the environment but is there."""
    if importlib.util.find_spec("trackio") is None:
        if not (TRACKIO_SITE / "trackio").is_dir():
            return False
        if str(TRACKIO_SITE) not in sys.path:
            sys.path.append(str(TRACKIO_SITE))  # appended: the environment's packages win
        importlib.invalidate_caches()
        if importlib.util.find_spec("trackio") is None:
            return False
    _give_trl_trackio()
    return True


def _give_trl_trackio() -> None:
    """TRL's modules import trackio when they load (``if is_trackio_available(): import
    trackio``, e.g. ``trl.extras.profiling``, whose timings every step logs): those loaded
    before :data:`TRACKIO_SITE` was on ``sys.path`` get the module now, as they would have."""
    needy = [
        mod
        for name, mod in list(sys.modules.items())
        if (name == "trl" or name.startswith("trl."))
        and mod is not None
        and "is_trackio_available" in vars(mod)
        and "trackio" not in vars(mod)
    ]
    if needy:
        import trackio  # optional, from .trackio-site: only when report_to names it

        for mod in needy:
            mod.trackio = trackio  # type: ignore[attr-defined]  # trackio is injected into the TRL modules that import it lazily


def ensure_report_to(report_to: Sequence[str], source: str | None = None) -> None:
    """Make every integration in ``report_to`` that needs it importable, or raise
    :class:`ConfigError` naming the ``[training] report_to`` entry and the fix."""
    if "trackio" in report_to and not trackio_importable():
        where = f"{source}: " if source else ""
        raise ConfigError(
            f"{where}[training] report_to: trackio is not installed: `make install` puts it "
            f"in {TRACKIO_SITE} (pip install --no-deps --target; a plain `pip install "
            "trackio` would downgrade Pillow below 13)"
        )
