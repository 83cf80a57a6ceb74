"""Long-term memory's identity and health: the one-key probe refuses a key bound to one
user, per-tenant keys and hashed user ids, and Cortadel as a non-critical readiness check."""

from __future__ import annotations

from gateway.longterm.render import cortadel_user_id
from tests.conftest import auth
from tests.cortadel_gateway import SEARCH, STORE, Gateway, _probed, send_reveal
from tests.cortadel_gateway import gateway as gateway
from tests.cortadel_server import CortadelServer
from tests.waiting import stays, until


async def test_a_key_bound_to_one_user_is_refused(
    gateway: Gateway, cortadel: CortadelServer
) -> None:
    cortadel.pin_key_to = "service-account"
    async with gateway() as c:
        # the probe writes as one user and reads as another: refused, so the key is bound
        await until(
            lambda: c.app.state.runtime.cortadel.key_states()["refused"],
            what="the probe to refuse the key",
        )
        ready = (await c.get("/readyz")).json()
        task = await send_reveal(c, "does anyone remember me?")

        def untouched() -> bool:
            return not cortadel.calls_to(SEARCH) and not cortadel.calls_to(STORE)

        # nothing goes through a refused key: a window for a stray call to show
        await stays(untouched, 0.5, what="no search or store through the refused key")
    assert ready["status"] == "degraded" and ready["checks"]["cortadel"] == "degraded"
    assert task["status"]["state"] == "completed"
    assert cortadel.calls_to(SEARCH) == [] and cortadel.calls_to(STORE) == []
    assert [m.text for m in cortadel.memories.values()] == []  # the probe cleaned up


async def test_the_probe_passes_for_a_per_user_key_and_cleans_up(
    gateway: Gateway, cortadel: CortadelServer
) -> None:
    async with gateway() as c:
        await _probed(c)
        ready = (await c.get("/readyz")).json()
    assert ready == {
        "status": "ready",
        "checks": {"redis": "ok", "cortadel": "ok"},
        "critical": ["redis"],
    }
    assert cortadel.memories == {}


async def test_per_tenant_keys_and_hashed_user_ids(
    gateway: Gateway, cortadel: CortadelServer
) -> None:
    cortadel.api_key = None  # accept any key; record which one came
    secret = "a-long-enough-secret-value"
    async with gateway(
        tenant_keys='{"t2": "tenant-two-key"}', user_ids="hashed", user_id_secret=secret
    ) as c:
        await _probed(c)
        await send_reveal(c, "tenant one speaking")
        await send_reveal(c, "tenant two speaking", headers=auth("carol"))
    one, two = cortadel.calls_to(SEARCH)
    assert one["auth"] == "Bearer cortadel-key" and two["auth"] == "Bearer tenant-two-key"
    assert one["body"]["user_id"] == cortadel_user_id("t1", "alice", secret)
    assert two["body"]["user_id"] == cortadel_user_id("t2", "alice", secret)
    assert one["body"]["user_id"] != two["body"]["user_id"]


async def test_readyz_reports_cortadel_as_non_critical(
    gateway: Gateway, cortadel: CortadelServer
) -> None:
    async with gateway() as c:
        await _probed(c)
        cortadel.down = True
        r = await c.get("/readyz")
    assert r.status_code == 200
    assert r.json()["status"] == "degraded" and r.json()["checks"]["cortadel"] == "degraded"
    cortadel.stop()
    async with gateway(probe=False) as c:
        r = await c.get("/readyz")
    assert r.status_code == 200 and r.json()["checks"]["cortadel"] == "unreachable"
