"""Responses are stated once (coordinator/api/shapes/): the document's response schemas are
generated from the shapes the views are built through, and every answer the HTTP-level tests
receive is checked against its route's schema with additional properties forbidden
(tests/coordinator/response_shapes.py, the ``api`` client's response hook). These tests show
that check bites."""

from __future__ import annotations

import pytest

from coordinator.api.openapi import openapi_document
from coordinator.api.routes import ENDPOINTS, Endpoint
from tests.conftest import Api
from tests.coordinator.response_shapes import check

pytestmark = pytest.mark.anyio


async def test_a_field_a_view_adds_and_its_shape_does_not_name_fails_the_check(api: Api) -> None:
    task = (await api.create_task(device_id="phone-9")).json()  # no such device: queued, with its candidates
    check("GET", f"/api/v1/tasks/{task['task_id']}", 200, task)  # as the server answered it
    with pytest.raises(AssertionError, match="Additional properties"):
        check("GET", f"/api/v1/tasks/{task['task_id']}", 200, {**task, "lease_id": "l_1"})
    with pytest.raises(AssertionError, match="'updated_at' is a required property"):
        check("GET", f"/api/v1/tasks/{task['task_id']}", 200, {k: v for k, v in task.items() if k != "updated_at"})
    page = (await api.admin("GET", "/api/v1/tasks")).json()  # a nested view is closed as well
    page["tasks"][0]["candidates"]["spare"] = 0
    with pytest.raises(AssertionError, match="Additional properties"):
        check("GET", "/api/v1/tasks", 200, page)


def test_a_json_answer_on_a_status_its_route_names_no_shape_for_fails_the_check() -> None:
    with pytest.raises(AssertionError, match="names no shape"):
        check("GET", "/api/v1/tasks", 202, {"tasks": [], "next_cursor": None})
    check("GET", "/no/such/path", 404, {"error": {"code": "not_found", "message": "no such route"}})


def test_a_route_naming_a_shape_that_is_not_stated_builds_no_document() -> None:
    async def handler(*_: object) -> None: ...

    odd = Endpoint("GET", "/api/v1/odd", handler, "An odd route", None, None, {200: "NoSuchShape"})  # type: ignore[arg-type]  # never called
    with pytest.raises(ValueError, match="no shape named"):
        openapi_document([*ENDPOINTS, odd])
