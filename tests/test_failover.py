"""A Sentinel-managed Redis loses its primary under load: the gateway follows the promoted
replica without a restart, and with GATEWAY_REDIS_MIN_REPLICAS_ACK nothing it acknowledged
is lost."""

from __future__ import annotations

import asyncio
import signal
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from redis import Redis

from tests.cluster import LocalCluster
from tests.processes import PROCESS_SECONDS, serving, slow_process_test
from tests.sentinel import MASTER, LocalSentinel
from tests.waiting import until, until_sync

CLIENTS = 4
# Each client's acknowledged sends before the primary is killed, and after service resumes.
BEFORE, AFTER = 10, 10
LOAD_SECONDS = 60  # a bound on the whole load, for a failover that never comes


@pytest.fixture
def sentinel(tmp_path: Path) -> Iterator[LocalSentinel]:
    topology = LocalSentinel(tmp_path / "redis")
    try:
        topology.start()
        yield topology
    finally:
        topology.stop()


@dataclass
class Load:
    """Non-blocking sends from several clients, each retried with its own message id (as a
    client honouring Retry-After would) until acknowledged."""

    base: str
    killed_at: float | None = None
    acknowledged: dict[str, str] = field(default_factory=dict)  # message id -> task id
    # when each send after the kill was acknowledged, and when it was first tried
    after_kill: list[tuple[float, float]] = field(default_factory=list)
    refused: int = 0
    failing: bool = False  # the failure is under way: the load goes on until it is over

    async def client(self, n: int, deadline: float) -> None:
        async with httpx.AsyncClient(base_url=self.base, timeout=30) as c:
            done = 0
            while time.monotonic() < deadline:
                if self.killed_at is None and done >= BEFORE:
                    await asyncio.sleep(0.02)  # until the kill: the load is bounded
                    continue
                if len(self.after_kill) >= CLIENTS * AFTER and not self.failing:
                    return
                message_id, tried = f"c{n}-{uuid.uuid4()}", time.monotonic()
                body = {
                    "message": {
                        "role": "user",
                        "parts": [{"kind": "text", "text": f"m{n}.{done}"}],
                        "messageId": message_id,
                    },
                    "configuration": {"blocking": False},
                }
                while time.monotonic() < deadline:
                    try:
                        r = await c.post("/v1/message:send", json=body)
                    except httpx.TransportError:
                        r = None
                    if r is not None and r.status_code == 200:
                        self.acknowledged[message_id] = r.json()["task"]["id"]
                        if self.killed_at is not None and tried >= self.killed_at:
                            self.after_kill.append((tried, time.monotonic()))
                        done += 1
                        break
                    assert r is None or r.status_code == 503, r.text
                    self.refused += 1
                    await asyncio.sleep(0.05)

    @property
    def resumed_seconds(self) -> float:
        """From the kill to the first send tried after it that was acknowledged."""
        assert self.killed_at is not None and self.after_kill
        return min(done for _, done in self.after_kill) - self.killed_at


def _kill_primary(sentinel: LocalSentinel) -> Callable[[], None]:
    def kill() -> None:
        primary = sentinel.primary_port()
        assert primary is not None
        process = sentinel.node(primary).process
        assert process is not None
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=PROCESS_SECONDS)

    return kill


def _sentinel_env(sentinel: LocalSentinel, replicas_ack: int) -> dict[str, str]:
    return {
        "REDIS_URL": "redis://127.0.0.1/0",  # scheme and database: the host is Sentinel's
        "GATEWAY_REDIS_SENTINELS": sentinel.addresses,
        "GATEWAY_REDIS_SENTINEL_MASTER": MASTER,
        "GATEWAY_REDIS_MIN_REPLICAS_ACK": str(replicas_ack),
    }


