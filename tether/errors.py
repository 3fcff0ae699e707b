"""The one exception of the operator client.

::

    TetherError                 .code, .status, str() is the message
      code = the contract's error.code   the coordinator answered 4xx/5xx with its JSON error
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
                 details: Any = None) -> None:
        super().__init__(message)
        self.code = code
        self.status = status
        self.message = message
        self.details = details

    def __repr__(self) -> str:
        return f"TetherError(code={self.code!r}, status={self.status!r}, message={self.message!r})"

    @classmethod
    def unreachable(cls, url: str, exc: httpx.TransportError) -> TetherError:
        reason = str(exc) or type(exc).__name__
        return cls("unavailable", f"cannot reach the coordinator at {url}: {reason}")

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
        try:
            error = response.json()["error"]
            return cls(str(error["code"]), str(error.get("message", "")), status=response.status_code,
                       details=error.get("details"))
        except (ValueError, KeyError, TypeError):
            code = _CODES_BY_STATUS.get(response.status_code, "http_error")
            return cls(code, f"HTTP {response.status_code} {response.reason_phrase}".strip(),
                       status=response.status_code)


_CODES_BY_STATUS = {401: "unauthorized", 403: "forbidden", 404: "not_found", 502: "unavailable",
                    503: "unavailable", 504: "unavailable"}
