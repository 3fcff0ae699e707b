"""The one exception of the operator client.

::

    TetherError                 .code, .status, str() is the message
      code = the contract's error.code   the coordinator answered 4xx/5xx with its JSON error
                                         (``retry_after_s`` and the message say how long to wait,
                                         when it sent Retry-After: rate_limited, unavailable)
      code = "unavailable"               the coordinator could not be reached (status None)
      code = "invalid_request"           refused before sending: an id outside the id grammar
      code = "ambiguous_id"              a prefix that starts more than one id (details["matches"])
      code = "invalid_response"          an answer that is not the contract's JSON

One type, so a script needs one ``except``; ``code`` is what it branches on. Neither the message
nor the repr ever carries the token: the coordinator never echoes secrets, and the client builds
its own messages from the URL and the failure only.
"""

from __future__ import annotations

from typing import Any

import httpx


class TetherError(Exception):
    def __init__(self, code: str, message: str, *, status: int | None = None,
                 details: Any = None, retry_after_s: int | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.status = status
        self.message = message
        self.details = details
        self.retry_after_s = retry_after_s  # the answer's Retry-After (rate_limited, unavailable)

    def __repr__(self) -> str:
        return f"TetherError(code={self.code!r}, status={self.status!r}, message={self.message!r})"

    @classmethod
    def unreachable(cls, url: str, exc: httpx.TransportError) -> TetherError:
        return cls("unavailable", f"cannot reach the coordinator at {url}: {meaning(exc)}")

    @classmethod
    def ambiguous(cls, what: str, prefix: str, matches: list[str], *, more: bool) -> TetherError:
        shown = matches[:-1] if more else matches
        named = ", ".join(shown) + (" and more" if more else "")
        return cls("ambiguous_id", f"{prefix!r} is the start of more than one {what} id: {named}; "
                   "give more of it", details={"matches": shown})

    @classmethod
    def from_response(cls, response: httpx.Response) -> TetherError:
        """The contract's ``{"error": {"code", "message"}}``; something sensible for a body that
        is not one (a proxy's page, say)."""
        retry_after = _seconds(response.headers.get("retry-after"))
        # How long to wait, when the answer says: a person told "rate_limited" alone cannot tell
        # whether to retry at once or in an hour.
        wait = "" if retry_after is None else f"; try again in {retry_after} s"
        try:
            error = response.json()["error"]
            return cls(str(error["code"]), str(error.get("message", "")) + wait, status=response.status_code,
                       details=error.get("details"), retry_after_s=retry_after)
        except (ValueError, KeyError, TypeError):
            code = _CODES_BY_STATUS.get(response.status_code, "http_error")
            return cls(code, f"HTTP {response.status_code} {response.reason_phrase}".strip() + wait,
                       status=response.status_code, retry_after_s=retry_after)


# What a transport failure means to a person, in the order to test them (subclasses first).
_MEANINGS: tuple[tuple[type[httpx.TransportError], str], ...] = (
    (httpx.ConnectTimeout, "timed out connecting"),
    (httpx.ReadTimeout, "no answer within the timeout"),
    (httpx.WriteTimeout, "timed out sending the request"),
    (httpx.PoolTimeout, "timed out waiting for a free connection"),
    (httpx.RemoteProtocolError, "the connection closed before a whole answer came"),
    (httpx.ReadError, "the connection broke while the answer was read"),
    (httpx.WriteError, "the connection broke while the request was sent"),
    (httpx.UnsupportedProtocol, "not an http:// or https:// URL"),
    (httpx.ProxyError, "the proxy refused the connection"),
)
# The operating system's words for why a connection failed, and ours.
_CONNECT_REASONS = (
    ("refused", "connection refused (is the coordinator running, on that port?)"),
    ("name or service not known", "unknown host name"),
    ("nodename nor servname", "unknown host name"),
    ("name resolution", "unknown host name"),
    ("getaddrinfo failed", "unknown host name"),
    ("no route to host", "no route to host"),
    ("network is unreachable", "network unreachable"),
    ("certificate", "its TLS certificate was not accepted"),
    ("ssl", "the TLS handshake failed"),
)


def meaning(exc: httpx.TransportError) -> str:
    """What the failure means (``connection refused``), never only the exception's class name."""
    text = str(exc)
    if isinstance(exc, httpx.ConnectError):
        lowered = text.lower()
        return next((ours for words, ours in _CONNECT_REASONS if words in lowered), "cannot connect")
    for kind, words in _MEANINGS:
        if isinstance(exc, kind):
            return words
    return text or "the connection failed"


def _seconds(value: str | None) -> int | None:
    """``Retry-After`` in seconds (the coordinator sends seconds, never an HTTP date); None when
    absent or not a number of seconds."""
    if value is None or not value.strip().isdigit():
        return None
    return int(value.strip())


_CODES_BY_STATUS = {401: "unauthorized", 403: "forbidden", 404: "not_found", 502: "unavailable",
                    503: "unavailable", 504: "unavailable"}
