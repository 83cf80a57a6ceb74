"""What a request did, by **operation**, and how each ended, by **A2A outcome**.

A REST request is one operation, named by its route template; a JSON-RPC request is one
per request object of its body (a batch has several), named by the method. The outcome is
``ok`` or the A2A error's name (``TaskNotFoundError``): JSON-RPC wraps errors in HTTP 200,
so the status alone would count a failed ``tasks/get`` as a success. The access log, the
metrics, the request's span and the audit trail all read the operations noted here.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import orjson
from starlette.types import Scope

from gateway.errors import GatewayError
from gateway.metrics import OPERATION_SECONDS, OPERATIONS, series

__all__ = ["Operation", "error_outcome", "finished", "note", "noted", "outcome_of_body"]

log = logging.getLogger("gateway.access")

OK = "ok"
_KEY = "operations"
# A response body is read for its error's name only up to this size (error bodies are small).
_MAX_ERROR_BODY = 16 * 1024


@dataclass
class Operation:
    binding: str  # rest, jsonrpc, mcp, grpc
    name: str  # a route template or a method name, never client text
    outcome: str = OK

    @property
    def label(self) -> str:
        """``jsonrpc:message/send``: how the audit trail names it."""
        return f"{self.binding}:{self.name}"


@functools.cache
def _error_names() -> frozenset[str]:
    """Every A2A error the gateway answers with: the bounded set an outcome is one of."""
    names, pending = set(), [GatewayError]
    while pending:
        cls = pending.pop()
        names.add(cls.name)
        pending += cls.__subclasses__()
    return frozenset(names)


def error_outcome(exc: BaseException) -> str:
    """The outcome an exception makes: its A2A error's name, else ``InternalError``."""
    if isinstance(exc, GatewayError) and exc.name in _error_names():
        return exc.name
    return GatewayError.name


def outcome_of_body(status: int, body: bytes) -> str:
    """A REST response's outcome: ``ok`` below 400, else the error its body names."""
    if status < 400:
        return OK
    name: Any = None
    if len(body) <= _MAX_ERROR_BODY:
        try:
            parsed = orjson.loads(body)
        except orjson.JSONDecodeError:
            parsed = None
        if isinstance(parsed, dict):
            name = parsed.get("error")
            if isinstance(name, dict):  # JSON-RPC's error object, or google.rpc.Status
                name = name.get("status") or name.get("name")
    if isinstance(name, str) and name in _error_names():
        return name
    return f"http_{status}"


def note(scope: Scope, binding: str, name: str) -> Operation:
    """An operation of the request; set its ``outcome`` when it fails."""
    operation = Operation(binding, name)
    scope.setdefault("state", {}).setdefault(_KEY, []).append(operation)
    return operation


def noted(scope: Scope) -> list[Operation]:
    found: list[Operation] = scope.get("state", {}).get(_KEY, [])
    return found


def finished(
    operations: Sequence[Operation],
    seconds: float,
    *,
    log_line: bool,
    request_id: str,
    method: str,
    route: str,
    status: int,
) -> None:
    """A request (an HTTP request, a gRPC call) is over: count its operations and, when
    ``log_line``, write its access log line — ids, names, outcome and timing, no content."""
    for operation in operations:
        series(OPERATIONS, operation.binding, operation.name, operation.outcome).inc()
        series(OPERATION_SECONDS, operation.binding, operation.name).observe(seconds)
    if log_line:
        log.info(
            "request",
            extra={
                "request_id": request_id,
                "method": method,
                "route": route,
                "binding": operations[0].binding,
                "operation": ",".join(o.name for o in operations),
                "outcome": ",".join(o.outcome for o in operations),
                "status": status,
                "ms": round(seconds * 1000, 2),
            },
        )
