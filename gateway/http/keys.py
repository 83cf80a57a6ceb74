"""The ``/keys`` routes: an admin manages its own tenant's API keys (``service/keys.py``)."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from gateway.canonical import created_key_json, key_json, key_list_json
from gateway.errors import UnsupportedOperationError
from gateway.http.audit import note_ids
from gateway.http.params import json_body, validated
from gateway.http.responses import JSONResponse
from gateway.http.state import app_state, principal_of
from gateway.models import KeyCreateRequest, KeyRotateRequest
from gateway.service.keys import Issued, KeyService, admin_tenant

__all__ = ["key_routes"]


def _keys(request: Request) -> tuple[KeyService, str]:
    """The key service and the admin caller's tenant (501 when keys are not managed)."""
    service = app_state(request).keys
    if service is None:
        raise UnsupportedOperationError(
            "API keys are not managed here (GATEWAY_API_KEY_SECRET is not set)"
        )
    return service, admin_tenant(principal_of(request))


async def list_keys(request: Request) -> Response:
    service, tenant = _keys(request)
    return JSONResponse(key_list_json(await service.list(tenant)))


def _issued(request: Request, issued: Issued) -> Response:
    """A key made over HTTP; its audit entry names it, and the user it acts for when that
    is another's (``actingFor``)."""
    created = issued.created
    note_ids(request.scope, key=created.record.id)
    if issued.acting_for is not None:
        note_ids(request.scope, subject=issued.acting_for)
    return JSONResponse(
        created_key_json(created),
        status_code=201,
        headers={"Location": f"/keys/{created.record.id}"},
    )


async def create_key(request: Request) -> Response:
    service, _ = _keys(request)
    body = validated(KeyCreateRequest, await json_body(request))
    issued = await service.issue(
        principal_of(request), body.user, list(body.roles), body.name, body.expiresInSeconds
    )
    return _issued(request, issued)


async def read_key(request: Request) -> Response:
    service, tenant = _keys(request)
    return JSONResponse(key_json(await service.read(tenant, request.path_params["key_id"])))


async def revoke_key(request: Request) -> Response:
    service, tenant = _keys(request)
    await service.revoke(tenant, request.path_params["key_id"])
    return Response(status_code=204)


async def rotate_key(request: Request) -> Response:
    service, _ = _keys(request)
    body = validated(KeyRotateRequest, await json_body(request, optional=True) or {})
    key_id = request.path_params["key_id"]
    issued = await service.reissue(principal_of(request), key_id, body.graceSeconds)
    return _issued(request, issued)


def key_routes() -> list[BaseRoute]:
    return [
        Route("/keys", list_keys, methods=["GET"]),
        Route("/keys", create_key, methods=["POST"]),
        Route("/keys/{key_id:id}", read_key, methods=["GET"]),
        Route("/keys/{key_id:id}", revoke_key, methods=["DELETE"]),
        Route("/keys/{key_id:id}:rotate", rotate_key, methods=["POST"]),
    ]
