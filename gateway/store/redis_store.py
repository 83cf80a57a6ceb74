"""The store: every read and write of a user's contexts and tasks, over one Redis client.

``Store`` is composed of one part per aggregate: what they share (``store_base.py``: the
client, the scripts, the sealing of content), the second steps of writes on a cluster
(``store_cluster.py``), sends (``store_sends.py``), runs (``store_runs.py``), task reads
(``store_tasks.py``) and contexts (``store_contexts.py``). The records its callers pass
and get are importable from here.

Redis exceptions become ``StoreUnavailableError`` through ``translate.translated``. Content
(messages, status, artifacts, metadata) is sealed on its way in and opened on its way out
(``sealing.py``): nothing above the store sees ciphertext, nothing below it plaintext.
"""

from __future__ import annotations

from gateway.store.store_base import RunInputs
from gateway.store.store_contexts import ContextOps
from gateway.store.store_runs import RunOps, TaskUpdate, UpdateResult
from gateway.store.store_sends import OnBusy, Queueing, RunQueue, SendOps, SendWrite, StoredSend
from gateway.store.store_tasks import TaskReads

__all__ = [
    "OnBusy",
    "Queueing",
    "RunInputs",
    "RunQueue",
    "SendWrite",
    "Store",
    "StoredSend",
    "TaskUpdate",
    "UpdateResult",
]


class Store(SendOps, RunOps, TaskReads, ContextOps):
    """Every read and write of gateway state but those of the stores beside it (jobs,
    agents, keys, audit, rate limits, push, memory)."""
