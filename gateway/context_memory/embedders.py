"""Embedders behind one small protocol, chosen by ``GATEWAY_EMBEDDER``.

``wordllama``: offline semantic embeddings — the static token embeddings of wordllama's
``l2_supercat`` model (256 dimensions, distilled from large language models), whose weights
and tokenizer ship inside the ``wordllama`` wheel (nothing is downloaded), mean-pooled over
the text's tokens and L2-normalised. It finds "warfarin" for "blood thinners"; it reads no
word order.

``hashing``: offline and deterministic — signed feature hashing (CRC-32) of
word unigrams, word bigrams and character trigrams into a fixed dimension (256 by
default), L2-normalised.
It finds messages that share words (and word fragments) with the query; it knows
no synonyms or meaning: "heart attack" does not find "myocardial infarction".

``openai``: any OpenAI-compatible ``/embeddings`` endpoint (OpenAI, Azure, vLLM, TEI,
Ollama) through the official SDK, with our own retry policy.
"""

from __future__ import annotations

import asyncio
import functools
import importlib.util
import itertools
import json
import os
import re
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from gateway import tracing

__all__ = [
    "Embedder",
    "EmbedderError",
    "HashingEmbedder",
    "OpenAIEmbedder",
    "WordLlamaEmbedder",
]

Matrix = npt.NDArray[np.float32]

_WORD = re.compile(r"\w+", re.UNICODE)


class EmbedderError(Exception):
    """An embedding call failed; ``retryable`` says whether trying again may help."""

    def __init__(self, reason: str, *, retryable: bool) -> None:
        super().__init__(reason)
        self.retryable = retryable


class Embedder(Protocol):
    dimensions: int
    max_batch: int

    @property
    def model_id(self) -> str:
        """Names the vector space: vectors of two ids are never compared."""
        ...

    async def embed(self, texts: Sequence[str]) -> Matrix:
        """One L2-normalised float32 row per text."""
        ...


def _normalise(matrix: Matrix) -> Matrix:
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    result: Matrix = (matrix / norms).astype(np.float32)
    return result


@functools.lru_cache(maxsize=65_536)
def _word_codes(word: str) -> tuple[int, ...]:
    """The CRC-32 codes of one word's features: the word, and its character trigrams
    (``<word>`` padded). Words repeat (Zipf), so they are hashed once and kept."""
    padded = f"<{word}>"
    features = [f"w:{word}", *(f"c:{padded[i : i + 3]}" for i in range(len(padded) - 2))]
    return tuple(zlib.crc32(f.encode()) for f in features)


class HashingEmbedder:
    def __init__(self, dimensions: int = 256, max_batch: int = 256) -> None:
        self.dimensions, self.max_batch = dimensions, max_batch

    @property
    def model_id(self) -> str:
        return f"hashing:{self.dimensions}"

    def _row(self, text: str) -> Matrix:
        words = _WORD.findall(text.lower())
        codes = np.fromiter(
            itertools.chain(
                itertools.chain.from_iterable(map(_word_codes, words)),
                (zlib.crc32(f"b:{a} {b}".encode()) for a, b in itertools.pairwise(words)),
            ),
            np.int64,
        )
        signs = np.where(codes & 1, 1.0, -1.0)
        counts = np.bincount((codes >> 1) % self.dimensions, signs, minlength=self.dimensions)
        row: Matrix = counts.astype(np.float32)
        return row

    def embed_now(self, texts: Sequence[str]) -> Matrix:
        matrix = (
            np.vstack([self._row(t) for t in texts])
            if texts
            else np.zeros((0, self.dimensions), np.float32)
        )
        return _normalise(matrix.astype(np.float32))

    async def embed(self, texts: Sequence[str]) -> Matrix:
        return self.embed_now(texts)


# Batches of at least this many texts are embedded off the event loop. An indexer's batch
# (up to GATEWAY_EMBEDDER_BATCH_SIZE, 64 by default: under a millisecond) is embedded on it:
# a thread holding the GIL would take it from the loop in 5 ms slices, each time the loop
# waits on a socket, which halved the throughput of a serving process at c=32.
_THREAD_BATCH = 512


