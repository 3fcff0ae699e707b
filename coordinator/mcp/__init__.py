"""/mcp, the Model Context Protocol server for LLM agents: ``endpoint`` (mounted in the app,
authenticated as the operator API is, the SDK loaded on its first request), ``server`` (the SDK's
stateless session manager and the tools' list and calls), ``tools`` (each a thin call into the operator API's
functions), ``screens`` (a screen and its elements as a model reads them)."""

from __future__ import annotations
