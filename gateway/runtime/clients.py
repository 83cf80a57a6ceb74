"""The outbound HTTP clients of a process, from settings: the allowlisted ones agents, the
embedder, Cortadel and JWKS fetches go through, and the webhooks' (their policy, pool and
signing keys)."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import httpx
import httpx2

from gateway import tracing
from gateway.outbound import Allowlist, guarded_client
from gateway.push.destinations import WebhookPolicy
from gateway.push.signing import SigningKeys
from gateway.settings import Settings

__all__ = ["HttpClients"]


def _allowlist(settings: Settings) -> Allowlist:
    """``GATEWAY_OUTBOUND_ALLOWLIST``, and the configured embedder, Cortadel and issuers."""
    return Allowlist(
        settings.outbound_allowlist,
        [
            settings.embedder_url,
            settings.cortadel.url,
            *(issuer.jwks_url for issuer in settings.jwt_issuers),
        ],
    )


def _push_keys(settings: Settings) -> SigningKeys:
    """The webhooks' signing keys, issued by the gateway's public URL (or its address)."""
    bound = f"[{settings.host}]" if ":" in settings.host else settings.host
    issuer = settings.public_url or f"http://{bound}:{settings.port}"
    return SigningKeys.from_files(settings.push_signing_keys, issuer)


def _push_http(settings: Settings, policy: WebhookPolicy) -> httpx.AsyncClient:
    # Connections are kept for reuse (httpx keeps 20 by default: a busy deliverer
    # would reconnect for most requests; the pool's limits go to the transport).
    client: httpx.AsyncClient = guarded_client(
        policy,
        httpx,
        timeout=settings.push_timeout_seconds,
        limits=httpx.Limits(
            max_connections=settings.push_concurrency,
            max_keepalive_connections=settings.push_concurrency,
        ),
    )
    return client


@dataclass
class HttpClients:
    allowlist: Allowlist
    # a2a-sdk's (httpx) and the openai SDK's (httpx2) requests, traced
    outbound: tuple[httpx.AsyncClient, httpx2.AsyncClient]
    push_keys: SigningKeys
    push_policy: WebhookPolicy
    push_http: httpx.AsyncClient

    @classmethod
    def build(cls, settings: Settings) -> HttpClients:
        allowlist = _allowlist(settings)
        outbound = (
            guarded_client(allowlist, httpx, timeout=60.0),
            guarded_client(allowlist, httpx2, timeout=60.0),
        )
        tracing.instrument_http(*outbound)
        policy = WebhookPolicy(settings.push_allowlist, restrict=settings.push_restrict)
        return cls(allowlist, outbound, _push_keys(settings), policy, _push_http(settings, policy))

    async def close(self) -> None:
        for http in (*self.outbound, self.push_http):
            with contextlib.suppress(Exception):
                await http.aclose()
