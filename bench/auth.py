"""`make bench` identity, limits and audit: what each costs a blocking send at c=32.

Five gateways on one Redis, measured in interleaved rounds: open mode, a static API key,
a JWT from an identity provider stand-in (its JWKS fetched once, then cached; the client
reuses its token, as OAuth2 clients do), an API key with the audit trail and a rate limit
(set high enough never to refuse), and a JWT with both. The audit trail is off in the first
three, so each figure shows one mechanism's cost.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
from pathlib import Path

import orjson

from bench import loadgen
from bench.harness import (
    ROUNDS,
    SECONDS,
    by_round,
    gateway,
    in_turn,
    line,
    merge,
    posts,
    ratio,
    send_body,
)
from bench.report import REPORT
from gateway.embedded_redis import EmbeddedRedis, free_port
from tests.identity_provider import IdentityProvider

KEY = "bench-api-key-0123456789"
LIMIT = "10000000/60"  # never reached: the check's cost, not its refusals


def _configs(idp: IdentityProvider) -> dict[str, tuple[dict[str, str], str]]:
    """name -> (environment, Authorization header line)."""
    keys = orjson.dumps({KEY: {"tenant": "t1", "user": "bench"}}).decode()
    issuers = orjson.dumps([idp.issuer()]).decode()
    token = idp.token("r1", sub="bench", tenant="t1", exp=2_000_000_000)
    off = {"GATEWAY_AUDIT": "false"}
    limited = {
        "GATEWAY_AUDIT": "true",
        "GATEWAY_RATE_LIMIT_USER": LIMIT,
        "GATEWAY_RATE_LIMIT_TENANT": LIMIT,
    }
    return {
        "open": (off, ""),
        "API key": ({**off, "GATEWAY_API_KEYS": keys}, f"Authorization: Bearer {KEY}\r\n"),
        "JWT (cached JWKS)": (
            {**off, "GATEWAY_JWT_ISSUERS": issuers},
            f"Authorization: Bearer {token}\r\n",
        ),
        "API key + audit + rate limit": (
            {**limited, "GATEWAY_API_KEYS": keys},
            f"Authorization: Bearer {KEY}\r\n",
        ),
        "JWT + audit + rate limit": (
            {**limited, "GATEWAY_JWT_ISSUERS": issuers},
            f"Authorization: Bearer {token}\r\n",
        ),
    }


def _cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def _rounds(
    ports: dict[str, int], headers: dict[str, str], pids: dict[str, int]
) -> tuple[dict[str, loadgen.Result], dict[str, float]]:
    """Merged results, and each gateway's CPU milliseconds per answered send (less
    sensitive than throughput to whatever else the machine runs)."""
    counter = itertools.count(70_000_000)
    results: dict[str, list[loadgen.Result]] = {name: [] for name in ports}
    cpu = dict.fromkeys(ports, 0.0)
    for name, port in ports.items():  # warm up: JWKS fetched, scripts loaded, caches filled
        status, body = await loadgen.one(
            port, loadgen.post("/v1/message:send", send_body(next(counter)), headers[name])
        )
        assert status == 200, (name, body[:200])
    for n in range(ROUNDS):
        for name, port in in_turn(ports.items(), n):
            header = headers[name]
            before = _cpu_seconds(pids[name])
            results[name].append(
                await loadgen.run(
                    port,
                    posts("/v1/message:send", send_body, header),
                    32,
                    SECONDS,
                    counter,
                )
            )
            cpu[name] += _cpu_seconds(pids[name]) - before
    merged = {name: merge(r) for name, r in results.items()}
    per_send = {n: ratio(cpu[n] * 1000, len(merged[n].latencies)) for n in merged}
    return merged, per_send


def auth_bench(tmp: Path) -> None:
    server = EmbeddedRedis(tmp / "redis-auth")
    url = server.start()
    idp = IdentityProvider()
    idp.publish("r1", "rsa")
    idp.start()
    configs = _configs(idp)
    ports = {name: free_port() for name in configs}
    base = {"REDIS_URL": url, "GATEWAY_EMBEDDER": "none"}
    try:
        with contextlib.ExitStack() as stack:
            pids = {}
            for name, (env, _) in configs.items():
                port = ports[name]
                proc = stack.enter_context(gateway(port, {**base, **env}))
                pids[name] = proc.pid
            headers = {n: h for n, (_, h) in configs.items()}
            merged, per_send = asyncio.run(_rounds(ports, headers, pids))
    finally:
        idp.stop()
        server.stop()
    print(f"blocking echo message:send, concurrency 32, by auth mode ({ROUNDS} interleaved rounds)")
    for name, result in merged.items():
        print(f"{line(name, result)}   gateway CPU {per_send[name]:.2f} ms/send")
        REPORT.run("message:send, c=32, auth", name, "gateway", result)
        REPORT.figure(f"c=32 gateway CPU ms per send, {name}", per_send[name])
    open_mode = merged["open"].throughput
    for name, result in merged.items():
        if name != "open":
            REPORT.figure(
                f"c=32 send throughput, {name} / open", ratio(result.throughput, open_mode)
            )
    target = ratio(merged["JWT + audit + rate limit"].throughput, open_mode)
    cpu_ratio = ratio(per_send["open"], per_send["JWT + audit + rate limit"])
    spread = by_round(merged["JWT + audit + rate limit"], merged["open"])
    print(
        f"  JWT + audit + rate limit / open: throughput {target:.2f} ({spread}), "
        f"CPU per send (open / it) {cpu_ratio:.2f}"
    )
    REPORT.figure("c=32 gateway CPU per send, open / (JWT + audit + rate limit)", cpu_ratio)
    REPORT.target("c=32 send throughput, JWT + audit + rate limit / open", target, 0.90, ">=")
