"""The whole Redis keyspace of the gateway.

Every key of one principal shares the hash tag ``{<user tag>}``, so multi-key
scripts are atomic and cluster-safe. The tag is a digest of ``(tenant, user)``:
no user id, whatever characters it holds, can name another principal's keys.

=====================================  ======  ==============================================
key                                    type    holds
=====================================  ======  ==============================================
``gw:{u}:ctxs``                        zset    context id -> last write (ms): the user's index
``gw:{u}:tix``                         hash    task id -> context id
``gw:{u}:orig``                        hash    messageId -> context id, for sends that opened
                                               a context (idempotent retries without contextId)
``gw:{u}:run``                         zset    task id -> when its run was last queued (ms):
                                               the user's tasks with a run queued or under way
                                               (the running-tasks quota)
``gw:{u}:c:<cid>``                     hash    context meta: created, updated, seq, tasks, origin;
                                               embq/embd (embedding queued/done), vdim and
                                               vmodel (the vectors' space), vre (re-embedding),
                                               vgen (the vectors' layout), vfmt ('s': sealed)
``gw:{u}:c:<cid>:items``               list    task ids, oldest first
``gw:{u}:c:<cid>:tasks``               hash    ``<tid>:st`` state, ``<tid>:s`` status json,
                                               ``<tid>:a`` artifacts json array, ``<tid>:m``
                                               message seqs "1,2,5", ``<tid>:md`` metadata; push
                                               configs ``<tid>:pn`` (ids), ``<tid>:pn:<id>``,
                                               ``<tid>:pe`` (event count)
``gw:{u}:c:<cid>:msgs``                hash    seq -> message json (whole context, in order)
``gw:{u}:c:<cid>:mids``                hash    messageId -> "<tid>|<digest>" (idempotency)
``gw:{u}:c:<cid>:ev:<tid>``            stream  the task's events for stream readers, written by the
                                               context scripts (see ``event_log.py``)
``gw:{u}:c:<cid>:push``                zset    Redis Cluster: webhook deliveries a script queued,
                                               until the store moves them to ``gw:{jobs}:push``
``gw:{u}:c:<cid>:vec``                 string  float32 vectors of embedded user messages, appended
                                               (sealed: length-prefixed frames of such rows)
``gw:{u}:c:<cid>:vix``                 string  uint32 message seq of each vector, appended
``gw:{u}:c:<cid>:vbits``               string  bitmap of seqs embedded (a repeated job adds none)
``gw:{u}:c:<cid>:seen``                zset    Cortadel memory id -> when it was last recalled
                                               into this context (dedupe across turns)
``gw:{u}:c:<cid>:ledger``              set     ids of memories Cortadel named for this
                                               context's turns (deleted with it on scrub)
``gw:{u}:ctxs:gone:<sha1(cid)>``       string  "1": the context was scrubbed; a send naming its
                                               id finds no context (expires after the context
                                               retention)
``gw:{u}:c:<cid>:stored:<tid>:<seq>``  string  "1": Cortadel has stored that turn (for a send
                                               that waits for it; expires after 10 minutes)
=====================================  ======  ==============================================

A context owns a fixed number of keys, so refreshing the sliding TTL of all of
them costs O(1) whatever the context holds (a write does it only once the context has lost
1% of its TTL, at most an hour, since the last refresh: ``touch`` in ``lua/prelude.py``).

A tenant's agent registry has a tag of its own, ``{r:<tenant digest>}``:
``gw:{r:<t>}:agents`` (set) lists the ids of its registered agents and
``gw:{r:<t>}:agent:<id>`` (string) holds each entry as JSON; an ephemeral agent's key
has a sliding TTL like a context's.

Global keys share the hash tag ``{jobs}`` (one slot, so they can change together):
``gw:{jobs}`` (stream, consumer group ``runners``) holds queued runs, ids only;
``gw:{jobs}:dead`` holds runs that failed too often; ``gw:{jobs}:embed`` and
``gw:{jobs}:ltm`` (with their ``:dead`` streams) queue embeddings and long-term memory
work (turns to store in Cortadel, memories to delete); ``gw:{jobs}:leader`` names the
process that runs the maintenance sweeps; ``gw:{jobs}:push`` (group ``notifiers``, with its
``:dead`` stream) queues webhook deliveries, ``gw:{jobs}:push:key`` holds the generated key
that signs them when none is configured. Encryption at rest: ``gw:{jobs}:keyring`` (hash)
names the keys the stored data is sealed with, key id -> fingerprint, and
``gw:{jobs}:replicas`` (hash) the keys each live process has (see ``key_registry.py``);
``gw:{jobs}:rotation`` (hash) is where `rotate-data` is. Rate limits:
``gw:{rl:<tenant digest>}:u:<user tag>`` and ``gw:{rl:<tenant digest>}:t`` (strings, a GCRA
arrival time each, expiring when replenished), ``gw:{af}:<address>`` for failed
authentications. Channels: ``gw:ev:<tid>``
carries a task's new state on every change.

Managed API keys share the hash tag ``{apikeys}`` (a key and its indexes change together):
``gw:{apikeys}:k:<id>`` (hash) holds a key's record, ``gw:{apikeys}:ids`` (zset, id ->
creation ms) lists every key and ``gw:{apikeys}:t:<tenant digest>`` a tenant's. The audit
trail is one stream per tenant, ``gw:{au:<tenant digest>}:audit``, and
``gw:{au:-}:audit`` for attempts that never authenticated.

Maintenance and key rotation scan the keyspace: ``USER_CONTEXT_INDEXES`` finds every user's
contexts, ``TAGGED_KEYS`` every key of the gateway's data, and ``CONTEXT_CONTENT``,
``AGENT_ENTRY`` and ``TASK_LOG`` tell the keys rotation seals again.
"""

