"""Worker processes for `serve` (``WEB_CONCURRENCY``): gunicorn's arbiter with uvicorn-worker's
worker, each worker running our server (`coordinator.serve.server`).

gunicorn binds the listening socket once, forks the workers, forwards SIGTERM to them, replaces
any that dies, and halts with status 3 when a worker cannot start (Redis unreachable at its
lifespan, ...). The worker is uvicorn-worker's ``UvicornWorker`` (uvicorn's own
``uvicorn.workers`` is deprecated since 0.30) with two changes that our stated requirements need:

- its protocol is ``HeadLimitedProtocol`` (head size and time limits, through ``CONFIG_KWARGS``);
- its ``run`` (gunicorn's worker entry point) serves with our ``Server``, which answers waiting
  polls ``204`` as soon as SIGTERM arrives and exits 0, on the plain sockets inside gunicorn's
  listener wrappers (so a stop closes each once, without an error line). Tried with the stock worker (uvicorn's
  ``Server``), the SIGTERM tests of tests/e2e/test_workers.py and test_server_limits.py got
  ``500`` for every waiting poll: held for the graceful timeout, then cancelled.

Not kept from the supervisor this replaced: a delay between restarts of a worker that keeps
dying after it started (gunicorn replaces it at once). A worker that cannot start still stops
gunicorn, with status 3, so a crash at start does not spin.

Logs: gunicorn's and uvicorn's records go through the root logger, so ``configure_logging``'s
format (JSON lines included) covers every process.
"""

from __future__ import annotations

import logging
import signal
import sys
from collections.abc import Callable
from typing import Any, ClassVar

from gunicorn.app.base import BaseApplication
from gunicorn.arbiter import Arbiter
from gunicorn.errors import HaltServer
from gunicorn.glogging import Logger
from starlette.applications import Starlette
from uvicorn_worker import UvicornWorker

from coordinator.serve.server import GRACEFUL_TIMEOUT_S, Server, head_limited_protocol

# Workers still running this long past their graceful timeout after SIGTERM are killed by the
# arbiter: their cut-off requests' answers and the lifespan's shutdown take well under it.
STOP_MARGIN_S = 5
# uvicorn's default keep-alive, as one process serves without gunicorn (gunicorn's is 2 s).
KEEP_ALIVE_S = 5


class TetherWorker(UvicornWorker):
    """uvicorn-worker's worker, serving the app with our `Server` and protocol class."""

    CONFIG_KWARGS: ClassVar[dict[str, Any]] = {
        **UvicornWorker.CONFIG_KWARGS,
        "timeout_graceful_shutdown": GRACEFUL_TIMEOUT_S,
        # The app never reads the client's address (see server.run).
        "proxy_headers": False,
        "access_log": False,
    }

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # uvicorn-worker hands uvicorn's error logger gunicorn's handlers and stops it there;
        # ours has none (`RootLogger`), so let the records reach the root's.
        logging.getLogger("uvicorn.error").propagate = True

    def run(self) -> None:
        app: Starlette = self.wsgi
        self.config.app = app
        # Waiting polls and feed watchers are ended at the signal, instead of holding the stop.
        server = Server(self.config, on_exit=app.state.stopping)
        # gunicorn's quick stop (its SIGINT) sends SIGQUIT: stop gracefully all the same.
        signal.signal(signal.SIGQUIT, server.handle_exit)
        # The plain sockets inside gunicorn's wrappers: uvloop closes a listener it was given as
        # a wrapper through its own handle first, and the wrapper's close then logged "Error
        # while closing socket [Errno 9] Bad file descriptor" in every worker at every stop.
        server.run(sockets=[getattr(s, "sock", s) for s in self.sockets])
        if not server.started:
            sys.exit(Arbiter.WORKER_BOOT_ERROR)


def worker_class(header_timeout_s: float, graceful_timeout_s: int = GRACEFUL_TIMEOUT_S) -> type[TetherWorker]:
    """The worker class for ``header_timeout_s`` (uvicorn builds one protocol per connection
    from a class alone, so the timeout lives in the class) and ``graceful_timeout_s``."""
    protocol = head_limited_protocol(header_timeout_s)

    class Worker(TetherWorker):
        CONFIG_KWARGS: ClassVar[dict[str, Any]] = {
            **TetherWorker.CONFIG_KWARGS, "http": protocol, "timeout_graceful_shutdown": graceful_timeout_s,
        }

    return Worker


class RootLogger(Logger):
    """gunicorn's logger without handlers of its own: its records go through the root logger."""

    def setup(self, cfg: Any) -> None:
        super().setup(cfg)
        for logger in (self.error_log, self.access_log):
            logger.handlers = []
            logger.propagate = True


class _Application(BaseApplication):
    """gunicorn configured here rather than from its command line; each worker builds its own
    app (Redis pool, wake-up listener, reaper) after the fork."""

    def __init__(self, build_app: Callable[[], Starlette], options: dict[str, Any]) -> None:
        self._build_app = build_app
        self._options = options
        super().__init__()

    def load_config(self) -> None:
        for name, value in self._options.items():
            self.cfg.set(name, value)

    def load(self) -> Starlette:
        return self._build_app()


def run_workers(count: int, build_app: Callable[[], Starlette], *, host: str, port: int,
                header_timeout_s: float, graceful_timeout_s: int = GRACEFUL_TIMEOUT_S) -> int:
    """Serve ``build_app()`` with ``count`` gunicorn workers on ``host:port`` until SIGTERM or
    SIGINT; the exit status (0 once every worker stopped; 3 if a worker could not start)."""
    options = {
        "bind": [f"[{host}]:{port}" if ":" in host else f"{host}:{port}"],
        "workers": count,
        "worker_class": worker_class(header_timeout_s, graceful_timeout_s),
        "logger_class": RootLogger,
        "graceful_timeout": graceful_timeout_s + STOP_MARGIN_S,
        "keepalive": KEEP_ALIVE_S,
        "proc_name": "tether-coordinator",
        # gunicorn's control socket (gunicornc) is at one fixed path per user: several
        # coordinators on one machine would take it from each other.
        "control_socket_disable": True,
    }
    try:
        _Application(build_app, options).run()
    except SystemExit as exit_:  # the arbiter leaves this way
        return exit_.code if isinstance(exit_.code, int) else int(exit_.code is not None)
    except HaltServer as halt:
        # When several workers fail to boot at once, the arbiter, halting for the first, reaps
        # the next while it stops and raises its HaltServer out of the halt itself.
        return int(halt.exit_status)
    return 0
