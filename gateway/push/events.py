"""A queued delivery (ids only) and the body a webhook gets for it (pure; no I/O)."""

from __future__ import annotations

from dataclasses import dataclass

import orjson

from gateway.canonical import task_json
from gateway.dialects import V1, artifact_out, status_out
from gateway.models import Task
from gateway.store import fields as f
from gateway.store.fields import ENTRY_JOB

__all__ = ["PushJob", "payload"]

_JOB = ENTRY_JOB.encode()


@dataclass(frozen=True)
class PushJob:
    """One event of a task for one of its webhooks, as the scripts queue it."""

    tenant: str
    user: str
    context_id: str
    task_id: str
    config_id: str
    number: int  # the task's event count: `<task>.<number>` is the event's id
    kind: str  # DELIVERY_STATUS: the state became `state`; DELIVERY_ARTIFACT: `artifact_id` added
    state: str
    artifact_id: str
    queued_ms: int

    @property
    def event_id(self) -> str:
        return f"{self.task_id}.{self.number}"

    @classmethod
    def from_wire(cls, fields: dict[bytes, bytes]) -> PushJob:
        job = orjson.loads(fields[_JOB])
        return cls(
            tenant=str(job[f.DELIVERY_TENANT]),
            user=str(job[f.DELIVERY_USER]),
            context_id=str(job[f.DELIVERY_CONTEXT]),
            task_id=str(job[f.DELIVERY_TASK]),
            config_id=str(job[f.DELIVERY_CONFIG]),
            number=int(job[f.DELIVERY_NUMBER]),
            kind=str(job[f.DELIVERY_KIND]),
            state=str(job.get(f.DELIVERY_STATE) or ""),
            artifact_id=str(job.get(f.DELIVERY_ARTIFACT_ID) or ""),
            queued_ms=int(job[f.DELIVERY_QUEUED]),
        )


def payload(job: PushJob, task: Task, version: str) -> bytes | None:
    """The body for ``job``, built from the task as it stands (None: nothing to send, the
    artifact is gone: a later attempt of the run replaced it). 0.3 webhooks get the Task;
    1.0 webhooks a ``StreamResponse``: a ``statusUpdate`` (the event's state; the stored
    status when the task is still in it) or an ``artifactUpdate``."""
    if version != "1.0":
        return orjson.dumps(task_json(task))
    header = {"taskId": task.id, "contextId": task.context_id}
    if job.kind == f.DELIVERY_ARTIFACT:
        found = [a for a in task.artifact_list if a.get("artifactId") == job.artifact_id]
        if not found:
            return None
        shown = artifact_out(found[-1], V1)
        return orjson.dumps({"artifactUpdate": {**header, "artifact": shown}})
    status = task.status.value or {}
    if status.get("state") != job.state:
        status = {"state": job.state}
    return orjson.dumps({"statusUpdate": {**header, "status": status_out(status, V1)}})
