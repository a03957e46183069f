"""What every benchmark shares: its one JSON line of figures, and ``--json-out``.

Each ``bench_*.py`` ends by printing one JSON line of figures (``make test`` reads it in
smoke mode). ``--json-out PATH`` also writes the figures there, wrapped with when and
under what load they were measured; ``make bench`` writes ``benchmarks/results/<name>.json``
and ``python -m benchmarks.figures`` renders the table of ``docs/benchmarks.md`` from
those files.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

#: the kind of a result measured by a run of the script (not carried over by hand)
MEASURED = "make bench"


def add_json_out(ap: argparse.ArgumentParser) -> None:
    ap.add_argument(
        "--json-out",
        type=Path,
        default=None,
        help="also write the figures (with date and load) to this JSON file",
    )


def result(figures: dict[str, Any]) -> dict[str, Any]:
    """The stored result: the figures plus when, where and under what load."""
    try:
        load = round(os.getloadavg()[0], 1)
    except OSError:  # not on every platform
        load = None
    return {
        "bench": figures["bench"],
        "source": MEASURED,
        "measured_at": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "load": load,
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "figures": figures,
    }


def emit(figures: dict[str, Any], json_out: Path | None = None) -> None:
    """Print the figures as the script's last line; with ``json_out`` also store them."""
    if json_out is not None:
        json_out.parent.mkdir(parents=True, exist_ok=True)
        tmp = json_out.with_name(json_out.name + ".tmp")
        tmp.write_text(json.dumps(result(figures), indent=1) + "\n", encoding="utf-8")
        tmp.replace(json_out)
    print(json.dumps(figures))
