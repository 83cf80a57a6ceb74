"""One store behind every binding: a context made over any binding is continued, read and
scrubbed by its owner over any other, retried idempotently across them, and is not found
for everyone else — on every binding."""

from __future__ import annotations

import itertools
import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import orjson
import pytest

from tests.conftest import API_KEYS, AppFactory, auth

NOT_FOUND = {-32001, -32010}  # task, context


class Binding:
    name = ""

    def __init__(self, c: httpx.AsyncClient) -> None:
        self.c = c

    async def send(self, user: str, context_id: str | None, message_id: str) -> Any:
        """(task id, context id), or None when the context is not found."""
        raise NotImplementedError

    async def state(self, user: str, task_id: str) -> str | None:
        """The task's state in canonical spelling, or None when not found."""
        raise NotImplementedError


def _canonical_state(state: str) -> str:
    return (
        state.removeprefix("TASK_STATE_").lower().replace("_", "-").replace("cancelled", "canceled")
    )


class Rest(Binding):
    name = "rest"

    async def send(self, user: str, context_id: str | None, message_id: str) -> Any:
        msg: dict[str, Any] = {
            "role": "user",
            "messageId": message_id,
            "parts": [{"kind": "text", "text": "x"}],
        }
        if context_id:
            msg["contextId"] = context_id
        r = await self.c.post("/v1/message:send", json={"message": msg}, headers=auth(user))
        if r.status_code == 404:
            return None
        task = r.json()["task"]
        return task["id"], task["contextId"]

    async def state(self, user: str, task_id: str) -> str | None:
        r = await self.c.get(f"/v1/tasks/{task_id}", headers=auth(user))
        return None if r.status_code == 404 else str(r.json()["status"]["state"])


class Proto03(Binding):
    name = "rest-0.3-proto"

    async def send(self, user: str, context_id: str | None, message_id: str) -> Any:
        msg: dict[str, Any] = {
            "role": "ROLE_USER",
            "messageId": message_id,
            "content": [{"text": "x"}],
        }
        if context_id:
            msg["contextId"] = context_id
        body = {"request": msg, "configuration": {"blocking": True}}
        r = await self.c.post("/agents/echo/a2a/v1/message:send", json=body, headers=auth(user))
        if r.status_code == 404:
            return None
        task = r.json()["task"]
        return task["id"], task["contextId"]

    async def state(self, user: str, task_id: str) -> str | None:
        r = await self.c.get(f"/agents/echo/a2a/v1/tasks/{task_id}", headers=auth(user))
        return None if r.status_code == 404 else _canonical_state(r.json()["status"]["state"])


class Rest10(Binding):
    name = "rest-1.0"

    async def send(self, user: str, context_id: str | None, message_id: str) -> Any:
        msg: dict[str, Any] = {
            "role": "ROLE_USER",
            "messageId": message_id,
            "parts": [{"text": "x"}],
        }
        if context_id:
            msg["contextId"] = context_id
        r = await self.c.post("/a2a/message:send", json={"message": msg}, headers=auth(user))
        if r.status_code == 404:
            return None
        task = r.json()["task"]
        return task["id"], task["contextId"]

    async def state(self, user: str, task_id: str) -> str | None:
        r = await self.c.get(f"/agents/echo/a2a/tasks/{task_id}", headers=auth(user))
        return None if r.status_code == 404 else _canonical_state(r.json()["status"]["state"])


class Rpc(Binding):
    name = "jsonrpc"
    send_method, get_method, v1 = "message/send", "tasks/get", False

    async def _call(self, user: str, method: str, params: dict[str, Any]) -> Any:
        body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
        answer = (await self.c.post("/agents/echo", json=body, headers=auth(user))).json()
        if "error" in answer:
            assert answer["error"]["code"] in NOT_FOUND, answer
            return None
        return answer["result"]

    async def send(self, user: str, context_id: str | None, message_id: str) -> Any:
        msg: dict[str, Any] = {"role": "ROLE_USER" if self.v1 else "user", "messageId": message_id}
        msg["parts"] = [{"text": "x"}] if self.v1 else [{"kind": "text", "text": "x"}]
        if context_id:
            msg["contextId"] = context_id
        result = await self._call(user, self.send_method, {"message": msg})
        if result is None:
            return None
        task = result["task"] if self.v1 else result
        return task["id"], task["contextId"]

    async def state(self, user: str, task_id: str) -> str | None:
        result = await self._call(user, self.get_method, {"id": task_id})
        return None if result is None else _canonical_state(result["status"]["state"])


class Rpc10(Rpc):
    name = "jsonrpc-1.0"
    send_method, get_method, v1 = "SendMessage", "GetTask", True


BINDINGS = [Rest, Proto03, Rest10, Rpc, Rpc10]


@pytest.fixture
async def gw(make_app: AppFactory) -> AsyncIterator[httpx.AsyncClient]:
    async with make_app(api_keys=orjson.dumps(API_KEYS).decode()) as c:
        yield c


async def test_every_binding_serves_every_other_bindings_contexts(gw: httpx.AsyncClient) -> None:
    bindings = [b(gw) for b in BINDINGS]
    contexts = []
    for made, used in itertools.product(bindings, repeat=2):
        pair = f"{made.name} -> {used.name}"
        first = await made.send("alice", None, str(uuid.uuid4()))
        assert first is not None, pair
        task_id, context_id = first
        contexts.append((task_id, context_id))
        # The owner continues and reads it over the other binding.
        second = await used.send("alice", context_id, str(uuid.uuid4()))
        assert second is not None and second[1] == context_id, pair
        assert await used.state("alice", task_id) == "completed", pair
        # Anyone else, same tenant or not: not found to read; naming the context id opens
        # their own context of that id, which the owner does not see either.
        for other in ("bob", "carol"):
            assert await used.state(other, task_id) is None, (pair, other)
            theirs = await used.send(other, context_id, str(uuid.uuid4()))
            assert theirs is not None and theirs[1] == context_id, (pair, other)
            assert await used.state("alice", theirs[0]) is None, (pair, other)
        # A retry of the first send over the other binding is the same task.
        again = await used.send("alice", context_id, "idem-" + task_id)
        replay = await made.send("alice", context_id, "idem-" + task_id)
        assert again == replay, pair
    # Scrubbed over the canonical REST, gone on every binding.
    for task_id, context_id in contexts[:: len(bindings) + 1]:
        assert (
            await gw.delete(f"/v1/contexts/{context_id}", headers=auth("alice"))
        ).status_code == 204
        for used in bindings:
            assert await used.state("alice", task_id) is None, used.name
            assert await used.send("alice", context_id, str(uuid.uuid4())) is None, used.name
