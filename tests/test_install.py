"""An install that coexists (docs/installation.md): pyproject.toml declares ranges, the exact
versions live in requirements.lock, and the ``live`` extra admits verl 0.9.1's pins. The
verl requirements are read from verl's own METADATA (``.verl-site``, ``make install``); the
live modules are imported in a fresh interpreter to see what they pull in."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import sysconfig
import tomllib
import venv
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from tests.support.helpers import service_missing
from tests.support.verl_env import VERL_SITE, import_verl

ROOT = Path(__file__).resolve().parents[1]
VERL_PINS = ROOT / ".verl-pins"


def _declared() -> dict[str, list[Requirement]]:
    """Requirements per group: ``base`` and every extra."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    groups = {"base": project["dependencies"], **project["optional-dependencies"]}
    return {g: [Requirement(r) for r in reqs] for g, reqs in groups.items()}


def _lock() -> dict[str, Version]:
    out = {}
    for line in (ROOT / "requirements.lock").read_text().splitlines():
        if line and not line.startswith(("#", "-")):
            name, version = line.split("==")
            out[canonicalize_name(name)] = Version(version)
    return out


def test_ranges_in_pyproject_and_the_lock_meets_every_one() -> None:
    lock = _lock()
    for group, reqs in _declared().items():
        for req in reqs:
            if group in ("dev", "gpu"):
                continue  # dev tools keep exact pins; vLLM is not in the CPU lock
            assert not any(s.operator == "==" for s in req.specifier), f"{group}: {req} is a pin"
            name = canonicalize_name(req.name)
            assert name in lock, f"{req} ({group}) is not in requirements.lock"
            assert req.specifier.contains(lock[name], prereleases=True), (
                f"requirements.lock has {name}=={lock[name]}, outside {req} ({group})"
            )


def _verl_requirements() -> list[Requirement]:
    import_verl("verl")  # skips (or fails under CI) without .verl-site
    (meta,) = VERL_SITE.glob("verl-0.9.1.dist-info/METADATA")
    reqs = [
        Requirement(line.split(":", 1)[1].strip())
        for line in meta.read_text().splitlines()
        if line.startswith("Requires-Dist:")
    ]
    return [r for r in reqs if r.marker is None]


def _candidates(*reqs: Requirement) -> list[Version]:
    """The versions the specifiers name (a range's ends are where two ranges meet)."""
    return sorted({Version(s.version) for r in reqs for s in r.specifier if "*" not in s.version})


def test_live_extra_admits_verl_0_9_1s_pins() -> None:
    verl = {canonicalize_name(r.name): r for r in _verl_requirements()}
    assert str(verl["transformers"].specifier) == "!=5.6.0,<5.11,>=5.5.3"
    ours = _declared()
    shared = 0
    for req in ours["base"] + ours["live"]:
        name = canonicalize_name(req.name)
        if name not in verl:
            continue
        shared += 1
        both = [
            v
            for v in _candidates(req, verl[name])
            if req.specifier.contains(v) and verl[name].specifier.contains(v)
        ]
        assert both, f"no version satisfies both {req} and verl's {verl[name]}"
    assert shared >= 2  # numpy and transformers at least


def test_live_extra_brings_only_numpy_torch_and_transformers() -> None:
    """``pip install 'rcea-audit[live]'`` installs the base and the extra: nothing but what
    the live modules import (the application is the ``app`` extra)."""
    ours = _declared()
    names = {canonicalize_name(r.name) for r in ours["base"] + ours["live"]}
    assert names == {"numpy", "torch", "transformers"}


def test_the_console_script_checks_for_declared_app_modules() -> None:
    """What ``rcea.app.entry`` looks for before importing the command line is in the
    ``app`` extra, so its hint (install ``[app]``) is the fix."""
    from importlib.metadata import packages_distributions

    from rcea.app.entry import APP_MODULES

    app = {canonicalize_name(r.name) for r in _declared()["app"]}
    dists = packages_distributions()
    for module in APP_MODULES:
        assert {canonicalize_name(d) for d in dists[module]} & app, module


LIGHT = """
import json, sys
from rcea.pipeline.training import live_callback, live_metrics
print(json.dumps(sorted(sys.modules)))
"""


def test_live_modules_import_only_numpy_torch_and_transformers() -> None:
    out = subprocess.run(
        [sys.executable, "-c", LIGHT],
        check=True,
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )
    modules = set(json.loads(out.stdout))
    heavy = {"sqlmodel", "sqlalchemy", "streamlit", "fastapi", "pandas", "pydantic", "typer"}
    heavy |= {"httpx", "matplotlib", "psycopg", "trl", "openai", "label_studio_sdk"}
    assert not heavy & modules
    ours = {m for m in modules if m.startswith("rcea")}
    assert ours <= {
        "rcea",
        "rcea.pipeline",
        "rcea.pipeline.training",
        "rcea.pipeline.training.live_callback",
        "rcea.pipeline.training.live_metrics",
        "rcea.pipeline.training.objectives",
    } | {m for m in ours if m.startswith("rcea.audits")}


