"""The protocol client for the coordinator's host API (``/internal/v1``, see PROTOCOL.md).

One method per endpoint. Each returns the parsed JSON answer (``claim`` returns ``None`` on
``204``, an ``Assignment`` otherwise) or raises one of ``agent/answers.py``'s exceptions.

This module does not retry (httpx itself retries nothing here): every retry, with its backoff and
jitter, goes through ``agent/retry.py``. Status names and limits come from ``wire``.
Credentials travel only in the ``Authorization`` header of each request; they are never part
of a URL, an exception message or a ``repr``.
"""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager
from typing import Any
from urllib.parse import quote

import httpx
from pydantic import SecretStr

from agent.answers import Assignment, MalformedAnswer, TransientError, decode_answer, no_answer
from wire import ResultStatus

DEFAULT_TIMEOUT = httpx.Timeout(10.0)
# A claim waits up to wait_s on the server; its read timeout is wait_s plus this margin.
CLAIM_TIMEOUT_MARGIN_S = 10.0


def _segment(value: str) -> str:
    return quote(value, safe=":._-")


class CoordinatorClient(AbstractAsyncContextManager["CoordinatorClient"]):
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
            raise no_answer(method, exc, f"{self._http.base_url}{path}") from None
        return decode_answer(method, response)


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
        answer: dict[str, Any] = await self._client.request(
            "PUT", f"{self._prefix}/heartbeat", self._token, json={"devices": devices, "agent": agent}
        )
        return answer

    def _long_poll_timeout(self, wait_s: int) -> httpx.Timeout:
        """The client's timeouts with the read one lengthened by a long poll's ``wait_s``."""
        base = self._client.timeout
        read = None if base.read is None else base.read + wait_s + CLAIM_TIMEOUT_MARGIN_S
        return httpx.Timeout(connect=base.connect, read=read, write=base.write, pool=base.pool)

    async def claim(self, claim_id: str, wait_s: int) -> Assignment | None:
        """``POST .../claim?wait_s=N``: one assignment, or ``None`` when none came in time.

        Send the same ``claim_id`` again after a ``TransientError``: the coordinator then returns
        the assignment it may already have handed to the lost response."""
        answer = await self._client.request(
            "POST",
            f"{self._prefix}/claim",
            self._token,
            json={"claim_id": claim_id},
            params={"wait_s": wait_s},
            timeout=self._long_poll_timeout(wait_s),
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

    async def renew_many(self, leases: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """``POST .../renewals``: each of ``leases`` (``lease_id``, ``task_id``, ``attempt`` and
        ``progress`` unless ``None``) renewed in one request; each answer, in order, is a single
        renewal's answer with ``status`` 200, or ``status`` 409 and the ``code``."""
        body = [{k: v for k, v in lease.items() if v is not None} for lease in leases]
        answer = await self._client.request("POST", f"{self._prefix}/renewals", self._token, json={"leases": body})
        answers = answer.get("leases") if isinstance(answer, dict) else None
        if (not isinstance(answers, list) or len(answers) != len(leases)
                or not all(isinstance(a, dict) for a in answers)):
            raise MalformedAnswer("renewals answer is not one object per lease")
        return answers

    async def poll_commands(
        self, lease_id: str, *, task_id: str, attempt: int, answers: list[dict[str, Any]], wait_s: int
    ) -> dict[str, Any]:
        """``POST .../leases/{lease_id}/commands?wait_s=N`` (a live session): deliver ``answers``
        and wait up to ``wait_s`` for the next commands; renews the lease, with a renewal's 409s.
        → ``{"commands": [{"command_id", "action"}], "lease_ttl_ms", "lease_expires_at",
        "cancel_requested", "end_requested"}``."""
        answer = await self._client.request(
            "POST",
            f"{self._prefix}/leases/{_segment(lease_id)}/commands",
            self._token,
            json={"task_id": task_id, "attempt": attempt, "answers": answers},
            params={"wait_s": wait_s},
            timeout=self._long_poll_timeout(wait_s),
        )
        if answer is None:  # 204: the coordinator process is stopping; another one answers the next
            raise TransientError("commands poll answered 204 (the coordinator is stopping)", status=204)
        if not isinstance(answer, dict) or not isinstance(answer.get("commands", []), list):
            raise MalformedAnswer("commands answer is not an object with a list of commands")
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
        next_wanted: bool = False,
    ) -> dict[str, Any]:
        """``POST .../results``: idempotent, so the identical report may be sent again.

        ``retryable`` (a ``failed`` run that was not the task's fault) is sent only when true:
        the coordinator then requeues the task as ``attempt + 1`` while attempts remain. The
        answer's ``task_status`` says what the task became. ``next_wanted`` sends ``"next":
        true`` (eager dispatch): the answer's ``next_assignment`` is then the device's next
        assignment, already under its lease, or ``None``."""
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
        if next_wanted:
            body["next"] = True
        answer: dict[str, Any] = await self._client.request("POST", f"{self._prefix}/results", self._token, json=body)
        return answer

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
