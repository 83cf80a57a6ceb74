"""The ceiling: a bare Starlette endpoint that reads the request and answers a constant JSON.

No Redis, no parsing: what uvicorn + Starlette on this machine can serve at most, measured
in the same run as the floor and the gateway (`make bench` interleaves the three).
"""

from __future__ import annotations

import os

import orjson
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

ANSWER = orjson.dumps(
    {"task": {"id": "ceiling", "contextId": "ceiling", "status": {"state": "completed"}}}
)


async def ceiling(request: Request) -> Response:
    await request.body()
    return Response(ANSWER, media_type="application/json")


app = Starlette(routes=[Route("/ceiling", ceiling, methods=["POST"])])

if __name__ == "__main__":
    uvicorn.run(app, host="127.0.0.1", port=int(os.environ["PORT"]), log_level="warning")
