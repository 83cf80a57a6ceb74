"""The client address of `gateway serve` (audit trail, failed-authentication limits): the
connection's peer, unless it is a proxy listed in GATEWAY_FORWARDED_ALLOW_IPS, whose
X-Forwarded-For is then believed. Through real processes: uvicorn reads the header."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from gateway.configuration import ConfigurationError, load_settings
from tests.conftest import API_KEYS, RawRedis, auth
from tests.processes import serving, slow_process_test
from tests.waiting import until_sync

KEYS = orjson.dumps(API_KEYS).decode()
FORGED = "203.0.113.7"


def _env(tmp: Path, redis_url: str, **env: str) -> dict[str, str]:
    return {
        "REDIS_URL": redis_url,
        "GATEWAY_API_KEYS": KEYS,
        "GATEWAY_EMBEDDER": "none",
        "GATEWAY_AUDIT_MIRROR": str(tmp / "audit.jsonl"),
        **env,
    }


def _audited(tmp: Path, n: int) -> list[dict[str, Any]]:
    """The mirrored audit entries, once there are at least ``n``."""

    def enough() -> list[dict[str, Any]] | None:
        path = tmp / "audit.jsonl"
        lines = path.read_bytes().splitlines() if path.exists() else []
        entries = [orjson.loads(line) for line in lines if line.strip()]
        return entries if len(entries) >= n else None

    found: list[dict[str, Any]] = until_sync(enough, what=f"{n} audit entries", logs=tmp)
    return found


@slow_process_test
def test_a_forged_forwarded_for_is_not_believed_by_default(
    tmp_path: Path, redis_url: str, redis: RawRedis
) -> None:
    """Anyone can send X-Forwarded-For: with no proxy listed it changes nothing. The audit
    trail records the real peer, and a client failing to authenticate cannot escape its
    limit by naming a new address each time."""
    env = _env(tmp_path, redis_url, GATEWAY_AUTH_FAILURE_LIMIT="3/3600")
    with serving(tmp_path, **env) as (_, base), httpx.Client(base_url=base, timeout=30) as c:
        forged = {**auth("alice"), "X-Forwarded-For": FORGED}
        assert c.get("/v1/contexts", headers=forged).status_code == 200
        statuses = [
            c.get(
                "/v1/contexts",
                headers={"X-API-Key": f"guess-{i}", "X-Forwarded-For": f"198.51.100.{i}"},
            ).status_code
            for i in range(5)
        ]
        assert statuses == [401, 401, 401, 429, 429]
        # The address is over its limit; a valid key from it is still served.
        assert c.get("/v1/contexts", headers=auth("bob")).status_code == 200
        entries = _audited(tmp_path, 7)
    assert {e["client"] for e in entries} == {"127.0.0.1"}, entries


@slow_process_test
def test_a_listed_proxy_names_the_client(tmp_path: Path, redis_url: str, redis: RawRedis) -> None:
    """From a proxy in GATEWAY_FORWARDED_ALLOW_IPS (a CIDR here), X-Forwarded-For names the
    client: the first address, from the right, that is not a listed proxy."""
    env = _env(tmp_path, redis_url, GATEWAY_FORWARDED_ALLOW_IPS="10.0.0.0/8, 127.0.0.0/8")
    with serving(tmp_path, **env) as (_, base), httpx.Client(base_url=base, timeout=30) as c:
        forwarded = {**auth("alice"), "X-Forwarded-For": f"{FORGED}, 10.1.2.3"}
        assert c.get("/v1/contexts", headers=forwarded).status_code == 200
        entries = _audited(tmp_path, 1)
    assert [e["client"] for e in entries] == [FORGED], entries


def test_a_proxy_that_is_no_address_is_a_configuration_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Named by its variable (never its value), rather than silently never matching."""
    for name in [n for n in os.environ if n.upper().startswith(("GATEWAY_", "REDIS_URL"))]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("GATEWAY_FORWARDED_ALLOW_IPS", "10.0.0.0/8, proxy.internal")
    with pytest.raises(ConfigurationError) as raised:
        load_settings()
    assert [p.split(":")[0] for p in raised.value.problems] == ["GATEWAY_FORWARDED_ALLOW_IPS"]
    assert "proxy.internal" not in str(raised.value)
    monkeypatch.setenv("GATEWAY_FORWARDED_ALLOW_IPS", "10.0.0.0/8, ::1")
    assert load_settings().forwarded_allow_ips == ["10.0.0.0/8", "::1"]
