"""An agent backed by any OpenAI-compatible Chat Completions endpoint (OpenAI, Azure
OpenAI, vLLM, Ollama, LiteLLM), through the official ``openai`` SDK.

The prompt is built by ``prompt.build_messages``. With context memory on, the model may
call ``search_memory`` in a bounded tool loop; a failing tool call becomes a tool message,
not a crash. The SDK retries 429 and 5xx with backoff (``maxRetries``); a timeout, an
unreachable or refusing endpoint, or a refusal by the model ends the task ``failed`` with
a safe message. Token usage goes to the task's metadata.

Unless the entry's ``stream`` is false, each call streams: the answer's text goes out as
artifact chunks as the model produces it (the stored artifact is their concatenation),
and the call's tool calls, refusal and usage are read from the finished stream. A JSON
answer (the client accepts only JSON) is not streamed: it is parsed whole.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Sequence
from typing import Any

import httpx2
import orjson
from openai import APIConnectionError, APIStatusError, APITimeoutError, AsyncOpenAI

from gateway.a2a import accepts_any
from gateway.agents.base import (
    AgentRequest,
    AgentUpdate,
    ArtifactChunk,
    ArtifactUpdate,
    LongTermTools,
    MetadataUpdate,
    ReplyUpdate,
    StatusUpdate,
)
from gateway.agents.key_env import KeyEnvPolicy
from gateway.agents.prompt import build_messages
from gateway.agents.registered import RegisteredAgent
from gateway.agents.specs import AgentEntry, OpenAIConfig
from gateway.genai_spans import answered, chat_span
from gateway.outbound import Allowlist, OutboundRefused
from gateway.search_mode import CONSISTENCIES, MODES

__all__ = ["OpenAIAgent"]

log = logging.getLogger("gateway.agents")

SEARCH_TOOL = {
    "type": "function",
    "function": {
        "name": "search_memory",
        "description": "Search this conversation's earlier messages by meaning and by words.",
        "parameters": {
            "type": "object",
            "properties": {
                "query": {"type": "string", "description": "What to look for."},
                "topK": {"type": "integer", "minimum": 1, "maximum": 20, "default": 5},
                "mode": {
                    "type": "string",
                    "enum": list(MODES),
                    "default": "hybrid",
                    "description": "hybrid: meaning and words fused; vector: meaning only; "
                    "text: words only (names, codes, numbers).",
                },
                "consistency": {
                    "type": "string",
                    "enum": list(CONSISTENCIES),
                    "default": "eventual",
                    "description": "eventual: what is embedded now; wait: first wait, briefly, "
                    "until this conversation's latest messages are embedded.",
                },
            },
            "required": ["query"],
            "additionalProperties": False,
        },
    },
}
_MODES = " | ".join(f'"{m}"' for m in MODES)
_ARGUMENTS = (
    f"arguments must be {{query: string, topK?: integer, mode?: {_MODES}, consistency?: "
    + " | ".join(f'"{c}"' for c in CONSISTENCIES)
    + "}"
)


def long_term_tools(search_name: str, add_name: str) -> list[dict[str, Any]]:
    """The long-term memory tools, as the model is offered them."""
    return [
        {
            "type": "function",
            "function": {
                "name": search_name,
                "description": "Search long-term memory: facts remembered from earlier "
                "conversations about this subject. Returns a numbered list.",
                "parameters": {
                    "type": "object",
                    "properties": {
                        "query": {"type": "string", "description": "What to look for."},
                        "top_k": {"type": "integer", "minimum": 1, "maximum": 50, "default": 5},
                    },
                    "required": ["query"],
                    "additionalProperties": False,
                },
            },
        },
        {
            "type": "function",
            "function": {
                "name": add_name,
                "description": "Remember facts for later conversations about this subject.",
                "parameters": {
                    "type": "object",
                    "properties": {"text": {"type": "string", "description": "The facts."}},
                    "required": ["text"],
                    "additionalProperties": False,
                },
            },
        },
    ]


TIMEOUT_TEXT = "The model did not answer in time."
UNREACHABLE_TEXT = "The model endpoint could not be reached."
REFUSED_TEXT = "The model declined to answer."
NOT_ALLOWED_TEXT = "The model endpoint is not allowed by the gateway's outbound allowlist."
NO_KEY_TEXT = "The model endpoint's API key is not configured."


def _status_text(status: int) -> str:
    return f"The model endpoint refused the request (status {status})."


def _wants_json(accepted: Sequence[str]) -> bool:
    """JSON output only when the client accepts JSON and not plain text."""
    return (
        bool(accepted)
        and not accepts_any(["text/plain"], accepted)
        and accepts_any(["application/json"], accepted)
    )


class _TenantOpenAI(AsyncOpenAI):
    """The SDK's client with nothing of the gateway's environment. The SDK would take
    OPENAI_ORG_ID, OPENAI_PROJECT_ID, OPENAI_ADMIN_KEY and OPENAI_CUSTOM_HEADERS from it and
    send them along, here to a base URL a tenant chose."""

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.organization = self.project = self.admin_api_key = self.webhook_secret = None
        self._custom_headers = {}
        self._ambient_authorizations = frozenset()


class OpenAIAgent(RegisteredAgent):
    def __init__(
        self,
        entry: AgentEntry,
        config: OpenAIConfig,
        allowlist: Allowlist,
        http: httpx2.AsyncClient,
        key_env: KeyEnvPolicy,
    ) -> None:
        super().__init__(entry)
        self._entry, self._config = entry, config
        self._allowlist, self._http, self._key_env = allowlist, http, key_env

    def _api_key(self) -> str | None:
        if self._config.apiKey is None and self._config.apiKeyEnv is None:
            return "unused"  # local servers (Ollama, vLLM) take any key; the SDK needs one
        return self._config.key(self._key_env)

    async def run(self, request: AgentRequest) -> AsyncIterator[AgentUpdate]:
        config = self._config
        try:
            await self._allowlist.check(config.baseUrl)
        except OutboundRefused:
            yield StatusUpdate("failed", NOT_ALLOWED_TEXT)
            return
        key = self._api_key()
        if key is None:
            yield StatusUpdate("failed", NO_KEY_TEXT)
            return
        client = _TenantOpenAI(
            base_url=config.baseUrl,
            api_key=key,
            timeout=config.timeoutSeconds,
            max_retries=config.maxRetries,
            http_client=self._http,
        )
        history = await request.history.load() if request.history.count else ()
        messages = build_messages(
            system_prompt=self._entry.systemPrompt,
            history=history,
            referenced=request.referenced_tasks,
            message=request.message,
            memory=request.memory,
            history_budget=config.historyTokenBudget,
            max_file_chars=config.maxFileChars,
        )
        json_out = _wants_json(request.accepted_output_modes)
        usage = {"promptTokens": 0, "completionTokens": 0, "totalTokens": 0, "calls": 0}
        answer: list[str | None] = [None]
        text: str | None = None
        failure: str | None = None
        streamed = False
        try:
            async for delta in self._converse(client, messages, request, json_out, usage, answer):
                yield ArtifactChunk([{"kind": "text", "text": delta}], "response", streamed)
                streamed = True
            text = answer[0]
            if text is None:
                failure = REFUSED_TEXT
        except APITimeoutError:
            failure = TIMEOUT_TEXT
        except APIStatusError as exc:
            failure = _status_text(exc.status_code)
        except APIConnectionError:
            failure = UNREACHABLE_TEXT
        yield MetadataUpdate({"usage": usage, "model": config.model})
        if failure is not None or text is None:
            log.warning("model call failed", extra={"agent": self.id, "reason": failure})
            yield StatusUpdate("failed", failure or REFUSED_TEXT)
            return
        parts = _reply_parts(text, json_out)
        if streamed:
            yield ArtifactChunk([], "response", append=True, last=True)
        else:
            yield ArtifactUpdate(parts, name="response")
        yield ReplyUpdate(parts)
        yield StatusUpdate("completed")

    def _call_options(
        self, messages: list[dict[str, Any]], json_out: bool, tools: list[dict[str, Any]]
    ) -> dict[str, Any]:
        config = self._config
        kwargs: dict[str, Any] = {"model": config.model, "messages": messages}
        if config.temperature is not None:
            kwargs["temperature"] = config.temperature
        if config.maxOutputTokens is not None:
            kwargs["max_tokens"] = config.maxOutputTokens
        if json_out:
            kwargs["response_format"] = {"type": "json_object"}
        if tools:
            kwargs["tools"] = tools
        return kwargs

    async def _converse(
        self,
        client: AsyncOpenAI,
        messages: list[dict[str, Any]],
        request: AgentRequest,
        json_out: bool,
        usage: dict[str, int],
        answer: list[str | None],
    ) -> AsyncIterator[str]:
        """Yields the text of the answer as it streams; the model's final answer (None: it
        refused) is left in ``answer[0]``."""
        config = self._config
        offered = [SEARCH_TOOL] if request.search is not None else []
        if request.long_term is not None:
            offered += long_term_tools(request.long_term.search_name, request.long_term.add_name)
        tools_left = config.maxToolSteps if offered else 0
        while True:
            kwargs = self._call_options(messages, json_out, offered if tools_left > 0 else [])
            with chat_span("openai", kwargs) as span:
                if config.stream and not json_out:
                    kwargs["stream_options"] = {"include_usage": True}
                    async with client.chat.completions.stream(**kwargs) as events:
                        async for event in events:
                            if event.type == "content.delta" and event.delta:
                                yield event.delta
                        completion: Any = await events.get_final_completion()
                else:
                    completion = await client.chat.completions.create(**kwargs)
                answered(span, completion)
            _count(usage, completion.usage)
            choice = completion.choices[0]
            message = choice.message
            if getattr(message, "refusal", None) or choice.finish_reason == "content_filter":
                answer[0] = None
                return
            calls = message.tool_calls or []
            if not calls or tools_left <= 0:
                answer[0] = message.content or ""
                return
            tools_left -= 1
            messages.append(
                {
                    "role": "assistant",
                    "content": message.content,
                    "tool_calls": [c.model_dump(mode="json", exclude_none=True) for c in calls],
                }
            )
            for call in calls:
                result = await _call_tool(call, request)
                messages.append({"role": "tool", "tool_call_id": call.id, "content": result})


def _count(usage: dict[str, int], reported: Any) -> None:
    usage["calls"] += 1
    if reported is not None:
        usage["promptTokens"] += reported.prompt_tokens or 0
        usage["completionTokens"] += reported.completion_tokens or 0
        usage["totalTokens"] += reported.total_tokens or 0


async def _call_tool(call: Any, request: AgentRequest) -> str:
    """Run one tool call; every failure is reported to the model as the tool's result."""
    function = getattr(call, "function", None)
    tools = request.long_term
    if (
        function is not None
        and tools is not None
        and function.name
        in (
            tools.search_name,
            tools.add_name,
        )
    ):
        return await _call_long_term(function, tools)
    if function is None or function.name != "search_memory" or request.search is None:
        return orjson.dumps({"error": "unknown tool"}).decode()
    try:
        args = orjson.loads(function.arguments or "{}")
        query = str(args["query"])
        top_k = max(1, min(20, int(args.get("topK", 5))))
        mode = args.get("mode", "hybrid")
        consistency = args.get("consistency", "eventual")
        if mode not in MODES or consistency not in CONSISTENCIES:
            raise ValueError("mode")
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
        return orjson.dumps({"error": _ARGUMENTS}).decode()
    try:
        hits = await request.search(query, top_k, mode, consistency)
    except Exception as exc:  # a tool failure is the model's to handle
        return orjson.dumps({"error": f"search failed ({type(exc).__name__})"}).decode()
    return orjson.dumps({"hits": hits}).decode()


async def _call_long_term(function: Any, tools: LongTermTools) -> str:
    """A long-term memory tool's call: its reply is plain text, as the tool words it."""
    try:
        args = orjson.loads(function.arguments or "{}")
        if function.name == tools.add_name:
            return await tools.add(str(args["text"]))
        return await tools.search(str(args["query"]), int(args.get("top_k", 5)))
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
        if function.name == tools.add_name:
            return "Invalid arguments: expected {text: string}."
        return "Invalid arguments: expected {query: string, top_k?: integer 1-50}."


def _reply_parts(text: str, json_out: bool) -> list[dict[str, Any]]:
    if json_out:
        try:
            data = orjson.loads(text)
        except orjson.JSONDecodeError:
            data = None
        if isinstance(data, dict):
            return [{"kind": "data", "data": data}]
    return [{"kind": "text", "text": text}]
