"""An issuer's signing keys (its JWKS document), fetched through the outbound guard and
cached.

Keys are refetched when the cache is older than ``ttl`` or when a token names a key id the
cache lacks (the issuer rotated its keys) — but never more often than once per
``min_refetch`` seconds, so a stream of tokens with made-up key ids cannot make the gateway
hammer the identity provider. A failed fetch keeps the keys already known.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import httpx
from jwt import PyJWK
from jwt.exceptions import PyJWKError

__all__ = ["JwksCache"]

log = logging.getLogger("gateway.identity")


def _usable(document: Any) -> dict[str, PyJWK]:
    """The signature keys of a JWKS document, by key id ('' for a key without one)."""
    keys: dict[str, PyJWK] = {}
    entries = document.get("keys") if isinstance(document, dict) else None
    for entry in entries if isinstance(entries, list) else []:
        if not isinstance(entry, dict) or entry.get("use", "sig") != "sig":
            continue
        try:
            keys[str(entry.get("kid", ""))] = PyJWK(entry)
        except (PyJWKError, ValueError, TypeError):
            continue  # a key type or curve this gateway does not verify
    return keys


class JwksCache:
    def __init__(
        self, http: httpx.AsyncClient, url: str, *, ttl: float, min_refetch: float
    ) -> None:
        self._http, self.url = http, url
        self._ttl, self._min_refetch = ttl, min_refetch
        self._keys: dict[str, PyJWK] = {}
        self._fetched = 0.0  # monotonic time of the last successful fetch
        self._attempted = float("-inf")  # of the last attempt, successful or not
        self._lock = asyncio.Lock()
        self.fetches = 0

    @property
    def loaded(self) -> bool:
        return bool(self._keys)

    async def key(self, kid: str | None) -> PyJWK | None:
        """The key a token names (by ``kid``; without one, the issuer's only key)."""
        found = self._find(kid)
        now = time.monotonic()
        stale = now - self._fetched > self._ttl
        if (found is None or stale) and now - self._attempted >= self._min_refetch:
            await self._refresh()
            found = self._find(kid)
        return found

    def _find(self, kid: str | None) -> PyJWK | None:
        if kid is not None:
            return self._keys.get(kid)
        return next(iter(self._keys.values())) if len(self._keys) == 1 else None

    async def _refresh(self) -> None:
        async with self._lock:
            if time.monotonic() - self._attempted < self._min_refetch:
                return  # another request refreshed while this one waited
            self._attempted = time.monotonic()
            self.fetches += 1
            try:
                response = await self._http.get(self.url, headers={"Accept": "application/json"})
                response.raise_for_status()
                keys = _usable(response.json())
            except (httpx.HTTPError, ValueError) as exc:
                log.warning(
                    "JWKS fetch failed", extra={"url": self.url, "error": type(exc).__name__}
                )
                return
            if not keys:
                log.warning("JWKS holds no usable signing key", extra={"url": self.url})
                return
            self._keys, self._fetched = keys, time.monotonic()
