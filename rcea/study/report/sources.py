"""Where a finished report comes from when it is not built from the store: a published
bundle (verified first, so every number read from it was re-derived from the bundle) or a
report JSON written by ``rcea report build --out``. ``rcea report tables|figures`` and the
Python API (:mod:`rcea.api`) read reports through here."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rcea.study.report.verify import BundleError, verify_bundle

REPORT_FILE = "report.json"
INPUTS_FILE = "inputs.json"


class ReportSourceError(ValueError):
    """A path that holds no readable report, or a bundle that does not verify."""


def is_bundle(path: Path) -> bool:
    return path.is_dir() and (path / "hashes.json").is_file()


def report_from_path(path: Path, *, verify: bool = True) -> dict[str, Any]:
    """The report of ``path``: a bundle directory (``verify``: only when ``rcea report
    verify`` would pass on it) or a report JSON file."""
    if path.is_dir():
        if not is_bundle(path):
            raise ReportSourceError(f"{path}: a directory but not a bundle (no hashes.json)")
        if verify:
            try:
                res = verify_bundle(path)
            except BundleError as exc:
                raise ReportSourceError(str(exc)) from exc
            if not res.ok:
                raise ReportSourceError(
                    f"{path}: the bundle does not verify ({len(res.mismatches)} mismatch(es), "
                    f"first: {res.mismatches[0]}); run `rcea report verify {path}`"
                )
        return _read_report(path / REPORT_FILE)
    if path.is_file():
        return _read_report(path)
    raise ReportSourceError(f"{path}: no such file or directory")


def bundle_rows(bundle: Path) -> list[dict[str, Any]]:
    """Every trajectory row a bundle carries (``inputs.json``), as dicts."""
    data = _read_json(bundle / INPUTS_FILE)
    try:
        rows = data["inputs"]["rows"]
        columns, values = rows["columns"], rows["values"]
    except (KeyError, TypeError) as exc:
        raise ReportSourceError(f"{bundle / INPUTS_FILE}: no inputs.rows table") from exc
    return [dict(zip(columns, v, strict=True)) for v in values]


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ReportSourceError(f"{path}: {exc.strerror or exc}") from exc
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ReportSourceError(f"{path}: not a JSON file ({exc})") from exc


def _read_report(path: Path) -> dict[str, Any]:
    data = _read_json(path)
    if not isinstance(data, dict) or "quantities" not in data or "schema_version" not in data:
        raise ReportSourceError(
            f"{path}: not an RCEA report (no quantities/schema_version): pass a bundle "
            "directory, a file from `rcea report build --out`, or a study name"
        )
    return data
