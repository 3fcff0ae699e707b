"""Request validation: ids, query values and bounded JSON bodies, read as the models of
``coordinator/api/bodies/`` with their errors in the contract's words.

Everything a client sends is checked here before any script runs, so bad input changes nothing.
"""

from __future__ import annotations

import json
import re
from types import UnionType
from typing import Annotated, Any, TypeVar, Union, get_args, get_origin

import orjson
from pydantic import BaseModel, ValidationError
from starlette.requests import Request

import wire
from coordinator.api import bodies, limits
from coordinator.api.bodies import RequestBody
from coordinator.errors import InvalidRequest, PayloadTooLarge


def require_id(value: object, field: str) -> str:
    if not wire.is_valid_id(value):
        raise InvalidRequest(f"{field} must be 1..128 characters of [A-Za-z0-9._:-]")
    return value


async def read_body(request: Request, limit: int) -> bytes:
    """The raw body, refusing more than ``limit`` bytes before reading past it: a declared
    length over it is refused before a byte is read, and a streamed one as soon as it passes it."""
    declared = request.headers.get("content-length")
    if declared is not None:
        try:
            too_large = int(declared) > limit
        except ValueError:
            raise InvalidRequest("invalid Content-Length") from None
        if too_large:
            raise PayloadTooLarge(f"the body exceeds {limit} bytes")
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():  # ClientDisconnect if the client hangs up meanwhile
        size += len(chunk)
        if size > limit:
            raise PayloadTooLarge(f"the body exceeds {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


def _check_depth(value: Any, depth: int) -> None:
    """400 for a container nested past ``wire.MAX_JSON_DEPTH`` (the body object is level 1)."""
    if isinstance(value, dict | list):
        if depth > wire.MAX_JSON_DEPTH:
            raise InvalidRequest(f"JSON is nested deeper than {wire.MAX_JSON_DEPTH} levels")
        for item in value.values() if isinstance(value, dict) else value:
            _check_depth(item, depth + 1)


# Past this size a body is parsed by the standard library: orjson (yyjson underneath) allocates some
# twelve times a large document's size while it parses it (an 8 MiB renewal: 104 MiB), the
# standard library two. Ordinary bodies (COORDINATOR_MAX_BODY_BYTES) stay on orjson.
LARGE_JSON_BYTES = 64 * 1024
# A "\uD800"-style escape: the standard library would accept a lone surrogate, which orjson refuses
# (and could not write back); a large body holding one is parsed by orjson after all.
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89abcdefABCDEF]")


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _loads(raw: bytes) -> Any:
    """``raw`` parsed as orjson parses it (strict UTF-8, no NaN or Infinity, no lone surrogate,
    nesting bounded), in about twice its size for a large one."""
    if len(raw) <= LARGE_JSON_BYTES or _SURROGATE_ESCAPE.search(raw):
        return orjson.loads(raw)
    try:
        return json.loads(raw.decode("utf-8"), parse_constant=_no_constant)
    except (ValueError, RecursionError):  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        raise orjson.JSONDecodeError("not valid JSON", "", 0) from None


def load_object(raw: bytes, *, optional: bool = False, unchecked: tuple[str, ...] = ()) -> dict[str, Any]:
    """The body as a JSON object, at most ``wire.MAX_JSON_DEPTH`` deep. An empty body (no byte at
    all) is ``{}`` when ``optional``; anything else must be a JSON object (white space alone is
    no JSON). Top-level fields named in ``unchecked`` skip the depth check, for a caller that
    judges them itself."""
    if not raw and optional:
        return {}
    try:
        body = _loads(raw)
    except orjson.JSONDecodeError:
        raise InvalidRequest("the body is not valid JSON" if raw else "a JSON object body is required") from None
    if not isinstance(body, dict):
        raise InvalidRequest("the body must be a JSON object")
    # JSON nests no deeper than it has brackets: most bodies have few, and are not walked.
    if raw.count(b"{") + raw.count(b"[") > wire.MAX_JSON_DEPTH:
        for key, value in body.items():
            if key not in unchecked:
                _check_depth(value, 2)
    return body


M = TypeVar("M", bound=BaseModel)


def parse(model: type[M], raw: bytes, *, optional: bool = False, unchecked: tuple[str, ...] = ()) -> M:
    """The body ``raw`` as ``model`` (coordinator/api/bodies/), or ``InvalidRequest`` saying
    what is wrong in the contract's words (``invalid``)."""
    body = load_object(raw, optional=optional, unchecked=unchecked)
    return validate(model, body)


def validate(model: type[M], body: dict[str, Any]) -> M:
    """``body`` (a JSON object) as ``model``."""
    try:
        return model.model_validate(body)
    except ValidationError as exc:
        raise invalid(exc, model) from None


B = TypeVar("B", bound=RequestBody)


async def read(request: Request, model: type[B], limit: int, *, unchecked: tuple[str, ...] = ()) -> B:
    """The request's body, at most ``limit`` bytes, as ``model``."""
    return parse(model, await read_body(request, limit), optional=model.body_optional, unchecked=unchecked)


