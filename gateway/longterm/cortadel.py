"""The gateway's side of Cortadel: one shared HTTP client, per-user SDK clients, the
retry policy, the one-key probe and health.

Cortadel has no tenants, so every principal maps to a user id no other principal can
produce (``render.cortadel_user_id``). Some authenticated Cortadel builds pin a key to
one user: they rewrite the body's ``user_id`` and refuse another one in the query.
Serving many users through such a key would merge their memories, so each key is
probed at start (write as one user, read as another) and a key that fails the probe
is refused: nothing is recalled or stored through it. Until a key's probe has run
(Cortadel may be down at start), recall is skipped and stores wait in the outbox.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from typing import TYPE_CHECKING, Any, Literal

import httpx

from gateway import tracing
from gateway.backoff import Backoff, RetryPolicy
from gateway.configuration import ConfigurationError
from gateway.longterm.render import cortadel_user_id
from gateway.options.longterm import CortadelSettings

if TYPE_CHECKING:
    from cortadel import CortadelClient

__all__ = ["Cortadel", "CortadelUnavailable", "retryable"]

log = logging.getLogger("gateway.cortadel")

KeyState = Literal["unknown", "ok", "refused"]
PROBE_TEXT = "gateway identity probe"


class CortadelUnavailable(Exception):
    """Cortadel cannot be used for this principal right now (``reason`` says why)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def retryable(exc: BaseException) -> bool:
    """Transport failures, timeouts, 408, 429 and 5xx may pass; other 4xx will not."""
    if isinstance(exc, CortadelUnavailable | TimeoutError | OSError | httpx.HTTPError):
        return True
    status = getattr(exc, "status", None)
    if not isinstance(status, int):
        return False  # not a Cortadel failure: retrying will not help
    return status in (0, 408, 429) or status >= 500


class Cortadel:
    def __init__(self, settings: CortadelSettings) -> None:
        if not settings.url:
            raise ConfigurationError(["GATEWAY_CORTADEL_URL: not set; long-term memory needs it"])
        self.settings = settings
        self.url = settings.url.rstrip("/")
        self._http = httpx.AsyncClient(
            timeout=httpx.Timeout(
                settings.timeout_seconds, connect=min(3.0, settings.timeout_seconds)
            ),
            limits=httpx.Limits(max_connections=64, max_keepalive_connections=32),
        )
        tracing.instrument_http(self._http)
        secret = settings.user_id_secret
        self._secret = (
            secret.get_secret_value() if settings.user_ids == "hashed" and secret else None
        )
        keys = {settings.key_for(t) for t in settings.tenant_keys} | {settings.key_for("")}
        self._keys: dict[str | None, KeyState] = {
            k: ("unknown" if settings.probe else "ok") for k in keys
        }
        self._probing: asyncio.Task[None] | None = None
        # The start-up probe of each key is tried again on any failure (Cortadel down).
        self.probe_retry = RetryPolicy(Backoff(0.5, settings.backoff_max_seconds), (Exception,))
        from cortadel import CortadelClient as _Client

        self._client_type = _Client

    # -- clients --------------------------------------------------------------------------

    def user_id(self, tenant: str, user: str, subject: str | None = None) -> str:
        return cortadel_user_id(tenant, user, self._secret, subject or None)

    def _client(self, user_id: str, key: str | None, app_name: str) -> CortadelClient:
        return self._client_type(
            self.url, user_id, api_key=key, app_name=app_name, http_client=self._http
        )

    def client(
        self, tenant: str, user: str, app_name: str = "gateway", subject: str | None = None
    ) -> CortadelClient:
        """The SDK client for one principal's memories about ``subject`` (None or "": its
        memories without a subject), if its key passed the probe."""
        key = self.settings.key_for(tenant)
        state = self._keys.get(key, "unknown")
        if state != "ok":
            raise CortadelUnavailable("key refused" if state == "refused" else "key not verified")
        return self._client(self.user_id(tenant, user, subject), key, app_name)

    # -- probe ----------------------------------------------------------------------------

    def start(self) -> None:
        if any(state == "unknown" for state in self._keys.values()):
            self._probing = asyncio.create_task(self._probe_all(), name="cortadel-probe")

    async def _probe_all(self) -> None:
        pauses = self.probe_retry.pauses()
        while pending := [k for k, s in self._keys.items() if s == "unknown"]:
            for key in pending:
                try:
                    self._keys[key] = "refused" if await self.shares_users(key) else "ok"
                except Exception as exc:
                    if not self.probe_retry.retries(exc):
                        raise
                    log.warning(
                        "cortadel probe failed; retrying", extra={"error": type(exc).__name__}
                    )
                    continue
                if self._keys[key] == "refused":
                    log.error(
                        "cortadel key pins all requests to one user; long-term memory is off "
                        "for the tenants that use it (configure per-tenant keys)"
                    )
            if any(s == "unknown" for s in self._keys.values()):
                await pauses.wait()

    async def shares_users(self, key: str | None) -> bool:
        """Whether ``key`` merges users: a memory written as one probe user is visible to
        (or refused for) another."""
        from cortadel import AddOptions, CortadelError

        tag = uuid.uuid4().hex[:12]
        writer = self._client(f"gw-probe:{tag}:a", key, "gateway-probe")
        reader = self._client(f"gw-probe:{tag}:b", key, "gateway-probe")
        created = await writer.add(PROBE_TEXT, AddOptions(infer=False))
        try:
            try:
                seen = await reader.get(created.id)
            except CortadelError as exc:
                if exc.status in (401, 403):
                    return True
                raise
            return seen is not None
        finally:
            with contextlib.suppress(Exception):
                await writer.delete([created.id])

    # -- health and lifecycle -------------------------------------------------------------

    def key_states(self) -> dict[str, int]:
        counts = {"ok": 0, "unknown": 0, "refused": 0}
        for state in self._keys.values():
            counts[state] += 1
        return counts

    async def health(self) -> str:
        """ "ok", "degraded" (Cortadel says so, or a key is refused or unverified) or
        "unreachable"."""
        try:
            result: Any = await asyncio.wait_for(
                self._client("gw-health", None, "gateway").health(),
                min(2.0, self.settings.timeout_seconds),
            )
        except Exception:
            return "unreachable"
        states = self.key_states()
        if result.status != "ok" or states["refused"] or states["unknown"]:
            return "degraded"
        return "ok"

    async def close(self) -> None:
        if self._probing is not None:
            self._probing.cancel()
            await asyncio.wait({self._probing}, timeout=2.0)
        await self._http.aclose()
