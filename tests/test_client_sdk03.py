"""The official a2a-sdk 0.3 client, as a user runs it: card-driven, its default transport
(JSON-RPC) and its REST transport, against a real gateway and Redis."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import orjson
import pytest
from a2a.client import A2ACardResolver, Client, ClientConfig, ClientFactory
from a2a.client.base_client import BaseClient
from a2a.client.errors import A2AClientHTTPError, A2AClientJSONRPCError
from a2a.types import (
    Artifact,
    DataPart,
    InvalidParamsError,
    Message,
    MessageSendConfiguration,
    Part,
    Role,
    Task,
    TaskArtifactUpdateEvent,
    TaskIdParams,
    TaskNotFoundError,
    TaskQueryParams,
    TaskState,
    TextPart,
    TransportProtocol,
)

from tests.conftest import API_KEYS, AppFactory, auth
from tests.waiting import until

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

# Nested values, numbers, unicode, null: what a DataPart must carry exactly.
VITALS = {
    "patient": {"name": "Zoë Ångström 患者", "age": 72, "weight": 71.5},
    "readings": [{"hr": 88, "spo2": 0.97}, {"hr": 91, "flags": [True, False, None]}],
    "emoji": "🩺",
}


@pytest.fixture
async def gateway(make_app: AppFactory) -> AsyncIterator[httpx.AsyncClient]:
    async with make_app(api_keys=orjson.dumps(API_KEYS).decode()) as c:
        c.headers.update(auth("alice"))
        yield c


async def _client(
    gw: httpx.AsyncClient, transport: str, polling: bool = False, streaming: bool = False
) -> Client:
    """The client for a card; sends block (or poll) unless ``streaming`` (the card offers
    streaming, which the client would otherwise use for every send)."""
    card = await A2ACardResolver(gw, "http://gw/agents/echo").get_agent_card()
    config = ClientConfig(httpx_client=gw, polling=polling, streaming=streaming)
    if transport == TransportProtocol.http_json:
        config.supported_transports = [TransportProtocol.http_json]
    return ClientFactory(config).create(card)


def _message(*parts: Part, **fields: Any) -> Message:
    return Message(
        role=Role.user,
        parts=list(parts) or [Part(root=TextPart(text="hello"))],
        message_id=str(uuid.uuid4()),
        **fields,
    )


async def _send(client: Client, message: Message, **config: Any) -> Task:
    assert isinstance(client, BaseClient)  # what the factory builds: it takes a configuration
    configuration = MessageSendConfiguration(**config) if config else None
    async for event in client.send_message(message, configuration=configuration):
        assert isinstance(event, tuple), event
        return event[0]
    raise AssertionError("no answer")


def _echo(task: Task) -> dict[str, Any]:
    """The echo agent's report (a DataPart of its artifact)."""
    for artifact in task.artifacts or []:
        for part in artifact.parts:
            if isinstance(part.root, DataPart) and "echo" in part.root.data:
                report: dict[str, Any] = part.root.data["echo"]
                return report
    raise AssertionError("no echo report")


def _data_parts(task: Task) -> list[dict[str, Any]]:
    return [
        p.root.data
        for a in task.artifacts or []
        for p in a.parts
        if isinstance(p.root, DataPart) and "echo" not in p.root.data
    ]


TRANSPORTS = [TransportProtocol.jsonrpc, TransportProtocol.http_json]


async def test_default_client_picks_json_rpc(gateway: httpx.AsyncClient) -> None:
    client = await _client(gateway, TransportProtocol.jsonrpc)
    task = await _send(client, _message())
    assert task.status.state == TaskState.completed
    assert (await gateway.get("/agents/echo/.well-known/agent-card.json")).json()[
        "preferredTransport"
    ] == "JSONRPC"


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_conversation_over_the_official_client(
    gateway: httpx.AsyncClient, transport: str
) -> None:
    client = await _client(gateway, transport)
    first = await _send(client, _message(Part(root=DataPart(data=VITALS))))
    assert first.status.state == TaskState.completed
    assert _data_parts(first) == [VITALS]  # 72 may come back as 72.0 (protobuf Struct)
    assert first.history is None or first.history == []

    # Continuation with contextId: the agent sees the earlier turn.
    second = await _send(client, _message(context_id=first.context_id))
    assert second.context_id == first.context_id and second.id != first.id
    assert _echo(second)["historyMessages"] >= 1

    # historyLength: none, N, and the whole history by default.
    assert not (await client.get_task(TaskQueryParams(id=first.id, history_length=0))).history
    full = await client.get_task(TaskQueryParams(id=first.id))
    assert full.history is not None and len(full.history) >= 2
    assert full.history[0].role == Role.user
    assert full.history[0].parts[0].root == DataPart(data=VITALS)
    last = await client.get_task(TaskQueryParams(id=first.id, history_length=1))
    assert last.history == full.history[-1:]

    # The same context read over the canonical REST binding.
    page = (await gateway.get(f"/v1/contexts/{first.context_id}")).json()
    assert [t["id"] for t in page["items"]] == [first.id, second.id]


