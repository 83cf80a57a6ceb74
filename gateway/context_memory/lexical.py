"""BM25 over a context's embedded text (pure), built incrementally as messages arrive.

Terms are lower-cased words (``\\w+``) less a short list of English function words;
scores are Okapi BM25 (k1 = 1.2, b = 0.75, the non-negative idf ``ln(1 + (N - n + 0.5) /
(n + 0.5))``): 0 for a message sharing no term with the query, higher for rarer terms
repeated in shorter messages.
"""

from __future__ import annotations

import math
import re
from collections import Counter, defaultdict
from collections.abc import Iterable

import numpy as np
import numpy.typing as npt

__all__ = ["LexicalIndex", "counted", "terms"]

K1, B = 1.2, 0.75

_WORD = re.compile(r"\w+", re.UNICODE)
_FUNCTION_WORDS = """a an the is are was were be been being am of to in on at for and or but
    with by from
    as it its he she his her him they them their this that these those there any does do
    did has have had what which who whom how when why not no yes if so than then into
    about over under up out off can could would should will shall may might must i me my
    we us our you your"""
_STOP = frozenset(_FUNCTION_WORDS.split())


def terms(text: str) -> list[str]:
    return [w for w in _WORD.findall(text.lower()) if w not in _STOP]


def counted(documents: Iterable[tuple[int, str]]) -> list[tuple[int, Counter[str]]]:
    """Documents as term counts: the costly part of adding them, safe in any thread."""
    return [(doc_id, Counter(terms(text))) for doc_id, text in documents]


class LexicalIndex:
    """Documents keyed by an id (the message seq), in the order they were added."""

    def __init__(self) -> None:
        self.ids: list[int] = []
        self._lengths: list[int] = []
        self._postings: dict[str, list[tuple[int, int]]] = defaultdict(list)
        # numpy copies, made when a query needs them and kept until documents are added
        self._length_array = np.zeros(0, np.float64)
        self._posting_arrays: dict[str, tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]] = {}

    def __len__(self) -> int:
        return len(self.ids)

    def add(self, documents: Iterable[tuple[int, str]]) -> None:
        self.add_counted(counted(documents))

    def add_counted(self, documents: Iterable[tuple[int, Counter[str]]]) -> None:
        """Add documents already split into term counts (see ``counted``)."""
        for doc_id, counts in documents:
            row = len(self.ids)
            self.ids.append(doc_id)
            self._lengths.append(sum(counts.values()))
            for term, count in counts.items():
                self._postings[term].append((row, count))
                self._posting_arrays.pop(term, None)

    def _posting(self, term: str) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]] | None:
        arrays = self._posting_arrays.get(term)
        if arrays is None:
            postings = self._postings.get(term)
            if not postings:
                return None
            rows, tf = np.asarray(postings, np.int64).T
            arrays = self._posting_arrays[term] = (rows, tf)
        return arrays

    def scores(self, query: str) -> npt.NDArray[np.float32]:
        """One BM25 score per document, in the order they were added."""
        n = len(self.ids)
        out = np.zeros(n, np.float64)
        if not n:
            return out.astype(np.float32)
        if self._length_array.shape[0] != n:
            self._length_array = np.asarray(self._lengths, np.float64)
        lengths = self._length_array
        average = max(float(lengths.mean()), 1e-9)
        for term in set(terms(query)):
            posting = self._posting(term)
            if posting is None:
                continue
            rows, tf = posting
            idf = math.log(1 + (n - rows.shape[0] + 0.5) / (rows.shape[0] + 0.5))
            norm = K1 * (1 - B + B * lengths[rows] / average)
            out[rows] += idf * tf * (K1 + 1) / (tf + norm)
        return out.astype(np.float32)
