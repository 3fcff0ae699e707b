"""What the coordinator's answers mean to the agent: a claim's ``Assignment``, and every
answer that is not the expected success as one exception of::

    ProtocolError              anything other than the expected success
    ├── TransientError         no answer (connect/read/write error, timeout), 5xx, 408, 429 or
    │                          an unreadable body: sending the identical request again may work
    ├── MalformedAnswer        a 2xx whose body breaks the contract (e.g. an assignment without
    │                          a lease_id): repeating would bring the same body back
    └── Rejected               a definite 4xx answer: repeating the request will not change it
        ├── Unauthorized       401 — credential missing, unknown, expired, revoked, used up
        ├── Forbidden          403 — valid credential, not allowed here
        ├── Conflict           409 — ``.code`` is the contract's code (``lease_expired``, ...)
        └── BadRequest         any other 4xx (``invalid_request``, ``payload_too_large``, ...)

``decode_answer`` turns an httpx response into the parsed JSON or one of these; ``no_answer``
says in words why no answer came (``connection refused``, not a bare ``ConnectError``). Messages
name the method and the whole URL, so a wrong ``HOST_AGENT_URL`` shows, and never a credential.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import httpx

from wire import TaskKind


class ProtocolError(Exception):
    """``code`` and ``details`` are the error answer's ``error.code`` and ``error.details``
    (``{"device_id": ...}`` with ``409 unknown_device``), when it had them."""

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        code: str | None = None,
        details: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.details = details or {}


class TransientError(ProtocolError):
    pass


class MalformedAnswer(ProtocolError):
    pass


class Rejected(ProtocolError):
    pass


class Unauthorized(Rejected):
    pass


class Forbidden(Rejected):
    pass


class Conflict(Rejected):
    pass


class BadRequest(Rejected):
    pass


@dataclass(frozen=True)
class Assignment:
    """One claimed assignment (the ``claim`` answer)."""

    task_id: str
    attempt: int
    lease_id: str
    lease_ttl_ms: int
    device_id: str
    kind: str
    goal: str | None = None
    max_steps: int | None = None
    workflow_name: str | None = None
    workflow_params: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_wire(cls, data: Any) -> Assignment:
        try:
            workflow = data.get("workflow") or {}
            max_steps = data.get("max_steps")
            assignment = cls(
                task_id=_str(data["task_id"]),
                attempt=_int(data["attempt"]),
                lease_id=_str(data["lease_id"]),
                lease_ttl_ms=_int(data["lease_ttl_ms"]),
                device_id=_str(data["device_id"]),
                kind=_str(data.get("kind", TaskKind.GOAL.value)),
                goal=data.get("goal"),
                max_steps=None if max_steps is None else _int(max_steps),
                workflow_name=workflow.get("name") if isinstance(workflow, dict) else None,
                workflow_params=dict(workflow.get("params") or {}) if isinstance(workflow, dict) else {},
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise MalformedAnswer(f"malformed assignment ({type(exc).__name__}: {exc})") from None
        if assignment.lease_ttl_ms <= 0:
            raise MalformedAnswer("malformed assignment (lease_ttl_ms must be positive)")
        return assignment


def _str(value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise ValueError("expected a non-empty string")
    return value


def _int(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError("expected an integer")
    return value


def _has_request(exc: httpx.TransportError) -> bool:
    try:
        exc.request  # noqa: B018 -- a property that raises when the error was raised without one
    except RuntimeError:
        return False
    return True


def _url_for_log(url: httpx.URL) -> str:
    """The whole URL the request went to, so a wrong ``HOST_AGENT_URL`` shows; never user info.
    (No credential travels in a URL: the token is in the ``Authorization`` header.)"""
    return str(url.copy_with(username=None, password=None))


def no_answer(method: str, exc: httpx.TransportError, fallback_url: str) -> TransientError:
    """The error for a request that got no answer (connect, read, write, timeout, protocol), with
    the URL it went to (``fallback_url`` when httpx raised before it had a request) and why."""
    url = _url_for_log(exc.request.url) if _has_request(exc) else fallback_url
    return TransientError(f"{method} {url}: {_transport_cause(exc)}")


def _transport_cause(exc: httpx.TransportError) -> str:
    """Why no answer came, in words: ``connection refused`` rather than a bare ``ConnectError``."""
    text = " ".join(str(exc).split())
    if isinstance(exc, httpx.ConnectError):
        if _refused(exc) or "refused" in text.lower():
            return "connection refused (is the coordinator running, and is this its address?)"
        if "name or service not known" in text.lower() or "nodename nor servname" in text.lower():
            return "cannot resolve the host name"
        return f"cannot connect ({text or type(exc).__name__})"
    if isinstance(exc, httpx.TimeoutException):
        return f"no answer in time ({type(exc).__name__})"
    return f"{type(exc).__name__}{': ' + text if text else ''}"


def _refused(exc: BaseException) -> bool:
    """Whether a ``ConnectionRefusedError`` lies under ``exc`` (httpx words it "All connection
    attempts failed" once it has tried every address)."""
    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        if isinstance(cause, ConnectionRefusedError):
            return True
        seen.add(id(cause))
        cause = cause.__cause__ or cause.__context__
    return False


def _where(method: str, response: httpx.Response) -> str:
    """An error's opening words. Built only for an error: copying the httpx URL takes about 80 µs
    on the bench's machine, a twentieth of a host's CPU per job when every answer paid it (issue 56)."""
    return f"{method} {_url_for_log(response.request.url)}: HTTP {response.status_code}"


def decode_answer(method: str, response: httpx.Response) -> Any:
    """The parsed JSON of a 2xx (``None`` for 204), else the exception its status means."""
    status = response.status_code
    if status == 204:
        return None
    if 200 <= status < 300:
        try:
            return response.json()
        except ValueError:
            raise TransientError(f"{_where(method, response)} with an unreadable body", status=status) from None
    where = _where(method, response)
    code, details = _error_code(response)
    if code:
        where = f"{where} {code}"
        message = _error_message(response)
        if message:
            where = f"{where}: {message}"
    elif status == 404:
        where = f"{where} (not a coordinator's answer: is HOST_AGENT_URL the coordinator's base URL?)"
    if status >= 500 or status in (408, 429):
        raise TransientError(where, status=status, code=code)
    if status == 401:
        raise Unauthorized(where, status=status, code=code)
    if status == 403:
        raise Forbidden(where, status=status, code=code)
    if status == 409:
        raise Conflict(where, status=status, code=code, details=details)
    if 400 <= status < 500:
        raise BadRequest(where, status=status, code=code, details=details)
    raise TransientError(f"{where} (unexpected status)", status=status, code=code)


ERROR_MESSAGE_MAX_CHARS = 200


def _error_message(response: httpx.Response) -> str:
    """The error answer's ``message``, on one line and clipped: it goes into a log line."""
    try:
        message = response.json()["error"]["message"]
    except (ValueError, KeyError, TypeError):
        return ""
    if not isinstance(message, str):
        return ""
    message = " ".join(message.split())
    return message if len(message) <= ERROR_MESSAGE_MAX_CHARS else message[: ERROR_MESSAGE_MAX_CHARS - 1] + "…"


def _error_code(response: httpx.Response) -> tuple[str | None, dict[str, Any] | None]:
    """The error answer's ``code`` (when it is a plain identifier) and ``details`` (when an object)."""
    try:
        error = response.json()["error"]
        code = error["code"]
    except (ValueError, KeyError, TypeError):
        return None, None
    details = error.get("details") if isinstance(error, dict) else None
    return (
        code if isinstance(code, str) and code.isidentifier() else None,
        details if isinstance(details, dict) else None,
    )
