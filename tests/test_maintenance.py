"""Maintenance: one leader, idempotent pruning of expired contexts' index entries, figures."""

from __future__ import annotations

from gateway.http.auth import LOCAL_PRINCIPAL
from gateway.store.jobs import JobStore
from gateway.store.keys import MAINTENANCE_LEADER, keys_of
from tests.conftest import AppFactory, RawRedis, message, runs_settled
from tests.waiting import WAIT_SECONDS, until


async def test_one_leader_at_a_time(redis: RawRedis) -> None:
    """While its holder renews it, no one else takes the lead; once the holder falls silent,
    the lead expires and the next node to ask takes it. Held leases are far longer than any
    step of the test; only the holder's last renewal is short, and its expiry is awaited."""
    jobs = JobStore(redis)
    held = 60_000  # ms
    assert await jobs.lead("a", held)
    assert not await jobs.lead("b", held)
    assert await jobs.lead("a", held)  # renewal
    assert not await jobs.lead("b", held)
    assert await jobs.lead("a", 300)  # its last renewal, for 300 ms
    assert 0 < await redis.pttl(MAINTENANCE_LEADER) <= 300  # the renewal set the lease

    async def taken() -> bool:
        return await jobs.lead("b", held)

    await until(taken, what="the lead to pass to b once a falls silent")
    assert not await jobs.lead("a", held)


async def test_prune_drops_index_entries_of_expired_contexts(
    make_app: AppFactory, redis: RawRedis
) -> None:
    """Two contexts of one user, the second written when the first has half its TTL left:
    once the first has expired, the user's indexes (which the second write refreshed) still
    name it until a prune drops its entries. Expiry is watched in Redis, not slept through,
    so the first is gone and the second still has half a TTL when the prune runs."""
    ttl_ms = 4000
    keys = keys_of(LOCAL_PRINCIPAL)
    async with make_app(context_ttl_seconds=ttl_ms // 1000) as c:
        old = (await c.post("/v1/message:send", json={"message": message("a")})).json()["task"]
        old_meta = keys.meta(old["contextId"])
        # Its run and embedding refresh its TTL: the half that is left is counted after them.
        await until(lambda: runs_settled(redis), what="the first context's run to settle")

        async def embedded() -> bool:
            memory = (await c.get(f"/v1/contexts/{old['contextId']}")).json()["memory"]
            return bool(memory["pending"] == 0)

        await until(embedded, what="the first context's message to be embedded")

        async def half_spent() -> int | None:
            left = int(await redis.pttl(old_meta))
            assert left > 0, f"the first context expired before the second was written ({left})"
            return left if left <= ttl_ms // 2 else None

        await until(half_spent, what="the first context to have half its TTL left")
        new = (await c.post("/v1/message:send", json={"message": message("b")})).json()["task"]

        async def expired() -> bool:
            return not await redis.exists(old_meta)

        await until(
            expired, timeout=ttl_ms / 1000 + WAIT_SECONDS, what="the first context to expire"
        )
        # the user's indexes have not expired, nor has the second context
        live = [keys.contexts, keys.task_index, keys.origins, keys.meta(new["contextId"])]
        ttls = [await redis.pttl(key) for key in live]
        assert all(ttl > 0 for ttl in ttls), dict(zip(live, ttls, strict=True))
        maintenance = c.app.state.runtime.maintenance  # type: ignore[attr-defined]
        removed = await maintenance.prune()
        assert removed == 3  # its entry in the context index, task index and origin index
        assert await maintenance.prune() == 0  # idempotent
        listed = (await c.get("/v1/contexts")).json()
    assert [i["id"] for i in listed["items"]] == [new["contextId"]]
    values = b" ".join(
        [v async for k in redis.scan_iter(match="gw:{*:tix") for v in await redis.hvals(k)]
    )
    assert old["contextId"].encode() not in values


async def test_queue_figures_reach_metrics(make_app: AppFactory) -> None:
    async with make_app(workers=False) as c:
        for i in range(3):
            body = {"message": message(f"m{i}"), "configuration": {"blocking": False}}
            assert (await c.post("/v1/message:send", json=body)).status_code == 200
        await c.app.state.runtime.maintenance.publish_figures()  # type: ignore[attr-defined]
        text = (await c.get("/metrics")).text
    assert "gateway_jobs_queued 3.0" in text
    assert "gateway_jobs_pending 0.0" in text
    assert "gateway_jobs_lag_seconds" in text


async def test_http_only_replica_queues_without_running(make_app: AppFactory) -> None:
    async with make_app(workers=False, blocking_timeout_seconds=0.3) as c:
        r = await c.post("/v1/message:send", json={"message": message("x")})
        assert r.json()["task"]["status"]["state"] == "submitted"
    async with make_app() as worker:  # a replica with workers picks the job up
        tid = r.json()["task"]["id"]

        async def completed() -> bool:
            got = (await worker.get(f"/v1/tasks/{tid}")).json()
            return bool(got["status"]["state"] == "completed")

        await until(completed, what="the replica with workers to run the queued job")


async def test_reclaim_runs_with_streams_that_were_never_used(make_app: AppFactory) -> None:
    """With embedding off, the embedding stream has no consumer group: reclaiming must not
    stop at it (it used to raise on every cycle)."""
    async with make_app(embedder="none") as c:
        assert await c.app.state.runtime.maintenance.reclaim() == 0  # type: ignore[attr-defined]
