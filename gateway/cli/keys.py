"""`gateway keys`: API keys created, listed, revoked and rotated in Redis, each change on the
audit trail (by the operating system's user, credential ``cli``)."""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from gateway import embedded_redis
from gateway.settings import Settings

if TYPE_CHECKING:
    from gateway.store.audit_store import AuditStore

__all__ = ["keys"]


async def _manage_keys(settings: Settings, args: argparse.Namespace) -> Any:
    from gateway.canonical import created_key_json, key_json, key_list_json
    from gateway.runtime.api_keys import key_service
    from gateway.runtime.connections import Connections
    from gateway.runtime.stores import api_key_store, audit_store

    connections = Connections.command(settings)
    service = key_service(settings, api_key_store(connections))
    assert service is not None  # `keys` refuses to run without GATEWAY_API_KEY_SECRET
    try:
        if args.action == "list":
            return key_list_json(await service.list(args.tenant))
        if args.action == "create":
            out = created_key_json(
                await service.create(args.tenant, args.user, args.role, args.name, args.expires_in)
            )
        elif args.action == "revoke":
            out = key_json(await service.revoke(None, args.key_id))
        else:
            out = created_key_json(await service.rotate(None, args.key_id, args.grace))
        audit = audit_store(settings, connections)
        if audit is not None:  # key changes are on record, whoever makes them
            await _audit_key_change(audit, args.action, out)
        return out
    finally:
        await connections.close()


async def _audit_key_change(store: AuditStore, action: str, key: Any) -> None:
    import getpass

    from gateway.audit.entry import AuditEntry
    from gateway.clock import now_ms

    entry = AuditEntry(
        time_ms=now_ms(),
        tenant=key["tenant"],
        user=getpass.getuser(),
        credential="cli",
        operation=f"{action}_key",
        method="CLI",
        status=200,
        request_id="",
        ids={"key": key["id"]},
    )
    await store.append([entry])


def keys(settings: Settings, args: argparse.Namespace) -> int:
    from gateway.errors import GatewayError

    if settings.api_key_secret is None:
        print("gateway keys: GATEWAY_API_KEY_SECRET is not set", file=sys.stderr)
        return 2
    if settings.redis_url is None:
        url = embedded_redis.running(Path(settings.data_dir) / "redis")
        if url is None:
            print("gateway keys: REDIS_URL is unset and no embedded redis-server runs for "
                  "this data directory", file=sys.stderr)  # fmt: skip
            return 2
        settings = settings.model_copy(update={"redis_url": url})
    try:
        out = asyncio.run(_manage_keys(settings, args))
    except GatewayError as exc:
        print(f"gateway keys: {exc.message}", file=sys.stderr)
        return 1
    print(orjson.dumps(out, option=orjson.OPT_INDENT_2).decode())
    return 0