async def test_reference_task_ids_over_json_rpc(gateway: httpx.AsyncClient) -> None:
    # The 0.3 proto (REST) Message has no referenceTaskIds: only JSON-RPC carries them.
    client = await _client(gateway, TransportProtocol.jsonrpc)
    first = await _send(client, _message())
    second = await _send(
        client, _message(context_id=first.context_id, reference_task_ids=[first.id])
    )
    assert _echo(second)["referenceTaskIds"] == [first.id]


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_polling_send_returns_at_once_and_completes(
    gateway: httpx.AsyncClient, transport: str
) -> None:
    client = await _client(gateway, transport, polling=True)
    slow = {"echo": {"delayMs": 400}}
    task = await _send(client, _message(metadata=slow))
    assert task.status.state in (TaskState.submitted, TaskState.working)

    async def state() -> TaskState:
        return (await client.get_task(TaskQueryParams(id=task.id))).status.state

    assert await until(lambda: _is(state, TaskState.completed), what="the polled task to complete")


async def _is(state: Any, wanted: TaskState) -> bool:
    return bool(await state() == wanted)


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_cancel_over_the_official_client(gateway: httpx.AsyncClient, transport: str) -> None:
    client = await _client(gateway, transport, polling=True)
    task = await _send(client, _message(metadata={"echo": {"finalState": "working"}}))
    canceled = await client.cancel_task(TaskIdParams(id=task.id))
    assert canceled.id == task.id and canceled.status.state == TaskState.canceled


async def test_errors_are_the_json_rpc_clients_typed_errors(gateway: httpx.AsyncClient) -> None:
    client = await _client(gateway, TransportProtocol.jsonrpc)
    with pytest.raises(A2AClientJSONRPCError) as missing:
        await client.get_task(TaskQueryParams(id="no-such-task"))
    # The 0.3 SDK parses every error into its first union member: the code is the type.
    assert missing.value.error.code == TaskNotFoundError().code
    with pytest.raises(A2AClientJSONRPCError) as invalid:
        await _send(client, Message(role=Role.user, parts=[], message_id="m-empty"))
    assert invalid.value.error.code == InvalidParamsError().code
    body = invalid.value.error.data  # the REST error body, as protocol.md says
    assert body is not None
    assert body["error"] == "InvalidParamsError"
    assert body["data"]["errors"][0]["field"] == "message.parts"


async def test_errors_over_the_rest_client_are_http_statuses(gateway: httpx.AsyncClient) -> None:
    client = await _client(gateway, TransportProtocol.http_json)
    with pytest.raises(A2AClientHTTPError) as missing:
        await client.get_task(TaskQueryParams(id="no-such-task"))
    assert missing.value.status_code == 404
    with pytest.raises(A2AClientHTTPError) as invalid:
        await _send(client, Message(role=Role.user, parts=[], message_id="m-empty"))
    assert invalid.value.status_code == 400


async def test_other_users_tasks_are_not_found(
    gateway: httpx.AsyncClient, make_app: AppFactory
) -> None:
    client = await _client(gateway, TransportProtocol.jsonrpc)
    task = await _send(client, _message())
    gateway.headers.update(auth("bob"))
    with pytest.raises(A2AClientJSONRPCError) as rpc:
        await client.get_task(TaskQueryParams(id=task.id))
    assert rpc.value.error.code == TaskNotFoundError().code
    rest = await _client(gateway, TransportProtocol.http_json)
    with pytest.raises(A2AClientHTTPError) as http:
        await rest.cancel_task(TaskIdParams(id=task.id))
    assert http.value.status_code == 404


STREAMED = "Chunks of a longer answer, as the agent produces them."


def _text(artifact: Artifact) -> str:
    """The text of an artifact, its text parts joined."""
    return "".join(p.root.text for p in artifact.parts if isinstance(p.root, TextPart))


def _streamed_text(task: Task) -> str:
    """The text of the streamed artifact of a task."""
    (artifact,) = [a for a in task.artifacts or [] if a.name == "echo-stream"]
    return _text(artifact)


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_streaming_over_the_official_client(
    gateway: httpx.AsyncClient, transport: str
) -> None:
    client = await _client(gateway, transport, streaming=True)
    chunked = {"echo": {"chunks": 4, "delayMs": 200}}
    message = _message(Part(root=TextPart(text=STREAMED)), metadata=chunked)
    # Each chunk as it arrives (the client's task manager extends the first chunk's
    # artifact in place with the later ones).
    received, chunks = [], []
    async for event in client.send_message(message):
        assert isinstance(event, tuple)
        received.append(event)
        update = event[1]
        if isinstance(update, TaskArtifactUpdateEvent) and update.artifact.name == "echo-stream":
            chunks.append((bool(update.append), bool(update.last_chunk), _text(update.artifact)))
    assert [c[:2] for c in chunks] == [(False, False), (True, False), (True, False), (True, True)]
    assert "".join(c[2] for c in chunks) == STREAMED
    task = received[-1][0]
    assert task.status.state == TaskState.completed
    # The task the client assembled from the events is the stored one.
    stored = await client.get_task(TaskQueryParams(id=task.id))
    assert _streamed_text(task) == _streamed_text(stored) == STREAMED
    # Resubscribing to the ended task: its final state, then the end.
    again = [e async for e in client.resubscribe(TaskIdParams(id=task.id))]
    assert [e[0].status.state for e in again] == [TaskState.completed]


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_resubscribe_mid_run_over_the_official_client(
    gateway: httpx.AsyncClient, transport: str
) -> None:
    polling = await _client(gateway, transport, polling=True)
    chunked = {"echo": {"chunks": 4, "delayMs": 1600}}
    sent = await _send(polling, _message(Part(root=TextPart(text=STREAMED)), metadata=chunked))

    async def partly_streamed() -> bool:
        task = await polling.get_task(TaskQueryParams(id=sent.id))
        return any(a.name == "echo-stream" for a in task.artifacts or [])

    await until(partly_streamed, what="the first chunks to be stored")
    # The client starts from the task as it stands (the artifact so far), then appends.
    client = await _client(gateway, transport, streaming=True)
    received = [e async for e in client.resubscribe(TaskIdParams(id=sent.id))]
    task = received[-1][0]
    assert task.status.state == TaskState.completed
    assert _streamed_text(task) == STREAMED


