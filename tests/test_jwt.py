"""Bearer tokens from an identity provider (OIDC / JWT): the provider's keys are fetched
from its JWKS endpoint (a stand-in on 127.0.0.1 with keys generated here), and every
token that fails a check is refused with 401 and a reason that quotes none of its claims."""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import orjson
import pytest

from tests.conftest import API_KEYS, AppFactory, auth, send_task
from tests.identity_provider import ISSUER, IdentityProvider
from tests.waiting import until

SENTINEL = "claim-sentinel-7f3a"


@pytest.fixture
def idp() -> Iterator[IdentityProvider]:
    provider = IdentityProvider()
    for kid, kind in (("r1", "rsa"), ("e1", "ec"), ("d1", "ed")):
        provider.publish(kid, kind)
    provider.start()
    yield provider
    provider.stop()


@pytest.fixture
async def gw(make_app: AppFactory, idp: IdentityProvider) -> AsyncIterator[httpx.AsyncClient]:
    async with make_app(
        jwt_issuers=orjson.dumps([idp.issuer()]).decode(),
        api_keys=orjson.dumps(API_KEYS).decode(),
        jwt_leeway_seconds=30,
        jwks_min_refetch_seconds=0.2,
    ) as c:
        yield c


def bearer(token: str, **headers: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}", **headers}


@pytest.mark.parametrize("kid", ["r1", "e1", "d1"])
async def test_a_valid_token_of_each_algorithm_is_a_principal(
    gw: httpx.AsyncClient, idp: IdentityProvider, kid: str
) -> None:
    token = idp.token(kid, sub="dr-house", tenant="t1")
    task = await send_task(gw, "x", headers=bearer(token))
    # The token's tenant and subject are the principal: another token of the subject sees it.
    same = await gw.get(f"/v1/tasks/{task['id']}", headers=bearer(idp.token(kid, sub="dr-house")))
    assert same.status_code == 200
    other = await gw.get(f"/v1/tasks/{task['id']}", headers=bearer(idp.token(kid, sub="other")))
    assert other.status_code == 404


async def test_static_api_keys_keep_working_next_to_tokens(gw: httpx.AsyncClient) -> None:
    assert (await gw.get("/v1/contexts", headers=auth("alice"))).status_code == 200


async def test_tenant_name_must_match_the_tokens_tenant(
    gw: httpx.AsyncClient, idp: IdentityProvider
) -> None:
    token = idp.token(tenant="t2")
    ok = await gw.get("/v1/contexts", headers=bearer(token, **{"Tenant-Name": "t2"}))
    assert ok.status_code == 200
    r = await gw.get("/v1/contexts", headers=bearer(token, **{"Tenant-Name": "t1"}))
    assert r.status_code == 403 and r.json()["error"] == "ForbiddenError"


async def test_clock_skew_within_the_leeway_is_accepted(
    gw: httpx.AsyncClient, idp: IdentityProvider
) -> None:
    import time

    now = int(time.time())
    late = idp.token(exp=now - 10, nbf=now - 100)
    early = idp.token(nbf=now + 10)
    for token in (late, early):
        assert (await gw.get("/v1/contexts", headers=bearer(token))).status_code == 200


def _matrix(idp: IdentityProvider) -> dict[str, tuple[str, str]]:
    import time

    now = int(time.time())
    common: dict[str, Any] = {"sub": SENTINEL}
    return {
        "expired": (idp.token(exp=now - 120, **common), "it has expired"),
        "not yet valid": (idp.token(nbf=now + 120, **common), "it is not valid yet"),
        "wrong audience": (idp.token(aud="another-api", **common), "audience is not accepted"),
        "wrong issuer": (idp.token(iss="https://evil.example", **common), "issuer is not accepted"),
        "no exp": (idp.token(exp=None, **common), "lacks the exp claim"),
        "no tenant": (idp.token(tenant=None, **common), "tenant claim is missing"),
        "alg none": (idp.forged("none", **common), "algorithm is not accepted"),
        "hs256 with the public key": (idp.forged("HS256", **common), "algorithm is not accepted"),
        "bad signature": (idp.token(**common)[:-6] + "AAAAAA", "signature is invalid"),
        "garbage": ("eyJhbGciOi.not.ajwt", "not a well-formed JWT"),
    }


async def test_each_bad_token_is_refused_with_a_reason_that_leaks_nothing(
    gw: httpx.AsyncClient, idp: IdentityProvider
) -> None:
    for case, (token, reason) in _matrix(idp).items():
        r = await gw.get("/v1/contexts", headers=bearer(token))
        assert r.status_code == 401, (case, r.text)
        body = r.json()
        assert body["error"] == "UnauthenticatedError", case
        assert reason in body["message"], (case, body)
        assert SENTINEL not in r.text and ISSUER not in r.text, case
        assert 'error="invalid_token"' in r.headers["www-authenticate"], case


