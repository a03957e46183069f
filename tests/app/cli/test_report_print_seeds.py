"""`rcea report build`'s table says "single seed" in words when no (run, model, step)
has two training seeds, and lists the across-seed rows when one has (estimators item 17)."""

from __future__ import annotations

from pathlib import Path

import pytest

from rcea.app.cli.report_cmd import _print_report
from tests.study.report.test_report_replicates import _both, _study


def test_one_seed_is_said_in_words(
    engine, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:  # type: ignore[no-untyped-def]
    _study(engine, tmp_path, seeds=(7,))
    report, _bundle = _both(engine)
    _print_report({**report, "generated_at": "now"})  # _both drops the time
    out = capsys.readouterr().out
    assert "single seed: no (run, model, step) has two or more training seeds" in out
    assert "across_seed_mean" not in out


def test_several_seeds_list_their_aggregate(
    engine, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:  # type: ignore[no-untyped-def]
    _study(engine, tmp_path)
    report, _bundle = _both(engine)
    _print_report({**report, "generated_at": "now"})  # _both drops the time
    out = capsys.readouterr().out
    assert "single seed:" not in out
    assert "across_seed_mean" in out and "across_seed_sd" in out