# -- pydantic's errors in the contract's words ------------------------------------------------

_OBJECT_TYPES = frozenset({"model_type", "model_attributes_type", "dict_type"})
# What each pattern of bodies/values.py means, in words.
_PATTERNS = {
    f"^{wire.ID_PATTERN}$": "must be 1..128 characters of [A-Za-z0-9._:-]",
    bodies.NO_CONTROL: "must not hold control characters",
    bodies.SOME_TEXT: "must hold more than control characters",
}


def invalid(exc: ValidationError, model: type[BaseModel]) -> InvalidRequest:
    """The one translation of a body's ``ValidationError`` into the contract's 400: its first
    error (an unknown field first, the likeliest cause of the others), named by its path
    (``selector.lables``, ``devices[3].driver``). Never the value sent: it may be a secret."""
    errors = exc.errors(include_url=False, include_input=False)
    error = next((e for e in errors if e["type"] == "extra_forbidden"), errors[0])
    kind, loc = error["type"], error["loc"]
    path = _path(loc)
    if kind == "extra_forbidden":
        known = _fields_at(model, loc[:-1])
        return InvalidRequest(f"unknown field {path!r}" + (f" (known: {', '.join(sorted(known))})" if known else ""))
    if kind == "missing":
        return InvalidRequest(f"{path} is required")
    if kind in _OBJECT_TYPES:
        return InvalidRequest(f"{path} must be an object" if path else "the body must be a JSON object")
    if kind == "string_pattern_mismatch" and error.get("ctx", {}).get("pattern") in _PATTERNS:
        return InvalidRequest(f"{path} {_PATTERNS[error['ctx']['pattern']]}")
    if kind == "null":
        return InvalidRequest(f"{path} {error['msg']}")
    if not path:  # a rule between fields (bodies.TaskCreate): its message names them
        return InvalidRequest(error["msg"])
    return InvalidRequest(f"{path}: {error['msg']}")


def _path(loc: tuple[int | str, ...]) -> str:
    """``("tasks", 3, "max_attempts")`` as ``tasks[3].max_attempts``, cut short when long (an
    unknown field's name is the client's, named, not echoed whole)."""
    name = ""
    for part in loc:
        name += f"[{part}]" if isinstance(part, int) else f".{part}" if name else part
    return name if len(name) <= 100 else name[:100] + "…"


def _fields_at(model: type[BaseModel], loc: tuple[int | str, ...]) -> list[str]:
    """The fields of the object at ``loc`` in a body of ``model`` (none if it is no model's)."""
    current: Any = model
    for part in loc:
        current = _inner(current)
        if isinstance(part, int):
            current = next(iter(get_args(current)), None)  # a list's items
        elif isinstance(current, type) and issubclass(current, BaseModel) and part in current.model_fields:
            current = current.model_fields[part].annotation
        else:
            return []
    current = _inner(current)
    return list(current.model_fields) if isinstance(current, type) and issubclass(current, BaseModel) else []


def _inner(annotation: Any) -> Any:
    """An annotation without its ``Annotated`` metadata and the ``None`` of an optional field."""
    while True:
        origin = get_origin(annotation)
        if origin is Annotated:
            annotation = get_args(annotation)[0]
        elif origin is Union or origin is UnionType:
            annotation = next((a for a in get_args(annotation) if a is not type(None)), None)
        else:
            return annotation


def canonical_json(value: Any) -> str:
    """Byte-stable JSON, so equal content compares equal inside the scripts."""
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode()


class Query:
    """A request's query parameters, read with the same rules as a body: 400 for anything
    malformed, nothing else read."""

    def __init__(self, request: Request) -> None:
        self._params = request.query_params

    def id(self, name: str) -> str | None:
        value = self._params.get(name)
        return None if value is None else require_id(value, name)

    def choice(self, name: str, choices: tuple[str, ...]) -> str | None:
        value = self._params.get(name)
        if value is not None and value not in choices:
            raise InvalidRequest(f"{name} must be one of {', '.join(choices)}")
        return value

    def integer(self, name: str, *, default: int, low: int, high: int) -> int:
        raw = self._params.get(name)
        if raw is None:
            return default
        if not raw.isascii() or not raw.isdigit() or not low <= int(raw) <= high:
            raise InvalidRequest(f"{name} must be an integer in [{low}, {high}]")
        return int(raw)

    def limit(self, default: int = 50, high: int = 500) -> int:
        return self.integer("limit", default=default, low=1, high=high)

    def offset_page(self) -> tuple[int, int]:
        """``limit`` and the offset ``cursor`` of a listing paged by position (the tokens)."""
        return (self.limit(*limits.TOKENS_LIMIT),
                self.integer("cursor", default=0, low=0, high=limits.OFFSET_CURSOR_MAX))

    def text(self, name: str, *, max_len: int = 300) -> str | None:
        """A cursor or similar opaque text: printable ASCII, bounded."""
        value = self._params.get(name)
        if value is not None and (not value or len(value) > max_len or not value.isascii()
                                  or not value.isprintable()):
            raise InvalidRequest(f"{name} is not a value this API gave")
        return value
