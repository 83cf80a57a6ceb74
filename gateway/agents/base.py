"""What an agent is given, what it may report, and the protocol every backend follows."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from gateway.search_mode import Consistency, Mode

__all__ = [
    "Agent",
    "AgentRequest",
    "AgentSkill",
    "AgentUpdate",
    "ArtifactChunk",
    "ArtifactUpdate",
    "ContextHistory",
    "ContextSearch",
    "MetadataUpdate",
    "RecalledMemory",
    "ReplyUpdate",
    "StatusUpdate",
]

JSON = Mapping[str, Any]


class ContextHistory(Protocol):
    """The context's messages before this one (user and agent, up to the configured window),
    loaded only when an agent asks for them."""

    @property
    def count(self) -> int: ...

    async def load(self) -> Sequence[JSON]:
        """The messages, oldest first, as A2A v0.3.0 Message JSON."""
        ...


class ContextSearch(Protocol):
    """Search over the run's context: hits ``{messageId, taskId, score, text}``, ranked by
    ``mode`` (``hybrid``, ``vector`` or ``text``, see ``gateway.context_memory.ranking``);
    with ``consistency`` ``wait``, once the context's queued messages are embedded (up to a
    bound, see ``gateway.search_mode``)."""

    async def __call__(
        self,
        query: str,
        top_k: int,
        mode: Mode = "hybrid",
        consistency: Consistency = "eventual",
    ) -> list[dict[str, Any]]: ...


@dataclass(frozen=True)
class RecalledMemory:
    """Long-term memories recalled for one run: the lines, and the delimited block to
    inject. ``inject_as`` "message" puts the block before the user's message;
    "instructions" appends it to the system prompt. Text that already holds ``header``
    holds a block, and gets no second one."""

    lines: tuple[str, ...]
    block: str
    inject_as: str
    header: str
    ids: tuple[str, ...] = ()  # the memories' Cortadel ids (provenance; never content)


class LongTermTools(Protocol):
    """The long-term memory tools of one run, bound to its context's (tenant, user,
    subject): the model names only a query or a text, never whose memories. Each answers
    with the text the model is given (a failure included)."""

    @property
    def search_name(self) -> str: ...

    @property
    def add_name(self) -> str: ...

    async def search(self, query: str, top_k: int) -> str: ...

    async def add(self, text: str) -> str: ...


@dataclass(frozen=True)
class AgentRequest:
    """One run: the user's message plus the context the gateway hands over.

    ``message`` and ``referenced_tasks`` are A2A v0.3.0 JSON objects (Message, Task…)
    exactly as stored.
    """

    task_id: str
    context_id: str
    message: JSON
    history: ContextHistory
    referenced_tasks: Sequence[JSON]
    recalled: Sequence[str] = ()
    memory: RecalledMemory | None = None
    # The client's acceptedOutputModes (empty: no preference).
    accepted_output_modes: Sequence[str] = ()
    # Search of this context's memory (None when context memory is off).
    search: ContextSearch | None = None
    # The long-term memory tools (None unless the agent's memory.tools is on).
    long_term: LongTermTools | None = None


@dataclass(frozen=True)
class StatusUpdate:
    """The task moves to ``state``; ``text`` becomes the status message when given."""

    state: str
    text: str | None = None


@dataclass(frozen=True)
class ArtifactUpdate:
    parts: Sequence[JSON]
    name: str | None = None


@dataclass(frozen=True)
class ArtifactChunk:
    """A piece of an artifact produced bit by bit (tokens), stored and sent to stream
    readers at once. ``append`` False begins a new artifact, True adds ``parts`` to the one
    begun last (adjacent text is joined in the stored artifact); ``last`` closes it. An
    artifact still open when the run ends is stored as it stands."""

    parts: Sequence[JSON]
    name: str | None = None
    append: bool = True
    last: bool = False


@dataclass(frozen=True)
class ReplyUpdate:
    """An agent message appended to the task's history (``metadata`` on the message)."""

    parts: Sequence[JSON]
    metadata: JSON | None = None


@dataclass(frozen=True)
class MetadataUpdate:
    """Keys merged into the task's metadata (e.g. token usage, a remote task's ids)."""

    metadata: JSON


AgentUpdate = StatusUpdate | ArtifactUpdate | ArtifactChunk | ReplyUpdate | MetadataUpdate


@dataclass(frozen=True)
class AgentSkill:
    id: str
    name: str
    description: str
    tags: Sequence[str] = field(default_factory=tuple)

    def to_json(self) -> dict[str, Any]:
        """As an A2A AgentSkill (and as the registry lists it)."""
        return {"id": self.id, "name": self.name, "description": self.description,
                "tags": list(self.tags)}  # fmt: skip


class Agent(Protocol):
    """An agent backend. Optional attributes the runtime reads when present:
    ``memory_options`` (overrides of the long-term memory options, camelCase),
    ``uses_recall`` (False: skip long-term recall, e.g. for a proxy to another agent) and
    ``run_policy`` (``enqueue``, ``reject`` or ``interrupt``: what a message continuing a task
    whose run is under way does, unless the message says)."""

    id: str
    name: str
    description: str
    version: str
    input_modes: Sequence[str]
    output_modes: Sequence[str]
    skills: Sequence[AgentSkill]

    def run(self, request: AgentRequest) -> AsyncIterator[AgentUpdate]:
        """Yield updates; the last StatusUpdate yielded decides the task's final state."""
        ...
