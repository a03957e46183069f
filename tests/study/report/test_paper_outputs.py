"""``rcea report tables|figures`` and the Python API on a real published bundle: the LaTeX
compiles with Debian's pdflatex (booktabs), the CSV holds every labelled number, each
figure is a valid file of its format and the same bundle gives the same bytes, a bundle
that does not verify is refused, and the docs page's notebook block runs as written."""

from __future__ import annotations

import csv
import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from rcea import api
from rcea.app.cli import app as cli
from tests.support.helpers import service_missing
from tests.support.report_study import JUDGE, draw, final_gate, judge, make_report_study, publish

ROOT = Path(__file__).resolve().parents[3]
MAGIC = {"png": b"\x89PNG\r\n\x1a\n", "pdf": b"%PDF-", "svg": b"<?xml"}
FIGURES = {
    "training_entropy",
    "paired_ratio",
    "covariance_scatter",
    "retention",
    "accuracy_passk",
    "passk_curve",
    "entropy_by_outcome",
    "mode_entropy_split",  # item 15
    "entropy_law",  # item 18 (item 16's needs grouped transitions: test_paper_items.py)
}


@pytest.fixture
def bundle(engine, tmp_path: Path) -> Path:  # type: ignore[no-untyped-def]
    if "sqlite" not in str(engine.url):
        pytest.skip("one store is enough: tables and figures read the bundle")
    make_report_study(engine, tmp_path)
    judge(engine, calibrated_hash=JUDGE)
    final_gate(engine, draw(engine, tmp_path), passing=True)
    return Path(publish(engine, tmp_path / "out")["bundle"])


def _run(*args: str) -> Any:
    res = CliRunner().invoke(cli, [*args, "--json"])
    return res.exit_code, json.loads(res.output)


def test_tables_figures_and_api_from_a_bundle(engine, bundle: Path, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    report = json.loads((bundle / "report.json").read_text())
    out = tmp_path / "paper"

    code, res = _run("report", "tables", str(bundle), "--format", "csv", "--out", str(out))
    assert code == 0 and res["ok"] and res["study"] == "rep", res
    with open(res["files"][0], newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == len(report["quantities"])
    assert {r["label"] for r in rows} == {q["label"] for q in report["quantities"]}

    code, res = _run("report", "tables", str(bundle), "--format", "latex", "--out", str(out))
    assert code == 0, res
    tex = Path(res["files"][0])
    assert tex.name == "rcea-tables.tex"
    _compile(tex, tmp_path)

    drawn: dict[str, dict[str, bytes]] = {}
    for fmt in ("pdf", "svg", "png"):
        code, res = _run("report", "figures", str(bundle), "--format", fmt, "--out", str(out))
        assert code == 0, res
        files = {Path(f).stem: Path(f).read_bytes() for f in res["files"]}
        assert set(files) == FIGURES
        assert all(data.startswith(MAGIC[fmt]) for data in files.values()), fmt
        drawn[fmt] = files
    # reproducible from the bundle alone: the same bundle gives the same bytes
    code, res = _run("report", "figures", str(bundle), "--format", "pdf", "--out", str(out / "2"))
    assert {Path(f).stem: Path(f).read_bytes() for f in res["files"]} == drawn["pdf"]
    # the bundle's own PNGs are the same figures
    for name, data in drawn["png"].items():
        assert (bundle / "figures" / f"{name}.png").read_bytes() == data

    rep = api.open_bundle(bundle)
    assert rep.study == "rep" and len(rep.checkpoints) == len(report["checkpoints"])
    assert len(rep.estimates) == len(report["quantities"])
    assert rep.estimates["value"].tolist() == [q["value"] for q in report["quantities"]]
    assert set(rep.gates["audit"]) == {"pair", "validity calibration", "validity accepted set"}
    assert rep.attempts["outcome"].tolist() == [a["outcome"] for a in report["attempts"]]
    assert len(rep.trajectories) == 12 * 8 * 16
    assert rep.passk["k"].max() == 8

    # the same study read from the store gives the same labelled numbers
    live = api.open_study("rep", store_url=engine.url.render_as_string(hide_password=False))
    assert live.estimates[["name", "run", "step", "label"]].equals(
        rep.estimates[["name", "run", "step", "label"]]
    )
    assert len(live.trajectories) == len(rep.trajectories)

    # the docs page's notebook block, as written
    page = (ROOT / "docs" / "paper-outputs.md").read_text()
    (block,) = re.findall(r"```python\n(.*?)```", page, flags=re.S)
    exec(compile(block, "docs/paper-outputs.md", "exec"), {"BUNDLE": str(bundle)})


def test_a_bundle_that_does_not_verify_is_refused(bundle: Path, tmp_path: Path) -> None:
    bad = tmp_path / "bad"
    shutil.copytree(bundle, bad)
    report = json.loads((bad / "report.json").read_text())
    report["quantities"][0]["value"] = 0.123
    (bad / "report.json").write_text(json.dumps(report))
    code, res = _run("report", "tables", str(bad), "--format", "latex", "--out", str(tmp_path))
    assert code == 1 and res["ok"] is False
    assert "does not verify" in res["error"] and "rcea report verify" in res["error"]
    assert not (tmp_path / "rcea-tables.tex").exists()
    with pytest.raises(api.ReportSourceError, match="does not verify"):
        api.open_bundle(bad)
    # a report file carries no trajectories, and says where to find them
    rep = api.open_report(bundle / "report.json")
    with pytest.raises(api.ReportSourceError, match="open the bundle or the study"):
        rep.trajectories  # noqa: B018


def test_a_missing_source_names_the_path(tmp_path: Path) -> None:
    code, res = _run("report", "figures", "no/such/bundle", "--out", str(tmp_path))
    assert code == 1 and res["error"] == "no/such/bundle: no such file or directory"
    code, res = _run("report", "figures", "x", "--format", "gif", "--out", str(tmp_path))
    assert code == 1 and "use pdf, svg or png" in res["error"]


def _compile(tex: Path, tmp_path: Path) -> None:
    pdflatex = shutil.which("pdflatex")
    if pdflatex is None:
        service_missing("latex", "pdflatex missing: `make install` installs Debian's texlive")
        return
    doc = tmp_path / "doc.tex"
    doc.write_text(
        "\\documentclass{article}\n\\usepackage{booktabs,graphicx}\n"
        f"\\begin{{document}}\n\\input{{{tex}}}\n\\end{{document}}\n"
    )
    res = subprocess.run(
        [pdflatex, "-interaction=nonstopmode", "-halt-on-error", doc.name],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 0, res.stdout[-2000:]
    assert (tmp_path / "doc.pdf").read_bytes().startswith(b"%PDF-")
