"""GATEWAY_REDIS_MIN_REPLICAS_ACK: a write is reported done only once enough replicas have
it; without them the client gets 503 with Retry-After, and its retry is not a second write."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from redis import Redis

from gateway.embedded_redis import EmbeddedRedis
from tests.agents import Partial
from tests.conftest import AppFactory, message, post_message
from tests.waiting import until


@pytest.fixture
def replica(tmp_path: Path, redis_url: str) -> Iterator[EmbeddedRedis]:
    """A replica of the suite's Redis."""
    primary = urlsplit(redis_url)
    assert primary.port is not None
    server = EmbeddedRedis(
        tmp_path / "replica",
        password=False,
        extra_args=(
            "--replicaof", "127.0.0.1", str(primary.port),
            *(("--masterauth", primary.password) if primary.password else ()),
        ),
    )  # fmt: skip
    server.start()
    try:
        yield server
    finally:
        server.stop()


def _in_sync(server: EmbeddedRedis) -> bool:
    with Redis(port=server.port, socket_timeout=2) as client:
        return bool(client.info("replication").get("master_link_status") == "up")


async def test_a_send_is_refused_until_a_replica_has_it(
    make_app: AppFactory, replica: EmbeddedRedis, tmp_path: Path
) -> None:
    await until(lambda: _in_sync(replica), what="the replica to sync", logs=tmp_path)
    async with make_app(redis_min_replicas_ack=1, redis_replica_ack_timeout_ms=200) as c:
        replicated = await c.post(
            "/v1/message:send",
            json={"message": message("x"), "configuration": {"blocking": False}},
        )
        assert replicated.status_code == 200, replicated.text

        replica.stop()  # no replica left to acknowledge anything
        body = {
            "message": message("y", message_id="unreplicated-1"),
            "configuration": {"blocking": False},
        }
        refused = await c.post("/v1/message:send", json=body)
        assert refused.status_code == 503, refused.text
        assert refused.headers["Retry-After"] == "1"
        assert "replicate" in refused.json()["message"]
        rpc = {"jsonrpc": "2.0", "id": 1, "method": "message/send", "params": body}
        assert (await c.post("/", json=rpc)).json()["error"]["code"] == -32603

        replica.restart()
        await until(lambda: _in_sync(replica), what="the replica to sync again", logs=tmp_path)
        retried = await c.post("/v1/message:send", json=body)
        assert retried.status_code == 200, retried.text
        task = (await c.get(f"/v1/tasks/{retried.json()['task']['id']}")).json()
        # the refused write and its retry are one message of one task
        assert [m["messageId"] for m in task["history"] if m["role"] == "user"] == [
            "unreplicated-1"
        ]


async def test_a_cancel_is_refused_until_a_replica_has_it(
    make_app: AppFactory, replica: EmbeddedRedis, tmp_path: Path
) -> None:
    await until(lambda: _in_sync(replica), what="the replica to sync", logs=tmp_path)
    settings = {"redis_min_replicas_ack": 1, "redis_replica_ack_timeout_ms": 200}
    async with make_app([Partial()], **settings) as c:
        r = await post_message(
            c, "x", agent="partial", metadata={"sleep": 30}, configuration={"blocking": False}
        )
        assert r.status_code == 200, r.text
        task_id = r.json()["task"]["id"]

        replica.stop()
        refused = await c.post(f"/v1/tasks/{task_id}:cancel")
        assert refused.status_code == 503, refused.text
        assert refused.headers["Retry-After"] == "1"

        replica.restart()
        await until(lambda: _in_sync(replica), what="the replica to sync again", logs=tmp_path)
        # the refused cancel reached the primary: its retry finds the task canceled
        retried = await c.post(f"/v1/tasks/{task_id}:cancel")
        assert retried.status_code == 409, retried.text
        assert retried.json()["data"]["state"] == "canceled"
        assert (await c.get(f"/v1/tasks/{task_id}")).json()["status"]["state"] == "canceled"
