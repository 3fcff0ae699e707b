"""Every JSON answer an HTTP-level test receives, checked against its route's response schema in
the document (``/openapi.json``, generated from ``coordinator/api/shapes/``) with additional
properties forbidden: a field a view carries and its shape does not name fails the test that
received it, as does a JSON answer on a status the route table names no shape for.

``check_response`` is an httpx response hook; ``tests/conftest.py`` gives it to the in-process
client of ``api_factory``, so every test that speaks HTTP through ``api`` checks its answers.
"""

from __future__ import annotations

import re
from functools import cache
from typing import Any

import httpx
import jsonschema
import jsonschema_rs

from coordinator.api.openapi import openapi_document
from coordinator.api.routes import ENDPOINTS

_REF = "#/components/schemas/"


def closed(schema: Any) -> Any:
    """``schema`` with every object that lists its properties closed to any other."""
    if isinstance(schema, list):
        return [closed(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    copy = {key: closed(value) for key, value in schema.items()}
    if "properties" in copy and "additionalProperties" not in copy:
        copy["additionalProperties"] = False
    return copy


@cache
def _document() -> dict[str, Any]:
    return openapi_document(ENDPOINTS)


@cache
def _routes() -> list[tuple[str, re.Pattern[str], str]]:
    """(method, path pattern, path template), in the table's order, as Starlette matches them."""
    return [(endpoint.method, re.compile("^" + "[^/]+".join(map(re.escape, re.split(r"\{[^}]+\}", endpoint.path)))
                                         + "$"), endpoint.path) for endpoint in ENDPOINTS]


@cache
def validator(name: str) -> jsonschema.protocols.Validator:
    """A validator of the shape ``name``, every object of the document closed."""
    root = {"$ref": _REF + name, "components": {"schemas": closed(_document()["components"]["schemas"])}}
    return jsonschema.Draft202012Validator(root)


@cache
def fast_validator(name: str) -> jsonschema_rs.Draft202012Validator:
    """``validator(name)``'s schema in jsonschema-rs, which says whether an answer is valid in a
    fraction of jsonschema's time; jsonschema words why one is not (``best_match``)."""
    root = {"$ref": _REF + name, "components": {"schemas": closed(_document()["components"]["schemas"])}}
    return jsonschema_rs.Draft202012Validator(root)


def shape_of(method: str, path: str, status: int) -> str | None:
    """The shape the document names for ``status`` of the route ``method path`` matches (an error
    answer of a path no route matches is an ``Error``); None where it names no JSON answer."""
    allowed = [template for verb, pattern, template in _routes() if verb == method and pattern.match(path)]
    if not allowed:
        return "Error" if status >= 400 else None
    operation = _document()["paths"][allowed[0]][method.lower()]
    answer = operation["responses"].get(str(status), {})
    schema = answer.get("content", {}).get("application/json", {}).get("schema", {})
    ref = schema.get("$ref", "")
    return ref.removeprefix(_REF) if ref.startswith(_REF) else None


def check(method: str, path: str, status: int, body: Any) -> None:
    """Raises AssertionError unless ``body`` is what the document says ``method path`` answers
    with ``status``."""
    name = shape_of(method, path, status)
    assert name is not None, f"{method} {path} answered JSON with {status}, for which its route names no shape"
    if fast_validator(name).is_valid(body):
        return
    error = jsonschema.exceptions.best_match(validator(name).iter_errors(body))
    assert error is None, (f"{method} {path} {status}: the answer is no {name} "
                           f"(coordinator/api/shapes/): {error.message} at {list(error.absolute_path)}")


async def check_response(response: httpx.Response) -> None:
    if response.headers.get("content-type", "").split(";")[0] != "application/json":
        return
    await response.aread()
    check(response.request.method, response.request.url.path, response.status_code, response.json())
