"""A real HTTP endpoint for webhook deliveries, in the test's process: it records every request
(path, headers, raw body) and answers each as the test scripts it (a status, or a hang until
released), so tests see exactly what a receiver sees."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import orjson

from tests.support import wait_until, wait_until_async


@dataclass(frozen=True)
class Received:
    path: str
    headers: dict[str, str]  # names lower-cased
    body: bytes

    @property
    def delivery(self) -> str:
        return self.headers["tether-delivery"]

    def json(self) -> Any:
        return orjson.loads(self.body)


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A sender that hung up on a held request (its attempt timed out, or it was killed): the
        # answer has nowhere to go, and that is what the test made happen.
        pass


# Receivers listen on loopback, which a webhook may reach only when the coordinator lists it
# (COORDINATOR_WEBHOOK_ALLOW_NETWORKS): the settings and the environment that do.
RECEIVERS_NETWORK = "127.0.0.0/8"
ALLOW_RECEIVERS: dict[str, Any] = {"webhook_allow_networks": RECEIVERS_NETWORK}
ALLOW_RECEIVERS_ENV = {"COORDINATOR_WEBHOOK_ALLOW_NETWORKS": RECEIVERS_NETWORK}

HANG = -1  # an answer that holds the request until ``release`` (or the receiver closes)


class Receiver:
    """``answers``: statuses for the requests in arrival order (HANG holds one); once used up,
    every request gets ``default``. ``redirect_to``: the Location of a 3xx answer."""

    def __init__(self, answers: list[int] | None = None, default: int = 200, redirect_to: str = "/elsewhere") -> None:
        self.answers = list(answers or [])
        self.default = default
        self.redirect_to = redirect_to
        self.received: list[Received] = []
        self._lock = threading.Lock()
        self._released = threading.Event()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length") or 0))
                with receiver._lock:
                    receiver.received.append(Received(self.path, {k.lower(): v for k, v in self.headers.items()},
                                                      body))
                    status = receiver.answers.pop(0) if receiver.answers else receiver.default
                if status == HANG:
                    receiver._released.wait(60)
                    status = 200
                self.send_response(status)
                if 300 <= status < 400:
                    self.send_header("location", receiver.redirect_to)
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = _Server(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"

    def release(self) -> None:
        """Answer every held request (200) and stop holding new ones."""
        self._released.set()

    def requests(self, path: str = "/hook") -> list[Received]:
        with self._lock:
            return [r for r in self.received if r.path == path]

    def wait_for(self, count: int, timeout: float = 20.0, path: str = "/hook") -> list[Received]:
        """The first ``count`` requests to ``path``, once that many arrived."""
        return wait_until(lambda: (got := self.requests(path)) and len(got) >= count and got[:count], timeout,
                          what=f"{count} webhook requests")

    async def arrived(self, count: int, timeout: float = 20.0, path: str = "/hook") -> list[Received]:
        """``wait_for`` on the event loop (for a coordinator running in the test's own loop)."""
        return await wait_until_async(lambda: (got := self.requests(path)) and len(got) >= count and got[:count],
                                      timeout, what=f"{count} webhook requests")

    def ids(self) -> list[str]:
        return [r.delivery for r in self.requests()]


@contextmanager
def receiving(answers: list[int] | None = None, **options: Any) -> Iterator[Receiver]:
    receiver = Receiver(answers, **options)
    # A short poll: shutdown() waits for the loop to look, 0.5 s by default, at every test's end.
    thread = threading.Thread(target=receiver.server.serve_forever, kwargs={"poll_interval": 0.02},
                              name="webhook receiver", daemon=True)
    thread.start()
    try:
        yield receiver
    finally:
        receiver.release()
        receiver.server.shutdown()
        receiver.server.server_close()

