"""One audit entry and how it is stored and shown. Pure logic.

An entry holds ids and outcomes only: the principal (tenant, user, the credential's id —
a managed key's id, a static key's digest prefix, a token's subject), the operation (the
route's name), the ids it named (task, context, agent, key), the HTTP status, the request
id and the client address; a scrub's entry adds what it removed (its receipt). Never a
message, a query, a body or a query string. A string a client chose that is not known to
name something that exists (an id of a refused or failed request, the client's own
``X-Request-Id``) is kept as its digest (``hashed_id``), so nothing a client writes reaches
the trail verbatim.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gateway.models import AuditRecord

__all__ = ["HASHED", "ID_FIELDS", "AuditEntry", "hashed_id", "outcome_of", "record_of"]

# The ids an entry may name, by stream field -> the name shown.
ID_FIELDS = {
    "task": "taskId",
    "context": "contextId",
    "agent": "agentId",
    "key": "keyId",
    "scrub": "scrubOf",
    "subject": "actingFor",  # the user a key was made for by someone else (impersonation)
    "recalled": "recalledMemoryIds",  # comma-separated Cortadel ids a run was shown
    "for_user": "forUser",  # the user a tenant admin acted for (/v1/memories)
}


HASHED = "sha256:"


def hashed_id(value: str) -> str:
    """How the trail keeps a client's string: ``sha256:`` and the first 32 hex digits of
    its SHA-256 (anyone holding the string can find its entries; the trail does not hold
    the string)."""
    return HASHED + hashlib.sha256(value.encode()).hexdigest()[:32]


def outcome_of(status: int) -> str:
    if status in (401, 403, 429):
        return "denied"
    if status >= 500:
        return "error"
    return "failed" if status >= 400 else "ok"


@dataclass
class AuditEntry:
    time_ms: int
    tenant: str | None  # None: not authenticated (the entry goes to the anonymous stream)
    user: str
    credential: str
    operation: str
    method: str
    status: int
    request_id: str
    client: str = ""
    ids: dict[str, str] = field(default_factory=dict)
    receipt: dict[str, int] = field(default_factory=dict)

    def fields(self) -> dict[str, str]:
        out = {
            "ts": str(self.time_ms),
            "tenant": self.tenant or "",
            "user": self.user,
            "cred": self.credential,
            "op": self.operation,
            "method": self.method,
            "status": str(self.status),
            "rid": self.request_id,
            "client": self.client,
        }
        out.update({k: v for k, v in self.ids.items() if k in ID_FIELDS and v})
        out.update({f"n:{k}": str(v) for k, v in self.receipt.items()})
        return out


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def record_of(entry_id: str, raw: Mapping[Any, Any]) -> AuditRecord:
    """A stored entry (its stream fields) as it is read back."""
    f = {_text(k): _text(v) for k, v in raw.items()}
    status = int(f.get("status", "0"))
    return AuditRecord(
        id=entry_id,
        time_ms=int(f.get("ts", "0")),
        tenant=f.get("tenant") or None,
        user=f.get("user") or None,
        credential=f.get("cred") or None,
        operation=f.get("op", ""),
        method=f.get("method", ""),
        status=status,
        outcome=outcome_of(status),
        request_id=f.get("rid") or None,
        client=f.get("client") or None,
        ids={shown: f[name] for name, shown in ID_FIELDS.items() if f.get(name)},
        removed={k[2:]: int(v) for k, v in f.items() if k.startswith("n:")},
    )