from __future__ import annotations

import functools
import hashlib
import re
from dataclasses import dataclass

from gateway.principal import Principal

__all__ = [
    "AGENT_ENTRY",
    "API_KEYS",
    "CONTEXT_CONTENT",
    "CONTEXT_KEY_COUNT",
    "DEAD_LETTERS",
    "EMBEDS",
    "EMBEDS_DEAD",
    "EMBEDS_GROUP",
    "EVENTS_GRACE_MS",
    "EVENT_CHANNEL",
    "EVENT_STREAM",
    "GONE",
    "JOBS",
    "JOBS_GROUP",
    "KEYRING",
    "MAINTENANCE_LEADER",
    "OUTBOX",
    "OUTBOX_DEAD",
    "OUTBOX_GROUP",
    "PENDING_PUSHES",
    "PUSH",
    "PUSH_CONTEXTS",
    "PUSH_DEAD",
    "PUSH_GROUP",
    "REPLICAS",
    "REWRITE_DUE",
    "ROTATION",
    "SIGNAL_ARTIFACT",
    "SIGNAL_INTERRUPTED",
    "SIGNAL_NEXT",
    "STOPS_PATTERN",
    "STOP_CHANNEL",
    "TAGGED_KEYS",
    "TASK_LOG",
    "USER_CONTEXT_INDEXES",
    "ContextKeys",
    "TenantAgentKeys",
    "UserKeys",
    "api_key",
    "audit_stream",
    "auth_failure_keys",
    "event_stream",
    "keys_of",
    "rate_keys",
    "tenant_api_keys",
    "user_tag",
]

