"""JSON responses and the one renderer of gateway errors."""

from __future__ import annotations

from typing import Any

import orjson
from starlette.responses import Response

from gateway.errors import GatewayError

__all__ = ["JSONResponse", "error_response"]


class JSONResponse(Response):
    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        return orjson.dumps(content)


def error_response(exc: GatewayError) -> JSONResponse:
    return JSONResponse(exc.body(), status_code=exc.status, headers=exc.headers())
