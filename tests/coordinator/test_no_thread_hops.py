"""Nothing a request runs goes through Starlette's thread pool: Starlette runs a synchronous
endpoint, exception handler or background task there, a thread hop on every call (a claim's
synchronous background callback once cost the lifecycle a sixth of its rate)."""

from __future__ import annotations

import inspect

from coordinator.api.routes import ENDPOINTS
from coordinator.app import create_app
from tests.conftest import make_settings
from tests.support import unique_prefix


def test_every_route_handler_is_a_coroutine_function() -> None:
    synchronous = [f"{e.method} {e.path}" for e in ENDPOINTS if not inspect.iscoroutinefunction(e.handler)]
    assert not synchronous


def test_every_exception_handler_of_the_app_is_a_coroutine_function() -> None:
    app = create_app(make_settings(unique_prefix()))
    handlers = app.exception_handlers
    assert handlers, "routing's 404 and 405 are answered by a handler of the app"
    synchronous = [name for name, handler in handlers.items() if not inspect.iscoroutinefunction(handler)]
    assert not synchronous
