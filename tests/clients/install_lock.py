"""One installer at a time for an environment the tests share (pytest-xdist's workers
each start from a fresh process and may all reach for it first)."""

from __future__ import annotations

import fcntl
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def installing(env: Path) -> Iterator[None]:
    """Hold ``env``'s lock (a file beside it) while the block checks and installs it."""
    env.parent.mkdir(parents=True, exist_ok=True)
    with open(env.parent / f".{env.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
