"""Two users, every endpoint: another user's contexts and tasks do not exist for you."""

from __future__ import annotations

import httpx

from tests.conftest import Send, auth


async def _setup(keyed: httpx.AsyncClient, send: Send) -> dict[str, str]:
    task = (
        await send(
            "private",
            via=keyed,
            headers=auth("alice"),
            metadata={"echo": {"finalState": "input-required"}},
        )
    ).json()["task"]
    return {"tid": task["id"], "cid": task["contextId"]}


async def test_other_users_get_404_everywhere(keyed: httpx.AsyncClient, send: Send) -> None:
    ids = await _setup(keyed, send)
    tid, cid = ids["tid"], ids["cid"]
    for intruder in ("bob", "carol"):  # same tenant other user; other tenant same user name
        h = auth(intruder)
        for base in ("", "/agents/echo"):
            checks = [
                await keyed.get(f"{base}/v1/tasks/{tid}", headers=h),
                await keyed.post(f"{base}/v1/tasks/{tid}:cancel", headers=h),
                await keyed.get(f"{base}/v1/contexts/{cid}", headers=h),
                await keyed.delete(f"{base}/v1/contexts/{cid}", headers=h),
                await send("x", via=keyed, headers=h, path=f"{base}/v1/message:send", taskId=tid),
                await send(
                    "x",
                    via=keyed,
                    headers=h,
                    path=f"{base}/v1/message:send",
                    contextId=cid,
                    taskId=tid,
                ),
            ]
            for r in checks:
                assert r.status_code == 404, (intruder, r.request.url, r.text)
                assert r.json()["error"] in ("TaskNotFoundError", "ContextNotFoundError")
            listed = await keyed.get(f"{base}/v1/contexts", headers=h)
            assert listed.json()["items"] == []
        # Naming alice's context id opens the intruder's own context of that id: none of
        # alice's messages or tasks in it.
        r = await send("x", via=keyed, headers=h, contextId=cid)
        assert r.status_code == 200, r.text
        theirs = r.json()["task"]
        assert theirs["artifacts"][0]["parts"][-1]["data"]["echo"]["historyMessages"] == 0
        page = (await keyed.get(f"/v1/contexts/{cid}", headers=h)).json()
        assert [t["id"] for t in page["items"]] == [theirs["id"]]
        own = (await send("mine", via=keyed, headers=h)).json()["task"]
        r = await send(
            "x", via=keyed, headers=h, contextId=own["contextId"], referenceTaskIds=[tid]
        )
        assert r.status_code == 400
        assert r.json()["data"]["unknownTaskIds"] == [tid]
    alice = auth("alice")
    assert (await keyed.get(f"/v1/tasks/{tid}", headers=alice)).json()["status"]["state"] == (
        "input-required"
    )
    assert (await keyed.get(f"/v1/contexts/{cid}", headers=alice)).status_code == 200
    assert (await keyed.delete(f"/v1/contexts/{cid}", headers=alice)).status_code == 204


async def test_same_message_id_from_two_users_makes_two_tasks(
    keyed: httpx.AsyncClient, send: Send
) -> None:
    a = (await send("x", via=keyed, headers=auth("alice"), message_id="shared")).json()["task"]
    b = (await send("x", via=keyed, headers=auth("bob"), message_id="shared")).json()["task"]
    assert a["id"] != b["id"] and a["contextId"] != b["contextId"]
