"""``rcea report verify BUNDLE``: every published number re-derived from the bundle alone.

The study is the one of ``test_report_publish`` (real gate: drawn pairs, recorded labels,
``gate_status``, ``record_final_gate``). Round trip publish → verify passes; editing one
number, one label, one draw, one hash or one row in the bundle makes verify fail and name
it; verify runs from an installed wheel in a fresh virtual environment with no store.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import venv
import zipfile
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from rcea import __version__
from rcea.app.cli import app as cli
from rcea.study.report.schema import StudyReport
from rcea.study.report.verify import verify_bundle
from tests.support.report_study import JUDGE, draw, final_gate, judge, make_report_study, publish

ROOT = Path(__file__).resolve().parents[3]


def published(engine, tmp_path: Path, **kw: Any) -> Path:  # type: ignore[no-untyped-def]
    make_report_study(engine, tmp_path)
    judge(engine, calibrated_hash=JUDGE)
    final_gate(engine, draw(engine, tmp_path), passing=True)
    return Path(publish(engine, tmp_path / "out", **kw)["bundle"])


def tampered(bundle: Path, tmp_path: Path, name: str, file: str, edit: Any) -> Path:
    """A copy of ``bundle`` with ``edit`` applied to the JSON of ``file``."""
    out = tmp_path / name
    shutil.copytree(bundle, out)
    data = json.loads((out / file).read_text())
    edit(data)
    (out / file).write_text(json.dumps(data, indent=1))
    return out


def test_round_trip_and_every_kind_of_edit_is_named(engine, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    bundle = published(engine, tmp_path)
    res = verify_bundle(bundle)
    assert res.ok, res.mismatches
    assert res.n_checked > 1000 and res.signature == "unsigned"
    assert res.not_rederived == [
        "judge calibration (the bundle carries its report, not its held-out items)"
    ]
    assert res.summary().startswith(f"OK: {res.n_checked} values re-derived from {bundle}")
    assert f"written by rcea-audit {__version__}, verified with {__version__}" in res.summary()
    report = json.loads((bundle / "report.json").read_text())
    inputs = json.loads((bundle / "inputs.json").read_text())
    columns = inputs["inputs"]["rows"]["columns"]
    assert "text" not in columns and "in_partition" not in columns
    assert {
        "reward",
        "validity",
        "mode",
        "mean_token_entropy",
        "seq_logprob",
        "run",
        "model",
        "step",
        "question_id",
    } <= set(columns)
    assert len(inputs["inputs"]["rows"]["values"]) == sum(c["n"] for c in report["checkpoints"])
    assert inputs["software"] == {"name": "rcea-audit", "version": __version__}

    # one number: a published retention
    i, q = next((i, q) for i, q in enumerate(report["quantities"]) if q["name"] == "retention")

    def bump(rep: dict[str, Any]) -> None:
        rep["quantities"][i]["value"] += 0.01

    res = verify_bundle(tampered(bundle, tmp_path, "number", "report.json", bump))
    where = f"run={q['run']}, model={q['model']}, step={q['step']}"
    assert not res.ok
    assert (
        f"quantity retention ({where}) value: published {q['value'] + 0.01!r}, "
        f"recomputed {q['value']!r}" in res.mismatches
    )
    assert any(m.startswith("file report.json: sha256 recorded") for m in res.mismatches)
    assert res.summary().startswith("FAILED: ")

    # a key removed: the typed report names it
    def drop(rep: dict[str, Any]) -> None:
        del rep["quantities"][0]["label"]

    res = verify_bundle(tampered(bundle, tmp_path, "schema", "report.json", drop))
    assert (
        "report.json quantities.0.label: does not match the StudyReport schema (Field required)"
        in res.mismatches
    )

    # one bootstrap CI bound of an entropy number (recomputed with the stored seed)
    def ci(rep: dict[str, Any]) -> None:
        rep["checkpoints"][0]["entropy"]["paired_ci_low"] *= 1 + 1e-6

    res = verify_bundle(tampered(bundle, tmp_path, "ci", "report.json", ci))
    assert any(
        m.startswith("checkpoints[0].entropy.paired_ci_low: published") for m in res.mismatches
    )

    # one label: annotator A's label of one pair
    pairs = inputs["audit"]["pairs"]
    k = next(j for j, p in enumerate(pairs) if p["A"] == "same")

    def relabel(data: dict[str, Any]) -> None:
        data["audit"]["pairs"][k]["A"] = "different"
        data["audit"]["pairs"][k]["B"] = "different"

    res = verify_bundle(tampered(bundle, tmp_path, "label", "inputs.json", relabel))
    assert any(
        m.startswith("gate.json gate.human_human") or m.startswith("gate.json gate.automatic")
        for m in res.mismatches
    ), res.mismatches
    assert any(m.startswith("file inputs.json: sha256") for m in res.mismatches)

    # the gate's coverage input
    def cover(data: dict[str, Any]) -> None:
        data["audit"]["automatic_coverage"] = 0.5

    res = verify_bundle(tampered(bundle, tmp_path, "coverage", "inputs.json", cover))
    assert any(
        m.startswith("inputs.json audit (from the partition).automatic_coverage: published 0.5")
        for m in res.mismatches
    ), res.mismatches

    # one draw
    entries = json.loads((bundle / "rarefaction.json").read_text())
    n = next(j for j, e in enumerate(entries) if e["draws"])

    def redraw(entries: list[dict[str, Any]]) -> None:
        d = next(iter(entries[n]["draws"].values()))
        first = d["base_draws"][0]
        first[0], first[-1] = first[-1], first[0]
        if first[0] == first[-1]:
            first[0] += 1

    e0 = entries[n]
    res = verify_bundle(tampered(bundle, tmp_path, "draw", "rarefaction.json", redraw))
    head = f"rarefaction.json[{n}] ({e0['run']}, {e0['model']}, step {e0['step']}).draws"
    assert any(m.startswith(head) for m in res.mismatches), res.mismatches

    # one hash
    def rehash(h: dict[str, Any]) -> None:
        h["rubric_hash"] = "0" * 64

    res = verify_bundle(tampered(bundle, tmp_path, "hash", "hashes.json", rehash))
    rubric_hash = report["audits"]["pair"]["rubric_hash"]
    assert res.mismatches == [
        f"rubric_hash (hashes.json): recorded {'0' * 64}, recomputed {rubric_hash}"
    ]

    # one record: a reward flipped changes the record-set hash and the numbers
    def flip(data: dict[str, Any]) -> None:
        cols = data["inputs"]["rows"]["columns"]
        row = data["inputs"]["rows"]["values"][0]
        row[cols.index("reward")] = 1 - row[cols.index("reward")]

    res = verify_bundle(tampered(bundle, tmp_path, "row", "inputs.json", flip))
    assert any(m.startswith("record_set_hash (report.json): recorded") for m in res.mismatches)
    assert any(m.startswith("quantity accuracy (") for m in res.mismatches)


def test_cli_verify(engine, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    bundle = published(engine, tmp_path)
    runner = CliRunner()
    res = runner.invoke(cli, ["report", "verify", str(bundle)])
    assert res.exit_code == 0, res.output
    assert res.output.count("\n") == 1 and res.output.startswith("OK: ")
    res = runner.invoke(cli, ["report", "verify", str(bundle), "--json"])
    body = json.loads(res.output)
    assert res.exit_code == 0 and body["ok"] is True and body["mismatches"] == []
    (bundle / "figures" / "retention.png").write_bytes(b"not a png")
    res = runner.invoke(cli, ["report", "verify", str(bundle)])
    assert res.exit_code == 1
    assert "mismatch: file figures/retention.png: sha256 recorded" in res.output
    res = runner.invoke(cli, ["report", "verify", str(tmp_path / "nope")])
    assert res.exit_code == 2 and "not a directory" in res.output


def test_entropy_only_bundle_with_texts_verifies(engine, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    make_report_study(engine, tmp_path)
    bundle = Path(
        publish(engine, tmp_path / "out", entropy_only=True, include_texts=True)["bundle"]
    )
    res = verify_bundle(bundle)
    assert res.ok, res.mismatches
    assert not (bundle / "rarefaction.json").exists()
    texts = [json.loads(line) for line in (bundle / "texts.jsonl").read_text().splitlines()]
    inputs = json.loads((bundle / "inputs.json").read_text())
    tid = inputs["inputs"]["rows"]["columns"].index("trajectory_id")
    assert [t["trajectory_id"] for t in texts] == [
        v[tid] for v in inputs["inputs"]["rows"]["values"]
    ]
    assert all(isinstance(t["text"], str) and t["text"] for t in texts)
    # no number depends on the texts, but they are a listed file: removing it is named
    (bundle / "texts.jsonl").unlink()
    res = verify_bundle(bundle)
    assert res.mismatches == ["file texts.jsonl: listed in hashes.json but missing"]


@pytest.mark.slow
def test_verify_from_the_wheel_in_a_fresh_venv(engine, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Build the wheel from the sources, install it (no deps) into a new virtual
    environment, and run ``rcea report verify`` there with no store configured. The new
    environment is not ``--system-site-packages`` of this one (that would expose the
    editable install); the third-party dependencies come from this environment's
    site-packages through a path line in a ``.pth`` file, which does not run the editable
    finder — so ``rcea`` can only come from the wheel (asserted). The wheel installs one
    top-level package, ``rcea``, and nothing else beside it (no ``app`` or ``pipeline`` to
    shadow another project's)."""
    if "sqlite" not in str(engine.url):
        pytest.skip("one store is enough: verify does not use a store")
    bundle = published(engine, tmp_path)
    src = tmp_path / "src"
    src.mkdir()
    shutil.copytree(ROOT / "rcea", src / "rcea", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    wheels = tmp_path / "wheels"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            ".",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(wheels),
        ],
        cwd=src,
        check=True,
        timeout=600,
    )
    (wheel,) = wheels.glob("rcea_audit-*.whl")
    with zipfile.ZipFile(wheel) as whl:
        top = {n.split("/")[0] for n in whl.namelist() if ".dist-info/" not in n}
    assert top == {"rcea"}, top
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=False).create(env_dir)
    py = env_dir / "bin" / "python"
    site = subprocess.run(
        [py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    import sysconfig

    (Path(site) / "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(py),
            "install",
            "--no-deps",
            "-q",
            str(wheel),
        ],
        check=True,
        timeout=600,
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RCEA_", "PYTHON"))}
    env["HOME"] = str(tmp_path)
    where = subprocess.run(
        [py, "-c", "import rcea.app, rcea.study as s; print(rcea.app.__file__, s.__file__)"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
    )
    assert where.returncode == 0, where.stderr[-3000:]
    where = where.stdout.split()
    assert all(w.startswith(site) for w in where), where
    rcea = env_dir / "bin" / "rcea"
    res = subprocess.run(
        [rcea, "report", "verify", str(bundle)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert res.returncode == 0, res.stdout + res.stderr
    assert res.stdout.startswith("OK: ") and res.stdout.count("\n") == 1
    (bundle / "report.json").write_text(
        (bundle / "report.json").read_text().replace('"n_boot": 200', '"n_boot": 201', 1)
    )
    res = subprocess.run(
        [rcea, "report", "verify", str(bundle)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert res.returncode == 1 and "parameters.n_boot: published 201, recomputed 200" in res.stdout


def test_signed_bundle(engine, tmp_path: Path, store_url: str, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from rcea.study.settings import get_settings

    runner = CliRunner()
    priv, pub = tmp_path / "k.pem", tmp_path / "k.pub.pem"
    res = runner.invoke(cli, ["report", "keygen", "--private", str(priv), "--public", str(pub)])
    assert res.exit_code == 0 and "ed25519 key" in res.output
    assert oct(priv.stat().st_mode & 0o777) == "0o600"
    other_priv, other_pub = tmp_path / "o.pem", tmp_path / "o.pub.pem"
    runner.invoke(
        cli, ["report", "keygen", "--private", str(other_priv), "--public", str(other_pub)]
    )
    make_report_study(engine, tmp_path)
    judge(engine, calibrated_hash=JUDGE)
    final_gate(engine, draw(engine, tmp_path), passing=True)
    monkeypatch.setenv("RCEA_DATABASE_URL", store_url)
    get_settings.cache_clear()
    out = tmp_path / "out"
    res = runner.invoke(
        cli,
        [
            "report",
            "publish",
            "--study",
            "rep",
            "--n-boot",
            "200",
            "--out",
            str(out),
            "--sign",
            str(priv),
            "--json",
        ],
    )
    assert res.exit_code == 0, res.output
    bundle = Path(json.loads(res.output)["bundle"])
    sig = json.loads((bundle / "signature.json").read_text())
    assert sig["algorithm"] == "ed25519" and sig["signed_file"] == "hashes.json"
    res = runner.invoke(cli, ["report", "verify", str(bundle), "--key", str(pub)])
    assert res.exit_code == 0, res.output
    assert f"(signature: valid (ed25519 key {sig['key_fingerprint']}))" in res.output
    assert "signature: signed, not checked (no --key)" in verify_bundle(bundle).summary()
    res = runner.invoke(cli, ["report", "verify", str(bundle), "--key", str(other_pub)])
    assert res.exit_code == 1 and "mismatch: signature: signed with key" in res.output
    # a re-hashed bundle (hashes.json edited consistently) no longer matches the signature
    h = json.loads((bundle / "hashes.json").read_text())
    h["simulated"] = True
    (bundle / "hashes.json").write_text(json.dumps(h, indent=2) + "\n")
    res = runner.invoke(cli, ["report", "verify", str(bundle), "--key", str(pub)])
    assert res.exit_code == 1
    assert "mismatch: signature: the ed25519 signature of hashes.json does not verify" in res.output
    # an unsigned bundle checked with a key fails, and says it is unsigned
    plain = Path(publish(engine, tmp_path / "plain")["bundle"])
    res = verify_bundle(plain, public_key=pub)
    assert res.mismatches == ["signature: the bundle is unsigned but a public key was given"]
    assert verify_bundle(plain).signature == "unsigned"


def test_publish_refuses_a_bundle_that_does_not_verify(engine, tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The verifier's recomputation is made to disagree (as a nondeterministic estimator
    would): publish refuses, writes nothing and records no event."""
    import rcea.study.report.verify as verify
    from rcea.study.report.publication import PublishRefused
    from rcea.study.store import list_events, session_scope

    make_report_study(engine, tmp_path)
    real = verify.compute_report

    def drifting(inputs: dict[str, Any], **kw: Any) -> StudyReport:
        rep = real(inputs, **kw)
        rep.checkpoints[0].accuracy += 1e-6
        return rep

    # the verifier's own recomputation (publish computes through its own import)
    monkeypatch.setattr(verify, "compute_report", drifting)
    with pytest.raises(PublishRefused) as err:
        publish(engine, tmp_path / "out", entropy_only=True)
    assert "the written bundle does not verify: checkpoints[0].accuracy: published" in str(
        err.value
    )
    assert not any((tmp_path / "out").iterdir())
    with session_scope(engine) as s:
        assert not list_events(s, kind="report.publish")
