"""Configuration an operator gets wrong: one line naming the variable and exit 2, never a
traceback; misspelt variables named with the setting they were probably meant to be; and
`gateway config check` for CI/CD, which exits non-zero on any problem."""

from __future__ import annotations

from pathlib import Path

import orjson

from tests.processes import PROCESS_SECONDS, gateway_cli, serving, slow_process_test
from tests.waiting import until_sync

ROOT = Path(__file__).resolve().parent.parent


def test_an_unknown_log_level_is_one_line_and_exit_2() -> None:
    done = gateway_cli("serve", GATEWAY_LOG_LEVEL="LOUD")
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines() == [
        "gateway: invalid configuration: GATEWAY_LOG_LEVEL: "
        "Input should be 'DEBUG', 'INFO', 'WARNING', 'ERROR' or 'CRITICAL'"
    ]


def test_a_log_level_in_any_case_is_accepted() -> None:
    done = gateway_cli("config", "check", GATEWAY_LOG_LEVEL="debug")
    assert done.returncode == 0, done.stderr
    assert orjson.loads(done.stdout)["log_level"] == "DEBUG"


def test_config_check_names_every_problem_and_the_nearest_setting() -> None:
    done = gateway_cli(
        "config",
        "check",
        GATEWAY_BLOKING_TIMEOUT_SECONDS="30",
        GATEWAY_PORT="tcp://10.0.0.7:8000",  # a Kubernetes service link, not a port
    )
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.splitlines() == [
        "gateway: invalid configuration: GATEWAY_PORT: "
        "Input should be a valid integer, unable to parse string as an integer",
        "gateway: invalid configuration: GATEWAY_BLOKING_TIMEOUT_SECONDS: not a setting of "
        "the gateway (did you mean GATEWAY_BLOCKING_TIMEOUT_SECONDS?)",
    ]
    assert "10.0.0.7" not in done.stderr


def test_config_check_of_a_valid_environment_prints_it_without_secrets() -> None:
    done = gateway_cli(
        "config",
        "check",
        GATEWAY_API_KEYS='{"sk-live-check-1": {"tenant": "t", "user": "u"}}',
        REDIS_URL="redis://:pw-check-2@127.0.0.1:6379/0",
    )
    assert done.returncode == 0, done.stderr
    shown = orjson.loads(done.stdout)
    assert shown["api_keys"] == {"keys": 1, "tenants": 1}
    assert "sk-live-check-1" not in done.stdout and "pw-check-2" not in done.stdout


def test_a_data_directory_that_cannot_be_made_is_one_line_and_exit_2(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    done = gateway_cli("serve", "--port", "1", GATEWAY_DATA_DIR=str(blocker / "data"))
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    (line,) = done.stderr.splitlines()
    assert orjson.loads(line)["event"].startswith("cannot run the embedded redis-server")


@slow_process_test
def test_serve_reports_a_misspelt_variable_at_start(tmp_path: Path) -> None:
    with serving(tmp_path, GATEWAY_BLOKING_TIMEOUT_SECONDS="5"):
        log = next(tmp_path.glob("serve-*.log"))

        def warned() -> bool:
            return "GATEWAY_BLOKING_TIMEOUT_SECONDS" in log.read_text()

        until_sync(warned, timeout=PROCESS_SECONDS, what="the warning", logs=log)
        (line,) = [ln for ln in log.read_text().splitlines() if "BLOKING" in ln]
        entry = orjson.loads(line)
        assert entry["level"] == "warning"
        assert "did you mean GATEWAY_BLOCKING_TIMEOUT_SECONDS?" in entry["event"]
        assert "5" not in entry["event"].replace("GATEWAY_", "")


def test_an_allowlist_pattern_that_is_no_host_is_refused() -> None:
    for bad in ("exa mple.com", "host:99999", "[::1]:x", "https://model.example"):
        done = gateway_cli("config", "check", GATEWAY_OUTBOUND_ALLOWLIST=f"vllm:8000,{bad}")
        assert done.returncode == 2, bad
        (line,) = done.stderr.splitlines()
        assert line.startswith("gateway: invalid configuration: GATEWAY_OUTBOUND_ALLOWLIST: ")
    good = "*.example.com:443,10.0.0.0/8,[::1]:8080,localhost:*,127.0.0.1,vllm:8000"
    assert gateway_cli("config", "check", GATEWAY_OUTBOUND_ALLOWLIST=good).returncode == 0


def test_sentinel_addresses_are_host_port_and_their_password_is_not_shown() -> None:
    for bad in ("sentinel-0", "sentinel-0:0", ":26379", "sentinel-0:port"):
        done = gateway_cli("config", "check", GATEWAY_REDIS_SENTINELS=f"s1:26379,{bad}")
        assert done.returncode == 2, bad
        (line,) = done.stderr.splitlines()
        assert line.startswith("gateway: invalid configuration: GATEWAY_REDIS_SENTINELS: ")
    done = gateway_cli(
        "config",
        "check",
        GATEWAY_REDIS_SENTINELS="s1:26379, s2:26379,[::1]:26380",
        GATEWAY_REDIS_SENTINEL_PASSWORD="sentinel-pw-3",
    )
    assert done.returncode == 0, done.stderr
    assert orjson.loads(done.stdout)["redis_sentinels"] == ["s1:26379", "s2:26379", "[::1]:26380"]
    assert "sentinel-pw-3" not in done.stdout
    # Sentinel and a Redis Cluster exclude each other: `gateway serve` says so and exits 2
    for cluster in ({"REDIS_URL": "redis+cluster://127.0.0.1:1"}, {"GATEWAY_REDIS_CLUSTER": "1"}):
        done = gateway_cli("serve", GATEWAY_REDIS_SENTINELS="127.0.0.1:2", **cluster)
        assert done.returncode == 2, done.stderr
        (line,) = done.stderr.splitlines()
        assert "GATEWAY_REDIS_SENTINELS: not with a Redis Cluster" in line
