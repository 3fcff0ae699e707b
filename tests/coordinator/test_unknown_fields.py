"""Unknown request fields (PROTOCOL.md, Conventions; issue 28, seen 6): the operator API answers
`400 invalid_request` naming the field and changes nothing (`max_atempts` is a typo, not a wish);
the host API ignores them, so older and newer agents keep working.

Hypothesis drives the in-process coordinator of the ``api`` fixture (real Redis and fakeredis) as
tests/coordinator/test_id_properties.py does: examples in a worker thread, requests on the loop."""

from __future__ import annotations

from typing import Any

import anyio
import anyio.from_thread
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from coordinator.api.routes import ENDPOINTS
from tests.conftest import Api
from tests.coordinator.helpers import claim_one, redis_state

pytestmark = pytest.mark.anyio

EXAMPLES = settings(max_examples=40, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])

# A body each operator route that takes one accepts.
VALID_BODIES: dict[tuple[str, str], tuple[str, dict[str, Any]]] = {
    ("POST", "/api/v1/tasks"): ("/api/v1/tasks", {"kind": "goal", "goal": "g", "device_id": "a1"}),
    ("POST", "/api/v1/devices/{device_id}/disable"): ("/api/v1/devices/a1/disable", {"reason": "r"}),
    ("POST", "/api/v1/enrollment-tokens"): ("/api/v1/enrollment-tokens", {}),
    ("POST", "/api/v1/operator-tokens"): ("/api/v1/operator-tokens", {"name": "ci", "scopes": ["read"]}),
    ("PUT", "/api/v1/teams/{team}"): ("/api/v1/teams/qa", {"weight": 2}),
    ("POST", "/api/v1/runs"): ("/api/v1/runs", {"tasks": [{"kind": "goal", "goal": "g", "device_id": "a1"}]}),
    ("POST", "/api/v1/webhooks"): ("/api/v1/webhooks", {"url": "https://ci.example/hook", "events": ["task.ended"]}),
}
ROUTES = sorted(VALID_BODIES)
# Routes whose body is accepted only in a state set up elsewhere: their unknown fields are tested there.
TESTED_ELSEWHERE = {("POST", "/api/v1/tasks/{task_id}/commands"): "tests/coordinator/test_sessions.py"}


async def _known_fields(api: Api) -> dict[tuple[str, str], frozenset[str]]:
    """The fields each route's body may have, as its document (/openapi.json) lists them."""
    document = (await api.client.get("/openapi.json")).json()
    known = {}
    for method, path in ROUTES:
        schema = document["paths"][path][method.lower()]["requestBody"]["content"]["application/json"]["schema"]
        body = document["components"]["schemas"][schema["$ref"].rsplit("/", 1)[1]]
        assert body["additionalProperties"] is False, (method, path)  # the document says so too
        known[(method, path)] = frozenset(body["properties"])
    return known


def test_every_operator_route_with_a_body_is_tested_here() -> None:
    with_body = {(e.method, e.path) for e in ENDPOINTS if e.path.startswith("/api/v1/") and e.request}
    assert with_body == set(VALID_BODIES) | set(TESTED_ELSEWHERE)


def _refused_naming(response: Any, name: str) -> None:
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["code"] == "invalid_request"
    assert repr(name) in error["message"], error["message"]


async def test_the_typo_of_the_issue_is_refused_naming_it(api: Api) -> None:
    await api.heartbeat("host-a", ["a1"])
    before = await redis_state(api)
    response = await api.create_task(device_id="a1", max_atempts=5)
    _refused_naming(response, "max_atempts")
    assert "max_attempts" in response.json()["error"]["message"]  # the known fields, to spot the typo
    assert await redis_state(api) == before


@pytest.mark.parametrize(("body", "name"), [
    ({"kind": "goal", "goal": "g", "selector": {"driver": "sim", "lables": {"a": "b"}}}, "selector.lables"),
    ({"kind": "workflow", "workflow": {"name": "w", "parms": {}}, "device_id": "a1"}, "workflow.parms"),
])
async def test_a_typo_in_a_nested_object_is_refused_naming_its_path(api: Api, body: dict[str, Any],
                                                                    name: str) -> None:
    await api.heartbeat("host-a", ["a1"])
    before = await redis_state(api)
    _refused_naming(await api.admin("POST", "/api/v1/tasks", json=body), name)
    assert await redis_state(api) == before


