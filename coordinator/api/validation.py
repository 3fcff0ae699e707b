"""Request validation: ids, bounded JSON bodies and the small schemas of the contract.

Everything a client sends is checked here before any script runs, so bad input changes nothing.
"""

from __future__ import annotations

import re
from typing import Any

import orjson
from starlette.requests import ClientDisconnect, Request

import wire
from coordinator.api import limits
from coordinator.errors import InvalidRequest, PayloadTooLarge

# C0 control characters, tab and newline aside: never stored (they corrupt terminals and logs).
# Free text loses them; an id, a key or a secret that holds one is refused, since stripping would
# make two different ones the same.
_C0 = re.compile("[\x00-\x08\x0b-\x1f]")
_C0_TABLE = dict.fromkeys([*range(0, 9), *range(11, 32)])


def require_id(value: object, field: str) -> str:
    if not wire.is_valid_id(value):
        raise InvalidRequest(f"{field} must be 1..128 characters of [A-Za-z0-9._:-]")
    return value  # type: ignore[return-value]


def header(request: Request, name: bytes) -> str | None:
    """The first value of the header ``name`` (lower case), read from the ASGI scope: as
    ``request.headers.get`` answers, without building the request's Headers, which the hot
    paths need for nothing else."""
    for key, value in request.scope["headers"]:
        if key == name:
            return value.decode("latin-1")
    return None


async def read_body(request: Request, limit: int) -> bytes:
    """The raw body, refusing more than ``limit`` bytes before reading past it."""
    declared = header(request, b"content-length")
    if declared is not None:
        try:
            if int(declared) > limit:
                raise PayloadTooLarge(f"the body exceeds {limit} bytes")
        except ValueError:
            raise InvalidRequest("invalid Content-Length") from None
    # The ASGI messages read here, as Request.stream() reads them, without its async generator:
    # nearly every body comes in one message, and the generator's steps cost more than that.
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            raise ClientDisconnect()
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise PayloadTooLarge(f"the body exceeds {limit} bytes")
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


def clean_text(value: str) -> str:
    """Free text without its C0 controls (tab and newline aside)."""
    return value.translate(_C0_TABLE) if _C0.search(value) else value


def has_control(value: str) -> bool:
    """Whether ``value`` holds a C0 control that free text would lose."""
    return _C0.search(value) is not None


def _clean(value: Any) -> Any:
    """A free-form JSON value (attributes, metadata, params) with C0 controls stripped from every
    string in it, object keys included: all of it is free text, matched by nothing."""
    if isinstance(value, str):
        return clean_text(value)
    if isinstance(value, list):
        return [_clean(item) for item in value]
    if isinstance(value, dict):
        return {clean_text(k): _clean(v) for k, v in value.items()}
    return value


def _check_depth(value: Any, depth: int) -> None:
    """400 for a container nested past ``wire.MAX_JSON_DEPTH`` (the body object is level 1)."""
    if isinstance(value, dict | list):
        if depth > wire.MAX_JSON_DEPTH:
            raise InvalidRequest(f"JSON is nested deeper than {wire.MAX_JSON_DEPTH} levels")
        for item in value.values() if isinstance(value, dict) else value:
            _check_depth(item, depth + 1)


async def read_json(request: Request, limit: int, *, required: bool = True,
                    unchecked: tuple[str, ...] = (), fields: frozenset[str] | None = None) -> Body:
    """The body as a JSON object, at most ``wire.MAX_JSON_DEPTH`` deep, its strings as sent: each
    field's reader judges it (an id exactly, free text without C0 controls). An empty body is
    ``{}`` when not ``required``. Top-level fields named in ``unchecked`` skip the depth check,
    for a caller that judges them itself.

    ``fields``: the body's every field (an operator body, PROTOCOL.md "Conventions"): any other is
    a typo, refused naming it, and a field sent as null is refused rather than read as absent.
    Without it (the host API) unknown fields are ignored, so older and newer agents keep working."""
    raw = await read_body(request, limit)
    if not raw.strip():
        if required:
            raise InvalidRequest("a JSON object body is required")
        return Body({})
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise InvalidRequest("the body is not valid JSON") from None
    if not isinstance(body, dict):
        raise InvalidRequest("the body must be a JSON object")
    # JSON nests no deeper than it has brackets, and holds a control character only as an escape:
    # most bodies have few brackets and no backslash, and walking them was a tenth of a renewal's
    # Python.
    if raw.count(b"{") + raw.count(b"[") > wire.MAX_JSON_DEPTH:
        for key, value in body.items():
            if key not in unchecked:
                _check_depth(value, 2)
    if fields is not None:
        only_fields(body, fields)
    return Body(body, escaped=b"\\" in raw)


