"""An OpenAI-compatible embeddings server for tests, on 127.0.0.1.

Validates each request as the Embeddings API defines it (model, a list of non-empty
strings as input, encoding_format, optional dimensions) and answers deterministic
vectors. Faults are injected through attributes: ``fail_next`` statuses to return
first, ``delay`` seconds per call, ``refuse`` a substring that makes an input 400; and
``hold()`` keeps every call waiting until ``release()`` (an embedder as slow as a test
needs, whatever the machine's speed), ``held`` counting the calls waiting.
"""

from __future__ import annotations

import asyncio
import hashlib
import threading
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from tests.http_double import ServedDouble

MAX_INPUT_CHARS = 20_000


def vector(text: str, dimensions: int) -> list[float]:
    """Deterministic: word-hash features, so texts sharing words point the same way."""
    out = [0.0] * dimensions
    for word in text.lower().split():
        digest = hashlib.sha256(word.encode()).digest()
        out[int.from_bytes(digest[:4], "big") % dimensions] += 1.0
    return out


class EmbeddingsServer(ServedDouble):
    def __init__(self, model: str = "test-embed", dimensions: int = 64, prefix: str = "") -> None:
        """Served at ``{prefix}/v1/embeddings``."""
        self.model, self.dimensions, self.prefix = model, dimensions, prefix
        super().__init__()
        self.calls: list[dict[str, Any]] = []
        self.errors: list[str] = []
        self.fail_next: list[int] = []
        self.delay = 0.0
        self.refuse = "POISON"
        self.held = 0
        self._open = threading.Event()  # set from the test's thread, read on the server's
        self._open.set()
        route = Route(f"{prefix}/v1/embeddings", self._embeddings, methods=["POST"])
        app = Starlette(routes=[route])
        self.serve(app)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}{self.prefix}/v1"

    def hold(self) -> None:
        """Keep every call waiting, unanswered, until ``release``."""
        self._open.clear()

    def release(self) -> None:
        """Answer the calls held, and the next ones at once."""
        self._open.set()

    def stop(self) -> None:
        self.release()  # a held call must not keep the server from stopping
        super().stop()

    def _invalid(self, body: Any) -> str | None:
        if not isinstance(body, dict):
            return "body must be an object"
        if body.get("model") != self.model:
            return "unknown model"
        texts = body.get("input")
        if not isinstance(texts, list) or not texts or len(texts) > 2048:
            return "input must be a list of 1-2048 strings"
        if not all(isinstance(t, str) and t and len(t) <= MAX_INPUT_CHARS for t in texts):
            return "each input must be a non-empty string within the limit"
        if body.get("encoding_format", "float") not in ("float", "base64"):
            return "bad encoding_format"
        dims = body.get("dimensions")
        if dims is not None and (not isinstance(dims, int) or dims < 1):
            return "bad dimensions"
        return None

    async def _embeddings(self, request: Request) -> JSONResponse:
        body = await request.json()
        self.calls.append(body)
        if not self._open.is_set():
            self.held += 1
            await asyncio.to_thread(self._open.wait)  # the server's loop goes on meanwhile
            self.held -= 1
        if self.delay:
            await asyncio.sleep(self.delay)
        if self.fail_next:
            status = self.fail_next.pop(0)
            return JSONResponse({"error": {"message": "injected", "type": "server_error"}}, status)
        problem = self._invalid(body)
        if problem is None and any(self.refuse in t for t in body["input"]):
            problem = "input refused"
        if problem is not None:
            self.errors.append(problem)
            return JSONResponse(
                {"error": {"message": problem, "type": "invalid_request_error"}}, 400
            )
        dims = body.get("dimensions") or self.dimensions
        data = [
            {"object": "embedding", "index": i, "embedding": vector(t, dims)}
            for i, t in enumerate(body["input"])
        ]
        usage = {"prompt_tokens": len(data), "total_tokens": len(data)}
        return JSONResponse({"object": "list", "data": data, "model": self.model, "usage": usage})


def openai_settings(server: EmbeddingsServer, **extra: Any) -> dict[str, Any]:
    """Gateway settings for the ``openai`` embedder pointed at ``server`` (``extra`` on top)."""
    return {
        "embedder": "openai",
        "embedder_url": server.url,
        "embedder_model": server.model,
        "embedder_api_key": "test-key",
        **extra,
    }
