"""`make eval`'s script on a small retrieval set written here (the full set is not run)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from eval.__main__ import RetrievalSet, evaluate, main, report
from gateway.context_memory.embedders import HashingEmbedder, WordLlamaEmbedder
from tests.embeddings_server import EmbeddingsServer

TINY = """
contexts:
  - id: one
    messages:
      - "Blood glucose was 6.1 mmol/L this morning"
      - "Chest pain radiating to the left arm"
      - "Allergic to penicillin since childhood"
    queries:
      - [lay, "sugar levels", 0]
      - [exact, "penicillin", 2]
  - id: two
    messages:
      - "Lot number QX-2290 recorded for the flu vaccine"
      - "Scheduled for an MRI of the lumbar spine"
    queries:
      - [exact, "QX-2290", 0]
"""


@pytest.fixture
def tiny(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.yaml"
    path.write_text(TINY)
    return path


def test_figures_per_embedder_and_mode(tiny: Path) -> None:
    data = RetrievalSet.load(tiny)
    assert len(data.contexts) == 2 and [q.answer for q in data.queries] == [0, 2, 0]
    hashing = asyncio.run(evaluate(data, HashingEmbedder()))
    meaning = asyncio.run(evaluate(data, WordLlamaEmbedder()))
    # Words alone miss "sugar levels" (no word in common): ranked nowhere, so recall@5 2/3.
    assert hashing["text"]["all"].ranks == [None, 1, 1]
    assert hashing["text"]["all"].recall(5) == pytest.approx(2 / 3)
    assert hashing["text"]["exact"].recall(1) == 1.0
    assert meaning["vector"]["lay"].ranks == [1]
    assert meaning["hybrid"]["all"].recall(1) == 1.0 and meaning["hybrid"]["all"].mrr == 1.0
    table = report(data, {"hashing": hashing, "wordllama": meaning})
    assert "2 contexts, 5 messages, 3 queries" in table
    assert "wordllama  hybrid     1.000    1.000  1.000" in table


def test_make_eval_prints_every_embedder_and_says_why_one_is_skipped(
    tiny: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("GATEWAY_EMBEDDER_URL", raising=False)
    monkeypatch.delenv("GATEWAY_EMBEDDER_API_KEY", raising=False)
    main([str(tiny)])
    out = capsys.readouterr().out
    for name in ("hashing", "wordllama"):
        assert all(f"{name:<10} {mode:<7}" in out for mode in ("hybrid", "vector", "text"))
    assert "openai: skipped, no endpoint configured" in out


def test_a_query_naming_a_missing_message_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(TINY.replace('"penicillin", 2]', '"penicillin", 7]'))
    with pytest.raises(ValueError, match="no message 7 in one"):
        RetrievalSet.load(path)


def test_an_openai_compatible_endpoint_is_evaluated_when_configured(
    tiny: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    server = EmbeddingsServer().start()
    try:
        monkeypatch.setenv("GATEWAY_EMBEDDER_URL", server.url)
        monkeypatch.setenv("GATEWAY_EMBEDDER_MODEL", server.model)
        monkeypatch.setenv("GATEWAY_EMBEDDER_API_KEY", "test-key")
        main([str(tiny)])
    finally:
        server.stop()
    out = capsys.readouterr().out
    assert "openai     hybrid" in out and "skipped" not in out
    assert server.errors == [] and server.calls
