"""The floor: a bare Starlette endpoint doing one Redis pipeline of comparable writes.

It stores a message, a task record, the index entries and refreshes TTLs in one
MULTI/EXEC round trip and answers a small JSON task: what any gateway must at
least do per send, with nothing else.
"""

from __future__ import annotations

import os
import uuid

import orjson
import uvicorn
from redis.asyncio import Redis
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

client = Redis.from_url(os.environ["REDIS_URL"])
TTL = 30 * 24 * 3600


async def floor(request: Request) -> Response:
    body = orjson.loads(await request.body())
    msg = body["message"]
    cid, tid = str(uuid.uuid4()), str(uuid.uuid4())
    base = f"floor:{{u}}:c:{cid}"
    task = {"id": tid, "contextId": cid, "kind": "task", "status": {"state": "completed"}}
    async with client.pipeline(transaction=True) as pipe:
        pipe.hset(f"{base}:msgs", "1", orjson.dumps(msg))
        pipe.hset(f"{base}:tasks", mapping={tid: orjson.dumps(task), f"{tid}:st": "completed"})
        pipe.rpush(f"{base}:items", tid)
        pipe.hset(base, mapping={"created": 1, "updated": 1})
        pipe.zadd("floor:{u}:ctxs", {cid: 1})
        for key in (f"{base}:msgs", f"{base}:tasks", f"{base}:items", base, "floor:{u}:ctxs"):
            pipe.expire(key, TTL)
        await pipe.execute()
    return Response(orjson.dumps({"task": task}), media_type="application/json")


app = Starlette(routes=[Route("/floor", floor, methods=["POST"])])

if __name__ == "__main__":
    uvicorn.run(app, host="127.0.0.1", port=int(os.environ["PORT"]), log_level="warning")
