"""/mcp, the Model Context Protocol server for LLM agents: ``server`` (the endpoint, stateless,
authenticated as the operator API is), ``tools`` (each a thin call into the operator API's
functions), ``screens`` (a screen and its elements as a model reads them)."""

from __future__ import annotations
