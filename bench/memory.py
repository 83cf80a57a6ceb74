"""`make bench` context-memory figures.

1. Indexing rate on one core, per offline embedder: the indexer's own path (read a batch of
   64 stored messages, embed them, write the vectors in one script call) over 4,000 varied
   clinical messages, in a child process pinned to one CPU with one tokenizer thread, which
   also reports the RSS the embedder's model adds to it.
2. Search latency per mode over contexts of 1,000 and 10,000 messages embedded by the
   default embedder (wordllama): the first search of each context (which builds its lexical
   index in this process) and 200 searches after it, queries from the retrieval set.

Run alone: ``python -m bench.memory <embedder> <redis url>`` prints one child's figures as
JSON.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import orjson

from bench.report import REPORT
from eval.__main__ import DEFAULT_SET, RetrievalSet
from gateway.embedded_redis import EmbeddedRedis

INDEXED = 4_000
SEARCHES = 200
TARGET_RATE = {"wordllama": 2_000.0, "hashing": 500.0}


def _texts(count: int) -> list[str]:
    """Varied clinical messages: the retrieval set's, numbered."""
    data = RetrievalSet.load(DEFAULT_SET)
    messages = [m for ms in data.contexts.values() for m in ms]
    return [f"{messages[i % len(messages)]} (note {i})" for i in range(count)]


def _rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


async def index(url: str, embedder: Any, principal: Any, cid: str, texts: list[str]) -> float:
    """Store ``texts`` in a new context, then index them as the indexer does; msg/s."""
    from redis.asyncio import Redis

    from gateway.context_memory.indexer import Indexer, _Item
    from gateway.store.jobs import JobStore
    from gateway.store.keys import EMBEDS, EMBEDS_DEAD, EMBEDS_GROUP
    from gateway.store.memory_store import MemoryStore
    from gateway.store.redis_store import Store
    from tests.stored import store_messages

    client = Redis.from_url(url)
    store = Store(client, 3600)
    seqs = await store_messages(store, principal, cid, texts)
    jobs = JobStore(client, EMBEDS, EMBEDS_GROUP, EMBEDS_DEAD)
    indexer = Indexer(
        MemoryStore(store), jobs, embedder, consumer="bench", batch_size=64, max_chars=8000,
        block_ms=1, lease_seconds=60,
    )  # fmt: skip
    items = [_Item(f"0-{n + 1}", principal, cid, seq) for n, seq in enumerate(seqs)]
    started = time.perf_counter()
    for i in range(0, len(items), 64):
        await indexer.index(items[i : i + 64])
    rate = len(items) / (time.perf_counter() - started)
    await client.aclose()
    return rate


async def _child(name: str, url: str) -> dict[str, float]:
    from gateway.context_memory.factory import build_embedder
    from gateway.principal import Principal
    from gateway.settings import Settings

    texts = _texts(INDEXED)
    before = _rss_mb()
    embedder = build_embedder(Settings(embedder=name, redis_url=url))
    assert embedder is not None
    await embedder.embed(texts[:64])  # the model loaded and used once
    added = _rss_mb() - before
    rate = await index(url, embedder, Principal("bench", name), f"index-{name}", texts)
    return {"rate": rate, "rss_mb": added}


def _pin() -> None:
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})


def indexing(name: str, url: str) -> dict[str, float]:
    """One embedder's indexing figures, from a child process on one CPU."""
    env = {**os.environ, "RAYON_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    done = subprocess.run(
        [sys.executable, "-m", "bench.memory", name, url],
        env=env,
        preexec_fn=_pin,
        capture_output=True,
        check=True,
        timeout=600,
    )
    figures: dict[str, float] = orjson.loads(done.stdout.splitlines()[-1])
    return figures


def _ms(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000


async def search_latency(url: str) -> None:
    from redis.asyncio import Redis

    from gateway.context_memory.embedders import WordLlamaEmbedder
    from gateway.context_memory.ranking import MODES
    from gateway.principal import Principal
    from gateway.service.search import SearchService
    from gateway.store.memory_store import MemoryStore
    from gateway.store.redis_store import Store

    client = Redis.from_url(url)
    embedder = WordLlamaEmbedder()
    principal = Principal("bench", "search")
    queries = [q.text for q in RetrievalSet.load(DEFAULT_SET).queries]
    for size in (1_000, 10_000):
        cid = f"search-{size}"
        await index(url, embedder, principal, cid, _texts(size))
        for mode in MODES:
            search = SearchService(MemoryStore(Store(client, 3600)), embedder)  # a cold cache
            t0 = time.perf_counter()
            await search.search(principal, cid, queries[0], 5, mode=mode)
            first = (time.perf_counter() - t0) * 1000
            latencies = []
            for n in range(SEARCHES):
                t0 = time.perf_counter()
                await search.search(principal, cid, queries[n % len(queries)], 5, mode=mode)
                latencies.append(time.perf_counter() - t0)
            p50, p99 = _ms(latencies, 0.5), _ms(latencies, 0.99)
            print(
                f"  search {mode:<6} {size:>6,} messages: p50 {p50:6.2f} ms   p99 {p99:6.2f} ms"
                f"   first search {first:7.1f} ms"
            )
            REPORT.figure(f"search {mode} p99 at {size:,} messages (ms)", p99)
            REPORT.figure(f"search {mode} first search at {size:,} messages (ms)", first)
            if size == 10_000:
                REPORT.target(f"search p50, {mode}, 10,000 messages", p50, 20, "<", "ms")
            else:
                REPORT.figure(f"search {mode} p50 at {size:,} messages (ms)", p50)
        if size == 10_000:
            vec_keys = [k async for k in client.scan_iter(match=f"*:c:{cid}:v*")]
            vec_bytes = sum([int(await client.memory_usage(k) or 0) for k in vec_keys])
            print(f"  vectors in Redis: {vec_bytes / size:,.0f} B per embedded message")
            REPORT.figure("vector bytes per embedded message", vec_bytes / size)
    await client.aclose()


def memory_bench(tmp: Path) -> None:
    server = EmbeddedRedis(tmp / "redis-memory")
    url = server.start()
    try:
        for name, target in TARGET_RATE.items():
            figures = indexing(name, url)
            print(
                f"indexing ({name}, one core, batches of 64, read + embed + write): "
                f"{figures['rate']:,.0f} messages/s; RSS added by the model "
                f"{figures['rss_mb']:.0f} MB"
            )
            REPORT.target(
                f"indexing, {name} embedder, one core", figures["rate"], target, ">=", "msg/s"
            )
            REPORT.figure(f"RSS added by the {name} embedder (MB)", figures["rss_mb"])
        asyncio.run(search_latency(url))
    finally:
        server.stop()


if __name__ == "__main__":
    print(orjson.dumps(asyncio.run(_child(sys.argv[1], sys.argv[2]))).decode())
