"""Encryption at rest, on vs off in one run: blocking send at c=32 (two gateways, each on its
own Redis, interleaved rounds), search over a 10,000-message context (the store with and
without a keyring), and the rate at which `gateway encryption rotate-data` re-seals messages."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from pathlib import Path

from redis.asyncio import Redis

from bench.harness import (
    BENCH_KEYRING,
    ROUNDS,
    TEXT,
    by_round,
    gateway,
    line,
    ratio,
    send_rounds,
)
from bench.report import REPORT
from gateway.context_memory.embedders import HashingEmbedder
from gateway.embedded_redis import EmbeddedRedis, free_port
from gateway.principal import Principal
from gateway.service.search import SearchService
from gateway.store.memory_store import MemoryStore, VectorBatch
from gateway.store.redis_store import Store
from gateway.store.rotation import Rotation
from gateway.store.sealing import Keyring, Sealer, generate_keyring
from tests.stored import store_messages

SIZE = 10_000


def encryption_bench(tmp: Path) -> None:
    servers = [EmbeddedRedis(tmp / f"redis-enc{i}") for i in range(2)]
    urls = [s.start() for s in servers]
    ports = {"encryption on": free_port(), "encryption off": free_port()}
    base = {"GATEWAY_EMBEDDER": "none", "GATEWAY_ENCRYPTION_KEYS": BENCH_KEYRING}
    try:
        with contextlib.ExitStack() as stack:
            for (name, port), url in zip(ports.items(), urls, strict=True):
                mode = "on" if name.endswith("on") else "off"
                env = {**base, "REDIS_URL": url, "GATEWAY_ENCRYPTION": mode}
                stack.enter_context(gateway(port, env))
            asyncio.run(_send_on_off(ports))
        asyncio.run(_search_and_rotation(urls))
    finally:
        for s in servers:
            s.stop()


async def _send_on_off(ports: dict[str, int]) -> None:
    counter = itertools.count(60_000_000)
    # each side runs first in one round at least: the first run of a round measured lower
    # here either way
    busy = await send_rounds(ports, 32, counter, max(ROUNDS, 2))
    print("blocking send throughput, concurrency 32, encryption on vs off (interleaved)")
    for name, r in busy.items():
        print(line(name, r))
        REPORT.run("message:send, c=32", name, "gateway", r)
    on_off = ratio(busy["encryption on"].throughput, busy["encryption off"].throughput)
    spread = by_round(busy["encryption on"], busy["encryption off"])
    print(f"  throughput ratio on/off: {on_off:.2f} ({spread})")
    REPORT.target("c=32 send throughput, encryption on/off", on_off, 0.90, ">=")


async def _fill(store: Store, principal: Principal, cid: str, embedder: HashingEmbedder) -> None:
    """A context of SIZE user messages, each with its vector, through the store's API."""
    texts = [f"{TEXT} observation {i} dose {i % 17} mg" for i in range(SIZE)]
    seqs = await store_messages(store, principal, cid, texts)
    for i in range(0, SIZE, 256):
        matrix = await embedder.embed(texts[i : i + 256])
        vectors = [
            (s, row.astype("<f4").tobytes()) for s, row in zip(seqs[i:], matrix, strict=False)
        ]
        await MemoryStore(store).add_vectors(
            [VectorBatch(principal, cid, embedder.model_id, embedder.dimensions, vectors, 0)]
        )


async def _uncached(
    stores: dict[str, Store], principal: Principal, embedder: HashingEmbedder
) -> None:
    # The first search of each opens (and, sealed, merges the 40 frames of) the vectors;
    # then searches by a new search service each (nothing held: every vector read and
    # opened), then by one that holds what it read (``_search_and_rotation``).
    for name, store in stores.items():
        search = SearchService(MemoryStore(store), embedder)
        t0 = time.perf_counter()
        await search.search(principal, "ctx-search", "dose 3 observation", 5)
        first = (time.perf_counter() - t0) * 1000
        print(f"  first search, {SIZE:,} messages, {name}: {first:6.2f} ms")
        REPORT.figure(f"first search at {SIZE:,} messages, {name} (ms)", first)
    cold: dict[str, list[float]] = {name: [] for name in stores}
    for n in range(40):
        for name, store in stores.items():
            search = SearchService(MemoryStore(store), embedder)
            t0 = time.perf_counter()
            await search.search(principal, "ctx-search", f"dose {n % 17} observation", 5)
            cold[name].append(time.perf_counter() - t0)
    for name, values in cold.items():
        value = sorted(values)[len(values) // 2] * 1000
        print(f"  search with nothing held, {name}: p50 {value:6.2f} ms")
        REPORT.figure(f"search p50 at {SIZE:,} messages, nothing held, {name} (ms)", value)


async def _search_and_rotation(urls: list[str]) -> None:
    embedder = HashingEmbedder()
    principal = Principal("bench", "user")
    old = Keyring.parse(BENCH_KEYRING)
    clients = [Redis.from_url(u) for u in urls]
    try:
        for client in clients:
            await client.flushall()
        stores = {
            "encryption on": Store(clients[0], 3600, sealer=Sealer(old)),
            "encryption off": Store(clients[1], 3600),
        }
        for store in stores.values():
            await _fill(store, principal, "ctx-search", embedder)
        await _uncached(stores, principal, embedder)
        latencies: dict[str, list[float]] = {name: [] for name in stores}
        searches = {name: SearchService(MemoryStore(s), embedder) for name, s in stores.items()}
        for n in range(400):  # interleaved, query by query
            for name, search in searches.items():
                t0 = time.perf_counter()
                await search.search(principal, "ctx-search", f"dose {n % 17} observation", 5)
                latencies[name].append(time.perf_counter() - t0)
        p50 = {name: sorted(v)[len(v) // 2] * 1000 for name, v in latencies.items()}
        for name, value in p50.items():
            print(f"  search, {SIZE:,} messages, {name}: p50 {value:6.2f} ms")
            REPORT.figure(f"search p50 at {SIZE:,} messages, {name} (ms)", value)
        search_ratio = ratio(p50["encryption on"], p50["encryption off"])
        print(f"  search p50 ratio on/off: {search_ratio:.2f}")
        REPORT.target("search p50 at 10,000 messages, encryption on/off", search_ratio, 1.2, "<=")
        # Rotation: every value sealed with the old key is re-sealed with a new current one.
        rotated = Keyring.parse(generate_keyring("k2", BENCH_KEYRING))
        started = time.perf_counter()
        figures = await Rotation(clients[0], Sealer(rotated)).run(report_every=3600)
        seconds = time.perf_counter() - started
        rate = SIZE / seconds
        print(
            f"  rotation: {figures.resealed:,} values ({SIZE:,} messages and their tasks' "
            f"status) re-sealed in {seconds:.2f} s: {rate:,.0f} messages/s"
        )
        REPORT.target("rotate-data, messages re-sealed per second", rate, 5_000, ">=", "msg/s")
    finally:
        for client in clients:
            await client.aclose()
