"""How vectors are handed to the scripts that store them (pure, no I/O).

A context's vectors are appended by ``add`` (``lua/vectors.py``: the add-vectors script).
With encryption on, each call's rows for a context are sealed as one frame (bound to the
user, the context and ``vec``) behind a 4-byte length; in clear, each row goes as it is.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from gateway.store.lua.vectors import VectorRows
from gateway.store.sealing import Sealer, context_of

__all__ = ["VECTORS_FIELD", "frame", "frames_of", "vector_rows"]

VECTORS_FIELD = "vec"  # the field named in the associated data of sealed vector frames


def frame(sealed: bytes) -> bytes:
    """A sealed value behind its 4-byte length (little-endian)."""
    return len(sealed).to_bytes(4, "little") + sealed


def frames_of(blob: bytes) -> Iterator[memoryview]:
    """The sealed values of a string of frames, without copies; a truncated last frame is
    left out."""
    view, pos = memoryview(blob), 0
    while pos + 4 <= len(blob):
        size = int.from_bytes(view[pos : pos + 4], "little")
        if pos + 4 + size > len(blob):
            return
        yield view[pos + 4 : pos + 4 + size]
        pos += 4 + size


def vector_rows(
    sealer: Sealer,
    prefix: str,
    context_id: str,
    vectors: Sequence[tuple[int, bytes]],
    skipped: int,
    sealed: bool,
) -> list[Any]:
    """One context's ``VectorRows`` as script arguments: ``vectors`` (message seq, float32
    bytes) sealed as one frame, or in clear; ``skipped``: queued messages with nothing to
    embed."""
    rows: list[bytes | int] = []
    if not sealed:
        for seq, blob in vectors:
            rows += [seq.to_bytes(4, "little"), seq, blob]
        sealed_frame = b""
    else:
        joined = b"".join(blob for _, blob in vectors)
        aad = context_of(prefix, context_id, VECTORS_FIELD)
        sealed_frame = frame(sealer.seal(joined, aad)) if joined else b"-"
        for seq, _ in vectors:
            rows += [seq.to_bytes(4, "little"), seq, b""]
    return VectorRows(skipped, sealed_frame, len(vectors), rows).argv()