@functools.cache
def _wordllama_model() -> tuple[Any, Matrix]:
    """The tokenizer and the token table shipped in the wordllama wheel, loaded once per
    process. The package is located, not imported: its inference module configures the root
    logger and would fetch missing files from a hub.

    The table ships as float16 and is kept as float32 (32 MB instead of 16): this CPU has no
    float16 arithmetic, and summing a text's rows in float16 took six times as long. The
    tokenizer encodes a batch in the calling thread (``TOKENIZERS_PARALLELISM`` false unless
    set): its thread pool cost a third more CPU per text on the batches the indexer makes,
    and the indexer already embeds off the event loop."""
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    from safetensors import safe_open
    from tokenizers import Tokenizer

    spec = importlib.util.find_spec("wordllama")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("the wordllama package is not installed")
    root = Path(next(iter(spec.submodule_search_locations)))
    tokenizer = Tokenizer.from_file(str(root / "tokenizers" / "l2_supercat_tokenizer_config.json"))
    with safe_open(str(root / "weights" / "l2_supercat_256.safetensors"), framework="np") as f:
        table: Matrix = f.get_tensor("embedding.weight").astype(np.float32)
    return tokenizer, table


# wordllama's tokenizer is LLaMA's BPE without a pre-tokenizer: its normalizer puts a "▁" before
# the text and in place of every space, and BPE then merges over the whole text, which costs
# ~35 µs per 270 characters. No token of its vocabulary holds a "▁" after another character,
# so no merge joins across the start of a piece that a "▁" after another character begins: a
# text's ids are its pieces' ids, and pieces (words, with the spaces before them) repeat, so
# each is tokenized once and kept (as the hashing embedder keeps its words' features). What
# the caches hold (by piece, and by word for words after a single space) is word pieces in
# this process's memory (~28 MB each when full), never written anywhere.
_SPACE = "\u2581"
_PIECE = re.compile(f"{_SPACE}*[^{_SPACE}]+|{_SPACE}+")
_NORMALIZER = {
    "type": "Sequence",
    "normalizers": [
        {"type": "Prepend", "prepend": _SPACE},
        {"type": "Replace", "pattern": {"String": " "}, "content": _SPACE},
    ],
}


@functools.cache
def _splits_at_spaces() -> bool:
    """Whether the shipped tokenizer is the one the piece cache was worked out for: that
    normalizer, no pre-tokenizer, and no token with a "▁" after another character."""
    tokenizer = _wordllama_model()[0]
    config = json.loads(tokenizer.to_str())
    inner = re.compile(f"[^{_SPACE}]{_SPACE}")
    return (
        config.get("normalizer") == _NORMALIZER
        and config.get("pre_tokenizer") is None
        and config.get("model", {}).get("type") == "BPE"
        and not any(inner.search(token) for token in tokenizer.get_vocab())
    )


@functools.lru_cache(maxsize=65_536)
def _piece_ids(piece: str) -> tuple[int, ...]:
    """The ids of one normalized piece, by the tokenizer's BPE model alone."""
    return tuple(token.id for token in _wordllama_model()[0].model.tokenize(piece))


# The ids of the piece of a word after one space (or at the start), by the word (so not in
# ``_piece_ids``'s cache as well). A plain dict, emptied when full: a hit is one lookup,
# where an LRU cache also moves the entry in its list (~half the time of a text's words).
_WORD_IDS: dict[str, tuple[int, ...]] = {}
_WORD_IDS_MAX = 65_536


def _token_ids(text: str) -> list[int]:
    """The ids the tokenizer gives ``text`` without special tokens, piece by piece. A text
    of words between single spaces (no space at either end, no "▁" of its own) normalizes
    to a "▁" before each word, so its pieces are its words: ``str.split`` finds them in a
    third of the regular expression's time."""
    if not text:
        return []
    if "  " in text or _SPACE in text or text[0] == " " or text[-1] == " ":
        pieces = _PIECE.findall(_SPACE + text.replace(" ", _SPACE))
        return list(itertools.chain.from_iterable(map(_piece_ids, pieces)))
    ids: list[int] = []
    cached = _WORD_IDS.get
    for word in text.split(" "):
        word_ids = cached(word)
        if word_ids is None:
            if len(_WORD_IDS) >= _WORD_IDS_MAX:
                _WORD_IDS.clear()
            word_ids = _WORD_IDS[word] = _piece_ids.__wrapped__(_SPACE + word)
        ids += word_ids
    return ids


