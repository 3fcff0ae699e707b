"""Logging of ``python -m coordinator serve``: one configuration for our loggers and uvicorn's.

``COORDINATOR_LOG_FORMAT=text`` (the default) prints ``time LEVEL logger: message`` lines.
``json`` prints one JSON object a line, for log pipelines that parse each line as it comes (a
Heroku drain, Loki, Datadog): a traceback is a string field of its record's object, never lines
of its own. Fields: ``time`` (RFC 3339 UTC, milliseconds), ``level``, ``logger``, ``message``,
``pid``, ``traceback`` when there is one, and whatever the call passed as ``extra``.

The JSON format also turns on ``REQUESTS_LOGGER``, where ``boundary.RequestBoundary`` writes one
line per request; in text mode that logger is off, and costs one level check per request.
"""

from __future__ import annotations

import logging
import logging.config
import time
from typing import Any, Literal

import orjson

from coordinator.api.boundary import REQUESTS_LOGGER

LogFormat = Literal["text", "json"]

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"

# Loggers of libraries that would write a URL, header or body of ours below WARNING (the mcp SDK:
# a line per /mcp request, and a caller's text with its failures).
QUIET_LIBRARIES = ("httpx", "httpcore", "hpack", "h11", "urllib3", "botocore", "s3transfer", "mcp")

# What every record carries: any other attribute came from `extra=` and becomes a field.
# `color_message` is uvicorn's coloured copy of the message.
_RECORD_ATTRIBUTES = frozenset(vars(logging.makeLogRecord({}))) | {
    "message", "asctime", "taskName", "color_message",
}


class JsonFormatter(logging.Formatter):
    """A record as one line of JSON (newlines in the message or traceback are escaped)."""

    # staticmethod: a builtin never binds to the formatter anyway, but a type checker takes a
    # function assigned in a class for a method.
    converter = staticmethod(time.gmtime)

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": f"{self.formatTime(record, '%Y-%m-%dT%H:%M:%S')}.{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
            "pid": record.process,
        }
        for name, value in vars(record).items():
            if name not in _RECORD_ATTRIBUTES:
                entry.setdefault(name, value)
        if record.exc_info:
            entry["traceback"] = self.formatException(record.exc_info)
        elif record.exc_text:
            entry["traceback"] = record.exc_text
        if record.stack_info:
            entry["stack"] = self.formatStack(record.stack_info)
        # An extra that JSON cannot hold is written as its str(), rather than losing the line.
        return orjson.dumps(entry, default=str, option=orjson.OPT_NON_STR_KEYS).decode()


def logging_config(log_format: LogFormat) -> dict[str, Any]:
    """The ``logging.config.dictConfig`` of the process, uvicorn's loggers included (a new dict
    each call: ``dictConfig`` consumes parts of the one it is given)."""
    formatter: dict[str, Any] = {"()": JsonFormatter} if log_format == "json" else {"format": TEXT_FORMAT}
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"default": formatter},
        "handlers": {
            "stderr": {"class": "logging.StreamHandler", "formatter": "default", "stream": "ext://sys.stderr"},
        },
        "root": {"level": "INFO", "handlers": ["stderr"]},
        "loggers": {
            # No handlers of uvicorn's own (it would print in its format): its records go up to
            # the root's. Its INFO lines (started, shutting down) are noise for every worker, and
            # its access log is off (server.run): RequestBoundary writes a better line.
            "uvicorn": {"level": "WARNING", "handlers": [], "propagate": True},
            REQUESTS_LOGGER: {"level": "INFO" if log_format == "json" else "WARNING"},
            # Libraries that write the URLs, headers or bodies they send at INFO or DEBUG (httpx's
            # "HTTP Request: POST <url>", httpcore's traces): a webhook's URL is its credential,
            # and nothing of ours reaches a log through them. Their warnings carry none of it.
            **{name: {"level": "WARNING"} for name in QUIET_LIBRARIES},
        },
    }


def configure_logging(log_format: LogFormat) -> None:
    """Configure logging for ``log_format``, once, before the server starts: uvicorn is then
    told to leave logging alone (``log_config=None``), so its records take our handler."""
    logging.config.dictConfig(logging_config(log_format))
    # A warning printed by the warnings module would be a line of plain text among the JSON.
    logging.captureWarnings(True)
