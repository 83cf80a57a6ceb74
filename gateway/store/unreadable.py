"""What a read shows in place of a stored value that does not open (``sealing.py``): its
key is not configured here, or it was moved or altered. The read goes on: one such value is
that value's error, not the task's or the context's. Each stand-in is valid A2A and holds no
content, and carries ``metadata.unreadable`` (the error's name and code) for clients to
tell it apart:

- a message: role ``agent``, id ``unreadable-<seq>``, one text part saying it cannot be read;
- a task's status: state ``unknown``, with such a message;
- an artifact: id ``unreadable-<n>`` (its place in the list, or ``streamed``), one such
  text part;
- a task's metadata: only ``unreadable``.
"""

from __future__ import annotations

import orjson

from gateway.errors import StoredDataUnreadableError

__all__ = ["MARK", "artifact", "message", "metadata", "status"]

MARK = {
    "unreadable": {
        "error": StoredDataUnreadableError.name,
        "code": StoredDataUnreadableError.code,
    }
}
_NOTICE = (
    "This content cannot be read: it is stored encrypted with a key this gateway does not "
    "have, or it was not written for this place."
)
_PART = {"kind": "text", "text": _NOTICE}


def message(context_id: str, seq: int | bytes | str) -> bytes:
    """A stand-in for the message at ``seq`` of a context."""
    number = seq.decode() if isinstance(seq, bytes) else str(seq)
    return orjson.dumps(
        {
            "kind": "message",
            "role": "agent",
            "messageId": f"unreadable-{number}",
            "contextId": context_id,
            "parts": [_PART],
            "metadata": MARK,
        }
    )


def status(context_id: str) -> bytes:
    return b'{"state":"unknown","message":' + message(context_id, "status") + b"}"


def artifact(n: int | str) -> bytes:
    return orjson.dumps({"artifactId": f"unreadable-{n}", "parts": [_PART], "metadata": MARK})


def metadata() -> bytes:
    return orjson.dumps(MARK)
