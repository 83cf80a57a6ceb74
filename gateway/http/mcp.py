"""The MCP endpoint (official ``mcp`` SDK, streamable HTTP at ``/mcp``).

``search_memory`` searches a context the caller owns; with long-term memory on,
``search_long_term_memory`` and ``add_memories`` (the deployment's names) search and add
to the long-term memories of such a context, bound to its subject. The endpoint sits
behind the same authentication middleware as the REST API; the tool reads the
caller from the request, so it sees only the caller's contexts. Tool results are
plain text a model can read.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pydantic_core
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.transport_security import TransportSecuritySettings
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS, INVALID_REQUEST, PARSE_ERROR
from mcp_types.jsonrpc import jsonrpc_message_adapter
from pydantic import ValidationError
from starlette.requests import Request
from starlette.routing import BaseRoute, Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gateway.agents.base import LongTermTools
from gateway.errors import ContentTypeNotSupportedError, GatewayError
from gateway.http.responses import JSONResponse, error_response
from gateway.models import SearchHit
from gateway.principal import Principal
from gateway.search_mode import Consistency, Mode
from gateway.service.memories import MemoryService
from gateway.service.search import SearchService
from gateway.validation import JsonInt

__all__ = ["mcp_endpoint", "render_hits"]

MAX_TOP_K = 50


def render_hits(hits: Sequence[SearchHit], mode: str = "") -> str:
    """Hits as numbered, delimited lines of data (never instructions)."""
    if not hits:
        return "No matching messages in this context."
    ranked = f" ({mode} ranking)" if mode else ""
    lines = [f"{len(hits)} matching message(s), best first{ranked}:"]
    for n, hit in enumerate(hits, 1):
        text = " ".join(hit.text.split())
        lines.append(f"{n}. [score {hit.score:.3f}, messageId {hit.message_id}] {text}")
    return "\n".join(lines)


class _Server(MCPServer):
    """The SDK's server, answering without quoting the caller's input: an unknown tool is a
    JSON-RPC error (the SDK would log its name), invalid arguments are named, not shown."""

    tool_names: frozenset[str] = frozenset({"search_memory"})

    async def call_tool(self, name: str, arguments: dict[str, Any], context: Any = None) -> Any:
        if name not in self.tool_names:
            raise MCPError(INVALID_PARAMS, "Unknown tool")
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as exc:
            if not isinstance(exc.__cause__, ValidationError):
                raise
            fields = sorted({".".join(map(str, e["loc"])) for e in exc.__cause__.errors()})
            raise ToolError(f"Invalid arguments: {', '.join(fields)}") from exc.__cause__


def _rpc_error(code: int, message: str) -> JSONResponse:
    body = {"jsonrpc": "2.0", "id": None, "error": {"code": code, "message": message}}
    return JSONResponse(body, status_code=400)


class _Guard:
    """What the SDK gets: JSON bodies holding one JSON-RPC message. Checked here because the
    SDK's own answers quote the input."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        media = request.headers.get("content-type", "").partition(";")[0].strip().lower()
        if media != "application/json":
            error = ContentTypeNotSupportedError("MCP requests must be application/json")
            await error_response(error)(scope, receive, send)
            return
        body = await request.body()
        try:
            message = pydantic_core.from_json(body)
            # Strict: the SDK's own (lax) reading would take `true` for an error code.
            jsonrpc_message_adapter.validate_python(message, strict=True, by_name=False)
        except ValidationError:
            await _rpc_error(INVALID_REQUEST, "Invalid JSON-RPC message")(scope, receive, send)
            return
        except ValueError:
            await _rpc_error(PARSE_ERROR, "Parse error")(scope, receive, send)
            return
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)


def _memory_tools(server: _Server, memories: MemoryService) -> None:
    """The long-term memory tools, bound to the named context's (tenant, user, subject)."""
    assert memories.longterm is not None
    o = memories.longterm.defaults
    server.tool_names = server.tool_names | {o.search_tool_name, o.add_tool_name}

    async def bound(ctx: Context, context_id: str) -> LongTermTools:
        request = ctx.request_context.request
        assert request is not None, "served over HTTP only"
        try:
            return await memories.tools_for(request.scope["state"]["principal"], context_id)
        except GatewayError as exc:
            raise ToolError(exc.message) from None

    @server.tool(
        name=o.search_tool_name,
        description=(
            "Search the long-term memories about the subject of a context you own (facts "
            "remembered from earlier conversations). Arguments: contextId, query, top_k "
            "(1-50, default 5). Returns a numbered list."
        ),
    )
    async def search_long_term(contextId: str, query: str, ctx: Context, top_k: JsonInt = 5) -> str:
        return await (await bound(ctx, contextId)).search(query, top_k)

    @server.tool(
        name=o.add_tool_name,
        description=(
            "Remember facts for later conversations about the subject of a context you own. "
            "Arguments: contextId, text."
        ),
    )
    async def add_memories(contextId: str, text: str, ctx: Context) -> str:
        return await (await bound(ctx, contextId)).add(text)


def mcp_endpoint(
    search: SearchService,
    security: TransportSecuritySettings,
    memories: MemoryService | None = None,
) -> tuple[MCPServer, list[BaseRoute]]:
    server = _Server(
        name="gateway",
        instructions="Search what was said earlier in a conversation (a context) you own.",
    )
    if memories is not None and memories.longterm is not None:
        _memory_tools(server, memories)

    @server.tool(
        name="search_memory",
        description=(
            "Search the messages of a conversation context by meaning and by words. Arguments: "
            "contextId (the context to search), query (what to look for), topK (1-50, "
            "default 5), mode (hybrid: meaning and words fused, the default; vector: meaning "
            "only; text: words only), consistency (eventual: what is embedded now, the "
            "default; wait: first wait, briefly, until the context's latest messages are "
            "embedded, to find a message just sent)."
        ),
    )
    async def search_memory(
        contextId: str,
        query: str,
        ctx: Context,
        topK: JsonInt = 5,
        mode: Mode = "hybrid",
        consistency: Consistency = "eventual",
    ) -> str:
        request = ctx.request_context.request
        assert request is not None, "served over HTTP only"
        principal: Principal = request.scope["state"]["principal"]
        if not 1 <= topK <= MAX_TOP_K or not query.strip():
            raise ToolError("topK must be between 1 and 50, and query must not be empty")
        try:
            found = await search.search(
                principal, contextId, query, topK, mode=mode, consistency=consistency
            )
        except GatewayError as exc:
            raise ToolError(exc.message) from None
        return render_hits(found.hits, found.mode)

    app = server.streamable_http_app(
        streamable_http_path="/mcp",
        stateless_http=True,
        json_response=True,
        transport_security=security,
    )
    # Stateless with JSON answers: POST is the whole protocol (no GET stream, no session
    # to DELETE); other methods get the REST binding's 405.
    (route,) = (r for r in app.routes if isinstance(r, Route) and r.path == "/mcp")
    return server, [Route("/mcp", endpoint=_Guard(route.app), methods=["POST"])]