async def test_an_unknown_key_is_refused_until_the_provider_publishes_it(
    gw: httpx.AsyncClient, idp: IdentityProvider
) -> None:
    assert (await gw.get("/v1/contexts", headers=bearer(idp.token("r1")))).status_code == 200
    idp.generate("r2")
    token = idp.token("r2")
    r = await gw.get("/v1/contexts", headers=bearer(token))
    assert r.status_code == 401 and "signing key is not known" in r.json()["message"]
    # The provider rotates: r2 published, r1 withdrawn. The next refetch picks it up.
    idp.publish("r2")
    idp.withdraw("r1")

    async def accepted() -> bool:
        return (await gw.get("/v1/contexts", headers=bearer(token))).status_code == 200

    await until(accepted, what="the rotated key to be accepted")


async def test_unknown_key_ids_do_not_hammer_the_provider(
    make_app: AppFactory, idp: IdentityProvider
) -> None:
    async with make_app(
        jwt_issuers=orjson.dumps([idp.issuer()]).decode(), jwks_min_refetch_seconds=60
    ) as gw:
        assert (await gw.get("/v1/contexts", headers=bearer(idp.token("r1")))).status_code == 200
        fetched = idp.fetches
        idp.generate("rx")
        for _ in range(30):  # distinct tokens (no verdict is reused), one unknown key
            token = idp.token("rx", jti=str(uuid.uuid4()))
            r = await gw.get("/v1/contexts", headers=bearer(token))
            assert r.status_code == 401
        assert idp.fetches == fetched  # within the minimum refetch interval: no new fetch


async def test_a_fixed_tenant_issuer_and_nested_role_claims(
    make_app: AppFactory, idp: IdentityProvider
) -> None:
    issuer = idp.issuer(tenant_claim=None, tenant="hospital-a", roles_claim="realm.roles")
    async with make_app(jwt_issuers=orjson.dumps([issuer]).decode()) as gw:
        admin = idp.token(realm={"roles": ["admin"]}, tenant=None)
        plain = idp.token(realm={"roles": []}, tenant=None)
        spec = {"id": "notes", "name": "Notes", "type": "echo"}
        r = await gw.post("/agents", json=spec, headers=bearer(plain))
        assert r.status_code == 403
        r = await gw.post(
            "/agents", json=spec, headers=bearer(admin, **{"Tenant-Name": "hospital-a"})
        )
        assert r.status_code == 201, r.text


async def test_an_unreachable_provider_is_503_not_401(make_app: AppFactory) -> None:
    from gateway.embedded_redis import free_port

    provider = IdentityProvider()  # never started: nothing listens on its port
    provider.publish("r1")
    issuer = {**provider.issuer(), "jwks_url": f"http://127.0.0.1:{free_port()}/jwks"}
    async with make_app(jwt_issuers=orjson.dumps([issuer]).decode()) as gw:
        r = await gw.get("/v1/contexts", headers=bearer(provider.token("r1")))
    assert r.status_code == 503 and r.headers["retry-after"]


async def test_a_tokens_user_is_not_the_api_key_user_of_the_same_name(
    make_app: AppFactory, idp: IdentityProvider
) -> None:
    """Principals of different credential sources never merge: a token with ``sub=alice``
    is not the API key's alice, and a token cannot carry ``impersonate``."""
    async with make_app(
        jwt_issuers=orjson.dumps([idp.issuer()]).decode(),
        api_keys=orjson.dumps(API_KEYS).decode(),
        api_key_secret="s" * 20,
    ) as gw:
        task = await send_task(gw, "x", headers=auth("alice"))
        token = idp.token(sub="alice", tenant="t1", roles=["admin", "impersonate"])
        assert (await gw.get(f"/v1/tasks/{task['id']}", headers=bearer(token))).status_code == 404
        own = await send_task(gw, "y", headers=bearer(token))
        assert (await gw.get(f"/v1/tasks/{own['id']}", headers=auth("alice"))).status_code == 404
        r = await gw.post("/keys", json={"user": "alice"}, headers=bearer(token))
        assert r.status_code == 403
        mine = await gw.post("/keys", json={}, headers=bearer(token))
        assert mine.status_code == 201, mine.text
        namespace = hashlib.sha256(ISSUER.encode()).hexdigest()[:12]
        assert mine.json()["user"] == f"jwt:{namespace}:alice"
        key = {"Authorization": f"Bearer {mine.json()['key']}"}
        assert (await gw.get(f"/v1/tasks/{own['id']}", headers=key)).status_code == 200
