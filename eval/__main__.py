"""`make eval`: recall@1, recall@5 and MRR of context-memory search, per embedder and mode.

Reads a retrieval set (default ``eval/clinical_retrieval.yaml``, or ``EVAL_SET``): contexts
of user messages and queries each naming the message that answers it. Every context's
messages are embedded as the indexer embeds them; every query is ranked within its context
by ``gateway.context_memory.ranking`` exactly as the search route ranks it. Embedders: ``hashing``
and ``wordllama`` (offline), and ``openai`` when ``GATEWAY_EMBEDDER_URL`` or
``GATEWAY_EMBEDDER_API_KEY`` names an endpoint (skipped with the reason otherwise).
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from gateway.context_memory.embedders import Embedder, HashingEmbedder, WordLlamaEmbedder
from gateway.context_memory.lexical import LexicalIndex
from gateway.context_memory.ranking import MODES, Mode, rank

DEFAULT_SET = Path(__file__).resolve().parent / "clinical_retrieval.yaml"


@dataclass(frozen=True)
class Query:
    context: str
    text: str
    answer: int
    kind: str


@dataclass(frozen=True)
class RetrievalSet:
    contexts: dict[str, list[str]]
    queries: list[Query]

    @classmethod
    def load(cls, path: Path) -> RetrievalSet:
        raw: dict[str, Any] = yaml.safe_load(path.read_text())
        contexts = {c["id"]: [str(m) for m in c["messages"]] for c in raw["contexts"]}
        queries = [
            Query(c["id"], str(text), int(answer), str(kind))
            for c in raw["contexts"]
            for kind, text, answer in c.get("queries", ())
        ]
        for q in queries:
            if not 0 <= q.answer < len(contexts[q.context]):
                raise ValueError(f"query {q.text!r}: no message {q.answer} in {q.context}")
        return cls(contexts, queries)


@dataclass
class Figures:
    """Recall@1, recall@5 and MRR over a list of queries' answer ranks (None: not found)."""

    ranks: list[int | None] = field(default_factory=list)

    def recall(self, k: int) -> float:
        return sum(1 for r in self.ranks if r is not None and r <= k) / max(1, len(self.ranks))

    @property
    def mrr(self) -> float:
        return sum(1 / r for r in self.ranks if r is not None) / max(1, len(self.ranks))


async def _embed(embedder: Embedder, texts: Sequence[str]) -> np.ndarray[Any, Any]:
    rows = [await embedder.embed(texts[i : i + 64]) for i in range(0, len(texts), 64)]
    return np.vstack(rows)


async def evaluate(data: RetrievalSet, embedder: Embedder) -> dict[Mode, dict[str, Figures]]:
    """Figures per mode, for all queries (``all``) and per query kind."""
    out: dict[Mode, dict[str, Figures]] = {m: defaultdict(Figures) for m in MODES}
    by_context: dict[str, list[Query]] = defaultdict(list)
    for q in data.queries:
        by_context[q.context].append(q)
    for cid, queries in by_context.items():
        messages = data.contexts[cid]
        vectors = await _embed(embedder, messages)
        lexical = LexicalIndex()
        lexical.add(enumerate(messages))
        query_vectors = await _embed(embedder, [q.text for q in queries])
        for q, qv in zip(queries, query_vectors, strict=True):
            vector, text = vectors @ qv, lexical.scores(q.text)
            for mode in MODES:
                ranked = rank(mode, len(messages), vector, text)
                order = [r.index for r in ranked]
                position = order.index(q.answer) + 1 if q.answer in order else None
                out[mode]["all"].ranks.append(position)
                out[mode][q.kind].ranks.append(position)
    return out


def embedders() -> tuple[dict[str, Embedder], dict[str, str]]:
    """The embedders to evaluate, and those skipped with the reason."""
    chosen: dict[str, Embedder] = {"hashing": HashingEmbedder(), "wordllama": WordLlamaEmbedder()}
    skipped: dict[str, str] = {}
    if os.environ.get("GATEWAY_EMBEDDER_URL") or os.environ.get("GATEWAY_EMBEDDER_API_KEY"):
        from gateway.context_memory.factory import build_embedder
        from gateway.settings import Settings

        openai = build_embedder(Settings(embedder="openai"))
        assert openai is not None
        chosen["openai"] = openai
    else:
        skipped["openai"] = "no endpoint configured (GATEWAY_EMBEDDER_URL / _API_KEY unset)"
    return chosen, skipped


async def _evaluate_all(
    data: RetrievalSet, chosen: dict[str, Embedder]
) -> dict[str, dict[Mode, dict[str, Figures]]]:
    results = {}
    for name, embedder in chosen.items():
        results[name] = await evaluate(data, embedder)
        closing = getattr(embedder, "close", None)
        if closing is not None:
            await closing()
    return results


def report(data: RetrievalSet, results: dict[str, dict[Mode, dict[str, Figures]]]) -> str:
    kinds = sorted({q.kind for q in data.queries})
    lines = [
        f"{len(data.contexts)} contexts, {sum(map(len, data.contexts.values()))} messages, "
        f"{len(data.queries)} queries",
        f"{'embedder':<10} {'mode':<7} {'recall@1':>8} {'recall@5':>8} {'MRR':>6}   "
        + "  ".join(f"{k + ' R@5':>10}" for k in kinds),
    ]
    for name, modes in results.items():
        for mode, figures in modes.items():
            every = figures["all"]
            lines.append(
                f"{name:<10} {mode:<7} {every.recall(1):8.3f} {every.recall(5):8.3f} "
                f"{every.mrr:6.3f}   " + "  ".join(f"{figures[k].recall(5):10.3f}" for k in kinds)
            )
    return "\n".join(lines)


def main(argv: Sequence[str] = ()) -> None:
    path = Path(argv[0] if argv else os.environ.get("EVAL_SET") or DEFAULT_SET)
    data = RetrievalSet.load(path)
    chosen, skipped = embedders()
    started = time.perf_counter()
    results = asyncio.run(_evaluate_all(data, chosen))
    print(report(data, results))
    for name, reason in skipped.items():
        print(f"{name}: skipped, {reason}")
    print(f"({time.perf_counter() - started:.1f} s)")


if __name__ == "__main__":
    main(sys.argv[1:])