# --- push notification configs --------------------------------------------------------


@pytest.fixture
async def push_gateway(make_app: AppFactory) -> AsyncIterator[httpx.AsyncClient]:
    settings = {"api_keys": orjson.dumps(API_KEYS).decode(), "push_allowlist": "127.0.0.1"}
    async with make_app(**settings) as c:
        c.headers.update(auth("alice"))
        yield c


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_push_configs_over_the_official_client(
    push_gateway: httpx.AsyncClient, transport: str
) -> None:
    """A send carrying a config, set and get with the client; list and delete (which the
    0.3 client lacks) over the same binding by hand, read back with the SDK's own models.
    The send's webhook receives the Task with the config's token."""
    from a2a.grpc import a2a_pb2
    from a2a.types import (
        GetTaskPushNotificationConfigParams,
        PushNotificationConfig,
        TaskPushNotificationConfig,
    )
    from google.protobuf.json_format import ParseDict

    from tests.test_jsonrpc import rpc
    from tests.webhook_receiver import WebhookReceiver

    hook = WebhookReceiver().start()
    try:
        # The client's own way to a send's config (a per-call one trips the SDK's copy).
        first = PushNotificationConfig(id="first", url=hook.url, token="tok-first")
        card = await A2ACardResolver(push_gateway, "http://gw/agents/echo").get_agent_card()
        assert card.capabilities.push_notifications is True
        config = ClientConfig(
            httpx_client=push_gateway, streaming=False, push_notification_configs=[first]
        )
        config.supported_transports = [transport]
        client = ClientFactory(config).create(card)
        task = await _send(client, _message())
        assert task.status.state == TaskState.completed
        delivered = await until(
            lambda: [d for d in hook.accepted if d.json()["status"]["state"] == "completed"],
            what="the completed task at the webhook",
        )
        assert Task.model_validate(delivered[0].json()).id == task.id
        assert delivered[0].headers["x-a2a-notification-token"] == "tok-first"

        second = TaskPushNotificationConfig(
            task_id=task.id,
            push_notification_config=PushNotificationConfig(id="second", url=hook.url),
        )
        set_back = await client.set_task_callback(second)
        assert set_back.task_id == task.id
        assert (set_back.push_notification_config.id, set_back.push_notification_config.url) == (
            "second",
            hook.url,
        )
        got = await client.get_task_callback(
            GetTaskPushNotificationConfigParams(id=task.id, push_notification_config_id="first")
        )
        assert got.task_id == task.id
        assert got.push_notification_config == first

        if transport == TransportProtocol.jsonrpc:
            listing = await push_gateway.post(
                "/agents/echo", json=rpc("tasks/pushNotificationConfig/list", {"id": task.id})
            )
            configs = [
                TaskPushNotificationConfig.model_validate(c) for c in listing.json()["result"]
            ]
            assert {c.push_notification_config.id for c in configs} == {"first", "second"}
            deleted = await push_gateway.post(
                "/agents/echo",
                json=rpc(
                    "tasks/pushNotificationConfig/delete",
                    {"id": task.id, "pushNotificationConfigId": "first"},
                    request_id=2,
                ),
            )
            assert deleted.json()["result"] is None
        else:
            base = f"/agents/echo/a2a/v1/tasks/{task.id}/pushNotificationConfigs"
            listing = await push_gateway.get(base)
            parsed = ParseDict(listing.json(), a2a_pb2.ListTaskPushNotificationConfigResponse())
            assert {c.push_notification_config.id for c in parsed.configs} == {"first", "second"}
            assert (await push_gateway.delete(f"{base}/first")).status_code == 200
        with pytest.raises((A2AClientJSONRPCError, A2AClientHTTPError)):
            await client.get_task_callback(
                GetTaskPushNotificationConfigParams(id=task.id, push_notification_config_id="first")
            )
    finally:
        hook.stop()
