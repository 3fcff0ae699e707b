"""The agent's own log lines of one run, kept in memory (bounded) to upload as its ``log.txt``.

A run sets itself as the current ``RunLog`` (a context variable) while it runs; tasks it starts
(its renewal, its uploads) inherit it. One handler on the ``agent`` logger appends every record
logged in such a context to that run's log, so concurrent runs on other devices never mix. Lines
are formatted as the agent's stderr formats them (UTC here, as the coordinator's times are). No
secret reaches a log line in the first place (DESIGN.md), so none reaches this one.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

MAX_BYTES = 256 * 1024  # the newest lines are kept; a run's end is what explains it
MAX_LINE_CHARS = 4000  # one traceback may be long, but not the whole budget

_CURRENT: ContextVar[RunLog | None] = ContextVar("tether_run_log", default=None)


class RunLog:
    """A header line, then the newest lines whose UTF-8 size fits in ``max_bytes``."""

    def __init__(self, header: str, *, max_bytes: int = MAX_BYTES) -> None:
        self._header = header
        self._max_bytes = max_bytes
        self._lines: deque[tuple[str, int]] = deque()
        self._bytes = 0
        self._dropped = 0

    def add(self, line: str) -> None:
        if len(line) > MAX_LINE_CHARS:
            line = line[: MAX_LINE_CHARS - 1] + "…"
        size = len(line.encode("utf-8")) + 1
        self._lines.append((line, size))
        self._bytes += size
        while self._bytes > self._max_bytes and len(self._lines) > 1:
            _, dropped = self._lines.popleft()
            self._bytes -= dropped
            self._dropped += 1

    def text(self) -> bytes:
        lines = [self._header]
        if self._dropped:
            lines.append(f"[{self._dropped} earlier line(s) dropped: this log keeps its last {self._max_bytes} bytes]")
        lines.extend(line for line, _ in self._lines)
        return ("\n".join(lines) + "\n").encode("utf-8")

    @contextmanager
    def capturing(self) -> Iterator[RunLog]:
        """While inside (and in tasks started inside), the agent's log lines also come here."""
        _install()
        token = _CURRENT.set(self)
        try:
            yield self
        finally:
            _CURRENT.reset(token)


class _RunLogHandler(logging.Handler):
    def emit(self, record: logging.LogRecord) -> None:
        run = _CURRENT.get()
        if run is None:
            return
        try:
            run.add(self.format(record))
        except Exception:  # noqa: BLE001 - a handler never raises: logging's handleError reports it
            self.handleError(record)


def _formatter() -> logging.Formatter:
    formatter = logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
    formatter.converter = time.gmtime
    return formatter


_HANDLER = _RunLogHandler()
_HANDLER.setFormatter(_formatter())


def _install() -> None:
    logger = logging.getLogger("agent")
    if _HANDLER not in logger.handlers:
        logger.addHandler(_HANDLER)
