"""openapi.yaml is the served contract: every route in it, nothing else, responses conform."""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path
from typing import Any

import httpx
import jsonschema
import pytest
import yaml
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012
from starlette.routing import Route

from tests.conftest import AppFactory, Send, auth

SPEC_PATH = Path(__file__).parent.parent / "openapi.yaml"
METHODS = {"get", "post", "put", "patch", "delete"}


@cache
def spec() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(SPEC_PATH.read_text())
    return loaded


def documented() -> set[tuple[str, str]]:
    return {
        (method.upper(), path)
        for path, item in spec()["paths"].items()
        for method in item
        if method in METHODS
    }


def conform(response: httpx.Response, path: str) -> None:
    """Validate a real response against what openapi.yaml says of its path and status."""
    method = response.request.method.lower()
    operation = spec()["paths"][path][method]
    declared = operation["responses"].get(str(response.status_code))
    assert declared is not None, f"{method} {path} does not document {response.status_code}"
    if "$ref" in declared:
        declared = spec()["components"]["responses"][declared["$ref"].rsplit("/", 1)[-1]]
    content = declared.get("content")
    if content is None:
        assert response.content == b""
        return
    media = next(iter(content))
    assert response.headers["content-type"].startswith(media)
    schema = content[media]["schema"]
    if media != "application/json":
        return
    registry: Registry[Any] = Registry().with_resource(
        "urn:openapi", Resource.from_contents(spec(), default_specification=DRAFT202012)
    )
    target = {"$ref": f"urn:openapi{schema['$ref']}"} if "$ref" in schema else schema
    validator = jsonschema.Draft202012Validator(target, registry=registry)
    validator.validate(response.json())


def test_every_route_is_documented_and_every_documented_route_exists(
    client: httpx.AsyncClient,
) -> None:
    app = client.app  # type: ignore[attr-defined]
    served = {
        (method, re.sub(r":\w+}", "}", route.path))  # {task_id:id} is {task_id}
        for route in app.routes
        if isinstance(route, Route)
        for method in (route.methods or ("POST",))  # a mounted ASGI endpoint: MCP
        if method != "HEAD"
    }
    assert served == documented()


async def test_spec_is_served(client: httpx.AsyncClient) -> None:
    r = await client.get("/openapi.yaml")
    assert r.status_code == 200
    assert yaml.safe_load(r.text) == spec()
    conform(r, "/openapi.yaml")


