"""The protocol client for the coordinator's host API (``/internal/v1``, see PROTOCOL.md).

One method per endpoint. Each returns the parsed JSON answer (``claim`` returns ``None`` on
``204``) or raises one of::

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

This module does not retry (httpx itself retries nothing here): every retry, with its backoff and
jitter, goes through ``agent/retry.py``. Status names and limits come from ``wire``.
Credentials travel only in the ``Authorization`` header of each request; they are never part
of a URL, an exception message or a ``repr``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import httpx
from pydantic import SecretStr

from wire import ResultStatus, TaskKind

DEFAULT_TIMEOUT = httpx.Timeout(10.0)
# A claim waits up to wait_s on the server; its read timeout is wait_s plus this margin.
CLAIM_TIMEOUT_MARGIN_S = 10.0


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


def _segment(value: str) -> str:
    return quote(value, safe=":._-")


class CoordinatorClient:
    """Owns the HTTP connection pool. ``enroll`` uses an enrollment token; ``host(...)`` gives a
    ``HostClient`` for everything under ``/internal/v1/hosts/{host_id}``."""

    def __init__(
        self,
        base_url: str,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
        timeout: httpx.Timeout = DEFAULT_TIMEOUT,
        user_agent: str = "tether-agent",
    ) -> None:
        self.timeout = timeout
        self._http = httpx.AsyncClient(
            base_url=base_url.rstrip("/"),
            transport=transport,
            timeout=timeout,
            headers={"User-Agent": user_agent, "Accept": "application/json"},
            follow_redirects=False,
        )

    def __repr__(self) -> str:
        return f"CoordinatorClient({str(self._http.base_url)!r})"

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> CoordinatorClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    def host(self, host_id: str, token: SecretStr) -> HostClient:
        return HostClient(self, host_id, token)

    async def enroll(
        self,
        enrollment_token: SecretStr,
        *,
        enrollment_id: str,
        host_token: SecretStr,
        hostname: str,
        labels: dict[str, str],
    ) -> dict[str, Any]:
        """``POST /internal/v1/enroll`` → ``{"host_id": ..., "created": bool}``."""
        body = {
            "enrollment_id": enrollment_id,
            "host_token": host_token.get_secret_value(),
            "hostname": hostname,
            "labels": labels,
        }
        answer = await self.request("POST", "/internal/v1/enroll", enrollment_token, json=body)
        if not isinstance(answer, dict) or not isinstance(answer.get("host_id"), str):
            raise MalformedAnswer("enroll answer carries no host_id")
        return answer

    async def request(
        self,
        method: str,
        path: str,
        credential: SecretStr,
        *,
        json: Any = None,
        params: dict[str, Any] | None = None,
        timeout: httpx.Timeout | None = None,
        content: bytes | None = None,
        content_type: str | None = None,
    ) -> Any:
        """Send one request; return the decoded body (``None`` for 204) or raise. The body is
        ``json``, or raw ``content`` of ``content_type`` (an artifact)."""
        headers = {"Authorization": f"Bearer {credential.get_secret_value()}"}
        if content_type is not None:
            headers["Content-Type"] = content_type
        try:
            response = await self._http.request(
                method,
                path,
                json=json,
                content=content,
                params=params,
                headers=headers,
                timeout=timeout if timeout is not None else self.timeout,
            )
        except httpx.TransportError as exc:  # connect, read, write, timeouts, protocol errors
            url = _url_for_log(exc.request.url) if _has_request(exc) else f"{self._http.base_url}{path}"
            raise TransientError(f"{method} {url}: {_transport_cause(exc)}") from None
        return _decode(method, _url_for_log(response.request.url), response)


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


def _decode(method: str, url: str, response: httpx.Response) -> Any:
    status = response.status_code
    if status == 204:
        return None
    where = f"{method} {url}: HTTP {status}"
    if 200 <= status < 300:
        try:
            return response.json()
        except ValueError:
            raise TransientError(f"{where} with an unreadable body", status=status) from None
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


class HostClient:
    """The host-scoped endpoints, authenticated with this host's token."""

    def __init__(self, client: CoordinatorClient, host_id: str, token: SecretStr) -> None:
        self.host_id = host_id
        self._client = client
        self._token = token
        self._prefix = f"/internal/v1/hosts/{_segment(host_id)}"

    def __repr__(self) -> str:
        return f"HostClient(host_id={self.host_id!r})"

    async def enroll_devices(self, devices: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """``POST .../devices/enroll`` → ``[{"local_id", "driver", "device_id"}]`` in order."""
        answer = await self._client.request(
            "POST", f"{self._prefix}/devices/enroll", self._token, json={"devices": devices}
        )
        enrolled = answer.get("devices") if isinstance(answer, dict) else None
        if not isinstance(enrolled, list) or len(enrolled) != len(devices):
            raise MalformedAnswer("devices/enroll answer does not list every device")
        return enrolled

    async def heartbeat(self, devices: list[dict[str, Any]], agent: dict[str, Any]) -> dict[str, Any]:
        """``PUT .../heartbeat`` with the complete device snapshot."""
        return await self._client.request(
            "PUT", f"{self._prefix}/heartbeat", self._token, json={"devices": devices, "agent": agent}
        )

    async def claim(self, claim_id: str, wait_s: int) -> Assignment | None:
        """``POST .../claim?wait_s=N``: one assignment, or ``None`` when none came in time.

        Send the same ``claim_id`` again after a ``TransientError``: the coordinator then returns
        the assignment it may already have handed to the lost response."""
        base = self._client.timeout
        read = None if base.read is None else base.read + wait_s + CLAIM_TIMEOUT_MARGIN_S
        timeout = httpx.Timeout(connect=base.connect, read=read, write=base.write, pool=base.pool)
        answer = await self._client.request(
            "POST",
            f"{self._prefix}/claim",
            self._token,
            json={"claim_id": claim_id},
            params={"wait_s": wait_s},
            timeout=timeout,
        )
        return None if answer is None else Assignment.from_wire(answer)

    async def renew(
        self, lease_id: str, *, task_id: str, attempt: int, progress: dict[str, Any] | None
    ) -> dict[str, Any]:
        """``POST .../leases/{lease_id}/renew``; ``progress`` omitted when ``None``."""
        body: dict[str, Any] = {"task_id": task_id, "attempt": attempt}
        if progress is not None:
            body["progress"] = progress
        answer = await self._client.request(
            "POST", f"{self._prefix}/leases/{_segment(lease_id)}/renew", self._token, json=body
        )
        if not isinstance(answer, dict):
            raise MalformedAnswer("renew answer is not an object")
        return answer

    async def report_result(
        self,
        *,
        task_id: str,
        attempt: int,
        lease_id: str,
        status: ResultStatus,
        failure_reason: str | None,
        metadata: dict[str, Any],
        retryable: bool = False,
    ) -> dict[str, Any]:
        """``POST .../results``: idempotent, so the identical report may be sent again.

        ``retryable`` (a ``failed`` run that was not the task's fault) is sent only when true:
        the coordinator then requeues the task as ``attempt + 1`` while attempts remain. The
        answer's ``task_status`` says what the task became."""
        body: dict[str, Any] = {
            "task_id": task_id,
            "attempt": attempt,
            "lease_id": lease_id,
            "status": ResultStatus(status).value,
            "failure_reason": failure_reason,
            "metadata": metadata,
        }
        if retryable:
            body["retryable"] = True
        return await self._client.request("POST", f"{self._prefix}/results", self._token, json=body)

    async def upload_artifact(
        self,
        lease_id: str,
        name: str,
        content: bytes,
        *,
        content_type: str,
        task_id: str,
        attempt: int,
        step_index: int | None = None,
    ) -> dict[str, Any]:
        """``PUT .../leases/{lease_id}/artifacts/{name}``: one artifact of the running attempt
        (``201``, or ``200`` for the same bytes again) → ``{"name", "size", "sha256", ...}``."""
        params: dict[str, Any] = {"task_id": task_id, "attempt": attempt}
        if step_index is not None:
            params["step_index"] = step_index
        answer = await self._client.request(
            "PUT",
            f"{self._prefix}/leases/{_segment(lease_id)}/artifacts/{_segment(name)}",
            self._token,
            content=content,
            content_type=content_type,
            params=params,
        )
        if not isinstance(answer, dict):
            raise MalformedAnswer("artifact answer is not an object")
        return answer
