"""The stream consumer's loops (behind the run queue, the indexer, the long-term outbox and
the push deliverer) outlive whatever a Redis command raises: a consumer that met an error
no retry expects (as redis-py's cluster client raises while a cluster changes) still reads
its jobs and renews their leases afterwards."""

from __future__ import annotations

import asyncio
from typing import Any

from gateway.store.jobs import Entry, JobStore
from gateway.stream_consumer import BatchConsumer
from tests.waiting import until

STREAM, GROUP, DEAD = "test:consumer:jobs", "test:consumer:group", "test:consumer:dead"


class _Faulty(JobStore):
    """Real jobs on the test Redis; the calls named in ``faults`` fail once each, in turn,
    with an error that is no Redis outage the consumer knows of."""

    def __init__(self, client: Any, *faults: str) -> None:
        super().__init__(client, STREAM, GROUP, DEAD)
        self.faults = list(faults)
        self.renewed = 0

    def _fault(self, call: str) -> None:
        if self.faults and self.faults[0] == call:
            self.faults.pop(0)
            raise RuntimeError("unable to perform operation: the handler is closed")

    async def read(self, consumer: str, count: int, block_ms: int | None) -> list[Entry]:
        self._fault("read")
        return await super().read(consumer, count, block_ms)

    async def ensure_group(self) -> None:
        self._fault("ensure_group")
        await super().ensure_group()

    async def heartbeat(self, consumer: str, entries: list[str]) -> None:
        self._fault("heartbeat")
        await super().heartbeat(consumer, entries)
        self.renewed += 1


class _Collector(BatchConsumer):
    """Takes each batch and holds it until ``release`` is set."""

    def __init__(self, jobs: JobStore, lease_seconds: float = 30.0) -> None:
        super().__init__(jobs, consumer="c1", batch=8, block_ms=50, lease_seconds=lease_seconds)
        self.seen: list[bytes] = []
        self.release = asyncio.Event()
        self.release.set()

    async def process(self, entries: list[Entry]) -> None:
        self.seen += [fields[b"n"] for _, fields in entries]
        await self.release.wait()
        await self.jobs.ack([entry for entry, _ in entries])


async def test_a_failed_read_and_a_failed_group_after_it_do_not_stop_the_reading(
    redis: Any,
) -> None:
    jobs = _Faulty(redis, "read", "ensure_group")
    consumer = _Collector(jobs)
    await consumer.start()
    try:
        await redis.xadd(STREAM, {"n": "1"})
        await until(lambda: consumer.seen == [b"1"], what="the job read after both failures")
        assert jobs.faults == []
    finally:
        await consumer.stop()


async def test_a_failed_lease_renewal_does_not_stop_the_renewals(redis: Any) -> None:
    jobs = _Faulty(redis, "heartbeat")
    consumer = _Collector(jobs, lease_seconds=0.3)  # renewed every 0.1 s
    consumer.release.clear()  # the job is held while this test looks
    await consumer.start()
    try:
        await redis.xadd(STREAM, {"n": "1"})
        await until(lambda: consumer.seen == [b"1"], what="the job read")
        await until(lambda: jobs.renewed >= 2, what="the lease renewed after the failed renewal")
        assert jobs.faults == []
    finally:
        consumer.release.set()
        await consumer.stop()