async def test_real_responses_conform(keyed: httpx.AsyncClient, send: Send) -> None:
    h = auth("alice")
    for base in ("", "/agents/echo"):
        tb = base.replace("/agents/echo", "/agents/{agent_id}")
        sent = await send(
            "hi",
            {"kind": "data", "data": {"a": 1}},
            via=keyed,
            headers=h,
            path=f"{base}/v1/message:send",
            configuration={"historyLength": 2},
        )
        conform(sent, f"{tb}/v1/message:send")
        task = sent.json()["task"]
        tid, cid = task["id"], task["contextId"]
        conform(await keyed.get(f"{base}/v1/tasks/{tid}", headers=h), f"{tb}/v1/tasks/{{task_id}}")
        conform(await keyed.get(f"{base}/v1/tasks/nope", headers=h), f"{tb}/v1/tasks/{{task_id}}")
        conform(
            await keyed.get(f"{base}/v1/tasks/{tid}?historyLength=-2", headers=h),
            f"{tb}/v1/tasks/{{task_id}}",
        )
        conform(
            await keyed.post(f"{base}/v1/tasks/{tid}:cancel", headers=h),
            f"{tb}/v1/tasks/{{task_id}}:cancel",
        )
        open_task = await send(
            "w",
            via=keyed,
            headers=h,
            configuration={"blocking": False},
            metadata={"echo": {"finalState": "working"}},
        )
        conform(
            await keyed.post(f"{base}/v1/tasks/{open_task.json()['task']['id']}:cancel", headers=h),
            f"{tb}/v1/tasks/{{task_id}}:cancel",
        )
        conform(await keyed.get(f"{base}/v1/contexts", headers=h), f"{tb}/v1/contexts")
        conform(await keyed.get(f"{base}/v1/contexts", headers={}), f"{tb}/v1/contexts")
        conform(
            await keyed.get(f"{base}/v1/contexts", headers={**h, "Tenant-Name": "x"}),
            f"{tb}/v1/contexts",
        )
        ctx = f"{tb}/v1/contexts/{{context_id}}"
        conform(await keyed.get(f"{base}/v1/contexts/{cid}", headers=h), ctx)
        conform(await keyed.get(f"{base}/v1/contexts/{cid}?limit=0", headers=h), ctx)
        conform(await keyed.delete(f"{base}/v1/contexts/{cid}", headers=h), ctx)
        conform(await keyed.delete(f"{base}/v1/contexts/{cid}", headers=h), ctx)
        send_path = f"{base}/v1/message:send"
        send_tpl = f"{tb}/v1/message:send"
        conform(await keyed.post(send_path, headers=h, content=b"{"), send_tpl)
        sends: list[dict[str, Any]] = [
            {"contextId": cid},
            {"configuration": {"acceptedOutputModes": ["image/png"]}},
            {"configuration": {"pushNotificationConfig": {}}},
        ]
        for fields in sends:
            conform(await send("x", via=keyed, headers=h, path=send_path, **fields), send_tpl)
        for card in ("/.well-known/agent-card.json", "/agent-card.json"):
            conform(await keyed.get(f"{base}{card}"), f"{tb}{card}")
    conform(await keyed.get("/healthz"), "/healthz")
    conform(await keyed.get("/readyz"), "/readyz")
    conform(await keyed.get("/metrics"), "/metrics")
    conform(await keyed.get("/agents/ghost/agent-card.json"), "/agents/{agent_id}/agent-card.json")


async def test_registry_responses_conform(keyed: httpx.AsyncClient) -> None:
    admin, alice = auth("admin"), auth("alice")
    spec = {"id": "scribe", "name": "Scribe", "type": "echo", "skills": [{"id": "s", "name": "S"}]}
    conform(await keyed.post("/agents", json=spec, headers=admin), "/agents")
    conform(await keyed.post("/agents", json=spec, headers=admin), "/agents")  # 409
    conform(await keyed.post("/agents", json=spec, headers=alice), "/agents")  # 403
    conform(await keyed.post("/agents", json={"name": 1}, headers=admin), "/agents")  # 400
    conform(await keyed.get("/agents", headers=alice), "/agents")
    one = "/agents/{agent_id}"
    conform(await keyed.get("/agents/scribe", headers=alice), one)
    conform(await keyed.get("/agents/echo", headers=alice), one)
    conform(await keyed.get("/agents/nope", headers=alice), one)
    conform(await keyed.patch("/agents/scribe", json={"name": "S2"}, headers=admin), one)
    conform(await keyed.patch("/agents/echo", json={"name": "S2"}, headers=admin), one)
    conform(await keyed.delete("/agents/scribe", headers=admin), one)
    conform(await keyed.delete("/agents/scribe", headers=admin), one)


def test_operation_ids_are_unique() -> None:
    ids = [
        operation["operationId"]
        for item in spec()["paths"].values()
        for method, operation in item.items()
        if method in METHODS
    ]
    assert len(ids) == len(documented()) and len(set(ids)) == len(ids)


def accepts(schema: str, instance: Any) -> bool:
    """Whether openapi.yaml's ``schema`` (a components name) accepts ``instance``."""
    registry: Registry[Any] = Registry().with_resource(
        "urn:openapi", Resource.from_contents(spec(), default_specification=DRAFT202012)
    )
    ref = {"$ref": f"urn:openapi#/components/schemas/{schema}"}
    return bool(jsonschema.Draft202012Validator(ref, registry=registry).is_valid(instance))


