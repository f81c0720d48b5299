"""docker-compose.yml is the production shape of what `make up` runs."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent


def services() -> dict[str, Any]:
    data = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    svc: dict[str, Any] = data["services"]
    return svc


def command(svc: dict[str, Any]) -> str:
    cmd = svc.get("command", [])
    return " ".join(cmd) if isinstance(cmd, list) else str(cmd)


def test_it_has_the_database_broker_web_beat_and_a_runner() -> None:
    svc = services()
    assert svc["postgres"]["image"].startswith("postgres:")
    assert svc["redis"]["image"].startswith("redis:")
    assert "kperf-web --host 0.0.0.0" in command(svc["web"])
    assert "beat" in command(svc["beat"])
    assert command(svc["runner-qemu"]).startswith("kperf-runner run")
    assert "--backend qemu" in command(svc["runner-qemu"])


def test_every_celery_queue_has_its_own_worker() -> None:
    consumed: set[str] = set()
    for svc in services().values():
        m = re.search(r"celery -A kperf worker (.*)-Q (\S+)", command(svc))
        if m:
            consumed.update(m.group(2).split(","))
            # Off, as in kperf-up: their shutdown on a lost Redis connection crashed workers.
            assert "--without-gossip --without-mingle --without-heartbeat" in m.group(1)
    from kperf.celery import app

    declared = {q.name for q in app.conf.task_queues}
    assert declared == {"default", "builds", "analysis"}
    # Builds are pulled by build machines over HTTP there, never sent to the builds queue.
    assert environments()["web"]["KPERF_BUILDERS"] == "remote"
    assert consumed == declared - {"builds"}


def test_build_machines_hold_only_their_token_and_reach_only_web() -> None:
    data = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    svc = services()
    builders = {name: s for name, s in svc.items() if command(s).startswith("kperf-builder run")}
    assert set(builders) == {"builder", "builder-2"}
    others = [s for name, s in svc.items() if name not in builders]
    for name, builder in builders.items():
        assert list(builder["environment"]) == ["KPERF_BUILDER_TOKEN"], name
        assert "--server http://web:8000" in command(builder)
        assert builder["networks"] == ["builds"] and data["networks"]["builds"]["internal"] is True
        volumes = {v.split(":")[0] for v in builder["volumes"]}
        assert not volumes & {v.split(":")[0] for s in others for v in s.get("volumes", [])}, name
        assert builder["cap_add"] == ["SYS_ADMIN"] and "apparmor=unconfined" in builder["security_opt"]
    on_builds = [name for name, s in svc.items() if "builds" in s.get("networks", [])]
    assert sorted(on_builds) == ["builder", "builder-2", "web"]


def test_service_processes_use_postgres_and_redis_and_wait_for_them() -> None:
    for name, svc in services().items():
        env = svc.get("environment", {})
        if "DATABASE_URL" in env:
            assert env["DATABASE_URL"].startswith("postgres://")
            assert env["CELERY_BROKER_URL"].startswith("redis://")
            assert "postgres" in svc["depends_on"] and "redis" in svc["depends_on"], name
            # Shared services must not read the server's disk through local trees.
            assert env["KPERF_ALLOW_LOCAL_TREES"] == "0"
            # No default secret key: compose refuses to start without one in .env.
            assert env["KPERF_SECRET_KEY"].startswith("${KPERF_SECRET_KEY:?"), env["KPERF_SECRET_KEY"]


def test_the_image_installs_the_three_packages() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    for pkg in ("runners", "kernel-builds", "service"):
        assert f"-e {pkg}" in dockerfile
    assert "qemu-system-x86" in dockerfile and "flex" in dockerfile


def test_grafana_reads_the_provisioned_dashboards_and_the_database() -> None:
    svc = services()["grafana"]
    image, tag = svc["image"].split(":")
    assert image == "grafana/grafana-oss" and re.fullmatch(r"11\.6\.\d+", tag), svc["image"]
    assert "postgres" in svc["depends_on"]
    mounts = {v.split(":")[1]: v.split(":")[0] for v in svc["volumes"]}
    datasources = yaml.safe_load((ROOT / "dashboards/provisioning/datasources/kperf.yaml").read_text())
    providers = yaml.safe_load((ROOT / "dashboards/provisioning/dashboards/kperf.yaml").read_text())
    assert mounts["/etc/grafana/provisioning/datasources"] == "./dashboards/provisioning/datasources"
    assert mounts["/etc/grafana/provisioning/dashboards"] == "./dashboards/provisioning/dashboards"
    assert mounts[providers["providers"][0]["options"]["path"]] == "./dashboards/json"
    # Every ${VAR} the data source file uses is in Grafana's environment.
    wanted = set(re.findall(r"\$\{(\w+)\}", (ROOT / "dashboards/provisioning/datasources/kperf.yaml").read_text()))
    assert wanted and wanted <= set(svc["environment"]), wanted - set(svc["environment"])
    assert svc["environment"]["KPERF_GRAFANA_DB_HOST"] == "postgres:5432"
    assert datasources["datasources"][0]["type"] == "grafana-postgresql-datasource"
    home = svc["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
    assert (ROOT / "dashboards/json" / Path(home).name).is_file()


# Variables and environment keys that hold a secret: a password, a key, a token.
SECRET_NAME = re.compile(r"PASSWORD|SECRET|TOKEN|_KEY")
# ${NAME}, ${NAME:-default}, ${NAME-default}, ${NAME:?message}, ${NAME?message}
INTERPOLATION = re.compile(r"\$\{(\w+)(:?[-?+])?([^${}]*)")
# Registered after compose is up (add_runner prints it), so present in .env but
# possibly empty; `?` still stops compose when the line is missing.
MAY_BE_EMPTY = {"KPERF_RUNNER_TOKEN", "KPERF_BUILDER_TOKEN", "KPERF_BUILDER_2_TOKEN"}


def environments() -> dict[str, dict[str, str]]:
    return {name: {k: str(v) for k, v in svc.get("environment", {}).items()} for name, svc in services().items()}


def test_no_secret_has_a_default_anywhere_in_the_file() -> None:
    text = (ROOT / "docker-compose.yml").read_text()
    secrets = [(name, op, rest) for name, op, rest in INTERPOLATION.findall(text) if SECRET_NAME.search(name)]
    assert {name for name, _, _ in secrets} >= {
        "POSTGRES_PASSWORD",
        "KPERF_SECRET_KEY",
        "KPERF_S3_SECRET_ACCESS_KEY",
        "GRAFANA_ADMIN_PASSWORD",
        "GRAFANA_SECRET_KEY",
        "KPERF_GRAFANA_DB_PASSWORD",
        "KPERF_RUNNER_TOKEN",
    }
    for name, op, message in secrets:
        wanted = "?" if name in MAY_BE_EMPTY else ":?"
        # Compose stops with the message, so it must say what to set.
        assert op == wanted and name in message, f"${{{name}{op}{message}}}: use ${{{name}{wanted}set {name} ...}}"


def test_every_secret_in_a_service_comes_from_a_required_variable() -> None:
    for service, env in environments().items():
        for key, value in env.items():
            if SECRET_NAME.search(key):
                # The whole value is one required variable: no literal, no fallback to another.
                m = re.fullmatch(r"\$\{(\w+)(:?\?)[^${}]*\}", value)
                assert m, f"{service}: {key}={value!r} is not a required ${{VAR:?message}}"
            for userinfo in re.findall(r"://[^/@\s]*:([^/@\s]*)@", value):
                # A password inside a URL (DATABASE_URL) too.
                assert re.fullmatch(r"\$\{\w+:\?[^${}]*\}", userinfo), f"{service}: {key} has a password {userinfo!r}"


def test_grafana_has_no_default_admin_password_and_no_anonymous_access() -> None:
    env = environments()["grafana"]
    assert env["GF_SECURITY_ADMIN_PASSWORD"].startswith("${GRAFANA_ADMIN_PASSWORD:?")
    # Its built-in key, which encrypts the data source's password, is published.
    assert env["GF_SECURITY_SECRET_KEY"].startswith("${GRAFANA_SECRET_KEY:?")
    assert env["GF_AUTH_ANONYMOUS_ENABLED"] == "false" and env["GF_USERS_ALLOW_SIGN_UP"] == "false"
    assert env["KPERF_GRAFANA_DB_PASSWORD"].startswith("${KPERF_GRAFANA_DB_PASSWORD:?")


def test_build_workers_can_make_the_build_sandbox_and_do_not_turn_it_off() -> None:
    builders = 0
    for name, svc in services().items():
        if "-Q builds" not in command(svc) and not command(svc).startswith("kperf-builder"):
            continue
        builders += 1
        # bwrap makes mount and PID namespaces inside the container.
        assert "SYS_ADMIN" in svc.get("cap_add", []), name
        assert "apparmor=unconfined" in svc.get("security_opt", []), name
        assert svc.get("environment", {}).get("KPERF_BUILD_SANDBOX", "bwrap") == "bwrap", name
    assert builders == 2
    assert "bubblewrap" in (ROOT / "Dockerfile").read_text()