async def _fail_over_under_load(
    tmp_path: Path, env: dict[str, str], fail: Callable[[], None], logs: list[Path]
) -> tuple[Load, dict[str, Any]]:
    """Sends from several clients; ``fail`` (a primary killed, a failover forced) once each
    has some acknowledged; the load runs on until each has as many more. Returns the load
    and, for each acknowledged task, what became of it (None: it is gone)."""
    env = {
        "GATEWAY_REDIS_REPLICA_ACK_TIMEOUT_MS": "1000",
        "GATEWAY_REDIS_TIMEOUT_SECONDS": "1",
        "GATEWAY_JOB_LEASE_SECONDS": "2",
        **env,
    }
    logs = [*logs, tmp_path]
    with serving(tmp_path, **env) as (_, base):
        load = Load(base)
        deadline = time.monotonic() + LOAD_SECONDS
        clients = [asyncio.create_task(load.client(n, deadline)) for n in range(CLIENTS)]
        await until(
            lambda: len(load.acknowledged) >= CLIENTS * BEFORE or any(t.done() for t in clients),
            timeout=PROCESS_SECONDS,
            what="the first sends to be acknowledged",
            logs=logs,
        )
        load.killed_at, load.failing = time.monotonic(), True
        await asyncio.to_thread(fail)  # the load goes on meanwhile
        load.failing = False
        await asyncio.gather(*clients)
        assert len(load.after_kill) >= CLIENTS * AFTER, (
            f"service did not resume within {LOAD_SECONDS}s"
        )
        async with httpx.AsyncClient(base_url=base, timeout=30) as c:

            async def fates() -> dict[str, Any] | None:
                seen: dict[str, Any] = {}
                for task_id in load.acknowledged.values():
                    r = await c.get(f"/v1/tasks/{task_id}")
                    if r.status_code == 503:
                        return None
                    seen[task_id] = r.json() if r.status_code == 200 else None
                    assert r.status_code in (200, 404), r.text
                settled = [t for t in seen.values() if t is not None]
                done = all(t["status"]["state"] == "completed" for t in settled)
                return seen if done else None

            found = await until(
                fates, timeout=60, what="every acknowledged task to complete", logs=logs
            )
            # a blocking send's wait (task events, pub/sub) follows the new primary too
            body = {"message": {"role": "user", "parts": [{"kind": "text", "text": "after"}],
                                "messageId": str(uuid.uuid4())}}  # fmt: skip

            async def sent() -> httpx.Response | None:
                r = await c.post("/v1/message:send", json=body)
                assert r.status_code in (200, 503), r.text
                return r if r.status_code == 200 else None

            blocking = await until(sent, what="a blocking send", every=0.1, logs=logs)
            assert blocking.json()["task"]["status"]["state"] == "completed", blocking.text
    return load, found


@slow_process_test
async def test_primary_killed_with_replica_acks_loses_nothing_acknowledged(
    tmp_path: Path, sentinel: LocalSentinel
) -> None:
    primary = sentinel.primary_port()
    load, found = await _fail_over_under_load(
        tmp_path, _sentinel_env(sentinel, 1), _kill_primary(sentinel), sentinel.logs
    )
    assert sentinel.primary_port() != primary
    lost = [task_id for task_id, task in found.items() if task is None]
    assert lost == [], f"{len(lost)} acknowledged tasks lost"
    for task in found.values():
        # one run each: the message and its one answer, no duplicate
        assert [m["role"] for m in task["history"]] == ["user", "agent"], task
    assert len(set(load.acknowledged.values())) == len(load.acknowledged)
    print(
        f"\nfailover, MIN_REPLICAS_ACK=1: {len(load.acknowledged)} sends acknowledged, 0 lost, "
        f"{load.refused} refused (503) and retried; service resumed "
        f"{load.resumed_seconds:.1f}s after the primary was killed"
    )
    assert load.resumed_seconds < 20


@slow_process_test
async def test_primary_killed_without_replica_acks_what_can_be_lost(
    tmp_path: Path, sentinel: LocalSentinel
) -> None:
    load, found = await _fail_over_under_load(
        tmp_path, _sentinel_env(sentinel, 0), _kill_primary(sentinel), sentinel.logs
    )
    lost = [task_id for task_id, task in found.items() if task is None]
    print(
        f"\nfailover, MIN_REPLICAS_ACK=0: {len(load.acknowledged)} sends acknowledged, "
        f"{len(lost)} lost; service resumed {load.resumed_seconds:.1f}s after the primary "
        "was killed"
    )
    assert load.resumed_seconds < 20


@slow_process_test
async def test_cluster_failover_forced_under_load_loses_nothing_acknowledged(
    tmp_path: Path,
) -> None:
    cluster = LocalCluster(tmp_path / "cluster", masters=3, replicas=1)
    try:
        url = cluster.start()
        logs = [node.data_dir / "redis.log" for node in cluster.nodes]

        def force() -> None:
            """Every replica takes its primary's place at once (CLUSTER FAILOVER FORCE)."""
            for port in [n.port for n in cluster.nodes if _role(n.port) == "slave"]:
                _force_failover(port, logs)

        env = {"REDIS_URL": url, "GATEWAY_REDIS_MIN_REPLICAS_ACK": "1"}
        load, found = await _fail_over_under_load(tmp_path, env, force, logs)
    finally:
        cluster.stop()
    lost = [task_id for task_id, task in found.items() if task is None]
    assert lost == [], f"{len(lost)} acknowledged tasks lost"
    for task in found.values():
        assert [m["role"] for m in task["history"]] == ["user", "agent"], task
    print(
        f"\ncluster failover forced, MIN_REPLICAS_ACK=1: {len(load.acknowledged)} sends "
        f"acknowledged, 0 lost; service resumed {load.resumed_seconds:.1f}s after"
    )


def _role(port: int) -> str:
    with Redis(port=port, socket_timeout=5) as client:
        return str(client.info("replication")["role"])


