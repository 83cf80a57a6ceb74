"""The names inside the keys of ``keys.py``: the fields of a context's hashes and the marks
stored in them, defined once.

The Lua scripts (``lua/``) get every name here as a local of their prelude, generated
from these definitions when the module is imported, so renaming a field is one edit here.

A context's tasks hash holds, per task, ``<tid><suffix>`` for each suffix below; its meta
hash holds the ``META_*`` fields.
"""

from __future__ import annotations

__all__ = [
    "AGENT_METADATA",
    "ARTIFACTS",
    "ATTEMPT",
    "CONFIG_ARTIFACTS",
    "CONFIG_TENANT",
    "CONFIG_USER",
    "DELIVERY_ARTIFACT",
    "DELIVERY_ARTIFACT_ID",
    "DELIVERY_CONFIG",
    "DELIVERY_CONTEXT",
    "DELIVERY_KIND",
    "DELIVERY_NUMBER",
    "DELIVERY_QUEUED",
    "DELIVERY_STATE",
    "DELIVERY_STATUS",
    "DELIVERY_TASK",
    "DELIVERY_TENANT",
    "DELIVERY_USER",
    "ENTRY_FORGET",
    "ENTRY_JOB",
    "ENTRY_SEQ",
    "EVENTS_SEAL",
    "EVENT_ARTIFACT",
    "EVENT_DATA",
    "EVENT_KIND",
    "EVENT_STATUS",
    "JOB",
    "LOCAL_MARK",
    "LOGGED",
    "MARK",
    "MESSAGES",
    "METADATA",
    "META_BYTES",
    "META_CREATED",
    "META_EMBEDDED",
    "META_EMBED_QUEUED",
    "META_ORIGIN",
    "META_REEMBEDDING",
    "META_SEQ",
    "META_SUBJECT",
    "META_TASKS",
    "META_UPDATED",
    "META_VECTOR_DIMS",
    "META_VECTOR_FORM",
    "META_VECTOR_GENERATION",
    "META_VECTOR_MODEL",
    "NO_EVENT",
    "OPEN_ARTIFACT",
    "PENDING_MARK",
    "PUSH_CONFIG",
    "PUSH_EVENTS",
    "PUSH_IDS",
    "RAN",
    "STATE",
    "STATUS",
    "TASK_FIELDS",
    "WAITING",
    "WAITING_JOB",
    "task_field",
]

# -- the tasks hash: '<tid><suffix>' --------------------------------------------------------
STATE = ":st"  # the task's state
STATUS = ":s"  # its status json (sealed)
ARTIFACTS = ":a"  # its artifacts, a json array (items sealed)
MESSAGES = ":m"  # the seqs of its messages, "1,2,5"
METADATA = ":md"  # the client's task metadata (sealed)
AGENT_METADATA = ":xmd"  # what the agent's last run reported (sealed)
OPEN_ARTIFACT = ":pa"  # the artifact a run is streaming, as it stands (sealed)
ATTEMPT = ":att"  # the attempt that owns the task's run
MARK = ":mk"  # '<artifacts length>|<seqs length>' when that attempt began (its rollback)
JOB = ":job"  # the run's job: a stream entry, or one of the marks below
RAN = ":ran"  # the seq of the last message whose run settled
WAITING = ":w"  # seqs of messages waiting for the task's run, "6,7"
WAITING_JOB = ":wj:"  # '<tid>:wj:<seq>': the job fields of a waiting message's run
PUSH_IDS = ":pn"  # the ids of its webhooks, "a,b"
PUSH_CONFIG = ":pn:"  # '<tid>:pn:<id>': one webhook's config json
PUSH_EVENTS = ":pe"  # how many events its webhooks were told of
LOGGED = ":lg"  # '1' once a reader has followed the task: its changes go to its event log
# Not a field: what a task's events are sealed as (bound to the task, like its fields).
EVENTS_SEAL = ":ev"

# A task's fields as a read of the whole task takes them (their order is what it unpacks).
TASK_FIELDS = (STATUS, ARTIFACTS, MESSAGES, METADATA, AGENT_METADATA)

# Values of JOB that are not stream entries: the run is queued on a cluster in a second step
# ('pending:<seq>'), or by this process's in-process queue ('local:<seq>').
PENDING_MARK = "pending:"
LOCAL_MARK = "local:"

# -- the context's meta hash --------------------------------------------------------------
META_CREATED = "created"
META_UPDATED = "updated"
META_SEQ = "seq"  # the last message's seq
META_TASKS = "tasks"  # how many tasks it holds
META_ORIGIN = "origin"  # the messageId that opened it
META_SUBJECT = "subj"  # what the context is about, bound by its first message (sealed)
META_BYTES = "bytes"  # stored messages, replies and artifacts (the bytes quota)
META_EMBED_QUEUED = "embq"
META_EMBEDDED = "embd"
META_VECTOR_MODEL = "vmodel"
META_VECTOR_DIMS = "vdim"
META_VECTOR_FORM = "vfmt"  # 's': sealed frames
META_VECTOR_GENERATION = "vgen"
META_REEMBEDDING = "vre"


# -- the entries of the job streams (jobs, embeddings, outbox, push deliveries) -------------
ENTRY_JOB = "job"  # the job: ids only, json naming its context (``t``, ``u``, ``c``)
ENTRY_SEQ = "seq"  # the seq of the message it is about
ENTRY_FORGET = "forget"  # an outbox forget job's memory ids, "a,b"

# -- the entries of a task's event stream (``event_log.py``) -------------------------------
EVENT_KIND = "k"  # EVENT_STATUS or EVENT_ARTIFACT
EVENT_DATA = "d"  # its json (sealed like the task)
EVENT_STATUS = "s"  # a status (sealed as the task's STATUS field)
EVENT_ARTIFACT = "a"  # an artifact update (sealed as EVENTS_SEAL)
# The id of a snapshot taken when the log held no event (what came after it is all news).
NO_EVENT = "0-0"


def task_field(task_id: str, suffix: str) -> str:
    """A task's field of the tasks hash, e.g. ``task_field(tid, STATE)``."""
    return f"{task_id}{suffix}"


# -- a push delivery as the scripts queue it (``notify``; read by ``push/events.py``) -------
DELIVERY_TENANT = "t"
DELIVERY_USER = "u"
DELIVERY_CONTEXT = "c"
DELIVERY_TASK = "k"
DELIVERY_CONFIG = "p"  # the config's id
DELIVERY_NUMBER = "n"  # the task's event count: '<task>.<n>' is the event's id
DELIVERY_KIND = "e"  # DELIVERY_STATUS or DELIVERY_ARTIFACT
DELIVERY_STATE = "s"
DELIVERY_ARTIFACT_ID = "i"
DELIVERY_QUEUED = "q"  # ms
DELIVERY_STATUS = "s"  # the task's state changed
DELIVERY_ARTIFACT = "a"  # an artifact was added

# -- a push config's routing facts, kept clear for ``notify`` (``push_records.py``) ---------
CONFIG_TENANT = "t"
CONFIG_USER = "u"
CONFIG_ARTIFACTS = "a"  # it wants artifact updates
