"""/mcp: the Model Context Protocol server LLM agents drive sessions through (PROTOCOL.md, "MCP:
sessions for agents"), on the official SDK's low-level ``Server`` and its Streamable HTTP session
manager, mounted in the coordinator's app by ``endpoint.py`` (which loads this module on the
first request).

Stateless: the manager keeps no session between requests (``stateless_http``), and each answer is
one JSON body (``json_response``), so any coordinator process answers any request and nothing is
held open. Every request is authenticated before the SDK reads a byte of it, by the operator API's
own code (``Authenticator.operator``): a missing, bad, expired or revoked token raises the
``Unauthorized`` that the app's error boundary answers with the contract's ``401`` (throttled
like every refused credential), on every process from the next request after a revocation. The
operator is left in the request's ASGI scope, where the SDK hands it to the tool call.

A tool names the operator route whose scope it needs; outside the token's scopes, or failing in
any way the contract names, it answers a tool error whose text starts with the contract's code
(``insufficient_scope: …``), never a protocol error. Anything unexpected is logged once, like the
boundary does, and answered ``internal`` with the request id.

The SDK's DNS-rebinding check (Host and Origin headers) is off: it guards servers that trust a
browser's ambient credentials, and /mcp trusts only a bearer token, which a page on another origin
never has. Its request bodies are bounded by ``COORDINATOR_MAX_BODY_BYTES`` like every other.
"""

from __future__ import annotations

import functools
import logging
from typing import Any

from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel.server import Server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from mcp_types import (
    CallToolRequestParams,
    CallToolResult,
    ListToolsResult,
    PaginatedRequestParams,
    TextContent,
)
from mcp_types import Tool as McpTool
from pydantic import BaseModel
from starlette.requests import Request
from starlette.types import Scope

from coordinator import __version__
from coordinator.api.auth import Operator, access_for
from coordinator.api.boundary import request_id
from coordinator.api.context import Context
from coordinator.api.routes import ENDPOINTS
from coordinator.errors import ApiError, Internal, NotFound, error_for_exception, redis_unavailable
from coordinator.mcp.endpoint import OPERATOR
from coordinator.mcp.tools import TOOLS, Call, Tool

log = logging.getLogger("coordinator.mcp")

INSTRUCTIONS = (
    "Tether pools phones on many hosts. Find a device with list_devices, start_session on it (or on any "
    "device matching labels), then observe and act (tap, type_text, swipe, press_key, launch_app) with the "
    "session_id; every action answers with the screen and its elements. end_session when done: an idle "
    "session ends by itself after its idle timeout. submit_task and get_task run whole goals or workflows "
    "on the device's own agent."
)


def _scopes() -> dict[tuple[str, str], tuple[str, str | None]]:
    """Each operator route's (scope, own_scope), by (method, path): the route table's word."""
    return {(e.method, e.path): (e.scope, e.own_scope) for e in ENDPOINTS if e.scope is not None}


def tool_error(error: ApiError) -> CallToolResult:
    """A failure as the model reads it: the contract's code first, then its words and details."""
    message = f"{error.code}: {error.message}"
    if error.details is not None:
        message += f" (details: {error.details})"
    return CallToolResult(content=[TextContent(type="text", text=message)], is_error=True)


@functools.cache
def _input_schema(arguments: type[BaseModel]) -> dict[str, Any]:
    """A tool's arguments as JSON Schema, made once per process: pydantic's generation costs some
    4 ms a model, 45 ms an app, which every in-process coordinator would pay again (the tests
    build thousands). Nothing changes the schema it returns."""
    return arguments.model_json_schema()


class Tools:
    """The tools' list and calls, for the SDK's ``Server``."""

    def __init__(self, ctx: Context, tools: tuple[Tool, ...] = TOOLS) -> None:
        self._ctx = ctx
        self._tools = {tool.name: tool for tool in tools}
        self._scopes = _scopes()
        unknown = [t.name for t in tools if t.route not in self._scopes]
        if unknown:  # each tool stands for an operator route of the table, whose scope it needs
            raise ValueError(f"tools naming no operator route of the table: {unknown}")
        self._listed = ListToolsResult(tools=[
            McpTool(name=t.name, description=t.description, input_schema=_input_schema(t.arguments))
            for t in tools])

    async def list_tools(self, request: ServerRequestContext[Any], params: PaginatedRequestParams | None
                         ) -> ListToolsResult:
        return self._listed

    async def call_tool(self, request: ServerRequestContext[Any], params: CallToolRequestParams) -> CallToolResult:
        scope: Scope = request.request.scope if isinstance(request.request, Request) else {}
        operator = scope.get(OPERATOR)
        if not isinstance(operator, Operator):  # the endpoint authenticates every request first
            return tool_error(Internal("no authenticated operator"))
        tool = self._tools.get(params.name)
        if tool is None:
            return tool_error(NotFound(f"no tool {params.name[:64]!r}; the tools are {', '.join(self._tools)}"))
        try:
            access_for(operator, *self._scopes[tool.route])
            args = tool.parse(params.arguments)
            result = await tool.run(Call(self._ctx, operator), args)
        except ApiError as exc:
            return tool_error(exc)
        except Exception as exc:  # the tool's boundary: a tool error, never a protocol error
            rid = request_id(scope)
            error = error_for_exception(exc, rid)
            if redis_unavailable(exc):
                log.warning("mcp %s: Redis unavailable (%s)", tool.name, type(exc).__name__)
            else:
                log.error("mcp %s, request %s: unexpected %s", tool.name, rid, type(exc).__name__, exc_info=exc)
            return tool_error(error)
        return result


def session_manager(ctx: Context) -> StreamableHTTPSessionManager:
    """The SDK's stateless Streamable HTTP manager of the tools, for ``endpoint.py``, which
    authenticates each request first and runs the manager."""
    tools = Tools(ctx)
    server: Server[Any] = Server("tether", version=__version__, instructions=INSTRUCTIONS,
                                 on_list_tools=tools.list_tools, on_call_tool=tools.call_tool)
    return StreamableHTTPSessionManager(
        app=server, stateless=True, json_response=True,
        security_settings=TransportSecuritySettings(enable_dns_rebinding_protection=False),
        max_request_body_size=ctx.settings.max_body_bytes,
    )
