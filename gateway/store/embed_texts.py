"""The texts of a process's own sends, handed to its own indexer (``EmbedTexts``).

A send queued for embedding leaves its message's embeddable text here, keyed by its user,
context and seq, once the send script has stored it; the indexer of the same process takes
it when it reads the job, and embeds it without reading the message back from Redis and
opening it. A job whose text is not here (queued by another process, taken after a restart,
or retried after a failed batch) is read back as before: the hand-off only saves work, the
stream and the stored message stay what the indexer relies on.

It holds at most ``capacity`` texts and ``chars`` characters: past either the oldest go
(their jobs, if still queued, are read back), so a process whose jobs are taken elsewhere,
or whose users send long messages, holds a bounded amount; a text longer than ``chars``
alone is not held.
"""

from __future__ import annotations

__all__ = ["EmbedTexts"]

# Enough for the backlog of a burst at the indexer's pace; each entry is one message's text.
_CAPACITY = 4096
_CHARS = 4_000_000  # at most 16 MB of text (4 bytes a character at worst)


class EmbedTexts:
    """Embeddable texts of this process's sends, by (user key prefix, context, seq)."""

    def __init__(self, capacity: int = _CAPACITY, chars: int = _CHARS) -> None:
        self._texts: dict[tuple[str, str, int], str] = {}
        self._capacity, self._budget = capacity, chars
        self._chars = 0  # the characters held

    def put(self, prefix: str, context_id: str, seq: int, text: str) -> None:
        """Hand over the text of the message stored at ``seq``."""
        if len(text) > self._budget:
            return
        texts, key = self._texts, (prefix, context_id, seq)
        self._chars -= len(texts.pop(key, ""))  # handed over again: the last one counts
        while texts and (len(texts) >= self._capacity or self._chars + len(text) > self._budget):
            self._chars -= len(texts.pop(next(iter(texts))))  # the oldest (insertion order)
        texts[key] = text
        self._chars += len(text)

    def take(self, prefix: str, context_id: str, seq: int) -> str | None:
        """The text handed over for that message, once (None: read it back)."""
        text = self._texts.pop((prefix, context_id, seq), None)
        if text is not None:
            self._chars -= len(text)
        return text

    def __len__(self) -> int:
        return len(self._texts)
