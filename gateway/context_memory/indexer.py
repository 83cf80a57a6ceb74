"""The indexer: embeds queued user messages in batches, off the request path.

Jobs come from the ``gw:{jobs}:embed`` stream (ids only). A batch is embedded in
one call; failures that may pass (timeouts, 429, 5xx) are retried with
exponential backoff and jitter until they do, so nothing is lost and the queue
simply waits. An input the embedder refuses (4xx) is retried alone and, if it is
still refused, skipped with a logged reason. Vectors are written by one script per
user for up to eight of its contexts, the batch's scripts in one round trip; a script
writes nothing to a context that is gone, nor into a context whose vectors are of another
model: that context is queued for re-embedding instead (``reembed.py``).

It runs in the serving process's background loop (and in ``gateway worker`` processes): a
send never waits for its message's vector. A read that finds fewer jobs than a batch waits
``linger`` for more, so a busy gateway embeds and writes many messages per tokenizer pass,
matrix product and script, at the cost of that much delay before they are searchable.
"""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from dataclasses import dataclass

import orjson

from gateway import metrics, tracing
from gateway.backoff import Backoff, RetryPolicy
from gateway.context_memory.embedders import Embedder, EmbedderError, Matrix
from gateway.context_memory.progress import EmbeddingProgress
from gateway.context_memory.reembed import reembed
from gateway.context_memory.text import embeddable_text
from gateway.errors import GatewayError
from gateway.principal import Principal
from gateway.store.fields import ENTRY_JOB, ENTRY_SEQ
from gateway.store.jobs import Entry, JobStore
from gateway.store.memory_store import MemoryStore, VectorBatch
from gateway.stream_consumer import BatchConsumer

__all__ = ["Indexer"]

_JOB, _SEQ = ENTRY_JOB.encode(), ENTRY_SEQ.encode()

log = logging.getLogger("gateway.memory")


@dataclass(frozen=True)
class _Item:
    entry: str
    principal: Principal
    context_id: str
    seq: int
    trace: str = ""  # the traceparent of the send that queued it
    job: bytes = b""  # the job's ids, to queue the context again

    @property
    def where(self) -> tuple[str, str, str]:
        """The item's user and context, which its batch shares with their other items."""
        return (self.principal.tenant, self.principal.user, self.context_id)


