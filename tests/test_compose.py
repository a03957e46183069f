"""docker-compose.yml cannot run here (no Docker engine): check its wiring statically."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from rcea.study.settings import Settings

ROOT = Path(__file__).resolve().parents[1]


def _compose() -> dict:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def interpolate(value: str, env: dict[str, str] | None = None) -> str:
    """Compose's ``${VAR:-default}`` / ``${VAR}`` substitution (the forms this file uses),
    with ``env`` as the operator's environment (empty: nothing set)."""
    env = env or {}

    def sub(m: re.Match[str]) -> str:
        name, default = m.group(1), m.group(3) or ""
        return env.get(name) or default

    return re.sub(r"\$\{(\w+)(:?-([^}]*))?\}", sub, value)


def published(service: str, env: dict[str, str] | None = None) -> list[tuple[str, int, int]]:
    """``(host ip, host port, container port)`` of each published port, as compose
    resolves the short syntax ``IP:HOST:CONTAINER``."""
    out = []
    for spec in _compose()["services"][service].get("ports", []):
        ip, host, container = interpolate(str(spec), env).rsplit(":", 2)
        out.append((ip, int(host), int(container)))
    return out


PEOPLE = ("labelstudio-a", "labelstudio-b", "labelstudio-adjudicator")


def test_services_present() -> None:
    services = _compose()["services"]
    assert set(services) == {"postgres", *PEOPLE, "api", "view"}
    for name in PEOPLE:
        assert re.fullmatch(r"heartexlabs/label-studio:\d+\.\d+\.\d+", services[name]["image"])
    assert re.fullmatch(r"postgres:\d+(\.\d+)?", services["postgres"]["image"])


def test_rcea_env_vars_are_settings_fields() -> None:
    fields = {f"RCEA_{name.upper()}" for name in Settings.model_fields}
    for svc in ("api", "view"):
        env = _compose()["services"][svc]["environment"]
        unknown = {k for k in env if k.startswith("RCEA_")} - fields
        assert not unknown, f"{svc}: {unknown} are not Settings fields"


def test_ports_and_urls_are_consistent() -> None:
    s = _compose()["services"]
    api_env, view_env = s["api"]["environment"], s["view"]["environment"]
    api_port, view_port = int(api_env["RCEA_API_PORT"]), int(view_env["RCEA_VIEW_PORT"])
    assert ("127.0.0.1", api_port, api_port) in published("api")
    assert ("127.0.0.1", view_port, view_port) in published("view")
    for env in (api_env, view_env):
        url = env["RCEA_DATABASE_URL"]
        assert url.startswith("postgresql+psycopg://") and "@postgres:5432/" in url
        db = url.rsplit("/", 1)[1]
        assert db == s["postgres"]["environment"]["POSTGRES_DB"]
        # The URL must be accepted by the settings class unchanged.
        assert Settings(database_url=url).resolved_database_url == url


def test_one_label_studio_per_person() -> None:
    """Each person's server has its own data volume, host port and admin token variable,
    legacy tokens on, sign-up by invite only; the api depends on every one of them."""
    s = _compose()["services"]
    volumes, ports, tokens = set(), set(), set()
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
        ports.update(host for _ip, host, _c in published(name))
    assert len(volumes) == len(ports) == len(tokens) == len(PEOPLE)
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
    for pkg in ("app", "annotation", "pipeline", "audits"):
        assert f"COPY {pkg} ./{pkg}" in text
    assert "EXPOSE 8000 8501" in text


def test_published_ports_listen_on_loopback_by_default() -> None:
    """Every published port binds 127.0.0.1 unless the operator sets RCEA_PUBLISH_HOST;
    PostgreSQL is not published at all."""
    services = _compose()["services"]
    assert "ports" not in services["postgres"]
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
    assert url.port in {container for _ip, _host, container in published("api")}
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
