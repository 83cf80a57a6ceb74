"""How search ranks a context's messages (pure): by meaning, by words, or by both fused.

``vector``: the cosine of the query's and the message's embeddings (-1..1); messages not
embedded (yet, or by the current model) are not ranked.
``text``: the message's BM25 score for the query (``gateway.context_memory.lexical``, 0 and up);
messages sharing no term with it are not ranked.
``hybrid``: reciprocal-rank fusion of those two rankings — each message scores
``1 / (k + rank)`` in each ranking it is among the first 100 of (``k`` = 60, ranks from 1) —
scaled so that a message ranked first by both scores 1 (first by one ranking only: 0.5).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from gateway.search_mode import MODES, Mode

__all__ = ["FUSED", "MODES", "RRF_K", "Mode", "Ranked", "rank"]

RRF_K = 60
FUSED = 100  # each ranking contributes its first 100 messages

Scores = npt.NDArray[np.float32]


@dataclass(frozen=True, slots=True)
class Ranked:
    index: int  # the candidate's position in the score arrays
    score: float


def _best(scores: Scores, ranked: npt.NDArray[np.bool_], count: int) -> npt.NDArray[np.intp]:
    """The first ``count`` ranked candidates, best first (ties: the older message first)."""
    candidates = np.flatnonzero(ranked)
    if candidates.shape[0] > count:
        top = np.argpartition(-scores[candidates], count - 1)[:count]
        candidates = np.sort(candidates[top])
    order: npt.NDArray[np.intp] = candidates[np.argsort(-scores[candidates], kind="stable")]
    return order


def _fused(vector: Scores, text: Scores) -> Scores:
    fused = np.zeros(vector.shape[0], np.float64)
    ranks = 1.0 / (RRF_K + np.arange(1, FUSED + 1, dtype=np.float64))
    for scores, ranked in ((vector, np.isfinite(vector)), (text, text > 0)):
        order = _best(scores, ranked, FUSED)
        fused[order] += ranks[: order.shape[0]]
    result: Scores = (fused * (RRF_K + 1) / 2).astype(np.float32)
    return result


def rank(
    mode: Mode,
    top_k: int,
    vector: Scores,
    text: Scores,
    min_score: float | None = None,
) -> list[Ranked]:
    """The best ``top_k`` candidates by ``mode``'s score, best first, at or above
    ``min_score``. ``vector`` holds -inf for candidates without a usable embedding."""
    if mode == "vector":
        scores, ranked = vector, np.isfinite(vector)
    elif mode == "text":
        scores, ranked = text, text > 0
    else:
        scores = _fused(vector, text)
        ranked = scores > 0
    order = _best(scores, ranked, top_k) if top_k > 0 else np.zeros(0, np.intp)
    if min_score is not None:
        order = order[scores[order] >= min_score]
    return [Ranked(int(i), float(scores[i])) for i in order]