def _send_request(**message: Any) -> dict[str, Any]:
    base = {"role": "user", "messageId": "m", "parts": [{"kind": "text", "text": "t"}]}
    return {"message": {**base, **message}}


def _sends(*bodies: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    return [("SendMessageRequest", "/v1/message:send", body) for body in bodies]


def _file_part(file: dict[str, Any]) -> dict[str, Any]:
    return _send_request(parts=[{"kind": "file", "file": file}])


def _configured(configuration: dict[str, Any] | None) -> dict[str, Any]:
    return {**_send_request(), "configuration": configuration}


# Bodies on both sides of a rule: the code and the contract must agree on each.
AGREEMENT: list[tuple[str, str, dict[str, Any]]] = [
    *_sends(
        _send_request(),
        _send_request(contextId=""),
        _send_request(taskId=""),
        _send_request(messageId="m" * 257),
        _send_request(contextId=None, taskId=None, metadata=None),
        _send_request(role="agent"),
        _send_request(referenceTaskIds=["t"] * 101),
        _send_request(parts=[]),
        _send_request(parts=[{"text": "no kind"}]),
        _file_part({"uri": "urn:x"}),
        _file_part({"uri": " http://x"}),
        _file_part({"bytes": "QQ=="}),
        _file_part({"bytes": "QQ"}),
        _file_part({"bytes": "QQ==", "uri": "a:b"}),
        _file_part({"bytes": None, "uri": "a:b"}),
        _configured({"historyLength": 2.0}),
        _configured({"historyLength": True}),
        _configured({"historyLength": "2"}),
        _configured({"historyLength": 2**31}),
        _configured({"blocking": "false"}),
        _configured(None),
    ),
    ("AgentSpec", "/agents", {"name": "n", "type": "echo"}),
    ("AgentSpec", "/agents", {"name": "", "type": "echo"}),
    ("AgentSpec", "/agents", {"name": "n", "type": "echo", "id": "Bad Id"}),
    (
        "AgentSpec",
        "/agents",
        {"name": "n", "type": "echo", "skills": [{"id": "s", "name": "S", "x": 1}]},
    ),
    ("AgentSpec", "/agents", {"name": "n", "type": "echo", "extra": 1}),
    ("AgentPatch", "/agents/{id}", {"name": "n"}),
    ("AgentPatch", "/agents/{id}", {"name": None}),
    ("AgentPatch", "/agents/{id}", {"skills": None}),
    ("AgentPatch", "/agents/{id}", {"name": ""}),
    ("SearchRequest", "/v1/contexts/{id}:search", {"query": "q", "topK": 3}),
    ("SearchRequest", "/v1/contexts/{id}:search", {"query": "q", "topK": "3"}),
    ("SearchRequest", "/v1/contexts/{id}:search", {"query": "q", "topK": 3.0}),
    ("SearchRequest", "/v1/contexts/{id}:search", {"query": "q", "minScore": None}),
    ("SearchRequest", "/v1/contexts/{id}:search", {"query": ""}),
]


@pytest.mark.parametrize(("schema", "path", "body"), AGREEMENT)
async def test_the_code_and_the_contract_agree_on_bodies(
    client: httpx.AsyncClient, send: Send, schema: str, path: str, body: dict[str, Any]
) -> None:
    if "{id}" in path:
        if path.startswith("/agents"):
            spec_ = {"id": "a1", "name": "A", "type": "echo"}
            assert (await client.post("/agents", json=spec_)).status_code == 201
            path = path.replace("{id}", "a1")
        else:
            path = path.replace("{id}", (await send("x")).json()["task"]["contextId"])
    method = "PATCH" if schema == "AgentPatch" else "POST"
    r = await client.request(method, path, json=body)
    assert r.status_code < 500, r.text
    assert (r.status_code != 400) == accepts(schema, body), (r.status_code, r.text)


async def test_boundary_answers_conform(make_app: AppFactory, client: httpx.AsyncClient) -> None:
    text = {"Content-Type": "text/plain"}
    conform(await client.post("/v1/message:send", content=b"{}", headers=text), "/v1/message:send")
    conform(await client.post("/agents", content=b"{}", headers=text), "/agents")
    conform(await client.post("/mcp", content=b"{}", headers=text), "/mcp")
    rpc = {"Accept": "application/json", "Content-Type": "application/json"}
    conform(await client.post("/mcp", content=b"{", headers=rpc), "/mcp")
    conform(await client.post("/mcp", json={"jsonrpc": "2.0"}, headers=rpc), "/mcp")
    no_json = {"Accept": "text/html", "Content-Type": "application/json"}
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    conform(await client.post("/mcp", json=body, headers=no_json), "/mcp")
    conform(await client.post("/mcp", json=body, headers=rpc), "/mcp")
    async with make_app(allowed_hosts=[]) as local:
        for path in ("/healthz", "/v1/contexts", "/agents", "/.well-known/agent-card.json"):
            conform(await local.get(path, headers={"Host": "attacker.example"}), path)


async def test_binding_answers_conform(keyed: httpx.AsyncClient) -> None:
    h = auth("alice")
    rpc = {"jsonrpc": "2.0", "id": 1, "method": "message/send"}
    sent = await keyed.post(
        "/", json={**rpc, "params": {"message": {"role": "user", "messageId": "m1",
                   "parts": [{"kind": "text", "text": "t"}]}}}, headers=h,
    )  # fmt: skip
    conform(sent, "/")
    tid = sent.json()["result"]["id"]
    conform(
        await keyed.post("/agents/echo", json=[rpc, {**rpc, "id": 2}], headers=h),
        "/agents/{agent_id}",
    )
    conform(await keyed.post("/", json={**rpc, "method": "x"}, headers=h), "/")
    conform(await keyed.post("/", json={"jsonrpc": "2.0", "method": "x"}, headers=h), "/")
    conform(await keyed.post("/", json=rpc), "/")
    proto = {"request": {"role": "ROLE_USER", "messageId": "m2", "content": [{"text": "t"}]}}
    conform(await keyed.post("/a2a/v1/message:send", json=proto, headers=h), "/a2a/v1/message:send")
    conform(await keyed.get(f"/a2a/v1/tasks/{tid}", headers=h), "/a2a/v1/tasks/{task_id}")
    conform(await keyed.get("/a2a/v1/tasks/nope", headers=h), "/a2a/v1/tasks/{task_id}")
    conform(
        await keyed.post(f"/a2a/v1/tasks/{tid}:cancel", headers=h), "/a2a/v1/tasks/{task_id}:cancel"
    )
    conform(await keyed.get("/a2a/v1/card", headers=h), "/a2a/v1/card")
    v1 = {"message": {"role": "ROLE_USER", "messageId": "m3", "parts": [{"text": "t"}]}}
    conform(await keyed.post("/a2a/message:send", json=v1, headers=h), "/a2a/message:send")
    conform(await keyed.post("/message:send", json={}, headers=h), "/message:send")
    conform(await keyed.get(f"/a2a/t1/tasks/{tid}", headers=h), "/a2a/{tenant}/tasks/{task_id}")
    conform(await keyed.get(f"/a2a/t9/tasks/{tid}", headers=h), "/a2a/{tenant}/tasks/{task_id}")
    conform(
        await keyed.get("/agents/echo/a2a/tasks?pageSize=1", headers=h),
        "/agents/{agent_id}/a2a/tasks",
    )
    conform(await keyed.get("/tasks?pageSize=0", headers=h), "/tasks")
    conform(await keyed.post(f"/tasks/{tid}:cancel", headers=h), "/tasks/{task_id}:cancel")
    conform(await keyed.post("/message:stream", headers=h), "/message:stream")
    conform(await keyed.get("/extendedAgentCard", headers=h), "/extendedAgentCard")
    conform(
        await keyed.get(f"/v1/tasks/{tid}:subscribe", headers=h), "/v1/tasks/{task_id}:subscribe"
    )
