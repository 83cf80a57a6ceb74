"""A client's webhook, standing in for the receiver of push notifications: an honest HTTP
server on 127.0.0.1 that answers 503 to its first ``fail`` requests (and to every request
while ``down``), then 204 and records each request (headers and body) it accepts. While
``stalled`` it holds each request open (``holding`` counts them, ``most_held`` the most at
once) until ``release`` is set."""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import dataclass
from typing import Any

import orjson
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from tests.http_double import ServedDouble


@dataclass(frozen=True)
class Delivery:
    headers: dict[str, str]
    body: bytes
    at: float = 0.0  # when it was received (time.time())

    @property
    def event_id(self) -> str:
        return self.headers["x-a2a-notification-id"]

    def json(self) -> Any:
        return orjson.loads(self.body)


class WebhookReceiver(ServedDouble):
    def __init__(
        self,
        fail: int = 0,
        *,
        host: str = "127.0.0.1",
        port: int | None = None,
        tls: tuple[str, str] | None = None,  # certificate and key files: served over https
    ) -> None:
        super().__init__(host, port, tls)
        self.fail = fail
        self.down = False
        self.status = 204  # what it answers once it accepts (a 3xx, 4xx to test refusals)
        self.attempts = 0
        self.accepted: list[Delivery] = []
        self.stalled = False
        self.release = threading.Event()
        self.holding = self.most_held = 0
        # any path (a webhook's path is the client's to choose)
        app = Starlette(routes=[Route("/{path:path}", self._hook, methods=["POST"])])
        self.serve(app)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/hook"

    def unique(self) -> dict[str, Delivery]:
        """What a receiver that dedupes on the event id keeps (the first of each)."""
        out: dict[str, Delivery] = {}
        for delivery in self.accepted:
            out.setdefault(delivery.event_id, delivery)
        return out

    def stop(self) -> None:
        self.release.set()
        super().stop()

    async def _hook(self, request: Request) -> Response:
        body = await request.body()
        self.attempts += 1
        if self.stalled:
            self.holding += 1
            self.most_held = max(self.most_held, self.holding)
            await asyncio.to_thread(self.release.wait)
            self.holding -= 1
        if self.attempts <= self.fail or self.down:
            return Response(status_code=503)
        self.accepted.append(Delivery(dict(request.headers), body, time.time()))
        headers = {"Location": "/elsewhere"} if 300 <= self.status < 400 else None
        return Response(status_code=self.status, headers=headers)