class WordLlamaEmbedder:
    """wordllama's ``l2_supercat`` at 256 dimensions: the mean of the text's token vectors,
    as wordllama's own inference computes it (no special tokens, no truncation)."""

    model_id = "wordllama:l2_supercat:256"

    def __init__(self, max_batch: int = 256, *, piece_cache: bool = True) -> None:
        self._tokenizer, self._table = _wordllama_model()
        self.dimensions = int(self._table.shape[1])
        self.max_batch = max_batch
        self._pieces = piece_cache and _splits_at_spaces()

    def token_ids(self, texts: Sequence[str]) -> list[list[int]]:
        """Each text's token ids: piece by piece through the cache, or (a tokenizer it was
        not worked out for) by the tokenizer's fast batch, which gives the same ids without
        computing offsets, never read here."""
        if self._pieces:
            return [_token_ids(text) for text in texts]
        encodings = self._tokenizer.encode_batch_fast(list(texts), add_special_tokens=False)
        return [e.ids for e in encodings]

    def embed_now(self, texts: Sequence[str]) -> Matrix:
        """The embeddings, computed in the calling thread: each text's rows summed into its
        row of the result, then divided by their count (what ``mean`` does, in one step)."""
        ids = self.token_ids(texts)
        if len(ids) == 1 and ids[0]:
            return self._one(ids[0])
        rows = self._table.take(np.fromiter(itertools.chain.from_iterable(ids), np.intp), axis=0)
        matrix = np.zeros((len(ids), self.dimensions), np.float32)
        start = 0
        for i, text_ids in enumerate(ids):
            end = start + len(text_ids)
            if end > start:
                np.add.reduce(rows[start:end], axis=0, out=matrix[i])
            start = end
        counts = np.fromiter(map(len, ids), np.float32, len(ids))
        matrix /= np.maximum(counts, 1.0)[:, None]
        return _normalise(matrix)

    def _one(self, ids: list[int]) -> Matrix:
        """One text's embedding (the indexer's batch of one when messages come one at a
        time): the same float32 steps as a batch's, without a batch's arrays and loop (~half
        the time of one text in a batch).
        The rows are gathered with ``take``: indexing with the list is twice as slow."""
        row = np.add.reduce(self._table.take(ids, axis=0), axis=0)
        row /= np.float32(len(ids))
        norm = np.sqrt(np.add.reduce(row * row))
        matrix: Matrix = (row / (norm if norm else np.float32(1.0)))[None, :]
        return matrix

    async def embed(self, texts: Sequence[str]) -> Matrix:
        if len(texts) < _THREAD_BATCH:
            return self.embed_now(texts)
        return await asyncio.to_thread(self.embed_now, texts)


class OpenAIEmbedder:
    """An OpenAI-compatible embeddings endpoint. The SDK's own retries are off: the indexer
    retries with its policy, and only what can succeed on a retry is retried."""

    def __init__(
        self,
        *,
        base_url: str | None,
        model: str,
        api_key: str,
        dimensions: int | None,
        timeout: float,
        max_batch: int,
    ) -> None:
        import openai

        self._openai = openai
        http = openai.DefaultAsyncHttpxClient(timeout=timeout)
        tracing.instrument_http(http)  # the embedding server sees the indexer's trace
        self._client = openai.AsyncOpenAI(
            base_url=base_url,
            api_key=api_key or "unused",
            timeout=timeout,
            max_retries=0,
            http_client=http,
        )
        self._model, self._requested = model, dimensions
        self.dimensions = dimensions or 0  # learned from the first answer when not set
        self.max_batch = max_batch

    @property
    def model_id(self) -> str:
        return f"openai:{self._model}:{self._requested or 'default'}"

    async def embed(self, texts: Sequence[str]) -> Matrix:
        openai = self._openai
        try:
            reply = await self._client.embeddings.create(
                model=self._model,
                input=list(texts),
                encoding_format="float",
                dimensions=self._requested or openai.omit,
            )
        except openai.RateLimitError as exc:
            raise EmbedderError("rate limited", retryable=True) from exc
        except openai.APIStatusError as exc:
            raise EmbedderError(
                f"status {exc.status_code}", retryable=exc.status_code >= 500
            ) from exc
        except (openai.APIConnectionError, openai.APITimeoutError) as exc:
            raise EmbedderError("unreachable", retryable=True) from exc
        rows = sorted(reply.data, key=lambda d: d.index)
        if len(rows) != len(texts):
            raise EmbedderError("wrong number of embeddings", retryable=False)
        matrix = np.asarray([r.embedding for r in rows], dtype=np.float32)
        self.dimensions = matrix.shape[1]
        return _normalise(matrix)

    async def close(self) -> None:
        await self._client.close()
