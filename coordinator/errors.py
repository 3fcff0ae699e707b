"""The few exceptions the service raises, and the one place scripts' failure codes become them.

    ApiError                      -> {"error": {"code", "message"}} with its status
     ├── InvalidRequest    400    invalid_request
     ├── Unauthorized      401    unauthorized (one body for every bad credential)
     ├── Forbidden         403    forbidden
     │    └── InsufficientScope 403 insufficient_scope (details.required: the scope it needs)
     ├── NotFound          404    not_found
     ├── MethodNotAllowed  405    method_not_allowed (with Allow)
     ├── Conflict          409    the contract's conflict codes (lease_expired, result_conflict, ...)
     ├── PayloadTooLarge   413    payload_too_large
     ├── RateLimited       429    rate_limited (a failed credential from a throttled client
     │                            address, coordinator/api/throttle.py), with Retry-After
     ├── Unavailable       503    unavailable (Redis unreachable, loading, busy...), with Retry-After
     └── Internal          500    internal (anything unexpected; logged, never echoed)

``error_for_exception`` maps any exception to one of these (``error_for`` a script's failure
code); ``coordinator/api/boundary.py`` answers and logs it.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import IntEnum
from types import MappingProxyType
from typing import Any, TypeVar

import orjson
from redis import exceptions as redis_errors
from starlette.exceptions import HTTPException

import wire
from wire import ErrorCode


class ApiError(Exception):
    """An error the contract names. Subclasses set their status and code in the class line:
    ``class NotFound(ApiError, status=404, code=ErrorCode.NOT_FOUND)``."""

    status_code = 500
    code: str = ErrorCode.INTERNAL.value
    headers: Mapping[str, str] | None = None

    def __init_subclass__(cls, *, status: int | None = None, code: ErrorCode | None = None) -> None:
        super().__init_subclass__()
        if status is not None:
            cls.status_code = status
        if code is not None:
            cls.code = code.value

    def __init__(self, message: str, *, code: str | None = None, details: Any = None) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        self.details = details

    def body(self) -> dict[str, Any]:
        error: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.details is not None:
            error["details"] = self.details
        return {"error": error}


class InvalidRequest(ApiError, status=400, code=ErrorCode.INVALID_REQUEST): ...
class Forbidden(ApiError, status=403, code=ErrorCode.FORBIDDEN): ...
class NotFound(ApiError, status=404, code=ErrorCode.NOT_FOUND): ...


_Found = TypeVar("_Found")


def found(value: _Found | None, what: str) -> _Found:
    """``value``, or ``NotFound("no such <what>")`` when a read found nothing (None)."""
    if value is None:
        raise NotFound(f"no such {what}")
    return value


class InsufficientScope(Forbidden, code=ErrorCode.INSUFFICIENT_SCOPE):
    """A valid operator credential outside its scopes: ``details.required`` names the scope."""

    def __init__(self, required: str, message: str | None = None) -> None:
        super().__init__(message or f"this credential lacks the {required!r} scope", details={"required": required})


class MethodNotAllowed(ApiError, status=405, code=ErrorCode.METHOD_NOT_ALLOWED): ...
class Conflict(ApiError, status=409): ...  # its code is the conflict's, given when raised
class PayloadTooLarge(ApiError, status=413, code=ErrorCode.PAYLOAD_TOO_LARGE): ...
class RequestTimeout(ApiError, status=408, code=ErrorCode.REQUEST_TIMEOUT): ...
class Internal(ApiError, status=500, code=ErrorCode.INTERNAL): ...


class Unauthorized(ApiError, status=401, code=ErrorCode.UNAUTHORIZED):
    def __init__(self) -> None:
        # Deliberately one message for every case, so a caller learns nothing from it.
        super().__init__("missing, malformed or unknown credential")


class RateLimited(ApiError, status=429, code=ErrorCode.RATE_LIMITED):
    def __init__(self, retry_after_s: int) -> None:
        # One message for every case too: it says no more than the 401 it stands for.
        super().__init__("too many failed credentials from this client address; retry later")
        self.headers = {"Retry-After": str(retry_after_s)}


class Unavailable(ApiError, status=503, code=ErrorCode.UNAVAILABLE):
    headers = MappingProxyType({"Retry-After": "1"})


# Redis answers nothing useful now, but may in a moment: the client should retry.
REDIS_UNAVAILABLE = (
    redis_errors.ConnectionError,  # includes BusyLoadingError and a full connection pool
    redis_errors.TimeoutError,
    redis_errors.ReadOnlyError,
    redis_errors.ClusterDownError,
    redis_errors.MasterDownError,
    redis_errors.TryAgainError,
    redis_errors.SlotNotCoveredError,  # a cluster's slot has no master for now (failing over)
    # A cluster that cannot agree on its map yet (failing over): redirections past redis-py's
    # limit, or no node able to tell which node holds which slot.
    redis_errors.ClusterError,
    redis_errors.RedisClusterException,
)


def redis_busy(exc: BaseException) -> bool:
    """Redis is running another client's script past its busy threshold (``BUSY``): it answers
    every other call with that until the script ends or is killed. redis-py raises it as a plain
    ``ResponseError`` (inside a pipeline, with the pipeline's words before it)."""
    if not isinstance(exc, redis_errors.ResponseError):
        return False
    message = str(exc)
    return message.startswith("BUSY ") or "caused error: BUSY " in message


def redis_unavailable(exc: BaseException) -> bool:
    """Redis answers nothing useful now but may in a moment (``REDIS_UNAVAILABLE``, or busy with
    another client's script): a request gets ``503 unavailable`` with ``Retry-After``, a loop
    logs one line and tries again."""
    return isinstance(exc, REDIS_UNAVAILABLE) or redis_busy(exc)


def error_for_exception(exc: BaseException, request_id: str) -> ApiError:
    """The contract's error for any exception a request raised. ``request_id`` is named in an
    unexpected error's message, so an operator can find its log line; the exception's own text
    is never shown."""
    if isinstance(exc, ApiError):
        return exc
    if isinstance(exc, HTTPException):  # Starlette's routing: no such path, or method
        if exc.status_code == 405:
            return MethodNotAllowed("this method is not allowed on this path")
        if exc.status_code == 404:
            return NotFound("no such path")
        return InvalidRequest(str(exc.detail)) if exc.status_code < 500 else Internal(str(exc.detail))
    if redis_unavailable(exc):
        return Unavailable("the coordinator cannot reach Redis; retry shortly")
    return Internal(f"internal error (request {request_id})")


def device_limit(limit: int) -> Conflict:
    return Conflict(f"a host may have at most {limit} devices", code=ErrorCode.DEVICE_LIMIT.value)


class ScriptError(IntEnum):
    """Failure codes of the Lua scripts: the scripts' table E is generated from it
    (coordinator/state/scripts.py, lua_constants)."""

    REVOKED = -1
    LEASE_NOT_OWNED = -2
    LEASE_EXPIRED = -3
    LEASE_REPLACED = -4
    STALE_ATTEMPT = -5
    RESULT_CONFLICT = -6
    DEVICE_CONFLICT = -7
    UNKNOWN_DEVICE = -8
    DRIVER_CONFLICT = -9
    NOT_FOUND = -10
    TASK_TERMINAL = -11
    ENROLLMENT_CONFLICT = -12
    ENROLLMENT_INVALID = -13
    IDEMPOTENCY_CONFLICT = -14
    NOT_ENROLLED_HOST = -15
    DEVICE_LIMIT = -16
    DEVICE_BUSY = -17
    TOKEN_LIMIT = -18
    NOT_OWNER = -19
    ARTIFACT_CONFLICT = -20
    ARTIFACT_LIMIT = -21
    NO_MATCHING_DEVICE = -22
    TOO_MANY_TASKS = -23
    # A gap before the webhooks' code, so that codes other branches add meanwhile do not collide.
    WEBHOOK_LIMIT = -30
    # live sessions (another gap: codes of other branches may land between)
    NOT_A_SESSION = -40
    SESSION_NOT_RUNNING = -41
    SESSION_ENDED = -42
    TOO_MANY_COMMANDS = -43
    NOT_SESSION_OWNER = -44


_CONFLICT_MESSAGES = {
    ScriptError.LEASE_NOT_OWNED: "this host holds no such lease for this task and attempt",
    ScriptError.LEASE_EXPIRED: "the lease has expired or ended",
    ScriptError.LEASE_REPLACED: "a newer attempt of the task holds the current lease",
    ScriptError.STALE_ATTEMPT: "a newer attempt of the task exists",
    ScriptError.RESULT_CONFLICT: "a different result was already recorded for this attempt",
    ScriptError.DEVICE_CONFLICT: "a device id in the snapshot is owned by another online host",
    ScriptError.UNKNOWN_DEVICE: "a device id in the snapshot is not enrolled to this host",
    ScriptError.DRIVER_CONFLICT: "a device's driver differs from its enrollment",
    ScriptError.TASK_TERMINAL: "the task has already finished",
    ScriptError.ENROLLMENT_CONFLICT: "this enrollment id was used with another host token",
    ScriptError.IDEMPOTENCY_CONFLICT: "this idempotency key was used for a different request",
    ScriptError.DEVICE_LIMIT: "the host would have more devices than COORDINATOR_MAX_DEVICES_PER_HOST",
    ScriptError.DEVICE_BUSY: "the device holds a task; cancel it or let it finish first",
    ScriptError.TOKEN_LIMIT: "as many live operator tokens as COORDINATOR_MAX_OPERATOR_TOKENS allows exist; "
                             "revoke one first",
    ScriptError.ARTIFACT_CONFLICT: "an artifact of this name with other bytes exists for this attempt",
    ScriptError.NO_MATCHING_DEVICE: "no device the matrix's selector matches could run its work now "
                                    "(details.excluded says why each was left out)",
    ScriptError.ARTIFACT_LIMIT: "the task's artifacts would exceed COORDINATOR_MAX_TASK_ARTIFACT_BYTES "
                                "or COORDINATOR_MAX_TASK_ARTIFACTS",
    ScriptError.WEBHOOK_LIMIT: "as many webhooks as a deployment may hold exist; remove one first",
    ScriptError.NOT_A_SESSION: "this task is not a session: it takes no commands",
    ScriptError.SESSION_NOT_RUNNING: "the session is not running yet (details.status says where it is)",
    ScriptError.SESSION_ENDED: "the session has ended",
    ScriptError.TOO_MANY_COMMANDS: f"{wire.SESSION_COMMANDS_WAITING_MAX} commands of this session wait already; "
                                   "wait for their answers",
}


def _left_out(detail: Any) -> list[Any]:
    """The JSON list of left-out devices a script answered with NO_MATCHING_DEVICE; [] for
    anything else (an older script's answer has no detail)."""
    try:
        value = orjson.loads(detail) if isinstance(detail, str | bytes) else None
    except orjson.JSONDecodeError:
        return []
    return value if isinstance(value, list) else []


def error_for(code: int, detail: Any = None) -> ApiError:
    """Turn a script's failure code into the exception the API answers with."""
    failure = ScriptError(code)
    if failure in (ScriptError.REVOKED, ScriptError.ENROLLMENT_INVALID):
        return Unauthorized()
    if failure is ScriptError.NOT_FOUND:
        return NotFound("no such resource")
    if failure is ScriptError.NOT_ENROLLED_HOST:
        return Forbidden("static hosts do not enroll devices")
    if failure is ScriptError.NOT_OWNER:
        return InsufficientScope("control", "without the 'control' scope, a token may cancel (or rerun) only the "
                                            "tasks and runs it created")
    if failure is ScriptError.NOT_SESSION_OWNER:
        return InsufficientScope("admin", "only the token that created a session (or an admin) drives or ends it")
    if failure is ScriptError.TOO_MANY_TASKS:
        return InvalidRequest(f"matrix: a run has at most {wire.MAX_RUN_TASKS} tasks; this matrix makes {detail} "
                              "or more")
    details: dict[str, Any] | None = {"device_id": detail} if isinstance(detail, str) and failure in (
        ScriptError.DEVICE_CONFLICT,
        ScriptError.UNKNOWN_DEVICE,
        ScriptError.DRIVER_CONFLICT,
    ) else None
    if failure is ScriptError.SESSION_NOT_RUNNING:
        details = {"status": detail}
    if failure is ScriptError.NO_MATCHING_DEVICE:
        # The matching devices left out, each with its reason (lua/createRun-1.lua): none, when
        # the selector matches no pooled device at all.
        details = {"excluded": _left_out(detail)}
    return Conflict(_CONFLICT_MESSAGES[failure], code=ErrorCode[failure.name].value, details=details)