@pytest.mark.parametrize("field", ["device_id", "max_attempts", "selector", "idempotency_key"])
async def test_an_operator_field_sent_as_null_is_refused_not_read_as_absent(api: Api, field: str) -> None:
    body: dict[str, Any] = {"kind": "goal", "goal": "g", "device_id": "a1", field: None}
    response = await api.admin("POST", "/api/v1/tasks", json=body)
    assert response.status_code == 400 and field in response.json()["error"]["message"]
    token = await api.admin("POST", "/api/v1/enrollment-tokens", json={"ttl_s": None})
    assert token.status_code == 400 and "ttl_s" in token.json()["error"]["message"]


async def test_any_unknown_field_on_any_operator_route_is_refused_naming_it(api: Api) -> None:
    await api.heartbeat("host-a", ["a1"])
    for (method, _), (path, body) in VALID_BODIES.items():  # each base body is accepted
        assert (await api.admin(method, path, json=body)).status_code in (200, 201), path
    known = await _known_fields(api)

    async def check(route: tuple[str, str], name: str, value: Any) -> None:
        path, body = VALID_BODIES[route]
        before = await redis_state(api)
        _refused_naming(await api.admin(route[0], path, json={**body, name: value}), name)
        assert await redis_state(api) == before

    @EXAMPLES
    @given(route=st.sampled_from(ROUTES), name=st.text(max_size=40),
           value=st.one_of(st.none(), st.integers(), st.text(max_size=5), st.just({})))
    def examples(route: tuple[str, str], name: str, value: Any) -> None:
        if name in known[route]:
            return
        anyio.from_thread.run(check, route, name, value)

    await anyio.to_thread.run_sync(examples)


async def test_the_host_api_ignores_unknown_fields(api: Api) -> None:
    extra = {"from_a_newer_agent": {"x": [1]}}
    heartbeat = {"devices": [{"device_id": "a1", "driver": "sim", "status": "available", **extra}], **extra}
    response = await api.client.put("/internal/v1/hosts/host-a/heartbeat", json=heartbeat,
                                    headers=Api.host_headers("host-a"))
    assert response.status_code == 200, response.text
    await api.create_task(device_id="a1")
    response = await api.client.post("/internal/v1/hosts/host-a/claim?wait_s=0", json={"claim_id": "c1", **extra},
                                     headers=Api.host_headers("host-a"))
    assert response.status_code == 200, response.text
    assignment = response.json()
    assert (await api.renew("host-a", assignment, **extra)).status_code == 200
    recorded = await api.result("host-a", assignment, **extra)
    assert recorded.status_code == 200 and recorded.json()["task_status"] == "succeeded"
    await api.create_task(device_id="a1")
    assert (await api.result("host-a", await claim_one(api, "host-a"), failure_reason=None)).status_code == 200


# Every operator route that changes something and takes no body.
BODYLESS = [e for e in ENDPOINTS if e.security == "operator" and e.request is None and e.method != "GET"]


@pytest.mark.parametrize("endpoint", BODYLESS, ids=lambda e: f"{e.method} {e.path}")
async def test_a_route_that_takes_no_body_refuses_one_with_a_field_naming_it(api: Api, endpoint: Any) -> None:
    await api.heartbeat("host-a", ["a1"])
    path = endpoint.path.replace("{host_id}", "host-a").replace("{device_id}", "a1")
    path = path.replace("{task_id}", "t-1").replace("{token_id}", "tok-1")
    before = await redis_state(api)
    refused = await api.admin(endpoint.method, path, json={"reason": "maintenance"})
    assert refused.status_code == 400, refused.text
    assert refused.json()["error"]["code"] == "invalid_request"
    assert "'reason'" in refused.json()["error"]["message"]
    assert await redis_state(api) == before


async def test_a_route_that_takes_no_body_takes_none_or_an_empty_object(api: Api) -> None:
    await api.heartbeat("host-a", ["a1"])
    assert (await api.admin("POST", "/api/v1/hosts/host-a/drain")).json()["draining"] is True
    assert (await api.admin("POST", "/api/v1/hosts/host-a/undrain", json={})).json()["draining"] is False
