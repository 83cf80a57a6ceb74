"""The 1.0 dialect as proto messages (``dialects/proto1.py``) is the 1.0 proto-JSON dialect
through protobuf's own JSON conversions: a Task or stream event written into its message is
the message ``ParseDict`` makes of ``v1.py``'s JSON, and a send read out of its message is
the JSON ``MessageToDict`` gives, for any content."""

from __future__ import annotations

import base64
from typing import Any

import orjson
from google.protobuf.json_format import MessageToDict, ParseDict
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.dialects import (
    JSON_VALUE,
    V1,
    artifact_update_out,
    read_send_proto,
    status_update_out,
    task_out,
    write_stream_event,
    write_task,
)
from gateway.grpcapi.proto import a2a_pb2 as pb
from gateway.models import ArtifactUpdate, RawJson, StatusUpdate, Task

_EXAMPLES = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
_text = st.text(max_size=8)
_scalar = st.none() | st.booleans() | st.integers(-(2**40), 2**40) | _text
_json: st.SearchStrategy[Any] = st.recursive(
    _scalar | st.floats(allow_nan=False, allow_infinity=False),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_text, inner, max_size=3),
    max_leaves=8,
)
_object = st.dictionaries(_text, _json, max_size=3)
_b64 = st.binary(max_size=12).map(lambda b: base64.b64encode(b).decode())
_file = st.fixed_dictionaries(
    {},
    optional={
        "uri": _text,
        "bytes": _b64,
        "mimeType": _text,
        "name": _text,
    },
)
_part = st.one_of(
    st.fixed_dictionaries({"kind": st.just("text"), "text": _text}, optional={"metadata": _object}),
    st.fixed_dictionaries({"kind": st.just("file"), "file": _file}, optional={"metadata": _object}),
    st.fixed_dictionaries(
        {"kind": st.just("data"), "data": _object}, optional={"metadata": _object}
    ),
    # a 1.0 data value that is no object, as stored
    st.builds(
        lambda value, meta: {"kind": "data", "data": {"value": value}, "metadata": meta},
        _json,
        _object.map(lambda m: {**m, JSON_VALUE: True}),
    ),
)
_ids = st.lists(_text, max_size=2)
_message = st.fixed_dictionaries(
    {"kind": st.just("message"), "messageId": _text, "parts": st.lists(_part, max_size=3)},
    optional={
        "role": st.sampled_from(["user", "agent", "other"]),
        "contextId": _text,
        "taskId": _text,
        "referenceTaskIds": _ids,
        "metadata": _object,
        "extensions": _ids,
    },
)
_STATES = ["submitted", "working", "completed", "failed", "canceled", "input-required"]
_STAMPS = ["2026-12-07T01:02:03.456Z", "2026-01-01T00:00:00Z"]
_status = st.fixed_dictionaries(
    {"state": st.sampled_from([*_STATES, "rejected", "auth-required", "unknown"])},
    optional={"message": _message, "timestamp": st.sampled_from(_STAMPS)},
)
_artifact = st.fixed_dictionaries(
    {"artifactId": _text, "parts": st.lists(_part, max_size=3)},
    optional={"name": _text, "description": _text, "metadata": _object, "extensions": _ids},
)


def _raw(value: Any) -> RawJson:
    return RawJson(orjson.dumps(value))


@st.composite
def _tasks(draw: st.DrawFn) -> Task:
    artifacts = draw(st.none() | st.lists(_artifact, max_size=2))
    history = draw(st.none() | st.lists(_message, max_size=2))
    metadata = draw(st.none() | _object)
    return Task(
        draw(_text),
        draw(_text),
        _raw(draw(_status)),
        None if artifacts is None else _raw(artifacts),
        None if history is None else tuple(_raw(m) for m in history),
        None if metadata is None else _raw(metadata),
    )


@_EXAMPLES
@given(_tasks())
def test_a_task_is_written_as_parse_dict_writes_its_json(task: Task) -> None:
    expected = ParseDict({"task": task_out(task, V1)}, pb.SendMessageResponse())
    out = pb.SendMessageResponse()
    write_task(out.task, task)
    assert out == expected
    alone = pb.Task()
    write_task(alone, task)
    assert alone == expected.task


@_EXAMPLES
@given(_status, _artifact, st.booleans(), st.booleans())
def test_stream_events_are_written_as_parse_dict_writes_their_json(
    status: dict[str, Any], artifact: dict[str, Any], append: bool, last: bool
) -> None:
    update = StatusUpdate(_raw(status), status["state"])
    out = pb.StreamResponse()
    write_stream_event(out, "t", "c", update)
    assert out == ParseDict(status_update_out("t", "c", update, False, V1), pb.StreamResponse())
    chunk = ArtifactUpdate(_raw({"artifact": artifact, "append": append, "lastChunk": last}))
    out = pb.StreamResponse()
    write_stream_event(out, "t", "c", chunk)
    assert out == ParseDict(artifact_update_out("t", "c", chunk, V1), pb.StreamResponse())


def _value(value: Any) -> dict[str, Any]:
    return {"data": value}


_part_v1 = st.one_of(
    st.builds(lambda t: {"text": t}, _text),
    st.builds(lambda u: {"url": u}, _text),
    st.builds(lambda r: {"raw": r}, _b64),
    st.builds(_value, _json),
    st.just({}),
).flatmap(
    lambda part: st.fixed_dictionaries(
        {k: st.just(v) for k, v in part.items()},
        optional={"metadata": _object, "filename": _text, "mediaType": _text},
    )
)
_message_v1 = st.fixed_dictionaries(
    {},
    optional={
        "messageId": _text,
        "contextId": _text,
        "taskId": _text,
        "role": st.sampled_from(["ROLE_USER", "ROLE_AGENT", "ROLE_UNSPECIFIED", 7]),
        "parts": st.lists(_part_v1, max_size=3),
        "metadata": _object,
        "extensions": _ids,
        "referenceTaskIds": _ids,
    },
)
_config_v1 = st.fixed_dictionaries(
    {},
    optional={
        "acceptedOutputModes": _ids,
        "historyLength": st.integers(0, 2**31 - 1),
        "returnImmediately": st.booleans(),
        "taskPushNotificationConfig": st.fixed_dictionaries(
            {"url": _text}, optional={"id": _text, "token": _text}
        ),
    },
)
_send_v1 = st.fixed_dictionaries(
    {},
    optional={
        "tenant": _text,
        "message": _message_v1,
        "configuration": _config_v1,
        "metadata": _object,
    },
)


@_EXAMPLES
@given(_send_v1)
def test_a_send_is_read_as_message_to_dict_reads_it(body: dict[str, Any]) -> None:
    request = ParseDict(body, pb.SendMessageRequest())
    assert read_send_proto(request) == MessageToDict(request)
    again = pb.SendMessageRequest.FromString(request.SerializeToString())
    assert read_send_proto(again) == MessageToDict(again)
