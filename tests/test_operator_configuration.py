"""What an operator meets on the command line: help and version without markup,
configuration errors that name the variable and never a secret, and the start-up summary."""

from __future__ import annotations

import os

import orjson
import pytest

from gateway.configuration import ConfigurationError, load_settings, summary
from tests.operator_secrets import SECRET_VALUES, SECRETS
from tests.processes import gateway_cli


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """An environment with no gateway configuration of the test run's own."""
    for name in list(os.environ):
        if name.upper().startswith("GATEWAY_") or name.upper() == "REDIS_URL":
            monkeypatch.delenv(name)
    return monkeypatch


# --- the command line ---------------------------------------------------------------


def test_version_and_help_without_markup() -> None:
    version = gateway_cli("--version")
    assert version.returncode == 0, version.stderr
    assert version.stdout.strip() == "gateway 0.1.0"
    for args in (("--help",), ("serve", "--help"), ("worker", "--help")):
        shown = gateway_cli(*args)
        assert shown.returncode == 0, shown.stderr
        assert "``" not in shown.stdout, shown.stdout
        assert "GATEWAY_*" in shown.stdout and "docs/configuration.md" in shown.stdout, shown.stdout
    worker = gateway_cli("worker", "--help").stdout
    assert "Run agents from the durable job queue" in worker
    assert "REDIS_URL" in worker


# --- configuration errors -------------------------------------------------------------


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"GATEWAY_PORT": "eighty"}, ["GATEWAY_PORT"]),
        ({"GATEWAY_CORTADEL_TOP_K": "99"}, ["GATEWAY_CORTADEL_TOP_K"]),
        ({"GATEWAY_API_KEYS": "sk-live-4f9a2c"}, ["GATEWAY_API_KEYS"]),
        (
            {"GATEWAY_API_KEYS": '{"sk-live-4f9a2c": {"tenant": ""}}'},
            ["GATEWAY_API_KEYS (<key>.tenant)", "GATEWAY_API_KEYS (<key>.user)"],
        ),
        ({"GATEWAY_CORTADEL_USER_ID_SECRET": "hmac-short"}, ["GATEWAY_CORTADEL_USER_ID_SECRET"]),
        ({"GATEWAY_CORTADEL_TENANT_KEYS": "tenant-key-8e8e"}, ["GATEWAY_CORTADEL_TENANT_KEYS"]),
        ({"GATEWAY_CORTADEL_TENANT_KEYS": '{"t1": 5}'}, ["GATEWAY_CORTADEL_TENANT_KEYS (t1)"]),
        ({"GATEWAY_CORTADEL": "{"}, ["GATEWAY_CORTADEL"]),
        ({"REDIS_URL": ""}, ["REDIS_URL"]),
        ({"GATEWAY_REDIS_URL": "http://:pw-9f8e@redis:6379"}, ["GATEWAY_REDIS_URL"]),
        # both settings classes fail: every problem is reported at once
        (
            {"GATEWAY_CORTADEL_TOP_K": "0", "GATEWAY_JOB_LEASE_SECONDS": "-1"},
            ["GATEWAY_CORTADEL_TOP_K", "GATEWAY_JOB_LEASE_SECONDS"],
        ),
    ],
)
def test_configuration_errors_name_the_variable_and_never_a_secret(
    clean_env: pytest.MonkeyPatch, env: dict[str, str], named: list[str]
) -> None:
    for name, value in env.items():
        clean_env.setenv(name, value)
    with pytest.raises(ConfigurationError) as raised:
        load_settings()
    problems = raised.value.problems
    assert [p.split(":")[0] for p in problems] == named, problems
    for problem in problems:
        assert "\n" not in problem
        assert "input_value" not in problem and "errors.pydantic.dev" not in problem
        for value in (*SECRET_VALUES, "hmac-short", "pw-9f8e"):
            assert value not in problem, problem


def test_a_configuration_error_exits_non_zero_with_one_line_each() -> None:
    done = gateway_cli(
        "serve",
        GATEWAY_PORT="eighty",
        GATEWAY_API_KEYS='{"sk-live-4f9a2c": {"tenant": ""}}',
        GATEWAY_CORTADEL_USER_ID_SECRET="hmac-short",
    )
    assert done.returncode == 2
    assert done.stdout == ""
    lines = done.stderr.splitlines()
    assert lines == [
        "gateway: invalid configuration: GATEWAY_CORTADEL_USER_ID_SECRET: "
        "the user id secret must be at least 16 characters",
        "gateway: invalid configuration: GATEWAY_PORT: "
        "Input should be a valid integer, unable to parse string as an integer",
        "gateway: invalid configuration: GATEWAY_API_KEYS (<key>.tenant): "
        "String should have at least 1 character",
        "gateway: invalid configuration: GATEWAY_API_KEYS (<key>.user): Field required",
    ], done.stderr
    assert "sk-live-4f9a2c" not in done.stderr and "hmac-short" not in done.stderr


# --- the start-up summary ---------------------------------------------------------------


def test_summary_shows_every_setting_and_no_secret(clean_env: pytest.MonkeyPatch) -> None:
    for name, value in SECRETS.items():
        clean_env.setenv(name, value)
    clean_env.setenv("REDIS_URL", "rediss://gw:redis-pw-31@redis.internal:6380/0?password=q1")
    clean_env.setenv("GATEWAY_PORT", "8001")
    shown = summary(load_settings())
    dumped = orjson.dumps(shown).decode()
    for value in (*SECRET_VALUES, "redis-pw-31", "q1"):
        assert value not in dumped, dumped
    assert shown["port"] == 8001
    assert shown["redis_url"] == "rediss://gw:***@redis.internal:6380/0?password=***"
    assert shown["api_keys"] == {"keys": 2, "tenants": 2}
    assert shown["open_mode"] is False
    assert shown["embedder_api_key"] == "set"
    cortadel = shown["cortadel"]
    assert cortadel["api_key"] == "set" and cortadel["user_id_secret"] == "set"
    assert cortadel["tenant_keys"] == "1 set"
    assert cortadel["url"] == "http://cortadel.invalid:3001"
    assert cortadel["top_k"] == 5


def test_summary_of_the_defaults(clean_env: pytest.MonkeyPatch) -> None:
    shown = summary(load_settings())
    assert shown["redis_url"] is None and shown["embedder_api_key"] is None
    assert shown["api_keys"] == {"keys": 0, "tenants": 0} and shown["open_mode"] is True
    assert shown["cortadel"] == "off"


def test_an_app_or_cortadel_client_without_its_url_is_a_configuration_error(
    clean_env: pytest.MonkeyPatch,
) -> None:
    """Built directly (not through `gateway serve`, which starts a Redis when none is set),
    a missing URL is named, not an assertion."""
    from gateway.app import create_app
    from gateway.longterm.cortadel import Cortadel
    from gateway.options.longterm import CortadelSettings
    from gateway.settings import Settings

    with pytest.raises(ConfigurationError) as raised:
        create_app(Settings())
    assert [p.split(":")[0] for p in raised.value.problems] == ["REDIS_URL"]
    with pytest.raises(ConfigurationError) as raised:
        Cortadel(CortadelSettings())
    assert [p.split(":")[0] for p in raised.value.problems] == ["GATEWAY_CORTADEL_URL"]
