"""The Dockerfile and docker-compose.yml describe the processes the tests run (no Docker engine here)."""

from __future__ import annotations

import yaml
from service_procs import REPO

from tileplan.cli import build_parser


def test_compose_runs_api_two_workers_and_postgres() -> None:
    doc = yaml.safe_load((REPO / "docker-compose.yml").read_text())
    services = doc["services"]
    assert set(services) == {"api", "worker", "postgres"}
    assert services["worker"]["deploy"]["replicas"] == 2
    commands = {name: services[name]["command"] for name in ("api", "worker")}
    assert commands["api"][:2] == ["tileplan", "serve"] and commands["worker"][:2] == ["tileplan", "worker"]
    parser = build_parser()
    for cmd in commands.values():  # the commands parse with the real CLI
        parser.parse_args(cmd[1:])
    for name in ("api", "worker"):
        env = services[name]["environment"]
        assert env["TILEPLAN_QUEUE"] == "procrastinate"
        assert env["TILEPLAN_DATABASE_URL"].startswith("postgresql://") and "@postgres:5432/" in env["TILEPLAN_DATABASE_URL"]
        assert services[name]["depends_on"]["postgres"]["condition"] == "service_healthy"


def test_dockerfile_is_multi_stage_and_non_root() -> None:
    text = (REPO / "Dockerfile").read_text()
    stages = [line for line in text.splitlines() if line.startswith("FROM ")]
    assert len(stages) == 2 and "slim" in text
    build, final = text.rsplit(stages[1] + "\n", 1)  # the final stage's FROM line is a prefix of the first's
    assert "USER tileplan" in final and "COPY --from=build /opt/venv /opt/venv" in final
    # The build stage installs the codegen extra (TVM); the final image keeps only a C compiler, which codegen
    # needs at run time (the emulator and a module tar's host library are compiled on the server).
    assert 'pip install ".[codegen]"' in build
    assert "gcc" in final and "--no-install-recommends" in final and "rm -rf /var/lib/apt/lists" in final
    assert "pip" not in final.replace("PIP_", "")  # no package installs after the build stage
    assert "TILEPLAN_CATALOG_DIR=/app/hw_catalog" in final and "HEALTHCHECK" in final


def test_compose_builds_once_and_takes_its_secrets_from_the_environment() -> None:
    """One `build:` (the api's); the workers run its image. No secret in the file: the tokens and the database
    password are required variables (compose stops with the message), and the API's port is bound to loopback
    unless TILEPLAN_BIND says otherwise."""
    text = (REPO / "docker-compose.yml").read_text()
    services = yaml.safe_load(text)["services"]
    assert "build" in services["api"] and "build" not in services["worker"]
    assert services["api"]["image"] == services["worker"]["image"] == "tileplan:latest"
    env = services["api"]["environment"]
    assert env["TILEPLAN_TOKENS"].startswith("${TILEPLAN_TOKENS:?")
    assert "${TILEPLAN_DB_PASSWORD:?" in env["TILEPLAN_DATABASE_URL"]
    assert services["postgres"]["environment"]["POSTGRES_PASSWORD"].startswith("${TILEPLAN_DB_PASSWORD:?")
    assert "tileplan:tileplan@" not in text
    assert services["api"]["ports"] == ["${TILEPLAN_BIND:-127.0.0.1}:${TILEPLAN_PORT:-8000}:8000"]
