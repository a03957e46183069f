"""docker-compose.yml cannot run here (no Docker engine): check its wiring statically."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import yaml

from rcea.study.settings import Settings
from tests.support.helpers import nginx_executable

ROOT = Path(__file__).resolve().parents[1]


def _compose() -> dict:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def interpolate(value: str, env: dict[str, str] | None = None) -> str:
    """Compose's ``${VAR:-default}`` / ``${VAR:?message}`` / ``${VAR}`` substitution (the
    forms this file uses), with ``env`` as the operator's environment (empty: nothing set;
    an unset required variable becomes empty here, where compose would refuse to start)."""
    env = env or {}

    def sub(m: re.Match[str]) -> str:
        name, op, rest = m.group(1), m.group(2) or "", m.group(3) or ""
        return env.get(name) or ("" if "?" in op else rest)

    return re.sub(r"\$\{(\w+)(?:(:?[-?])([^}]*))?\}", sub, value)


def _ports(spec: str) -> list[int]:
    first, _, last = spec.partition("-")
    return list(range(int(first), int(last or first) + 1))


def published(service: str, env: dict[str, str] | None = None) -> list[tuple[str, int, int]]:
    """``(host ip, host port, container port)`` of each published port, as compose
    resolves the short syntax ``IP:HOST:CONTAINER`` (ranges ``A-B`` included)."""
    out = []
    for spec in _compose()["services"][service].get("ports", []):
        ip, host, container = interpolate(str(spec), env).rsplit(":", 2)
        out += [(ip, h, c) for h, c in zip(_ports(host), _ports(container), strict=True)]
    return out


PEOPLE = ("labelstudio-a", "labelstudio-b", "labelstudio-adjudicator")


def test_services_present() -> None:
    services = _compose()["services"]
    assert set(services) == {
        "postgres",
        *PEOPLE,
        "api",
        "view",
        "frontdoor-config",
        "frontdoor",
    }
    for name in PEOPLE:
        assert re.fullmatch(r"heartexlabs/label-studio:\d+\.\d+\.\d+", services[name]["image"])
    assert re.fullmatch(r"postgres:\d+(\.\d+)?", services["postgres"]["image"])


def test_rcea_env_vars_are_settings_fields() -> None:
    fields = {f"RCEA_{name.upper()}" for name in Settings.model_fields}
    for svc in ("api", "view", "frontdoor-config"):
        env = _compose()["services"][svc]["environment"]
        unknown = {k for k in env if k.startswith("RCEA_")} - fields
        assert not unknown, f"{svc}: {unknown} are not Settings fields"


def test_ports_and_urls_are_consistent() -> None:
    s = _compose()["services"]
    api_env, view_env = s["api"]["environment"], s["view"]["environment"]
    api_port, view_port = int(api_env["RCEA_API_PORT"]), int(view_env["RCEA_VIEW_PORT"])
    # reached through the front door only, at their service names and ports
    assert published("api") == published("view") == []
    door_env = s["frontdoor-config"]["environment"]
    assert door_env["RCEA_DOOR_API_URL"] == f"http://api:{api_port}"
    assert door_env["RCEA_DOOR_VIEW_URL"] == f"http://view:{view_port}"
    for env in (api_env, view_env):
        url = env["RCEA_DATABASE_URL"]
        assert url.startswith("postgresql+psycopg://") and "@postgres:5432/" in url
        db = url.rsplit("/", 1)[1]
        assert db == s["postgres"]["environment"]["POSTGRES_DB"]
        # The URL must be accepted by the settings class unchanged.
        assert Settings(database_url=url).resolved_database_url == url


def test_one_label_studio_per_person() -> None:
    """Each person's server has its own data volume and admin token variable, legacy
    tokens on, sign-up by invite only, no published port (the front door is the way in);
    the api depends on every one of them."""
    s = _compose()["services"]
    volumes, tokens = set(), set()
    for name in PEOPLE:
        env = s[name]["environment"]
        assert env["LABEL_STUDIO_ENABLE_LEGACY_API_TOKEN"] == "true"
        assert env["LABEL_STUDIO_DISABLE_SIGNUP_WITHOUT_LINK"] == "true"
        assert "DJANGO_DB" not in env  # own SQLite database in its own volume
        tokens.add(re.fullmatch(r"\$\{(LABEL_STUDIO_TOKEN_\w+):\?.*\}",
                                env["LABEL_STUDIO_USER_TOKEN"]).group(1))  # fmt: skip
        volumes.update(  # its own data volume (the read-only settings mount is shared)
            v.split(":")[0] for v in s[name]["volumes"] if not v.startswith("./")
        )
        assert published(name) == [], name
    assert len(volumes) == len(tokens) == len(PEOPLE)
    assert volumes <= set(_compose()["volumes"])
    assert set(PEOPLE) <= set(s["api"]["depends_on"])
    assert "RCEA_LABELSTUDIO_TOKEN" not in s["api"]["environment"]


def test_no_secret_literals() -> None:
    text = (ROOT / "docker-compose.yml").read_text()
    for line in text.splitlines():
        if re.search(r"(PASSWORD|_TOKEN|API_KEY)\s*:", line) and "LEGACY_API_TOKEN" not in line:
            assert "${" in line, f"secret given literally: {line.strip()}"


def test_dockerfile_installs_packages_and_exposes_ports() -> None:
    text = (ROOT / "Dockerfile").read_text()
    assert "COPY rcea ./rcea" in text
    assert "EXPOSE 8000 8501" in text


def test_published_ports_listen_on_loopback_by_default() -> None:
    """Every published port binds 127.0.0.1 unless the operator sets RCEA_PUBLISH_HOST;
    only the front door publishes any."""
    services = _compose()["services"]
    assert {name for name, svc in services.items() if svc.get("ports")} == {"frontdoor"}
    for name, svc in services.items():
        for spec in svc.get("ports", []):
            assert str(spec).count(":") >= 2, f"{name}: {spec} binds every interface"
        for ip, _host, _container in published(name):
            assert ip == "127.0.0.1", (name, ip)
        for ip, _host, _container in published(name, {"RCEA_PUBLISH_HOST": "0.0.0.0"}):
            assert ip == "0.0.0.0", (name, ip)  # the documented way to open them


def test_webhook_url_is_the_api_service_reachable_from_label_studio() -> None:
    """The webhook URL the API registers in Label Studio resolves (through the settings
    class, as the API would) to the api service's name and container port, and Label
    Studio shares a network with it; the view requires a login in compose."""
    from urllib.parse import urlsplit

    s = _compose()["services"]
    env = {k: interpolate(str(v)) for k, v in s["api"]["environment"].items()}
    cfg = Settings(
        api_host=env["RCEA_API_HOST"],
        api_port=int(env["RCEA_API_PORT"]),
        webhook_url=env.get("RCEA_WEBHOOK_URL"),
    )
    url = urlsplit(cfg.resolved_webhook_url)
    assert url.hostname == "api" and url.hostname in s
    assert url.port == int(env["RCEA_API_PORT"])
    assert url.path == "/webhooks/label-studio"
    assert "--port" in s["api"]["command"]
    assert s["api"]["command"][s["api"]["command"].index("--port") + 1] == str(url.port)
    # Services without a `networks` key share compose's default network.
    for name in PEOPLE:
        assert set(s[name].get("networks", ["default"])) & set(
            s["api"].get("networks", ["default"])
        )
    assert s["view"]["environment"]["RCEA_VIEW_AUTH"] == "password"


def test_wildcard_api_host_never_becomes_the_webhook_address() -> None:
    assert Settings(api_host="0.0.0.0").resolved_webhook_url == (
        "http://127.0.0.1:8000/webhooks/label-studio"
    )
    assert Settings(api_host="::", api_port=9).resolved_webhook_url == (
        "http://127.0.0.1:9/webhooks/label-studio"
    )
    assert Settings(api_host="10.0.0.5").resolved_webhook_url.startswith("http://10.0.0.5:8000/")


def test_label_studio_launched_as_rcea_launches_it() -> None:
    """Each person's server gets the environment ``rcea`` gives its own servers (SSRF
    protection on, rcea's settings module with the receiver allow-list, nothing phoning
    home), the settings module mounted read-only where PYTHONPATH points, and the api's
    webhook URL on the path that allow-list admits."""
    from rcea.annotation.server import SERVER_ENV, SITE_DIR

    s = _compose()["services"]
    for name in PEOPLE:
        env = {k: str(v) for k, v in s[name]["environment"].items()}
        assert {k: env.get(k) for k in SERVER_ENV} == SERVER_ENV, name
        mounts = {
            target: (ROOT / source).resolve()
            for source, target, *mode in (str(v).split(":") for v in s[name]["volumes"])
            if source.startswith("./") and mode == ["ro"]
        }
        assert mounts.get(env["PYTHONPATH"]) == SITE_DIR, (name, mounts)
    settings_py = (SITE_DIR / "rcea_labelstudio_settings.py").read_text()
    path = re.search(r'"RCEA_WEBHOOK_PATH", "([^"]+)"', settings_py).group(1)  # type: ignore[union-attr]
    receiver = s["api"]["environment"]["RCEA_WEBHOOK_URL"]
    assert (receiver.split("://", 1)[1].split("/", 1)[1] + "/") == path.lstrip("/"), receiver


def test_front_door_config_is_rcea_own_for_the_compose_people(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The frontdoor-config service's command, run with its environment (data dir moved
    to a temp dir) after the three people are registered as the compose comment says,
    writes a config nginx accepts, where the frontdoor service reads it, with every
    person's route on a published port and the services' names behind it."""
    from typer.testing import CliRunner

    from rcea.annotation.frontdoor import COMPOSE, FrontDoor
    from rcea.annotation.people import People
    from rcea.app.cli import app
    from rcea.study.settings import get_settings

    nginx_executable()
    s = _compose()["services"]
    env = {k: interpolate(str(v), {"RCEA_PUBLIC_HOST": "labelling.example.org"})
           for k, v in s["frontdoor-config"]["environment"].items()}  # fmt: skip
    assert env["RCEA_DATA_DIR"] == "/data"
    door_conf = "/data/frontdoor/nginx.conf"
    assert door_conf in " ".join(s["frontdoor"]["command"])
    assert "rceadata:/data:ro" in s["frontdoor"]["volumes"]
    assert "rceadata:/data" in s["frontdoor-config"]["volumes"]
    for key, value in {**env, "RCEA_DATA_DIR": str(tmp_path)}.items():
        monkeypatch.setenv(key, value)
    get_settings.cache_clear()
    people = People(tmp_path, "http://127.0.0.1:1")
    for name in PEOPLE:
        people.add(f"{name}@example.org", url=f"http://{name}:8080", token=f"token{len(name)}x")
    out = CliRunner().invoke(app, [*s["frontdoor-config"]["command"][1:], "--json"])
    get_settings.cache_clear()
    assert out.exit_code == 0, out.output
    state = FrontDoor(tmp_path).state()
    assert state is not None and state.runtime == COMPOSE and state.ca
    door_ports = {host for _ip, host, _c in published("frontdoor")}
    upstreams = {r.upstream.split("//")[1].split(":")[0] for r in state.routes}
    assert upstreams == {*PEOPLE, "api", "view"} and upstreams <= set(s)
    assert {r.port for r in state.routes} <= door_ports
    assert len(door_ports) >= len(state.routes) + 5  # room for more people
    conf = FrontDoor(tmp_path).conf
    res = subprocess.run(
        ["nginx", "-t", "-q", "-c", str(conf), "-e", "stderr"], capture_output=True, text=True
    )
    assert res.returncode == 0, res.stderr
