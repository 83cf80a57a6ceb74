"""Push notification config operations (set/create, get, list, delete) of every binding:
JSON-RPC 0.3 (``tasks/pushNotificationConfig/*``) and 1.0 (``*TaskPushNotificationConfig*``),
the 0.3 proto-JSON REST resource (``{base}/a2a/v1/tasks/{id}/pushNotificationConfigs``),
the 1.0 REST one (``{base}/a2a/tasks/{id}/pushNotificationConfigs``, tenant prefix and root
too) and the canonical REST (``/v1/tasks/{id}/pushNotificationConfigs``, 0.3 JSON). Thin
adapters over ``PushService``: each reads its spelling, and writes the config back in it
(``gateway.push.configs``). The config's version decides what its webhook receives: 0.3
bindings get Tasks, 1.0 bindings ``StreamResponse`` objects."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from gateway.errors import InvalidParamsError, PushNotificationNotSupportedError
from gateway.http.a2a_calls import Call
from gateway.http.params import json_body
from gateway.http.responses import JSONResponse
from gateway.models.requests import _Id, _Model
from gateway.push.configs import Version, write_config
from gateway.service.push import PushService
from gateway.validation import validated

__all__ = [
    "JSONRPC_V03",
    "JSONRPC_V1",
    "canonical_config",
    "canonical_configs",
    "jwks",
    "v03_config",
    "v03_configs",
    "v1_config",
    "v1_configs",
]

Params = dict[str, Any]


class _Ref(_Model):
    taskId: _Id
    configId: str | None = None


def _service(call: Call) -> PushService:
    if call.state.push is None:
        raise PushNotificationNotSupportedError()
    return call.state.push


async def _ready(call: Call, task_id: Any, config_id: Any = None) -> tuple[PushService, _Ref]:
    """The service, and the task (and config) ids validated; the agent must exist."""
    service = _service(call)
    await call.state.agents.resolve(call.principal.tenant, call.agent_id)
    return service, validated(_Ref, {"taskId": task_id, "configId": config_id})


def _first(params: Params, *names: str) -> Any:
    for name in names:
        if params.get(name) not in (None, ""):
            return params[name]
    return None


# --- the operations, shared by the bindings --------------------------------------------


@dataclass(frozen=True)
class _Spelling:
    """How a binding writes push configs: ``write_config``'s dialect, the version of the
    payloads its configs' webhooks get, and the answer of a list."""

    dialect: str
    version: Version
    listing: Callable[[list[dict[str, Any]]], Any]


_V03 = _Spelling("0.3", "0.3", list)  # JSON-RPC 0.3 and the canonical REST
_V03_PROTO = _Spelling("0.3proto", "0.3", lambda configs: {"configs": configs})
_V1 = _Spelling("1.0", "1.0", lambda configs: {"configs": configs, "nextPageToken": ""})


async def _set(call: Call, task_id: Any, raw: Any, spelling: _Spelling) -> Any:
    service, ref = await _ready(call, task_id)
    config = await service.set(call.principal, ref.taskId, raw, spelling.version)
    return write_config(config, ref.taskId, spelling.dialect)


async def _get(call: Call, task_id: Any, config_id: Any, spelling: _Spelling) -> Any:
    service, ref = await _ready(call, task_id, config_id)
    config = await service.get(call.principal, ref.taskId, ref.configId)
    return write_config(config, ref.taskId, spelling.dialect)


async def _list(call: Call, task_id: Any, spelling: _Spelling) -> Any:
    service, ref = await _ready(call, task_id)
    configs = await service.list(call.principal, ref.taskId)
    return spelling.listing([write_config(c, ref.taskId, spelling.dialect) for c in configs])


async def _delete(call: Call, task_id: Any, config_id: Any) -> None:
    service, ref = await _ready(call, task_id, config_id)
    if not ref.configId:
        raise InvalidParamsError(
            "The config id is required",
            data={"errors": [{"field": "pushNotificationConfigId", "reason": "required"}]},
        )
    await service.delete(call.principal, ref.taskId, ref.configId)


# --- JSON-RPC: the params read, the answer as the method's -------------------------------


async def _rpc_set_v03(call: Call, params: Params) -> Any:
    return await _set(call, params.get("taskId"), params.get("pushNotificationConfig"), _V03)


async def _rpc_get_v03(call: Call, params: Params) -> Any:
    return await _get(call, params.get("id"), params.get("pushNotificationConfigId"), _V03)


async def _rpc_list_v03(call: Call, params: Params) -> Any:
    return await _list(call, params.get("id"), _V03)


