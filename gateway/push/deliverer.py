"""Delivers queued task events to webhooks: the push notification outbox.

Events come from ``gw:{jobs}:push`` (ids only), queued by the script that changed the task,
in the same atomic step. Each is delivered on its own task: up to ``concurrency`` requests
are under way per process, at most ``per_origin`` of them to one origin (``origins.py``),
acknowledgements made while one is under way go together (``acks.py``),
and events waiting for a retry hold no request slot, so one slow or dead webhook holds up
no other — until a process holds ``HELD_PER_SLOT × concurrency``
events (8,192 by default), when it stops reading until some are done. Their entries' leases
are renewed together while they last, so a webhook that is down for hours neither loses its
events nor lets maintenance requeue them. An event is acknowledged once the webhook answers
2xx (at least once: a crash before the acknowledgement repeats it, under the same event id).

Each attempt reads the config and the task afresh: a config deleted, or a context scrubbed
or expired, stops delivery at the next attempt (the entry is dropped). The URL passes the
webhook policy on every request (``destinations.py``), and the addresses its name resolves
to on every connection, made to one of them (redirects are not followed). Which failures
are retried, and the pauses between tries, is the ``RetryPolicy`` passed in
(``webhook_retry``: 408, 425, 429, 5xx, transport errors — a name that does not resolve
too —, Redis unavailable, with exponential backoff and jitter), until ``retry_seconds``
after the event was queued; then, or on any other answer, or when the URL or an address
it resolves to is not allowed, the event goes to the dead letters. A delivery that
succeeds wakes the retries waiting for the same origin (scheme, host, port): after an
outage the backlog drains at once rather than at each event's next retry slot. No body,
token or URL is logged: only ids and statuses.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from dataclasses import dataclass
from typing import Any

import httpx

from gateway import metrics
from gateway.backoff import Backoff, RetryPolicy
from gateway.errors import GatewayError, StoredDataUnreadableError
from gateway.outbound import OutboundRefused
from gateway.principal import Principal
from gateway.push.acks import Acks
from gateway.push.configs import PushConfig
from gateway.push.events import PushJob, payload
from gateway.push.origins import OriginLimiter
from gateway.push.signing import SigningKeys
from gateway.store.jobs import Entry, JobStore
from gateway.store.push_store import PushStore
from gateway.store.redis_store import Store
from gateway.stream_consumer import StreamConsumer

__all__ = ["PushDeliverer", "WebhookRefused", "webhook_retry", "webhook_retryable"]

log = logging.getLogger("gateway.push")

_RETRYABLE = frozenset({408, 425, 429})
HELD_PER_SLOT = 32  # events a process holds (most of them waiting to retry) per request slot
STALE_SECONDS = 5.0  # a request prepared longer ago than this is prepared again before posting


@dataclass(frozen=True, slots=True)
class _Request:
    url: httpx.URL
    body: bytes
    headers: dict[str, Any]

    @property
    def origin(self) -> str:
        return f"{self.url.scheme}://{self.url.host}:{self.url.port}"


class WebhookRefused(Exception):
    """The webhook answered other than 2xx (the reason holds its status, never content)."""

    def __init__(self, status: int) -> None:
        super().__init__(f"the webhook answered {status}")
        self.status = status


class _GiveUp(Exception):
    """Not worth retrying (the reason holds a cause, never content)."""


def webhook_retryable(exc: BaseException) -> bool:
    """Whether a failed delivery is worth another try: a 408, 425, 429 or 5xx answer, a
    transport error, Redis unavailable, or a defect (logged); not another answer, a URL no
    longer allowed or stored data that cannot be opened."""
    if isinstance(exc, WebhookRefused):
        return exc.status in _RETRYABLE or exc.status >= 500
    return not isinstance(exc, _GiveUp)


def webhook_retry(first: float, cap: float) -> RetryPolicy:
    """The deliverer's retry policy: pauses from ``first`` doubling to ``cap`` seconds."""
    return RetryPolicy(Backoff(first, cap), webhook_retryable)


@dataclass
class _Delivery:
    """One event's tries: the job, and its webhook's origin once a try has learnt it."""

    job: PushJob
    origin: str = ""