def only_fields(body: dict[str, Any], fields: frozenset[str], path: str = "") -> None:
    """400 naming the first field of ``body`` (an object at ``path``) that is not one of
    ``fields``, or that is null: an operator's typo (``max_atempts``) is not a wish."""
    for key in sorted(body):
        name = f"{path}.{key}" if path else key
        if len(name) > 100:  # named, not echoed whole
            name = name[:100] + "…"
        if key not in fields:
            raise InvalidRequest(f"unknown field {name!r}"
                                 + (f" (known: {', '.join(sorted(fields))})" if fields else ""))
        if body[key] is None:
            raise InvalidRequest(f"{name} must not be null: give a value or leave it out")


class Body(dict[str, Any]):
    """A JSON object from a request, read field by field: each reader returns the field's value
    or raises ``InvalidRequest`` naming it (with the path of the object it sits in)."""

    def __init__(self, data: dict[str, Any], path: str = "", *, escaped: bool = True) -> None:
        super().__init__(data)
        self._path = path
        self._escaped = escaped  # False: the JSON text had no escape, so no control character

    def _name(self, field: str) -> str:
        return f"{self._path}.{field}" if self._path else field

    def id(self, field: str) -> str:
        return require_id(self.get(field), self._name(field))

    def integer(self, field: str, *, default: int | None = None, low: int = 0, high: int = 2**31 - 1,
                required: bool = False) -> int | None:
        value = self.get(field)
        if value is None:
            if required:
                raise InvalidRequest(f"{self._name(field)} is required")
            return default
        if isinstance(value, float) and value.is_integer():
            value = int(value)  # 3.0 is the integer 3, in JSON as in JSON Schema
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise InvalidRequest(f"{self._name(field)} must be an integer in [{low}, {high}]")
        return value

    def text(self, field: str, *, max_len: int, required: bool = False) -> str | None:
        value = self.get(field)
        if value is None:
            if required:
                raise InvalidRequest(f"{self._name(field)} is required")
            return None
        # At most max_len characters as sent, and not empty once its controls are gone.
        if isinstance(value, str) and len(value) <= max_len:
            value = clean_text(value)
        if not isinstance(value, str) or not value or len(value) > max_len:
            raise InvalidRequest(f"{self._name(field)} must be a non-empty string of at most {max_len} characters")
        return value

    def object(self, field: str, *, required: bool = False, fields: frozenset[str] | None = None) -> Body:
        """A nested object ({} when absent and not ``required``), its fields to be read in turn;
        with ``fields``, as ``read_json`` reads an operator body's."""
        value = self.get(field)
        if value is None and not required:
            return Body({}, self._name(field), escaped=False)
        if not isinstance(value, dict):
            raise InvalidRequest(f"{self._name(field)} must be an object")
        if fields is not None:
            only_fields(value, fields, self._name(field))
        return Body(value, self._name(field), escaped=self._escaped)

    def free_object(self, field: str) -> dict[str, Any]:
        """A free-form object ({} when absent): all its text, keys included, is free text."""
        value = dict(self.object(field))
        return _clean(value) if self._escaped else value

    def labels(self, field: str, *, max_items: int = limits.LABELS_MAX_ITEMS,
               max_len: int = limits.LABEL_MAX_CHARS) -> dict[str, str]:
        """A flat object of short strings. Selectors match labels by equality, so names and
        values are keys, taken as sent: one holding a C0 control is refused, not stripped."""
        value = self.get(field)
        if value is None:
            return {}
        name = self._name(field)
        if not isinstance(value, dict) or len(value) > max_items:
            raise InvalidRequest(f"{name} must be an object of at most {max_items} string values")
        for key, item in value.items():
            if not key or len(key) > max_len or not isinstance(item, str) or len(item) > max_len:
                raise InvalidRequest(f"{name} must map short strings to short strings")
            if has_control(key) or has_control(item):
                raise InvalidRequest(f"{name} must not hold control characters")
        return value

    def entries(self, field: str, id_field: str, *, low: int, high: int) -> list[tuple[str, Body]]:
        """A list of objects keyed by a valid, unique id: [(id, object), ...] in order."""
        entries = self.get(field)
        name = self._name(field)
        if not isinstance(entries, list) or not low <= len(entries) <= high:
            raise InvalidRequest(f"{name} must be a list of {low}..{high} objects")
        parsed: list[tuple[str, Body]] = []
        seen: set[str] = set()
        for index, entry in enumerate(entries):
            if not isinstance(entry, dict):
                raise InvalidRequest(f"each of {name} must be an object")
            item = Body(entry, f"{name}[{index}]", escaped=self._escaped)
            entry_id = item.id(id_field)
            if entry_id in seen:
                raise InvalidRequest(f"{id_field} {entry_id} appears twice")
            seen.add(entry_id)
            parsed.append((entry_id, item))
        return parsed


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
