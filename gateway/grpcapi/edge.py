"""The gRPC binding's edge: what the HTTP middleware does for the other bindings, for one
call. Credentials come from the call's metadata (``authorization: Bearer …``,
``x-api-key``, ``tenant-name``) through the same authenticator, failed attempts throttled
per client address; every authenticated call is charged to the rate limits; an
``a2a-version`` entry, if any, must name 1.0. Each call is one operation (binding ``grpc``,
the method's name) counted with its A2A outcome, logged (ids and timings only) and, when
authenticated or refused for its credentials, written to the audit trail.

Per-agent and per-tenant routing ride on the proto's ``tenant`` field, the way the REST
binding's path does: ``""`` or ``{tenant}`` is the default agent, ``agents/{id}`` or
``agents/{id}/{tenant}`` the agent ``id``; a tenant named must be the caller's. The agent
cards declare each agent's ``tenant`` value.
"""

from __future__ import annotations

import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from starlette.datastructures import Headers

from gateway.audit.entry import AuditEntry
from gateway.audit.log import AuditLog
from gateway.clock import now_ms
from gateway.entropy import random_bytes
from gateway.errors import GatewayError, VersionNotSupportedError
from gateway.http.a2a_calls import VERSION_HEADER, Call, version_of
from gateway.http.auth import Authenticator, identify
from gateway.http.cards import GRPC_AGENT_TENANT
from gateway.http.operations import Operation, finished
from gateway.http.ratelimit import RateLimiter
from gateway.http.state import AppState

__all__ = ["Edge", "Visit", "route"]

_AGENT = re.compile(GRPC_AGENT_TENANT.format(agent_id=r"([^/]+)") + r"(?:/(.*))?")
_SAFE_ID = re.compile(r"[A-Za-z0-9._-]{1,64}")
_PEER = re.compile(r"ipv[46]:(\[?[^\]]*\]?):\d+")
_DENIED = frozenset({401, 403, 429})


def route(tenant: str, default_agent: str) -> tuple[str, str]:
    """(agent id, tenant) a request's ``tenant`` field names."""
    found = _AGENT.fullmatch(tenant)
    if found is None:
        return default_agent, tenant
    return found[1], found[2] or ""


def _address(peer: str) -> str:
    found = _PEER.fullmatch(peer)
    return found[1].strip("[]") if found else ""


@dataclass
class Visit:
    """One call as the edge sees it: its operation, ids, caller and outcome."""

    operation: Operation
    client: str
    request_id: str
    began: float = field(default_factory=time.perf_counter)
    scope: dict[str, Any] = field(default_factory=lambda: {"state": {}})
    status: int = 200
    audited: bool = False  # its audit entry is written (``Edge.audited``)

    @property
    def state(self) -> dict[str, Any]:
        state: dict[str, Any] = self.scope["state"]
        return state


@dataclass
class Edge:
    state: AppState
    authenticator: Authenticator
    limiter: RateLimiter
    audit: AuditLog | None
    log_requests: bool = True

    def visit(self, method: str, metadata: Sequence[tuple[str, Any]], peer: str) -> Visit:
        given = next((v for k, v in metadata if k == "x-request-id"), None)
        request_id = (
            given
            if isinstance(given, str) and _SAFE_ID.fullmatch(given)
            else random_bytes(16).hex()
        )
        return Visit(Operation("grpc", method), _address(peer), request_id)

    async def enter(
        self, visit: Visit, metadata: Sequence[tuple[str, Any]], params: dict[str, Any]
    ) -> Call:
        """The call's context once its caller is known and admitted; ``params``' tenant is
        left as the tenant it names (the agent taken out)."""
        headers = Headers(headers={k: v for k, v in metadata if isinstance(v, str)})
        principal = await identify(self.authenticator, self.limiter, visit.client, headers)
        visit.state["caller"] = principal
        self.authenticator.check_tenant(headers, principal)
        visit.state["principal"] = principal
        await self.limiter.admit(principal)
        if version_of(headers.get(VERSION_HEADER)) == "0.3":  # this service is 1.0's
            raise VersionNotSupportedError(data={"supportedVersions": "1.0"})
        agent_id, tenant = route(str(params.get("tenant") or ""), self.state.settings.default_agent)
        params["tenant"] = tenant
        if agent_id != self.state.settings.default_agent:
            visit.state.setdefault("audit_ids", {})["agent"] = agent_id
        return Call(self.state, principal, agent_id, visit.scope)

    async def audited(self, visit: Visit) -> GatewayError | None:
        """Write the call's audit entry before its answer goes out (``AuditLog.commit``):
        None once it is written (or there is none to write), else the error that kept it
        out."""
        entry = self._entry(visit) if self.audit is not None else None
        visit.audited = True
        if entry is None or self.audit is None:
            return None
        return await self.audit.commit(entry)

    def done(self, visit: Visit) -> None:
        """Count, log and audit the call (unless its entry was written already)."""
        seconds = time.perf_counter() - visit.began
        finished(
            [visit.operation],
            seconds,
            log_line=self.log_requests,
            request_id=visit.request_id,
            method="POST",
            route=visit.operation.name,
            status=visit.status,
        )
        if self.audit is not None and not visit.audited:
            entry = self._entry(visit)
            if entry is not None:
                self.audit.record(entry)

    @staticmethod
    def _entry(visit: Visit) -> AuditEntry | None:
        principal = visit.state.get("principal") or visit.state.get("caller")
        if principal is None and visit.status not in _DENIED:
            return None
        return AuditEntry(
            time_ms=now_ms(),
            tenant=principal.tenant if principal else None,
            user=principal.user if principal else "",
            credential=principal.credential if principal else "",
            operation=visit.operation.label,
            method="POST",
            status=visit.status,
            request_id=visit.request_id,
            client=visit.client,
            ids=dict(visit.state.get("audit_ids", {})),
        )
