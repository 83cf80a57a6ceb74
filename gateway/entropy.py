"""Random bytes from the OS CSPRNG, drawn a block at a time.

``os.urandom`` is one system call per call; a send asks for random bytes a dozen times
(ids, nonces of sealed values, a request id), so each process draws 4 KiB at once and hands
it out in order. The bytes are the kernel's, as ``os.urandom`` gives them; none is handed
out twice: a forked child drops the block it inherited (its parent goes on using it), and a
lock keeps threads from taking the same bytes.
"""

from __future__ import annotations

import os
import threading

__all__ = ["random_bytes"]

_BLOCK = 4096


class _Pool:
    def __init__(self) -> None:
        self._block = b""
        self._at = 0
        self._lock = threading.Lock()

    def take(self, n: int) -> bytes:
        if n > _BLOCK:
            return os.urandom(n)
        with self._lock:
            at = self._at
            if at + n > len(self._block):
                self._block, at = os.urandom(_BLOCK), 0
            self._at = at + n
            return self._block[at : at + n]

    def forget(self) -> None:
        """In a forked child: what is left of the parent's block is the parent's."""
        self._block, self._at = b"", 0
        self._lock = threading.Lock()


_POOL = _Pool()
os.register_at_fork(after_in_child=_POOL.forget)


def random_bytes(n: int) -> bytes:
    """``n`` random bytes, as ``os.urandom(n)``, never the same as any other call's."""
    return _POOL.take(n)
