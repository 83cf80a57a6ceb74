"""The MCP endpoint (official ``mcp`` SDK, streamable HTTP at ``/mcp``).

One tool, ``search_memory``, searches a context the caller owns. The endpoint sits
behind the same authentication middleware as the REST API; the tool reads the
caller from the request, so it sees only the caller's contexts. Tool results are
plain text a model can read.
"""

from __future__ import annotations

from typing import Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.transport_security import TransportSecuritySettings
from starlette.routing import BaseRoute

from gateway.errors import GatewayError
from gateway.principal import Principal
from gateway.service.search import SearchService

__all__ = ["mcp_endpoint", "render_hits"]

MAX_TOP_K = 50


def render_hits(hits: list[dict[str, Any]]) -> str:
    """Hits as numbered, delimited lines of data (never instructions)."""
    if not hits:
        return "No matching messages in this context."
    lines = [f"{len(hits)} matching message(s), best first:"]
    for n, hit in enumerate(hits, 1):
        text = " ".join(str(hit["text"]).split())
        lines.append(f"{n}. [score {hit['score']:.3f}, messageId {hit['messageId']}] {text}")
    return "\n".join(lines)


def mcp_endpoint(search: SearchService) -> tuple[MCPServer, list[BaseRoute]]:
    server = MCPServer(
        name="gateway",
        instructions="Search what was said earlier in a conversation (a context) you own.",
    )

    @server.tool(
        name="search_memory",
        description=(
            "Search the messages of a conversation context by meaning. Arguments: contextId "
            "(the context to search), query (what to look for), topK (1-50, default 5)."
        ),
    )
    async def search_memory(
        contextId: str,
        query: str,
        ctx: Context,
        topK: int = 5,
    ) -> str:
        request = ctx.request_context.request
        assert request is not None, "served over HTTP only"
        principal: Principal = request.scope["state"]["principal"]
        if not 1 <= topK <= MAX_TOP_K or not query.strip():
            raise ToolError("topK must be between 1 and 50, and query must not be empty")
        try:
            hits = await search.search(principal, contextId, query, topK)
        except GatewayError as exc:
            raise ToolError(exc.message) from None
        return render_hits(hits)

    app = server.streamable_http_app(
        streamable_http_path="/mcp",
        stateless_http=True,
        json_response=True,
        # Callers authenticate with an API key on every request; browsers are not the clients.
        transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
    )
    return server, list(app.routes)