class Indexer(BatchConsumer):
    name = "indexer"

    def __init__(
        self,
        store: MemoryStore,
        jobs: JobStore,
        embedder: Embedder,
        *,
        consumer: str,
        batch_size: int,
        max_chars: int,
        block_ms: int,
        lease_seconds: float,
        linger: float = 0.05,
        backoff_cap: float = 30.0,
        write_step: int = 8,
        progress: EmbeddingProgress | None = None,
    ) -> None:
        batch = min(batch_size, embedder.max_batch)
        # A batch whose embedding failed stays pending; the loop pauses, then reads on.
        read_retry = RetryPolicy(Backoff(0.05, 2.0), (GatewayError, EmbedderError))
        super().__init__(
            jobs,
            consumer=consumer,
            batch=batch,
            block_ms=block_ms,
            lease_seconds=lease_seconds,
            retry=read_retry,
        )
        self._store, self._embedder = store, embedder
        self._max_chars, self._linger = max_chars, linger
        self._write_step = write_step
        self._progress = progress  # told of each batch written, for searches waiting here
        # An embedding that may pass (timeouts, 429, 5xx) is tried again until it does,
        # unless the indexer is stopping.
        self._embed_retry = RetryPolicy(
            Backoff(0.2, backoff_cap),
            lambda exc: isinstance(exc, EmbedderError) and exc.retryable and not self._closing,
        )

    async def read(self, count: int) -> list[Entry]:
        # Jobs coming in are found by a read that does not wait (the multiplexed
        # connection's, a fraction of a blocking read's cost); an idle stream is waited on.
        batch = await self.jobs.read(self.consumer, count, None)
        if not batch:
            batch = await super().read(count)
        if batch and len(batch) < count and self._linger:
            # Let a batch gather: fewer passes and round trips per message.
            await asyncio.sleep(self._linger)
            batch += await self.jobs.read(self.consumer, count - len(batch), None)
        return batch

    async def process(self, entries: list[Entry]) -> None:
        await self.index([self._item(e, f) for e, f in entries])

    @staticmethod
    def _item(entry: str, fields: dict[bytes, bytes]) -> _Item:
        job = orjson.loads(fields[_JOB])
        trace = str(job.get("tp") or "")
        return _Item(
            entry, Principal(job["t"], job["u"]), job["c"], int(fields[_SEQ]), trace, fields[_JOB]
        )

    async def index(self, items: list[_Item]) -> None:
        """Embed and store one batch, then acknowledge its jobs."""
        figures: tracing.Attributes = {
            "messaging.system": "redis",
            "messaging.batch.message_count": len(items),
        }
        with tracing.job_span("gateway.index", [i.trace for i in items], figures):
            await self._index(items)

    async def _index(self, items: list[_Item]) -> None:
        texts, todo, skipped = await self._texts(items)
        chars = sum(len(t) for t in texts)
        tracing.annotate({"gateway.index.texts": len(texts), "gateway.index.chars": chars})
        vectors = await self._embed_all(texts)
        await self._write(items, todo, vectors, skipped)
        if self._progress is not None:
            self._progress.written()
        await self.jobs.ack([i.entry for i in items])

    async def _texts(
        self, items: list[_Item]
    ) -> tuple[list[str], list[_Item], dict[tuple[str, str, str], int]]:
        """The texts to embed and their items, and per context how many items have none.
        A text this process's send handed over is taken as it is; the others' messages are
        read back and opened."""
        handed = [self._store.handed_text(i.principal, i.context_id, i.seq) for i in items]
        missing = [
            (i.principal, i.context_id, i.seq)
            for i, t in zip(items, handed, strict=True)
            if t is None
        ]
        read = iter(await self._store.messages_by_seq(missing) if missing else ())
        texts: list[str] = []
        todo: list[_Item] = []
        skipped: dict[tuple[str, str, str], int] = defaultdict(int)
        for item, text in zip(items, handed, strict=True):
            if text is None:
                message = next(read)
                text = embeddable_text(message) if message else ""
            if len(text) > self._max_chars:
                log.info("message truncated for embedding", extra={"chars": len(text)})
                text = text[: self._max_chars]
            if text:
                texts.append(text)
                todo.append(item)
            else:
                skipped[item.where] += 1
        return texts, todo, skipped

    async def _write(
        self,
        items: list[_Item],
        todo: list[_Item],
        vectors: list[Matrix | None],
        skipped: dict[tuple[str, str, str], int],
    ) -> None:
        per_context: dict[tuple[str, str, str], list[tuple[int, bytes]]] = defaultdict(list)
        item_of = {i.where: i for i in items}
        for item, vector in zip(todo, vectors, strict=True):
            where = item.where
            if vector is None:
                skipped[where] += 1
            else:
                per_context[where].append((item.seq, vector.astype("<f4").tobytes()))
        model = self._embedder.model_id
        batches = [
            VectorBatch(
                item_of[where].principal,
                where[2],
                model,
                self._embedder.dimensions,
                per_context[where],
                skipped[where],
            )
            for where in sorted(set(per_context) | set(skipped))
        ]
        # A few contexts' vectors per script (one script per user and ``write_step``
        # contexts), every script of the batch in one round trip: the indexer waits on one
        # answer, not one per script behind the loop's other work.
        parts = await asyncio.gather(
            *(
                self._store.add_vectors(batches[start : start + self._write_step])
                for start in range(0, len(batches), self._write_step)
            )
        )
        results = [added for part in parts for added in part]
        for batch, added in zip(batches, results, strict=True):
            if added == -1:  # embedded by another model: embed the whole context again
                item = item_of[(batch.principal.tenant, batch.principal.user, batch.context_id)]
                await reembed(self._store, batch.principal, batch.context_id, model, item.job)
            elif added == -3:
                log.error("vectors sealed earlier and encryption now off; vectors not stored")
        embedded = sum(len(v) for v in per_context.values())
        metrics.EMBEDDED.inc(embedded)
        tracing.annotate({"gateway.index.embedded": embedded})

    async def _embed_all(self, texts: list[str]) -> list[Matrix | None]:
        if not texts:
            return []
        try:
            return list(await self._embed_retrying(texts))
        except EmbedderError:
            if len(texts) == 1:
                log.warning("message skipped: the embedder refused it")
                return [None]
        # A refused batch: find the input at fault by embedding one at a time.
        return [row for text in texts for row in await self._embed_all([text])]

    async def _embed_retrying(self, texts: list[str]) -> Matrix:
        return await self._embed_retry.call(lambda: self._embedder.embed(texts), on_retry=_retried)


def _retried(exc: BaseException) -> None:
    metrics.EMBED_RETRIES.inc()
    tracing.event("retry", {"reason": str(exc)})
    log.warning("embedder unavailable; retrying", extra={"reason": str(exc)})
