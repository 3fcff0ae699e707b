"""/mcp as the app mounts it: the operator authenticated, then the SDK's Streamable HTTP session
manager (``server.py``), which is loaded on the endpoint's first authenticated request, not as
the process starts.

Why late: importing the SDK and its types costs a process some 1.1 s of CPU, more than the rest
of the coordinator together, and most processes never answer an agent (a lab without one, a
coordinator started for a test). The import runs in a thread, so the event loop goes on serving
hosts meanwhile; requests that come during it wait for the same load. The manager runs in a task
of its own, since its task group must be entered and left by one task, until the app stops.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

from starlette.requests import Request
from starlette.types import Receive, Scope, Send

from coordinator.api.context import Context

if TYPE_CHECKING:
    from mcp.server.streamable_http_manager import StreamableHTTPSessionManager

PATH = "/mcp"
# Where the endpoint leaves the authenticated operator in the request's ASGI scope.
OPERATOR = "tether.mcp.operator"


class McpEndpoint:
    """The ASGI app of ``/mcp``. ``running()`` is entered by the app's lifespan: leaving it stops
    the manager, if a request started it."""

    def __init__(self, ctx: Context) -> None:
        self._ctx = ctx
        self._manager: StreamableHTTPSessionManager | None = None
        self._loading = asyncio.Lock()
        self._stop = asyncio.Event()
        self._runner: asyncio.Task[None] | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        scope[OPERATOR] = await self._ctx.auth.operator(Request(scope, receive))  # before any SDK
        manager = self._manager or await self._start()
        await manager.handle_request(scope, receive, send)

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        try:
            yield
        finally:
            self._stop.set()
            if self._runner is not None:  # a manager that failed to start has said so to its request
                await asyncio.gather(self._runner, return_exceptions=True)

    async def _start(self) -> StreamableHTTPSessionManager:
        async with self._loading:
            if self._manager is None:
                server = await asyncio.to_thread(importlib.import_module, "coordinator.mcp.server")
                manager = server.session_manager(self._ctx)
                started = asyncio.Event()
                runner = asyncio.create_task(self._run(manager, started), name="mcp session manager")
                self._runner = runner
                await started.wait()
                if runner.done():
                    runner.result()  # why it could not start, raised to this request (a 500); the next tries again
                self._manager = manager
        return self._manager

    async def _run(self, manager: StreamableHTTPSessionManager, started: asyncio.Event) -> None:
        try:
            async with manager.run():
                started.set()
                await self._stop.wait()
        finally:
            started.set()  # started or not: the request waiting for it goes on
