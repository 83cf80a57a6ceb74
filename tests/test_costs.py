"""Work per request does not grow with the context: counted in Redis commands, not time."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import orjson

from gateway.principal import Principal
from gateway.store.redis_store import Store
from tests.conftest import API_KEYS, AppFactory, RawRedis, auth, message
from tests.stored import store_messages

LOCAL = Principal("default", "local")


async def _fill(redis: RawRedis, context_id: str, count: int) -> None:
    """Grow an existing context to ``count`` more messages through the store's own API."""
    fillers = [f"filler {i}" for i in range(count)]
    await store_messages(Store(redis, 3600), LOCAL, context_id, fillers, new_context=False)


async def _commands(redis: RawRedis) -> dict[str, int]:
    stats = await redis.info("commandstats")
    return {name: int(v["calls"]) for name, v in stats.items()}


async def _measure(redis: RawRedis, action: object) -> dict[str, int]:
    await redis.config_resetstat()
    await action()  # type: ignore[operator]
    counts = await _commands(redis)
    for name in ("info", "config|resetstat", "config"):
        counts.pop(f"cmdstat_{name}", None)
    # The background readers' polls (the webhook deliverer's, with queue=memory): a poll that
    # ends inside the window is counted, however short the window; they read no context.
    counts.pop("cmdstat_xreadgroup", None)
    return counts


async def test_append_and_page_cost_same_at_10_and_10000(
    make_app: AppFactory, redis: RawRedis
) -> None:
    # The `working` mark of slow runs is timing-dependent, and the queue readers, indexer and
    # maintenance issue background commands; keep both out of the count (the audit trail's
    # writes too: they are batched behind the answers). The durable path adds a constant: one
    # script to start the run and a share of one XREADGROUP.
    async with make_app(
        working_after_ms=60_000, queue="memory", embedder="none", audit=False
    ) as client:
        # Only this app may talk to Redis while commands are counted (no other fixture app).
        async def send(*parts: str, via: httpx.AsyncClient, **fields: Any) -> httpx.Response:
            return await via.post("/v1/message:send", json={"message": message(*parts, **fields)})

        await _compare(client, send, redis)


async def _compare(client: httpx.AsyncClient, send: Any, redis: RawRedis) -> None:
    small = (await send("s", via=client)).json()["task"]["contextId"]
    large = (await send("l", via=client)).json()["task"]["contextId"]
    await _fill(redis, small, 10)
    await _fill(redis, large, 10_000)

    async def append_small() -> None:
        assert (await send("x", contextId=small, via=client)).status_code == 200

    async def append_large() -> None:
        assert (await send("x", contextId=large, via=client)).status_code == 200

    async def page_small() -> None:
        assert (await client.get(f"/v1/contexts/{small}?limit=10&offset=0")).status_code == 200

    async def page_large() -> None:
        r = await client.get(f"/v1/contexts/{large}?limit=10&offset=5000")
        assert r.status_code == 200 and r.json()["total"] == 10_002

    small_cost = await _measure(redis, append_small)
    assert small_cost["cmdstat_evalsha"] == 2  # the send, and the run's one write
    assert small_cost == await _measure(redis, append_large)
    assert await _measure(redis, page_small) == await _measure(redis, page_large)
    report = (await send("y", contextId=large, via=client)).json()["task"]["artifacts"][0]["parts"][
        -1
    ]
    assert report["data"]["echo"]["historyMessages"] == 100  # GATEWAY_AGENT_CONTEXT_MESSAGES


Command = dict[str, Any]


async def _monitored(
    redis: RawRedis, action: Callable[[], Awaitable[None]], last: Callable[[list[Command]], bool]
) -> list[Command]:
    """The commands Redis gets (MONITOR) from just before ``action`` until ``last`` holds."""
    seen: list[Command] = []
    started = asyncio.Event()

    async def watch() -> None:
        async with redis.monitor() as monitor:
            started.set()
            while not seen or not last(seen):
                seen.append(await monitor.next_command())

    watcher = asyncio.create_task(watch())
    await asyncio.wait_for(started.wait(), 30)
    await action()
    await asyncio.wait_for(watcher, 60)
    return seen