def _force_failover(port: int, logs: list[Path]) -> None:
    """The replica on ``port`` takes its primary's place. One shard at a time: elections of
    several at once may split the primaries' votes, and a manual failover that loses its
    election is not tried again by Redis, so it is asked again here."""
    for attempt in range(3):
        with Redis(port=port, socket_timeout=5) as client:
            client.execute_command("CLUSTER", "FAILOVER", "FORCE")
        try:
            until_sync(lambda: _role(port) == "master", timeout=15, what=f"{port} to take over")
            return
        except AssertionError:
            if attempt == 2:
                until_sync(lambda: _role(port) == "master", timeout=1, logs=logs)


@slow_process_test
async def test_a_primary_demoted_by_sentinel_under_load_loses_nothing_acknowledged(
    tmp_path: Path, sentinel: LocalSentinel
) -> None:
    """SENTINEL FAILOVER of a live primary: it takes writes until the Sentinels demote it,
    and a replica still following it may acknowledge them; with every replica required
    (N = 2 here) none is acknowledged there, and the gateway moves to the new primary."""
    primary = sentinel.primary_port()
    assert primary is not None

    def fail_over() -> None:
        assert primary is not None
        with Redis(port=sentinel.sentinel_ports[0], socket_timeout=5) as client:
            client.execute_command("SENTINEL", "FAILOVER", MASTER)
        until_sync(
            lambda: sentinel.primary_port() not in (None, primary) and _role(primary) == "slave",
            timeout=60,
            what="the Sentinels to promote a replica and demote the old primary",
            logs=sentinel.logs,
        )

    load, found = await _fail_over_under_load(
        tmp_path, _sentinel_env(sentinel, 2), fail_over, sentinel.logs
    )
    lost = [task_id for task_id, task in found.items() if task is None]
    assert lost == [], f"{len(lost)} of {len(found)} acknowledged tasks lost"
    for task in found.values():
        assert [m["role"] for m in task["history"]] == ["user", "agent"], task
    print(
        f"\nSentinel failover (primary demoted), MIN_REPLICAS_ACK=2: "
        f"{len(load.acknowledged)} sends acknowledged, 0 lost; service resumed "
        f"{load.resumed_seconds:.1f}s after"
    )


def _own_slots(port: int) -> list[tuple[int, int]]:
    with Redis(port=port, socket_timeout=5) as client:
        me = client.execute_command("CLUSTER", "MYID")
        me = me.decode() if isinstance(me, bytes) else me
        ranges = client.execute_command("CLUSTER", "SLOTS")
    return [(int(r[0]), int(r[1])) for r in ranges if _decoded(r[2][2]) == me]


def _decoded(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


@slow_process_test
async def test_a_cluster_without_a_primary_for_its_slots_answers_503_then_serves_again(
    tmp_path: Path,
) -> None:
    """While shards serve no slots (CLUSTERDOWN, as between a primary's loss and its
    replica's election), every call answers 503 with Retry-After, never a 500; once the
    slots are served again, so is the gateway."""
    cluster = LocalCluster(tmp_path / "cluster", masters=3)
    try:
        url = cluster.start()
        logs = [node.data_dir / "redis.log" for node in cluster.nodes]
        env = {"REDIS_URL": url, "GATEWAY_REDIS_TIMEOUT_SECONDS": "1"}
        with serving(tmp_path, **env) as (_, base):
            async with httpx.AsyncClient(base_url=base, timeout=60) as c:

                def send(text: str) -> dict[str, Any]:
                    return {"message": {"role": "user", "parts": [{"kind": "text", "text": text}],
                                        "messageId": str(uuid.uuid4())}}  # fmt: skip

                r = await c.post("/v1/message:send", json=send("before"))
                assert r.status_code == 200, r.text
                task_id = r.json()["task"]["id"]
                owned = {node.port: _own_slots(node.port) for node in cluster.nodes}
                for port, ranges in owned.items():
                    with Redis(port=port, socket_timeout=5) as client:
                        for first, last in ranges:
                            client.execute_command("CLUSTER", "DELSLOTS", *range(first, last + 1))
                for call in (
                    c.post("/v1/message:send", json=send("during")),
                    c.get(f"/v1/tasks/{task_id}"),
                ):
                    r = await call
                    assert r.status_code == 503, r.text
                    assert r.headers["Retry-After"] == "1"
                    assert r.json()["error"] == "InternalError", r.text
                for port, ranges in owned.items():
                    with Redis(port=port, socket_timeout=5) as client:
                        for first, last in ranges:
                            client.execute_command("CLUSTER", "ADDSLOTS", *range(first, last + 1))

                async def served() -> httpx.Response | None:
                    r = await c.post("/v1/message:send", json=send("after"))
                    assert r.status_code in (200, 503), r.text
                    return r if r.status_code == 200 else None

                # The client learns the slot map again, on a busy machine in many seconds.
                after = await until(
                    served,
                    timeout=PROCESS_SECONDS,
                    what="service after the slots are served",
                    logs=logs,
                )
                assert after.json()["task"]["status"]["state"] == "completed", after.text
    finally:
        cluster.stop()
