"""Random bytes handed out from a block: never the same bytes twice, across threads and forks
(a nonce used twice under one key breaks AES-GCM; ids must not collide)."""

from __future__ import annotations

import os
import threading

from gateway.entropy import random_bytes
from gateway.ids import new_id


def test_calls_never_share_bytes_and_blocks_are_refilled() -> None:
    taken = [random_bytes(12) for _ in range(2_000)]  # several blocks' worth
    assert all(len(b) == 12 for b in taken)
    assert len(set(taken)) == len(taken)
    assert len(random_bytes(10_000)) == 10_000  # larger than a block: straight from the OS


def test_a_forked_child_does_not_reuse_its_parents_block() -> None:
    random_bytes(12)  # the parent holds a block with bytes still to hand out
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: what it draws next
        try:
            os.write(write, b"".join(random_bytes(12) for _ in range(20)))
        finally:
            os._exit(0)
    os.close(write)
    child = b""
    while chunk := os.read(read, 4096):
        child += chunk
    os.close(read)
    os.waitpid(pid, 0)
    parent = [random_bytes(12) for _ in range(20)]
    theirs = {child[i : i + 12] for i in range(0, len(child), 12)}
    assert len(theirs) == 20
    assert not theirs & set(parent)


def test_threads_never_take_the_same_bytes() -> None:
    results: list[list[str]] = [[] for _ in range(4)]

    def draw(out: list[str]) -> None:
        out.extend(new_id() for _ in range(5_000))

    threads = [threading.Thread(target=draw, args=(r,)) for r in results]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    ids = [i for r in results for i in r]
    assert len(set(ids)) == len(ids) == 20_000
