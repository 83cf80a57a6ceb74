"""What one message costs the indexer in batches of 1, 8, 32 and 128 (`make bench`,
section ``embedding``).

The indexer's whole path per batch, as the serving process runs it: read the batch's jobs
from the embedding stream, take the texts the process's sends handed over (the messages are
stored sealed, as by default), embed them with the default embedder (wordllama), write the
vectors (one script per user and eight contexts) and acknowledge the jobs. Each message is
a context of its own, as a send without a contextId makes. The cost is CPU: this process's
(the indexer's, its embedding threads included) and its Redis's, per message, and the wall
time per message.
"""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from pathlib import Path

import orjson

from bench.report import REPORT

SIZES = (1, 8, 32, 128)
MESSAGES = 1_024  # per batch size
TEXT = "Patient reports intermittent chest pain radiating to the left arm; " * 4


def _cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def _queue(store: object, count: int, run: int) -> None:
    """``count`` sends, each opening a context, each message queued for embedding."""
    from gateway.principal import Principal
    from gateway.store.redis_store import SendWrite, Store

    assert isinstance(store, Store)
    principal = Principal("default", "local")
    for n in range(count):
        cid, tid = f"batch-{run}-{n}", str(uuid.uuid4())
        message_text = f"{TEXT} (note {n})"
        message = {
            "kind": "message",
            "role": "user",
            "messageId": f"m-{run}-{n}",
            "contextId": cid,
            "taskId": tid,
            "parts": [{"kind": "text", "text": message_text}],
        }
        job = {"t": "default", "u": "local", "a": "echo", "c": cid, "k": tid, "r": []}
        write = SendWrite(
            context_id=cid,
            task_id=tid,
            continuing=False,
            new_context=True,
            message_id=f"m-{run}-{n}",
            digest="d",
            message_json=orjson.dumps(message),
            metadata_json=b"",
            status_json=b'{"state":"completed"}',
            reference_ids=(),
            job_json=orjson.dumps(job),
            embed=True,
            embed_text=message_text,
        )
        await store.send(principal, write)


async def _costs(url: str, redis_pid: int) -> dict[int, tuple[float, float, float]]:
    """Per batch size, µs per message: CPU of this process, CPU of Redis, wall time."""
    from gateway.context_memory.embedders import WordLlamaEmbedder
    from gateway.context_memory.indexer import Indexer
    from gateway.settings import Settings
    from gateway.store.connection import RedisTarget
    from gateway.store.embed_texts import EmbedTexts
    from gateway.store.jobs import JobStore
    from gateway.store.keys import EMBEDS, EMBEDS_DEAD, EMBEDS_GROUP
    from gateway.store.memory_store import MemoryStore
    from gateway.store.redis_store import Store
    from gateway.store.sealing import sealer_for

    settings = Settings(redis_url=url)
    target = RedisTarget.from_settings(settings)
    client = target.client(5.0)
    store = Store(client, 3600, sealer=sealer_for(settings), hot=target.multiplexed(5.0))
    store.embed_texts = EmbedTexts()  # as in a serving process: its sends' texts handed over
    jobs = JobStore(client, EMBEDS, EMBEDS_GROUP, EMBEDS_DEAD, hot=store.hot)
    await jobs.ensure_group()
    embedder = WordLlamaEmbedder()
    embedder.embed_now([TEXT] * 8)  # the model loaded and used once
    indexer = Indexer(
        MemoryStore(store), jobs, embedder, consumer="bench-batches", batch_size=128,
        max_chars=8000, block_ms=1, lease_seconds=60,
    )  # fmt: skip
    out: dict[int, tuple[float, float, float]] = {}
    for run, size in enumerate(SIZES):
        await _queue(store, MESSAGES, run)
        done = 0
        cpu, redis_cpu, wall = time.process_time(), _cpu(redis_pid), time.perf_counter()
        while done < MESSAGES:
            entries = await jobs.read("bench-batches", size, None)
            if not entries:
                break
            await indexer.process(entries)
            done += len(entries)
        cpu, redis_cpu = time.process_time() - cpu, _cpu(redis_pid) - redis_cpu
        wall = time.perf_counter() - wall
        out[size] = (cpu * 1e6 / done, redis_cpu * 1e6 / done, wall * 1e6 / done)
    if store.hot is not None:
        await store.hot.close()
    await client.aclose()
    return out


def batch_costs(tmp: Path) -> None:
    from gateway.embedded_redis import EmbeddedRedis

    server = EmbeddedRedis(tmp / "redis-batches")
    url = server.start()
    try:
        assert server.process is not None
        costs = asyncio.run(_costs(url, server.process.pid))
    finally:
        server.stop()
    print("indexer cost per message by batch size (read, embed, write, ack; wordllama)")
    for size, (cpu_us, redis_us, wall_us) in costs.items():
        print(f"  batch {size:>3}: CPU {cpu_us + redis_us:5.0f} µs/message (indexer {cpu_us:4.0f}"
              f" + Redis {redis_us:4.0f}), wall {wall_us:5.0f} µs/message")  # fmt: skip
        REPORT.figure(f"indexer CPU per message, batch of {size} (µs)", cpu_us + redis_us)
        REPORT.figure(f"indexer Redis CPU per message, batch of {size} (µs)", redis_us)
        REPORT.figure(f"indexer wall time per message, batch of {size} (µs)", wall_us)
