"""A fake OpenAI-compatible chat-completions server.

``FakeLLM(replies)`` answers each request with the next reply: a string is the model's message
content, an int is an HTTP error status. The same object backs an ``httpx.MockTransport``
(``transport()``) and a real HTTP server on 127.0.0.1 (``serve()``), and records every request.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx


class FakeLLM:
    def __init__(self, replies: list[str | int]) -> None:
        self.replies = list(replies)
        self.requests: list[dict[str, Any]] = []  # {"path", "headers", "body"}
        self._lock = threading.Lock()

    def handle(self, path: str, headers: dict[str, str], raw_body: bytes) -> tuple[int, bytes]:
        with self._lock:
            self.requests.append({"path": path, "headers": headers, "body": json.loads(raw_body)})
            reply: str | int = self.replies.pop(0) if self.replies else 500
        if isinstance(reply, int):
            return reply, b'{"error": {"message": "fake failure"}}'
        completion = {
            "id": "chatcmpl-fake",
            "object": "chat.completion",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": reply}, "finish_reason": "stop"}],
        }
        return 200, json.dumps(completion).encode()

    def transport(self) -> httpx.MockTransport:
        def respond(request: httpx.Request) -> httpx.Response:
            headers = {key.lower(): value for key, value in request.headers.items()}
            status, body = self.handle(request.url.path, headers, request.content)
            return httpx.Response(status, content=body, headers={"content-type": "application/json"})

        return httpx.MockTransport(respond)

    @contextmanager
    def serve(self) -> Iterator[str]:
        """Yield the base URL (``http://127.0.0.1:PORT/v1``) of a real server, stopped on exit."""
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length", "0")))
                headers = {key.lower(): value for key, value in self.headers.items()}
                status, payload = fake.handle(self.path, headers, body)
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, format: str, *args: Any) -> None:
                pass  # keep test output clean

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        # A short poll interval so shutdown() returns quickly at the end of a test.
        thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
        thread.start()
        try:
            yield f"http://127.0.0.1:{server.server_address[1]}/v1"
        finally:
            server.shutdown()
            server.server_close()
            thread.join()
