"""Shared fixtures: one real redis-server per session, a real app per test, driven over HTTP."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any, TypeAlias

import httpx
import orjson
import pytest

from gateway.app import create_app
from gateway.embedded_redis import EmbeddedRedis
from gateway.settings import Settings
from gateway.store.connection import RedisTarget
from gateway.store.jobs import JobStore
from gateway.store.keys import OUTBOX, OUTBOX_DEAD, OUTBOX_GROUP
from tests.cortadel_server import CortadelServer
from tests.embeddings_server import EmbeddingsServer

API_KEYS = {
    "key-alice": {"tenant": "t1", "user": "alice"},
    "key-bob": {"tenant": "t1", "user": "bob"},
    "key-carol": {"tenant": "t2", "user": "alice"},
    "key-admin": {"tenant": "t1", "user": "root", "roles": ["admin"]},
}
AppFactory = Callable[..., AbstractAsyncContextManager[httpx.AsyncClient]]
# The raw client the ``redis`` fixture yields (redis.asyncio's, or its cluster client).
# redis-py types its replies ``bytes | str | None`` whatever the client decodes, so each
# read would need a cast; tests read the bytes this client returns, untyped.
RawRedis: TypeAlias = Any
# The tests' encryption keys (content at rest is sealed, as by default); k0 is current.
TEST_KEYRING = (
    '{"k0": "dGVzdC1rZXktMC10ZXN0LWtleS0wLXRlc3Qta2V5LTA=", '
    '"k9": "dGVzdC1rZXktOS10ZXN0LWtleS05LXRlc3Qta2V5LTk="}'
)


CLUSTER = os.environ.get("GATEWAY_TEST_CLUSTER") == "1"


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """REDIS_URL if set; else a 3-master cluster (GATEWAY_TEST_CLUSTER=1) or one server."""
    if os.environ.get("REDIS_URL"):
        yield os.environ["REDIS_URL"]
        return
    if CLUSTER:
        from tests.cluster import LocalCluster

        cluster = LocalCluster(tmp_path_factory.mktemp("cluster"))
        yield cluster.start()
        cluster.stop()
        return
    server = EmbeddedRedis(tmp_path_factory.mktemp("redis"))
    server.start()
    yield server.url
    server.stop()


@pytest.fixture
async def redis(redis_url: str) -> AsyncIterator[RawRedis]:
    """A raw client on the test Redis (a cluster client on a cluster), flushed."""
    client: Any = RedisTarget.parse(redis_url).client(5.0)
    await client.flushall()
    yield client
    await client.aclose()


@asynccontextmanager
async def _lifespan(app: Any) -> AsyncIterator[None]:
    """Run the app's lifespan in a task of its own, as a server does (its task groups must
    be entered and left in one task, which pytest's fixtures do not guarantee)."""
    started, stop = asyncio.Event(), asyncio.Event()

    async def run() -> None:
        async with app.router.lifespan_context(app):
            started.set()
            await stop.wait()

    task = asyncio.create_task(run())
    waiter = asyncio.create_task(started.wait())
    await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
    if task.done():
        waiter.cancel()
        task.result()
    try:
        yield
    finally:
        stop.set()
        await task