# A task's changes are published on '<EVENT_CHANNEL><tid>', which a process subscribes to
# only while it follows the task from elsewhere (a stream, a wait for a run in another
# process). What must stop a run wherever it is (a cancel, an interruption) is published on
# '<STOP_CHANNEL><tid>', which every process receives (STOPS_PATTERN).
EVENT_CHANNEL = "gw:ev:"
STOP_CHANNEL = "gw:stop:"
STOPS_PATTERN = f"{STOP_CHANNEL}*"
# What is published there: '<state>|<seq>', or one of these signals (not task states) with
# '|<seq>'. NEXT: the run of message seq settled while later messages waited, and the task
# went on with the next one. INTERRUPTED: a later message superseded the runs of messages up
# to seq (run policy 'interrupt'). ARTIFACT: the run logged artifact events without changing
# the state.
SIGNAL_NEXT = "next"
SIGNAL_INTERRUPTED = "interrupted"
SIGNAL_ARTIFACT = "artifact"
# A task's event stream is '<context meta><EVENT_STREAM><tid>' (in the context's slot).
EVENT_STREAM = ":ev:"
# Redis Cluster: a context's webhook deliveries wait in '<context meta><PENDING_PUSHES>'.
PENDING_PUSHES = ":push"
# A scrubbed context's tombstone is '<the user's contexts><GONE><SHA-1 of the context id>'
# (for the context's retention; named by a digest so the scrubbed id itself is not kept).
GONE = ":gone:"
# How long a settled task's event stream outlives it (unless its context expires first).
EVENTS_GRACE_MS = 300_000
JOBS = "gw:{jobs}"
EMBEDS = "gw:{jobs}:embed"
EMBEDS_DEAD = "gw:{jobs}:embed:dead"
EMBEDS_GROUP = "embedders"
JOBS_GROUP = "runners"
OUTBOX = "gw:{jobs}:ltm"
OUTBOX_DEAD = "gw:{jobs}:ltm:dead"
OUTBOX_GROUP = "memorizers"
# Push notification deliveries (ids only), queued by the scripts that change a task.
PUSH = "gw:{jobs}:push"
PUSH_DEAD = "gw:{jobs}:push:dead"
# Cluster mode: the contexts whose tasks took a webhook (their '<meta>:push' sets), noted
# before the config is written, so maintenance sweeps these rather than the keyspace.
PUSH_CONTEXTS = "gw:{jobs}:push:contexts"
PUSH_GROUP = "notifiers"
# The key that signs webhook requests when no key files are configured (PEM), shared by
# every replica.
PUSH_SIGNING_KEY = "gw:{jobs}:push:key"
DEAD_LETTERS = "gw:{jobs}:dead"
MAINTENANCE_LEADER = "gw:{jobs}:leader"
# When the Redis files are next rewritten (ms), set by the first scrub since the last rewrite.
REWRITE_DUE = "gw:{jobs}:rewrite"
# Encryption at rest: the keys stored data is sealed with (id -> fingerprint), the keys each
# live process has (see key_registry.py), and where `rotate-data` is.
KEYRING = "gw:{jobs}:keyring"
REPLICAS = "gw:{jobs}:replicas"
ROTATION = "gw:{jobs}:rotation"
# Every managed API key (zset, id -> creation ms).
API_KEYS = "gw:{apikeys}:ids"

# The suffix of a user's contexts index.
_CONTEXTS = ":ctxs"
# Scans: every user's contexts index, and every key of the gateway's data (all hash-tagged).
USER_CONTEXT_INDEXES = f"gw:{{*}}{_CONTEXTS}"
TAGGED_KEYS = "gw:{*}:*"
# What key rotation seals again: a context's messages, tasks or vectors (groups: the user's
# prefix, the context id, which), a registered agent's entry, and a task's event log
# (groups: the user's prefix, the context id, the task id).
CONTEXT_CONTENT = re.compile(r"^(gw:\{[^}]*\}):c:([^:]+):(msgs|tasks|vec)$")
AGENT_ENTRY = re.compile(r"^gw:\{r:[^}]*\}:agent:.+$")
TASK_LOG = re.compile(r"^(gw:\{[^}]*\}):c:([^:]+)" + re.escape(EVENT_STREAM) + "(.+)$")


# How many of ``ContextKeys.all()`` belong to the user and context (the rest are global
# streams); the first thirteen take the context's sliding TTL.
CONTEXT_KEY_COUNT = 14


def event_stream(meta: str, task_id: str) -> str:
    """The event stream of a task of the context whose meta key is ``meta``."""
    return f"{meta}{EVENT_STREAM}{task_id}"


def _tenant_digest(tenant: str) -> str:
    return hashlib.blake2b(tenant.encode(), digest_size=12).hexdigest()


def rate_keys(tenant: str, user: str) -> tuple[str, str]:
    """The rate-limit keys of a principal and of its tenant (one hash tag: one script)."""
    digest = _tenant_digest(tenant)
    return f"gw:{{rl:{digest}}}:u:{user_tag(tenant, user)}", f"gw:{{rl:{digest}}}:t"


def auth_failure_keys(address: str, credential: str) -> tuple[str, str]:
    """Failed authentications of one client address, and of one credential (a digest's
    prefix, never the credential) from it; one hash tag: one script."""
    return f"gw:{{af}}:{address}", f"gw:{{af}}:{address}|{credential}"


def api_key(key_id: str) -> str:
    """A managed API key's record (hash)."""
    return f"gw:{{apikeys}}:k:{key_id}"