class PushDeliverer(StreamConsumer):
    name = "push-deliverer"

    def __init__(
        self,
        store: Store,
        jobs: JobStore,
        http: httpx.AsyncClient,
        keys: SigningKeys,
        *,
        consumer: str,
        concurrency: int,
        per_origin: int,
        block_ms: int,
        lease_seconds: float,
        retry_seconds: float,
        retry: RetryPolicy,
    ) -> None:
        super().__init__(jobs, consumer=consumer, block_ms=block_ms, lease_seconds=lease_seconds)
        self._batch = concurrency
        self._store, self._configs = store, PushStore(store)
        self._http, self._keys = http, keys
        self._slots = asyncio.Semaphore(concurrency)
        self._origins = OriginLimiter(per_origin)
        self._acks = Acks(jobs, self.read_retry)
        self._held = HELD_PER_SLOT * concurrency
        self._retry_seconds, self._retry = retry_seconds, retry
        self._inflight: dict[str, asyncio.Task[None]] = {}
        # per origin that failed: set (and dropped) when a delivery to it next succeeds
        self._recovered: dict[str, asyncio.Event] = {}

    async def drain(self, grace_seconds: float) -> None:
        """Deliveries under way are cut short and stay pending (the group's reclaimer gets
        them, and maintenance requeues them after the lease)."""
        for task in self._inflight.values():
            task.cancel()
        if self._inflight:
            await asyncio.wait(set(self._inflight.values()), timeout=5.0)
        await self._acks.close()

    def room(self) -> int:
        """As many events as there is room to hold (at most a batch)."""
        return min(self._batch, self._held - len(self._inflight))

    async def handle(self, entries: list[Entry]) -> None:
        for entry, fields in entries:
            if entry not in self._inflight:
                task = asyncio.create_task(self._deliver(entry, fields))
                self._inflight[entry] = task
                task.add_done_callback(functools.partial(self._done, entry))

    def _done(self, entry: str, _: object = None) -> None:
        self._inflight.pop(entry, None)
        self.let_go([entry])

    async def _deliver(self, entry: str, fields: dict[bytes, bytes]) -> None:
        try:
            job = PushJob.from_wire(fields)
        except (KeyError, ValueError, TypeError):
            await self._dead(entry, fields, "unreadable event")
            return
        pauses = self._retry.pauses()
        deadline = job.queued_ms / 1000 + self._retry_seconds
        delivery = _Delivery(job)
        while True:
            try:
                delivered = await self._attempt(delivery)
            except Exception as exc:
                if not self._retry.retries(exc):
                    await self._dead(entry, fields, str(exc))
                    return
                if not isinstance(exc, WebhookRefused | httpx.HTTPError | GatewayError):
                    # a defect: logged (its type only), retried like a failure
                    log.error("webhook delivery failed", extra={"error": type(exc).__name__})
            else:
                if delivered:
                    metrics.PUSH_DELIVERIES.labels("delivered").inc()
                    recovered = self._recovered.pop(delivery.origin, None)
                    if recovered is not None:
                        recovered.set()
                else:  # config, task or context gone: nothing to deliver
                    metrics.PUSH_DELIVERIES.labels("dropped").inc()
                await self._ack(entry)
                return
            if time.time() >= deadline:
                await self._dead(entry, fields, f"undelivered after {self._retry_seconds:g} s")
                return
            metrics.PUSH_DELIVERIES.labels("retried").inc()
            # Until the next try, or sooner when a delivery to the same origin succeeds.
            recovery = self._recovered.setdefault(delivery.origin, asyncio.Event())
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(recovery.wait(), pauses.next())

    async def _ack(self, entry: str) -> None:
        await self._acks.ack(entry)

    async def _dead(self, entry: str, fields: dict[bytes, bytes], reason: str) -> None:
        metrics.PUSH_DELIVERIES.labels("dead").inc()
        log.warning("webhook event given up", extra={"entry": entry, "reason": reason})
        await self.settle(entry, fields, reason)

    async def _attempt(self, delivery: _Delivery) -> bool:
        """One try: True delivered, False when there is nothing to deliver; a failure is
        raised (for the retry policy to judge). The request is prepared (config and task
        read, body signed) and posted holding a place at the webhook's origin — known from
        an earlier try, else from a first preparation, done again if the place took more
        than ``STALE_SECONDS`` to get (what it read, or the signature's time, may be stale
        by then). A request slot is held only to read and to post, never while waiting."""
        job, request = delivery.job, None
        if not delivery.origin:
            async with self._slots:
                request = await self._prepare(job)
            if request is None:
                return False
            delivery.origin = request.origin
        asked = time.monotonic()
        async with self._origins.hold(delivery.origin):
            if request is None or time.monotonic() - asked > STALE_SECONDS:
                async with self._slots:
                    request = await self._prepare(job)
                if request is None:
                    return False
            delivery.origin = request.origin
            async with self._slots:
                await self._post(request)
                return True

    async def _prepare(self, job: PushJob) -> _Request | None:
        """The request for the event, from the config and the task as they stand (None:
        either is gone, nothing to deliver)."""
        principal = Principal(job.tenant, job.user)
        try:
            raw, task = await asyncio.gather(
                self._configs.one(principal, job.context_id, job.task_id, job.config_id),
                self._store.read_task(principal, job.context_id, job.task_id, 0),
            )
        except StoredDataUnreadableError as exc:  # its key is gone: no later attempt opens it
            raise _GiveUp("stored data unreadable") from exc
        if raw is None or task is None:
            return None
        config = PushConfig.from_stored(raw)
        body = payload(job, task, config.version)
        if body is None:
            return None
        return _Request(httpx.URL(config.url), body, self._headers(config, job, body))

    async def _post(self, request: _Request) -> None:
        """Post the event; raises unless the webhook took it (``WebhookRefused``: its
        status; ``httpx.HTTPError``: unreachable; ``_GiveUp``: the URL is not allowed)."""
        try:
            response = await self._http.post(
                request.url, content=request.body, headers=request.headers
            )
        except httpx.HTTPError as exc:
            if isinstance(exc.__cause__, OutboundRefused):  # names a host, never a path
                raise _GiveUp(f"the webhook is not allowed: {exc.__cause__}") from exc
            log.info("webhook unreachable", extra={"error": type(exc).__name__})
            raise
        status = response.status_code
        if not 200 <= status < 300:
            log.info("webhook answered an error", extra={"status": status})
            raise WebhookRefused(status)

    def _headers(self, config: PushConfig, job: PushJob, body: bytes) -> dict[str, Any]:
        signature = self._keys.sign(body, job.event_id, job.task_id, config.url)
        headers = {
            "Content-Type": "application/json"
            if config.version != "1.0"
            else "application/a2a+json",
            "X-A2A-Notification-Id": job.event_id,
            "X-A2A-Notification-Signature": signature,
        }
        if config.token:
            headers["X-A2A-Notification-Token"] = config.token
        if config.schemes and config.credentials:
            headers["Authorization"] = f"{config.schemes[0]} {config.credentials}"
        else:
            headers["Authorization"] = f"Bearer {signature}"
        return headers
