"""Contexts filled through the store's own API rather than HTTP, for sizes that sending
message by message would make slow: the cost tests' large contexts and the benchmark's."""

from __future__ import annotations

import uuid
from collections.abc import Sequence

import orjson

from gateway.principal import Principal
from gateway.store.redis_store import SendWrite, Store


async def store_messages(
    store: Store,
    principal: Principal,
    cid: str,
    texts: Sequence[str],
    *,
    new_context: bool = True,
    embed: bool = False,
) -> list[int]:
    """One completed task per text in context ``cid``, holding the user's message as a send
    stores it; their seqs. ``new_context``: the first text starts the context (else it is
    there already). ``embed``: each message queued for embedding, its text handed over as a
    serving process's send hands it to its indexer."""
    seqs = []
    for i, text in enumerate(texts):
        tid = str(uuid.uuid4())
        message = {
            "kind": "message",
            "role": "user",
            "messageId": f"{cid}-{i}",
            "contextId": cid,
            "taskId": tid,
            "parts": [{"kind": "text", "text": text}],
        }
        result = await store.send(
            principal,
            SendWrite(
                context_id=cid,
                task_id=tid,
                continuing=False,
                new_context=new_context and i == 0,
                message_id=f"{cid}-{i}",
                digest="d",
                message_json=orjson.dumps(message),
                metadata_json=b"",
                status_json=b'{"state":"completed"}',
                reference_ids=(),
                job_json=orjson.dumps(
                    {"t": principal.tenant, "u": principal.user, "a": "echo", "c": cid, "k": tid}
                )
                if embed
                else b"",
                embed=embed,
                embed_text=text if embed else "",
            ),
        )
        seqs.append(result.seq)
    return seqs