def tenant_api_keys(tenant: str) -> str:
    """A tenant's managed API keys (zset, id -> creation ms)."""
    return f"gw:{{apikeys}}:t:{_tenant_digest(tenant)}"


@functools.lru_cache(maxsize=4096)
def audit_stream(tenant: str | None) -> str:
    """A tenant's audit trail (stream); None: attempts that never authenticated."""
    if tenant is None:
        return "gw:{au:-}:audit"
    return f"gw:{{au:{_tenant_digest(tenant)}}}:audit"


def user_tag(tenant: str, user: str) -> str:
    """A fixed-width digest naming one principal; length-prefixed so no pair collides."""
    raw = f"{len(tenant)}:{tenant}:{user}".encode()
    return hashlib.blake2b(raw, digest_size=12).hexdigest()


@dataclass(frozen=True, slots=True)
class ContextKeys:
    """The keys of one context, in the order every context script takes them."""

    contexts: str
    task_index: str
    origins: str
    meta: str
    items: str
    tasks: str
    msgs: str
    mids: str
    vectors: str
    vector_seqs: str
    vector_bits: str
    seen: str
    ledger: str
    running: str

    def all(self) -> list[str]:
        """The keys every context script takes: the context's thirteen, the user's running
        tasks, then the streams."""
        return [
            self.contexts,
            self.task_index,
            self.origins,
            self.meta,
            self.items,
            self.tasks,
            self.msgs,
            self.mids,
            self.vectors,
            self.vector_seqs,
            self.vector_bits,
            self.seen,
            self.ledger,
            self.running,
            JOBS,
            EMBEDS,
            OUTBOX,
            PUSH,  # last: the scripts find it as KEYS[#KEYS]
        ]


@dataclass(frozen=True, slots=True)
class UserKeys:
    prefix: str

    @classmethod
    def of(cls, tenant: str, user: str) -> UserKeys:
        return cls(prefix=f"gw:{{{user_tag(tenant, user)}}}")

    @classmethod
    def of_contexts(cls, contexts: str) -> UserKeys:
        """The keys of the user whose contexts index is ``contexts`` (found by a scan)."""
        return cls(prefix=contexts.removesuffix(_CONTEXTS))

    @property
    def contexts(self) -> str:
        return f"{self.prefix}{_CONTEXTS}"

    @property
    def task_index(self) -> str:
        return f"{self.prefix}:tix"

    @property
    def origins(self) -> str:
        return f"{self.prefix}:orig"

    @property
    def running(self) -> str:
        return f"{self.prefix}:run"

    def meta(self, context_id: str) -> str:
        return f"{self.prefix}:c:{context_id}"

    def pending_pushes(self, context_id: str) -> str:
        """Redis Cluster: the context's webhook deliveries waiting to be moved."""
        return f"{self.meta(context_id)}{PENDING_PUSHES}"

    def stored_turn(self, context_id: str, task_id: str, seq: int) -> str:
        """Set once Cortadel has stored the turn (a waiting send polls it)."""
        return f"{self.meta(context_id)}:stored:{task_id}:{seq}"

    def context(self, context_id: str) -> ContextKeys:
        base = self.meta(context_id)
        return ContextKeys(
            contexts=self.contexts,
            task_index=self.task_index,
            origins=self.origins,
            meta=base,
            items=f"{base}:items",
            tasks=f"{base}:tasks",
            msgs=f"{base}:msgs",
            mids=f"{base}:mids",
            vectors=f"{base}:vec",
            vector_seqs=f"{base}:vix",
            vector_bits=f"{base}:vbits",
            seen=f"{base}:seen",
            ledger=f"{base}:ledger",
            running=self.running,
        )


@dataclass(frozen=True, slots=True)
class TenantAgentKeys:
    prefix: str

    @classmethod
    def of(cls, tenant: str) -> TenantAgentKeys:
        return cls(prefix=f"gw:{{r:{_tenant_digest(tenant)}}}")

    @property
    def index(self) -> str:
        return f"{self.prefix}:agents"

    def agent(self, agent_id: str) -> str:
        return f"{self.prefix}:agent:{agent_id}"


def keys_of(principal: Principal) -> UserKeys:
    """The keys of a principal's data (its digest is computed once per recent principal)."""
    return _user_keys(principal.tenant, principal.user)


@functools.lru_cache(maxsize=4096)
def _user_keys(tenant: str, user: str) -> UserKeys:
    return UserKeys.of(tenant, user)