def _senders(seen: list[Command], prefix: str) -> set[tuple[str, str]]:
    """The clients (address, port) that sent commands starting with ``prefix``."""
    return {
        (c["client_address"], c["client_port"]) for c in seen if c["command"].startswith(prefix)
    }


async def test_a_sends_audit_entry_rides_the_connection_of_its_scripts(
    make_app: AppFactory, redis: RawRedis
) -> None:
    """On a standalone Redis the audit trail's batches go on the multiplexed connection the
    send scripts use, beside them, not through a pooled connection of their own (seen with
    MONITOR: the client that sent the EVALSHAs sends the audit stream's XADD)."""
    async with make_app(queue="memory", embedder="none") as client:
        assert (await client.post("/v1/message:send", json={"message": message("a")})).is_success

        async def send() -> None:
            r = await client.post("/v1/message:send", json={"message": message("b")})
            assert r.status_code == 200

        def audited(seen: list[Command]) -> bool:
            scripts = any(c["command"].startswith("EVALSHA") for c in seen)
            return scripts and str(seen[-1]["command"]).startswith("XADD gw:{au:")

        seen = await _monitored(redis, send, audited)
        senders = _senders(seen, "EVALSHA")
        audit = seen[-1]  # the second send's entry (the first's may come before its scripts)
        assert len(senders) == 1, seen
        assert (audit["client_address"], audit["client_port"]) in senders


async def test_the_indexers_acknowledgements_ride_the_connection_of_the_scripts(
    make_app: AppFactory, redis: RawRedis
) -> None:
    """On a standalone Redis the indexer acknowledges its batch (XACK and XDEL of the
    embedding stream) on the multiplexed connection the send scripts use, not through a
    pooled connection's MULTI (seen with MONITOR)."""
    async with make_app(queue="memory", embedder="hashing", audit=False) as client:

        async def send() -> None:
            r = await client.post(
                "/v1/message:send", json={"message": message("an allergy to penicillin")}
            )
            assert r.status_code == 200

        def acknowledged(seen: list[Command]) -> bool:
            return str(seen[-1]["command"]).startswith("XDEL gw:{jobs}:embed")

        seen = await _monitored(redis, send, acknowledged)
        ack = seen[-2]
        assert ack["command"].startswith("XACK gw:{jobs}:embed"), seen
        assert _senders(seen[-2:], "X") <= _senders(seen, "EVALSHA")
        assert not any(c["command"] == "MULTI" for c in seen), seen


async def test_a_rate_limit_check_rides_the_connection_of_the_scripts(
    make_app: AppFactory, redis: RawRedis
) -> None:
    """On a standalone Redis a request's rate-limit check (the rate script, over the
    principal's and the tenant's keys) goes on the multiplexed connection the send scripts
    use, not through a pooled connection (seen with MONITOR)."""
    limits = {"rate_limit_user": "1000/3600", "rate_limit_tenant": "1000/3600"}
    keys = orjson.dumps(API_KEYS).decode()
    async with make_app(queue="memory", embedder="none", api_keys=keys, **limits) as client:
        first = {"message": message("a")}
        assert (await client.post("/v1/message:send", json=first, headers=auth("alice"))).is_success

        async def send() -> None:
            body = {"message": message("b")}
            r = await client.post("/v1/message:send", json=body, headers=auth("alice"))
            assert r.status_code == 200

        def answered(seen: list[Command]) -> bool:  # the send's last script: its run's end
            return sum(str(c["command"]).startswith("EVALSHA") for c in seen) >= 3

        seen = await _monitored(redis, send, answered)
        checks = [c for c in seen if c["command"].startswith("EVALSHA") and "{rl:" in c["command"]]
        assert checks, seen
        sends = [
            c for c in seen if c["command"].startswith("EVALSHA") and "{rl:" not in c["command"]
        ]
        assert sends, seen
        assert _senders(checks, "EVALSHA") == _senders(sends, "EVALSHA"), seen


