"""What a history is made of: one client operation (``Op``), the ``History`` of one test, and
the ``RecordingTransport`` that records the test's own operator client
(``httpx.Client(transport=...)``); ``iter_ops`` reads back a history written as JSON lines.
Secrets (tokens) are never kept in a record: a history may be written to a file.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import httpx

TERMINAL = frozenset({"succeeded", "failed", "cancelled"})
OPERATOR = "operator"
# Keys whose values are secrets: never kept in a record (a history may be written to a file).
_SECRET_KEYS = frozenset({"token", "host_token"})


@dataclass
class Op:
    """One client operation. ``status`` is None when no answer came from the coordinator (the
    connection failed, or the coordinator died or hung up); ``delivered`` is False when an
    answer came but the client never saw it (the proxy lost it on purpose)."""

    index: int
    side: str  # "operator", or the host id of /internal/v1/hosts/{host_id}/...
    method: str
    path: str
    query: dict[str, str]
    request: Any
    invoked_at: float
    responded_at: float | None = None
    status: int | None = None
    body: Any = None
    delivered: bool = False
    error: str | None = None

    @property
    def answered(self) -> bool:
        """The coordinator gave a definite answer (not a 5xx "try again")."""
        return self.status is not None and self.status < 500

    @property
    def ok(self) -> bool:
        return self.status is not None and 200 <= self.status < 300

    def short(self) -> str:
        answer = "no answer" if self.status is None else f"{self.status} {_brief(self.body)}"
        if self.status is not None and not self.delivered:
            answer += " (lost)"
        when = f"{self.invoked_at:.3f}..{self.responded_at:.3f}" if self.responded_at else f"{self.invoked_at:.3f}.."
        return f"#{self.index} [{self.side}] {self.method} {self.path} {_brief(self.request)} @{when} -> {answer}"


def _brief(value: Any, limit: int = 160) -> str:
    text = "" if value is None else json.dumps(value, sort_keys=True)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _redacted(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: "<redacted>" if k in _SECRET_KEYS else _redacted(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_redacted(v) for v in value]
    return value


def parse_json(raw: bytes) -> Any:
    if not raw:
        return None
    try:
        return _redacted(json.loads(raw))
    except ValueError:
        return {"_raw": raw[:200].decode(errors="replace")}


def side_of(path: str) -> str:
    parts = path.split("/")
    if path.startswith("/internal/v1/hosts/") and len(parts) > 4:
        return parts[4]
    return OPERATOR if path.startswith("/api/") else "host"


class History:
    """The operations of one test, in the order they were invoked; safe to append from threads.
    ``jsonl`` (optional) also receives each finished operation as a JSON line, for debugging."""

    def __init__(self, jsonl: Path | None = None) -> None:
        self._lock = threading.Lock()
        self._ops: list[Op] = []
        self._jsonl = jsonl

    def invoke(self, method: str, url: str, body: bytes | None) -> Op:
        parts = urlsplit(url)
        with self._lock:
            op = Op(index=len(self._ops), side=side_of(parts.path), method=method.upper(), path=parts.path,
                    query=dict(parse_qsl(parts.query)), request=parse_json(body or b""),
                    invoked_at=time.monotonic())
            self._ops.append(op)
        return op

    def respond(self, op: Op, status: int, content: bytes, *, delivered: bool = True,
                at: float | None = None) -> None:
        op.responded_at = time.monotonic() if at is None else at
        op.status, op.body, op.delivered = status, parse_json(content), delivered
        self._write(op)

    def fail(self, op: Op, error: str) -> None:
        op.error = error
        self._write(op)

    def _write(self, op: Op) -> None:
        if self._jsonl is not None:
            with self._lock, self._jsonl.open("a") as out:
                out.write(json.dumps(asdict(op), sort_keys=True) + "\n")

    @property
    def ops(self) -> list[Op]:
        with self._lock:
            return list(self._ops)


class RecordingTransport(httpx.BaseTransport):
    """An httpx transport that records each request of a (blocking) client into ``history``."""

    def __init__(self, history: History, inner: httpx.BaseTransport | None = None) -> None:
        self.history = history
        self._inner = inner or httpx.HTTPTransport()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        op = self.history.invoke(request.method, str(request.url), request.read())
        try:
            response = self._inner.handle_request(request)
            content = response.read()
        except Exception as exc:
            self.history.fail(op, type(exc).__name__)
            raise
        self.history.respond(op, response.status_code, content)
        return response  # read: the client gets the content kept in it

    def close(self) -> None:
        self._inner.close()


def iter_ops(path: Path) -> Iterator[Op]:
    """Read back a history written as JSON lines (``History(jsonl=...)``)."""
    with path.open() as lines:
        for line in lines:
            yield Op(**json.loads(line))
