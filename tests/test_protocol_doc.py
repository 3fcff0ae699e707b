"""docs/protocol.md, the wire contract as the repository ships it (issue 58: the README cited a
PROTOCOL.md a user could not read), names every route the app serves and every error code of
``wire``: a route or a code added without its words there fails here, saying what to add."""

from __future__ import annotations

import re

import fakeredis
from starlette.routing import Mount, Route

import wire
from coordinator.api import ui
from coordinator.app import create_app
from coordinator.transport.base import PlainTransport
from tests.conftest import make_settings
from tests.support import REPO, unique_prefix

DOC = REPO / "docs" / "protocol.md"
# The dashboard's files are one route each; the document names them together.
UI_FILES = "GET /ui/{file}"


def _routes() -> set[str]:
    """Every route of the app as the document writes it: ``METHOD /path`` (``HEAD`` goes with
    every ``GET``), and a mounted application (``/mcp``) by its path alone."""
    app = create_app(make_settings(unique_prefix()), redis=PlainTransport(fakeredis.FakeAsyncRedis()))
    found: set[str] = set()
    for route in app.routes:
        if isinstance(route, Mount):
            found.add(route.path)
        elif isinstance(route, Route):
            path = UI_FILES.split()[1] if route.path.removeprefix(ui.PREFIX) in ui.ASSETS else route.path
            found |= {f"{method} {path}" for method in route.methods or () if method != "HEAD"}
    return found


def _named(text: str) -> set[str]:
    """What the document names in code spans: `POST /api/v1/tasks`, `lease_expired`, `/mcp`."""
    return {span.strip() for span in re.findall(r"`([^`\n]+)`", text)}


def test_every_route_of_the_app_is_in_docs_protocol_md() -> None:
    named = _named(DOC.read_text())
    missing = sorted(_routes() - named)
    assert not missing, (
        "docs/protocol.md does not describe these routes of the app: " + "; ".join(missing) + ". Add each, "
        "written exactly so in backquotes (`METHOD /path`, or `/path` for a mounted app such as /mcp), with "
        "its principal or scope, its request and response fields, its statuses and error codes, in the "
        "section of its API (host, operator, live sessions, MCP, operations)")


def test_every_error_code_of_wire_is_in_docs_protocol_md() -> None:
    named = _named(DOC.read_text())
    missing = sorted(code.value for code in wire.ErrorCode if code.value not in named)
    assert not missing, (
        "docs/protocol.md does not name these error codes of wire.ErrorCode: " + ", ".join(missing) + ". Add "
        "each in backquotes to its table of error codes (section \"Error codes\"), with its status and "
        "what it means, and to the routes that answer it")


def test_the_document_names_no_route_the_app_does_not_serve() -> None:
    text = DOC.read_text()
    served = _routes()
    documented = {span for span in _named(text) if re.fullmatch(r"(GET|POST|PUT|DELETE|PATCH) /\S*", span)}
    assert documented <= served, f"docs/protocol.md describes routes the app lacks: {sorted(documented - served)}"