VERL_RUN = """
import sys
import numpy as np
import torch
from verl.protocol import DataProto
import rcea
from rcea.pipeline.training.live_metrics import verl_batch_metrics

assert rcea.__file__.startswith(sys.argv[1]), rcea.__file__  # the wheel, not the sources
import transformers
from rcea.pipeline.training.live_callback import RceaLiveCallback  # TrainerCallback under it
g = torch.Generator().manual_seed(0)
b, t = 8, 5
mask = torch.ones(b, t)
scores = torch.zeros(b, t)
scores[:, 0] = torch.tensor([1, 0, 1, 0, 1, 1, 0, 0], dtype=torch.float32)
batch = DataProto.from_dict(
    tensors={
        "responses": torch.zeros(b, t, dtype=torch.long),
        "response_mask": mask,
        "token_level_scores": scores,
        "old_log_probs": -torch.rand(b, t, generator=g),
        "entropys": torch.rand(b, t, generator=g),
        "advantages": torch.randn(b, 1, generator=g).expand(b, t).contiguous(),
    },
    non_tensors={"uid": np.array([f"p{i // 4}" for i in range(b)], dtype=object)},
)
m = verl_batch_metrics(batch)
assert m and all(k.startswith("rcea/") for k in m), m
print(transformers.__version__, len(m))
"""


@pytest.mark.slow
def test_live_extra_installs_beside_verl_without_moving_a_pin(tmp_path: Path) -> None:
    """Build the wheel, make a fresh virtual environment that sees this one's packages (a
    ``.pth`` path line, as tests/study/report/test_report_verify.py does) and verl
    (``.verl-site``), let pip's resolver install ``rcea-audit[live]`` there offline
    (``--no-index``: only the wheel is new) with verl 0.9.1's requirements on the packages
    both declare as constraints, and assert it would install the wheel alone — no package
    moves; then install it and run verl's batch metrics on a real ``DataProto``."""
    import_verl("verl.protocol")
    src = tmp_path / "src"
    src.mkdir()
    shutil.copytree(ROOT / "rcea", src / "rcea", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    wheels = tmp_path / "wheels"
    pip = [sys.executable, "-m", "pip"]
    subprocess.run(
        [*pip, "wheel", ".", "--no-deps", "--no-build-isolation", "-q", "-w", str(wheels)],
        cwd=src,
        check=True,
        timeout=600,
    )
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=False).create(env_dir)
    py = env_dir / "bin" / "python"
    site = subprocess.run(
        [py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    (Path(site) / "deps.pth").write_text(
        sysconfig.get_paths()["purelib"] + "\n" + str(VERL_SITE) + "\n"
    )
    # verl's own transformers pin (<5.11), installed into the fresh environment from the
    # wheels `make install` keeps (.verl-pins); they shadow this environment's 5.24
    pinned = sorted(VERL_PINS.glob("*.whl"))
    if len(pinned) != 3:
        service_missing("verl's pinned wheels", f"no wheels in {VERL_PINS}; `make install`")
    subprocess.run(
        [*pip, "--python", str(py), "install", "--no-deps", "--no-index", "-q", *map(str, pinned)],
        check=True,
        timeout=600,
    )
    ours = {canonicalize_name(r.name) for r in _declared()["base"] + _declared()["live"]}
    constraints = tmp_path / "verl-constraints.txt"
    constraints.write_text(
        "".join(
            f"{r.name}{r.specifier}\n"
            for r in _verl_requirements()
            if canonicalize_name(r.name) in ours
        )
    )
    report = tmp_path / "report.json"
    (wheel,) = wheels.glob("rcea_audit-*.whl")
    subprocess.run(
        [*pip, "--python", str(py), "install", "--dry-run", "--no-index", "-q",
         "--find-links", str(wheels), "-c", str(constraints), "--report", str(report),
         f"rcea-audit[live] @ {wheel.as_uri()}"],
        check=True,
        timeout=600,
    )  # fmt: skip
    install = json.loads(report.read_text())["install"]
    assert [i["metadata"]["name"] for i in install] == ["rcea-audit"], install
    subprocess.run(
        [*pip, "--python", str(py), "install", "--no-deps", "-q", str(wheel)],
        check=True,
        timeout=600,
    )
    env = {"HOME": str(tmp_path), "PATH": "/usr/bin:/bin"}
    res = subprocess.run(
        [py, "-c", VERL_RUN, site],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    assert res.stdout.split()[-2:-1] == ["5.10.4"]  # verl's pin, not this environment's
    assert int(res.stdout.split()[-1]) > 0

    # the same wheel alone, without the application's dependencies: the console script
    # answers with one line naming the extra (and JSON under --json), not a traceback
    bare = tmp_path / "bare"
    venv.EnvBuilder(with_pip=False).create(bare)
    subprocess.run(
        [*pip, "--python", str(bare / "bin" / "python"), "install", "--no-deps", "-q", str(wheel)],
        check=True,
        timeout=600,
    )
    for args in (["status"], ["status", "--json"]):
        res = subprocess.run(
            [bare / "bin" / "rcea", *args], env=env, capture_output=True, text=True, timeout=120
        )
        assert res.returncode == 1, (res.stdout, res.stderr)
        assert "Traceback" not in res.stderr
        said = json.loads(res.stdout)["error"] if "--json" in args else res.stderr.strip()
        assert "pip install 'rcea-audit[app]'" in said and len(said.splitlines()) == 1
