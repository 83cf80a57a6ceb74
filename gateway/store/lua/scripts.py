"""Every script of the gateway, registered once per client (``Scripts``): each field names
its script (the name tracing gives the spans of the EVALSHAs that run it)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from redis.commands.core import AsyncScript

from gateway.store.lua import (
    context,
    limits,
    longterm,
    push,
    registry,
    rotation,
    run,
    streams,
    update,
    vectors,
)
from gateway.store.lua import send as send_

__all__ = ["Scripts"]


@dataclass(frozen=True)
class Scripts:
    send: AsyncScript
    begin_run: AsyncScript
    update: AsyncScript
    cancel: AsyncScript
    scrub: AsyncScript
    add_vectors: AsyncScript
    rewrite_vectors: AsyncScript
    reset_vectors: AsyncScript
    remember: AsyncScript
    ledger: AsyncScript
    record_job: AsyncScript
    rate: AsyncScript
    use_api_key: AsyncScript
    snapshot: AsyncScript
    push_config: AsyncScript
    take_pushes: AsyncScript
    lead: AsyncScript
    resign: AsyncScript
    leave: AsyncScript
    drop_idle: AsyncScript
    forget_dead: AsyncScript
    create_agent: AsyncScript
    read_agent: AsyncScript
    replace_agent: AsyncScript
    swap_fields: AsyncScript
    swap_string: AsyncScript
    swap_log: AsyncScript

    @classmethod
    def register(cls, client: Any) -> Scripts:
        return cls(
            send=client.register_script(send_.SEND),
            begin_run=client.register_script(run.BEGIN_RUN),
            update=client.register_script(update.UPDATE),
            cancel=client.register_script(context.CANCEL),
            scrub=client.register_script(context.SCRUB),
            add_vectors=client.register_script(vectors.ADD_VECTORS),
            rewrite_vectors=client.register_script(vectors.REWRITE_VECTORS),
            reset_vectors=client.register_script(vectors.RESET_VECTORS),
            remember=client.register_script(longterm.REMEMBER),
            ledger=client.register_script(longterm.LEDGER),
            record_job=client.register_script(run.RECORD_JOB),
            rate=client.register_script(limits.RATE),
            use_api_key=client.register_script(limits.USE_API_KEY),
            snapshot=client.register_script(context.SNAPSHOT),
            push_config=client.register_script(push.PUSH_CONFIG),
            take_pushes=client.register_script(push.TAKE_PUSHES),
            lead=client.register_script(streams.LEAD),
            resign=client.register_script(streams.RESIGN),
            leave=client.register_script(streams.LEAVE),
            drop_idle=client.register_script(streams.DROP_IDLE),
            forget_dead=client.register_script(streams.FORGET_DEAD),
            create_agent=client.register_script(registry.CREATE_AGENT),
            read_agent=client.register_script(registry.READ_AGENT),
            replace_agent=client.register_script(registry.REPLACE_AGENT),
            swap_fields=client.register_script(rotation.SWAP_FIELDS),
            swap_string=client.register_script(rotation.SWAP_STRING),
            swap_log=client.register_script(rotation.SWAP_LOG),
        )