@pytest.fixture
def make_app(redis_url: str, redis: RawRedis) -> AppFactory:
    """Build a gateway with settings overrides; yields an HTTP client bound to it."""

    @asynccontextmanager
    async def factory(agents: Any = (), **overrides: Any) -> AsyncIterator[httpx.AsyncClient]:
        values: dict[str, Any] = {
            "redis_url": redis_url,
            "log_requests": False,
            "encryption_keys": TEST_KEYRING,
        }
        values.update(overrides)
        app = create_app(Settings(**values), agents)
        async with _lifespan(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://gw") as client:
                client.app = app  # type: ignore[attr-defined]
                yield client

    return factory


@pytest.fixture
def cortadel() -> Iterator[CortadelServer]:
    """A Cortadel stand-in on 127.0.0.1 that checks requests against its OpenAPI spec."""
    server = CortadelServer().start()
    yield server
    server.stop()


@pytest.fixture
def embeddings() -> Iterator[EmbeddingsServer]:
    """An OpenAI-compatible embeddings endpoint on 127.0.0.1 (``tests/embeddings_server.py``)."""
    server = EmbeddingsServer().start()
    yield server
    server.stop()


@pytest.fixture
async def client(make_app: AppFactory) -> AsyncIterator[httpx.AsyncClient]:
    async with make_app() as c:
        yield c


@pytest.fixture
async def keyed(make_app: AppFactory) -> AsyncIterator[httpx.AsyncClient]:
    """A gateway with API keys; pass ``headers=auth("alice")`` per request."""
    async with make_app(api_keys=orjson.dumps(API_KEYS).decode()) as c:
        yield c


def auth(user: str) -> dict[str, str]:
    return {"Authorization": f"Bearer key-{user}"}


def message(
    *parts: dict[str, Any] | str,
    message_id: str | None = None,
    **fields: Any,
) -> dict[str, Any]:
    import uuid

    built = [{"kind": "text", "text": p} if isinstance(p, str) else p for p in parts or ("hi",)]
    body: dict[str, Any] = {
        "role": "user",
        "parts": built,
        "messageId": message_id or str(uuid.uuid4()),
    }
    body.update(fields)
    return body


async def post_message(
    c: httpx.AsyncClient,
    *parts: dict[str, Any] | str,
    agent: str | None = None,
    path: str | None = None,
    configuration: dict[str, Any] | None = None,
    headers: dict[str, str] | None = None,
    timeout: float | None = None,  # noqa: ASYNC109 (the HTTP request's own)
    **fields: Any,
) -> httpx.Response:
    """``message:send`` at the root (the default agent), at ``agent``'s base, or at
    ``path``; ``fields`` go into the message (``contextId``, ``metadata``, ...).
    ``timeout`` overrides the client's (for a blocking send to a served process)."""
    if path is None:
        path = f"/agents/{agent}/v1/message:send" if agent else "/v1/message:send"
    body: dict[str, Any] = {"message": message(*parts, **fields)}
    if configuration is not None:
        body["configuration"] = configuration
    if timeout is None:
        return await c.post(path, json=body, headers=headers)
    return await c.post(path, json=body, headers=headers, timeout=timeout)


async def send_task(
    c: httpx.AsyncClient, *parts: dict[str, Any] | str, **kw: Any
) -> dict[str, Any]:
    """``post_message`` that must succeed; returns the task."""
    r = await post_message(c, *parts, **kw)
    assert r.status_code == 200, r.text
    task: dict[str, Any] = r.json()["task"]
    return task


async def _drained(queue: JobStore) -> bool:
    figures = await queue.figures()
    return figures.queued + figures.pending == 0


async def runs_settled(redis: RawRedis) -> bool:
    """Whether every queued run has finished and been acknowledged (none queued or
    pending): after it, no run can write any more."""
    return await _drained(JobStore(redis))


async def outbox_settled(redis: RawRedis) -> bool:
    """Whether the long-term memory outbox (the ``gw:{jobs}:ltm`` stream) has nothing
    queued or in delivery. A scrub's job is added before the delete answers. A turn's job
    is written with the turn on a single Redis, but on a Redis Cluster it is added in a
    second step, after the script that completes the task: a send can answer, and this can
    read true, before the job is there. So it is a settled state only once that step is
    done: on a cluster, wait first for something that follows it (the turn arriving at the
    long-term store, a store attempt), not just for the send."""
    return await _drained(JobStore(redis, OUTBOX, OUTBOX_GROUP, OUTBOX_DEAD))


Send = Callable[..., Coroutine[Any, Any, httpx.Response]]


@pytest.fixture
def send(client: httpx.AsyncClient) -> Send:
    async def _send(
        *parts: dict[str, Any] | str,
        via: httpx.AsyncClient | None = None,
        **kw: Any,
    ) -> httpx.Response:
        return await post_message(via or client, *parts, **kw)

    return _send


CONTRACTS = Path(__file__).parent / "contracts"
