"""PHI at rest in context memory: searches over sealed vectors, and vectors indexed in clear
that keep working until rotation seals them."""

from __future__ import annotations

from typing import Any

import httpx

from gateway.store.keys import UserKeys
from gateway.store.rotation import Rotation
from gateway.store.sealing import Keyring, Sealer
from tests.at_rest_sentinel import send_sentinel
from tests.conftest import TEST_KEYRING, AppFactory, RawRedis, message
from tests.waiting import until


async def test_context_memory_searches_sealed_vectors(
    make_app: AppFactory, redis: RawRedis
) -> None:
    async with make_app(embedder="hashing") as c, make_app(embedder="hashing") as early:
        first = await send_sentinel(c, "SENTINEL-first")
        cid = first["contextId"]
        texts = [f"Blood glucose reading number {i} was fine" for i in range(17)]
        for n, text in enumerate([*texts, "Allergic to penicillin since childhood"], start=2):
            await send_and_index(c, cid, text, n)  # one at a time: a frame each
            if n in (4, 6):  # a process that holds the frames of its searches, read on from there
                found = await search(early, cid, "glucose reading number 1", "vector")
                assert found[0]["text"].startswith("Blood glucose reading number")
        ck = UserKeys.of("default", "local").context(cid)
        stored = await redis.get(ck.vectors)
        assert stored is not None and stored[4:7] == b"\x00g1"  # a length, then a sealed frame
        frames_before = stored.count(b"\x00g1\x02k0")
        penicillin = "Allergic to penicillin since childhood"
        assert (await search(c, cid, "penicillin allergy"))[0]["text"] == penicillin
        assert frames_before > 16
        # the search merged the frames into one, which the next search opens
        assert (await redis.get(ck.vectors) or b"").count(b"\x00g1\x02k0") == 1
        assert (await search(c, cid, "penicillin allergy", "vector"))[0]["text"] == penicillin
        # the other process held the frames before the merge: it reads the merged one whole
        assert (await search(early, cid, "penicillin allergy", "vector"))[0]["text"] == penicillin
        # a frame added after the merge is read on from the merged one, in both processes
        await send_and_index(c, cid, "Ankle sprain from a fall on the stairs", 20)
        for process in (c, early):
            found = await search(process, cid, "sprained ankle after falling", "vector")
            assert found[0]["text"] == "Ankle sprain from a fall on the stairs"
        # sealed vectors moved into another context do not open there: they match nothing
        other = (await send_sentinel(c, "SENTINEL-other"))["contextId"]
        await redis.set(UserKeys.of("default", "local").context(other).vectors, stored)
        meta = {"vfmt": "s", "vdim": "256", "vmodel": "hashing:256"}
        await redis.hset(UserKeys.of("default", "local").context(other).meta, mapping=meta)
        r = await c.post(f"/v1/contexts/{other}:search", json={"query": "penicillin"})
        assert r.status_code == 200 and "Allergic" not in r.text, r.text


async def test_vectors_indexed_in_clear_keep_working_until_rotation_seals_them(
    make_app: AppFactory, redis: RawRedis
) -> None:
    async with make_app(embedder="hashing", encryption="off") as c:
        cid = (await send_sentinel(c, "SENTINEL-clear"))["contextId"]
        await send_and_index(c, cid, "Chest pain radiating to the left arm", 2)
    ck = UserKeys.of("default", "local").context(cid)
    assert len(await redis.get(ck.vectors) or b"") == 2 * 256 * 4  # clear rows
    async with make_app(embedder="hashing") as c:
        assert (await search(c, cid, "chest pain", "vector"))[0]["text"].startswith("Chest")
        # encryption on: this context's vectors stay in clear, one layout per context
        await send_and_index(c, cid, "Allergic to penicillin since childhood", 3)
        assert len(await redis.get(ck.vectors) or b"") == 3 * 256 * 4
        assert (await search(c, cid, "penicillin allergy"))[0]["text"].startswith("Allergic")
        # rotation seals them as one frame; the process holding the clear rows reads it whole
        figures = await Rotation(redis, Sealer(Keyring.parse(TEST_KEYRING))).run()
        assert figures.resealed >= 1 and figures.unreadable == 0, figures
        sealed = await redis.get(ck.vectors) or b""
        assert sealed[4:10] == b"\x00g1\x02k0" and await redis.hget(ck.meta, "vfmt") == b"s"
        assert (await search(c, cid, "penicillin allergy", "vector"))[0]["text"].startswith(
            "Allergic"
        )
        # new vectors are sealed frames after it, read on from there
        await send_and_index(c, cid, "Ankle sprain from a fall on the stairs", 4)
        assert (await redis.get(ck.vectors) or b"").count(b"\x00g1\x02k0") == 2
        found = await search(c, cid, "sprained ankle after falling", "vector")
        assert found[0]["text"] == "Ankle sprain from a fall on the stairs"


async def send_and_index(c: httpx.AsyncClient, cid: str, text: str, count: int) -> None:
    """Send ``text`` to the context and wait until its ``count`` messages are indexed."""
    r = await c.post("/v1/message:send", json={"message": message(text, contextId=cid)})
    assert r.status_code == 200, r.text

    async def indexed() -> bool:
        memory = (await c.get(f"/v1/contexts/{cid}")).json()["memory"]
        return bool(memory["pending"] == 0 and memory["indexed"] == count)

    await until(indexed, what="the message to be indexed")


async def search(
    c: httpx.AsyncClient, cid: str, query: str, mode: str = "hybrid"
) -> list[dict[str, Any]]:
    body = {"query": query, "topK": 1, "mode": mode}
    r = await c.post(f"/v1/contexts/{cid}:search", json=body)
    assert r.status_code == 200 and r.json()["mode"] == mode, r.text
    hits: list[dict[str, Any]] = r.json()["hits"]
    return hits
