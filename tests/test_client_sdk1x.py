"""The official a2a-sdk 1.x client, as a user runs it, against a served gateway: native 1.0
over JSON-RPC, REST and gRPC (picked from the card's ``supportedInterfaces``) and its v0.3
compatibility transports (picked for a 0.3-only card).

a2a-sdk 1.x cannot live beside the gateway's 0.3 SDK: the client runs in the environment of
``tests/clients/sdk1x.py``, in a subprocess (``tests/clients/a2a_1x_scenario.py``)."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from gateway.embedded_redis import free_port
from tests.clients import sdk1x
from tests.conftest import API_KEYS
from tests.processes import serving, slow_process_test

SCENARIO = Path(__file__).parent / "clients" / "a2a_1x_scenario.py"
CARD = Path(__file__).parent / "clients" / "a2a_1x_card.py"
pytestmark = slow_process_test


@pytest.fixture(scope="session")
def sdk1x_python() -> Path:
    return sdk1x.python()


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    keys = orjson.dumps(API_KEYS).decode()
    with serving(
        tmp_path_factory.mktemp("sdk1x"),
        GATEWAY_API_KEYS=keys,
        GATEWAY_GRPC_PORT=str(free_port()),  # the gRPC binding, offered by the cards
        GATEWAY_PUSH_ALLOWLIST="127.0.0.1",  # the push test's webhook
    ) as (_, base):
        yield base


def run(python: Path, base: str, mode: str, key: str = "key-alice") -> dict[str, Any]:
    done = subprocess.run(
        [python, SCENARIO, base, key, mode], capture_output=True, text=True, timeout=180
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report: dict[str, Any] = json.loads(done.stdout)
    return report


def _echo(task: dict[str, Any]) -> dict[str, Any]:
    for artifact in task.get("artifacts", []):
        for part in artifact["parts"]:
            if "echo" in part.get("data", {}):
                report: dict[str, Any] = part["data"]["echo"]
                return report
    raise AssertionError(f"no echo report in {task}")


def _data(task: dict[str, Any]) -> list[Any]:
    return [
        p["data"]
        for a in task.get("artifacts", [])
        for p in a["parts"]
        if "data" in p and "echo" not in p["data"]
    ]


VITALS = {
    "patient": {"name": "Zoë Ångström 患者", "age": 72, "weight": 71.5},
    "readings": [{"hr": 88, "spo2": 0.97}, {"hr": 91, "flags": [True, False, None]}],
    "emoji": "🩺",
}
TRANSPORTS = {
    "jsonrpc": "JsonRpcTransport",
    "rest": "RestTransport",
    "grpc": "GrpcTransport",
    "compat-jsonrpc": "CompatJsonRpcTransport",
    "compat-rest": "CompatRestTransport",
}


@pytest.mark.parametrize("mode", list(TRANSPORTS))
def test_a_session_with_the_1x_client(sdk1x_python: Path, served: str, mode: str) -> None:
    r = run(sdk1x_python, served, mode)
    assert r["transport"] == TRANSPORTS[mode]
    first, second = r["first"], r["second"]
    assert first["status"]["state"] == "TASK_STATE_COMPLETED"
    assert _data(first) == [VITALS]  # protobuf Value: 72 compares equal to 72.0
    # Continuation in the same context, with the first task referenced.
    assert second["contextId"] == first["contextId"] and second["id"] != first["id"]
    assert _echo(second)["historyMessages"] >= 1
    if mode != "compat-rest":  # the 0.3 proto Message has no referenceTaskIds
        assert _echo(second)["referenceTaskIds"] == [first["id"]]
    # historyLength: 0 none, N the last N, unset the server default (all).
    assert "history" not in r["history_none"]
    assert len(r["history_one"]["history"]) == 1
    history = r["history_all"]["history"]
    assert [m["role"] for m in history] == ["ROLE_USER", "ROLE_AGENT"]
    assert history[0]["parts"] == [{"data": VITALS}]
    if not mode.startswith("compat"):
        assert r["values"] == [{"data": [1, "two", None]}, {"data": "text"}]
    # Non-blocking send, polled to completion; cancel.
    assert r["polled_first_state"] in ("TASK_STATE_SUBMITTED", "TASK_STATE_WORKING")
    assert r["polled_final_state"] == "TASK_STATE_COMPLETED"
    assert r["canceled_state"] == "TASK_STATE_CANCELED"
    # The SDK's own typed errors.
    assert r["not_found"] == "TaskNotFoundError"
    assert r["invalid"] == "InvalidParamsError"
    if not mode.startswith("compat"):
        # ListTasks: the context's two tasks one per page, newest first; only alice's.
        assert r["pages"] == [[second["id"]], [first["id"]]]
        assert r["total_size"] == 2
        assert first["id"] in r["all_ids"]
    streams(r, mode)


STREAMED = "Chunks of a longer answer, as the agent produces them."


def _kind(event: dict[str, Any]) -> str:
    (key,) = event
    return key


def _text(parts: list[dict[str, Any]]) -> str:
    return "".join(p.get("text", "") for p in parts)


def streams(r: dict[str, Any], mode: str) -> None:
    """What the 1.x client saw of streams (see ``streams`` in the scenario)."""
    events = r["stream"]
    kinds = [_kind(e) for e in events]
    assert kinds[0] == "task" and kinds[-1] == "statusUpdate"
    assert events[-1]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"
    chunks = [
        e["artifactUpdate"]
        for e in events
        if _kind(e) == "artifactUpdate" and e["artifactUpdate"]["artifact"]["name"] == "echo-stream"
    ]
    assert [bool(c.get("append")) for c in chunks] == [False, True, True, True]
    assert [bool(c.get("lastChunk")) for c in chunks] == [False, False, False, True]
    assert "".join(_text(c["artifact"]["parts"]) for c in chunks) == STREAMED
    stored = [a for a in r["stream_stored"]["artifacts"] if a["name"] == "echo-stream"]
    assert [_text(a["parts"]) for a in stored] == [STREAMED]
    if mode.startswith("compat"):  # 0.3: the ended task's final state
        assert [_kind(e) for e in r["subscribe_ended"]] == ["task"]
    else:  # 1.0: UnsupportedOperationError, as the spec says
        assert r["subscribe_ended"] == "UnsupportedOperationError"
    # Subscribed mid-run: the task as it stood (its artifact so far), then the rest.
    resumed = r["resubscribed"]
    assert _kind(resumed[0]) == "task" and _kind(resumed[-1]) == "statusUpdate"
    so_far = [a for a in resumed[0]["task"].get("artifacts", []) if a["name"] == "echo-stream"]
    text = _text(so_far[0]["parts"]) if so_far else ""
    for e in resumed[1:]:
        update = e.get("artifactUpdate")
        if update and update["artifact"]["name"] == "echo-stream":
            piece = _text(update["artifact"]["parts"])
            text = text + piece if update.get("append") else piece
    assert text == STREAMED


PUSH_SCENARIO = Path(__file__).parent / "clients" / "a2a_1x_push.py"


@pytest.mark.parametrize("mode", ["jsonrpc", "rest", "grpc"])
def test_push_configs_with_the_1x_client(sdk1x_python: Path, served: str, mode: str) -> None:
    """Create (in the send's configuration and on its own), get, list and delete configs
    with the 1.x client; the send's webhook receives StreamResponse objects with its token;
    a URL the allowlist refuses is the SDK's InvalidParamsError."""
    from tests.waiting import until_sync
    from tests.webhook_receiver import WebhookReceiver

    hook = WebhookReceiver().start()
    try:
        done = subprocess.run(
            [sdk1x_python, PUSH_SCENARIO, served, "key-alice", mode, hook.url],
            capture_output=True,
            text=True,
            timeout=180,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        r = json.loads(done.stdout)
        assert r["push_capability"] is True
        assert r["state"] == "TASK_STATE_COMPLETED"
        assert r["created"] == {
            "id": "made",
            "taskId": r["task_id"],
            "url": hook.url,
            "token": "tok-2",
        }
        assert r["got"]["id"] == "sent" and r["got"]["token"] == "tok-1x"
        assert r["listed"] == ["made", "sent"]
        assert r["after_delete"] == ["made"]
        assert r["get_deleted"] == "TaskNotFoundError"
        assert r["refused"] == "InvalidParamsError"

        def completed() -> list[Any]:
            return [
                d
                for d in hook.accepted
                if d.json().get("statusUpdate", {}).get("status", {}).get("state")
                == "TASK_STATE_COMPLETED"
            ]

        (delivered, *_) = until_sync(completed, what="the completed event at the webhook")
        assert delivered.headers["x-a2a-notification-token"] == "tok-1x"
        assert delivered.json()["statusUpdate"]["taskId"] == r["task_id"]
    finally:
        hook.stop()


def test_the_1x_client_verifies_the_signed_cards(sdk1x_python: Path, served: str) -> None:
    """The SDK's signature verifier (keys from the JWKS the signature's ``jku`` names)
    accepts every card the gateway signs, and refuses a card changed anywhere in its 1.0
    content or stripped of its signatures."""
    done = subprocess.run(
        [sdk1x_python, CARD, served, "key-alice"], capture_output=True, text=True, timeout=180
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout)
    assert set(report) == {served, f"{served}/agents/echo"}
    for seen in report.values():
        assert seen["state"] == "TASK_STATE_COMPLETED"
        assert seen["jku"] == f"{served}/.well-known/jwks.json"
        assert seen["again"] == "accepted"
        assert set(seen["tampered"].values()) == {"InvalidSignaturesError"}, seen["tampered"]
        assert seen["unsigned"] == "NoSignatureError"