async def test_a_polled_task_is_read_on_the_connection_of_the_scripts(
    make_app: AppFactory, redis: RawRedis
) -> None:
    """On a standalone Redis a poll of a task (GET: the task's context from the user's
    index, then the task's fields) goes on the multiplexed connection the send scripts
    use, not through pooled connections (seen with MONITOR)."""
    async with make_app(queue="memory", embedder="none", audit=False) as client:
        sent = await client.post("/v1/message:send", json={"message": message("a")})
        task_id = sent.json()["task"]["id"]

        async def send_and_poll() -> None:
            r = await client.post("/v1/message:send", json={"message": message("b")})
            assert r.status_code == 200
            polled = await client.get(f"/v1/tasks/{task_id}?historyLength=0")
            assert polled.status_code == 200 and polled.json()["id"] == task_id

        def polled(seen: list[Command]) -> bool:
            last = seen[-1]
            return str(last["command"]).startswith("HMGET") and last["client_address"] != "lua"

        seen = await _monitored(redis, send_and_poll, polled)
        reads = [
            c
            for c in seen
            if c["command"].startswith(("HGET ", "HMGET ")) and c["client_address"] != "lua"
        ]
        assert [c["command"].split()[0] for c in reads] == ["HGET", "HMGET"], seen
        assert reads[0]["command"].endswith(f":tix {task_id}"), reads  # the user's task index
        assert _senders(reads, "H") == _senders(seen, "EVALSHA"), seen


async def test_a_send_and_its_run_each_write_the_context_meta_and_the_task_once(
    make_app: AppFactory, redis: RawRedis
) -> None:
    """A message that continues a context, and its run's last write, each set the context's
    meta fields (its seq, bytes, task and embedding counts, the vector's fields, when it was
    updated) in one HSET, with no HINCRBY; and the send writes its new task's fields with the
    task's job and attempt in one HSET (seen with MONITOR: the commands the scripts make, on
    the durable queue, with the run embedding its message)."""
    async with make_app(embedder="hashing") as client:
        first = await client.post("/v1/message:send", json={"message": message("a")})
        assert first.status_code == 200
        context_id = first.json()["task"]["contextId"]

        async def send() -> None:
            body = {"message": message("an allergy to penicillin", contextId=context_id)}
            r = await client.post("/v1/message:send", json=body)
            assert r.status_code == 200 and r.json()["task"]["status"]["state"] == "completed"

        def scripts(seen: list[Command]) -> list[Command]:
            return [
                c for c in seen if c["command"].startswith("EVALSHA") and ":ctxs " in c["command"]
            ]

        def audited(seen: list[Command]) -> bool:  # the entry after both scripts of the send
            return len(scripts(seen)) >= 2 and str(seen[-1]["command"]).startswith("XADD gw:{au:")

        seen = await _monitored(redis, send, audited)
        # The seqs the merged writes counted are what a reader sees: each task's own history.
        page = await client.get(f"/v1/contexts/{context_id}?limit=10&offset=0")
        assert page.status_code == 200 and page.json()["total"] == 2, page.text
        for task, text in zip(page.json()["items"], ["a", "an allergy to penicillin"], strict=True):
            read = await client.get(f"/v1/tasks/{task['id']}?historyLength=10")
            history = read.json()["history"]
            assert [m["role"] for m in history] == ["user", "agent"], read.text
            assert history[0]["parts"][0]["text"] == text, read.text
    start = seen.index(scripts(seen)[-2])
    inner = [c["command"].split()[:2] for c in seen[start:] if c["client_address"] == "lua"]
    meta_key = next(key for _, key in inner if key.endswith(f":c:{context_id}"))
    meta_writes = [name for name, key in inner if key == meta_key and name.startswith("H")]
    assert [n for n in meta_writes if n != "HMGET"] == ["HSET", "HSET"], inner
    task_writes = [name for name, key in inner if key == f"{meta_key}:tasks" and name == "HSET"]
    assert task_writes == ["HSET", "HSET"], inner  # the send's, and the run's last write's