async def _rpc_delete_v03(call: Call, params: Params) -> Any:
    await _delete(call, params.get("id"), params.get("pushNotificationConfigId"))
    return None


def _v1_task(call: Call, params: Params) -> Any:
    """A 1.0 request's task id; a ``tenant`` it names must be the caller's."""
    call.check_tenant(params.get("tenant"))
    return _first(params, "taskId", "task_id")


async def _rpc_create_v1(call: Call, params: Params) -> Any:
    return await _set(call, _v1_task(call, params), params, _V1)


async def _rpc_get_v1(call: Call, params: Params) -> Any:
    return await _get(call, _v1_task(call, params), params.get("id"), _V1)


async def _rpc_list_v1(call: Call, params: Params) -> Any:
    return await _list(call, _v1_task(call, params), _V1)


async def _rpc_delete_v1(call: Call, params: Params) -> Any:
    await _delete(call, _v1_task(call, params), params.get("id"))
    return {}


JSONRPC_V03 = {
    "tasks/pushNotificationConfig/set": _rpc_set_v03,
    "tasks/pushNotificationConfig/get": _rpc_get_v03,
    "tasks/pushNotificationConfig/list": _rpc_list_v03,
    "tasks/pushNotificationConfig/delete": _rpc_delete_v03,
}
JSONRPC_V1 = {
    "CreateTaskPushNotificationConfig": _rpc_create_v1,
    "GetTaskPushNotificationConfig": _rpc_get_v1,
    "ListTaskPushNotificationConfigs": _rpc_list_v1,
    "DeleteTaskPushNotificationConfig": _rpc_delete_v1,
}


# --- REST: one endpoint for the collection (GET list, POST set), one for a config ----------

# A POSTed body read into the config it holds (before validation).
_Reader = Callable[[Call, Any], Any]


async def _rest_configs(request: Request, spelling: _Spelling, read: _Reader) -> Response:
    call, task_id = Call.of(request), request.path_params["task_id"]
    if request.method == "GET":
        return JSONResponse(await _list(call, task_id, spelling))
    raw = read(call, await json_body(request))
    return JSONResponse(await _set(call, task_id, raw, spelling))


async def _rest_one(request: Request, spelling: _Spelling) -> Response:
    call, path = Call.of(request), request.path_params
    if request.method == "DELETE":
        await _delete(call, path["task_id"], path["config_id"])
        return JSONResponse({})
    return JSONResponse(await _get(call, path["task_id"], path["config_id"], spelling))


def _read_canonical(call: Call, body: Any) -> Any:
    if isinstance(body, dict) and isinstance(body.get("pushNotificationConfig"), dict):
        return body["pushNotificationConfig"]
    return body


def _read_v03_proto(call: Call, body: Any) -> Any:
    raw: Any = body
    if isinstance(body, dict):
        config = body.get("config")
        if isinstance(config, dict):
            inner = _first(config, "pushNotificationConfig", "push_notification_config")
            raw = dict(inner) if isinstance(inner, dict) else inner
        config_id = _first(body, "configId", "config_id")
        if isinstance(raw, dict) and config_id and not raw.get("id"):
            raw["id"] = config_id
    return raw


def _read_v1(call: Call, body: Any) -> Any:
    if isinstance(body, dict):
        call.check_tenant(body.get("tenant"))
    return body


async def canonical_configs(request: Request) -> Response:
    """The canonical REST (0.3 JSON): POST a PushNotificationConfig (or a
    TaskPushNotificationConfig around one); GET lists them."""
    return await _rest_configs(request, _V03, _read_canonical)


async def canonical_config(request: Request) -> Response:
    return await _rest_one(request, _V03)


async def v03_configs(request: Request) -> Response:
    """0.3 proto-JSON: POST a CreateTaskPushNotificationConfigRequest; GET lists them."""
    return await _rest_configs(request, _V03_PROTO, _read_v03_proto)


async def v03_config(request: Request) -> Response:
    return await _rest_one(request, _V03_PROTO)


async def v1_configs(request: Request) -> Response:
    """1.0: POST a TaskPushNotificationConfig; GET lists them."""
    return await _rest_configs(request, _V1, _read_v1)


async def v1_config(request: Request) -> Response:
    return await _rest_one(request, _V1)


async def jwks(request: Request) -> Response:
    """The public keys that sign webhook requests (JWKS; public, like the agent cards)."""
    keys = getattr(request.app.state.runtime, "push_keys", None)
    document = keys.jwks() if keys is not None else {"keys": []}
    return JSONResponse(document, headers={"Cache-Control": "public, max-age=300"})
