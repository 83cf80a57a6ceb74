"""`gateway keys`: API keys created, listed, revoked and rotated in Redis, each change on the
audit trail (by the operating system's user, credential ``cli``)."""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path
from typing import Any

import orjson

from gateway import embedded_redis
from gateway.settings import Settings

__all__ = ["keys"]


async def _manage_keys(settings: Settings, args: argparse.Namespace) -> Any:
    from gateway.canonical import created_key_json, key_json, key_list_json
    from gateway.service.keys import KeyService
    from gateway.store.apikeys_store import ApiKeyStore
    from gateway.store.connection import RedisTarget
    from gateway.store.lua import Scripts

    assert settings.redis_url is not None and settings.api_key_secret is not None
    target = RedisTarget.from_settings(settings)
    client = target.client(settings.redis_timeout_seconds)
    service = KeyService(
        ApiKeyStore(client, Scripts.register(client)),
        settings.api_key_secret.get_secret_value().encode(),
    )
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
        if settings.audit:  # key changes are on record, whoever makes them
            await _audit_key_change(settings, client, args.action, out)
        return out
    finally:
        await client.aclose()


async def _audit_key_change(settings: Settings, client: Any, action: str, key: Any) -> None:
    import getpass

    from gateway.audit.entry import AuditEntry
    from gateway.clock import now_ms
    from gateway.store.audit_store import AuditStore

    store = AuditStore(client, settings.audit_max_entries, settings.audit_max_age_seconds)
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
