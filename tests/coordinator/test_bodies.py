"""Request bodies as the document states them (issue 36, "each shape once"): the three places
schemathesis, run from outside, found the document inexact, and how a refused body is named.

Each test sends what a client could send and reads what any client sees: the status, the error
body, and /openapi.json."""

from __future__ import annotations

from typing import Any

import pytest

from tests.conftest import Api
from tests.coordinator.helpers import enrolled_host, redis_state

pytestmark = pytest.mark.anyio

HEARTBEAT = "/internal/v1/hosts/host-a/heartbeat"


def _refused_naming(response: Any, *names: str) -> None:
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["code"] == "invalid_request"
    for name in names:
        assert name in error["message"], error["message"]


async def _schema(api: Api, name: str) -> dict[str, Any]:
    document = (await api.client.get("/openapi.json")).json()
    return document["components"]["schemas"][name]


# -- a body of white space is no body ----------------------------------------------------------


@pytest.mark.parametrize("blank", [b" ", b"   ", b"\n", b"\t\r\n "])
async def test_a_body_of_white_space_is_not_json_even_where_the_body_may_be_left_out(api: Api,
                                                                                    blank: bytes) -> None:
    await api.heartbeat("host-a", ["a1"])
    before = await redis_state(api)
    _refused_naming(await api.admin("POST", "/api/v1/enrollment-tokens", content=blank), "JSON")
    _refused_naming(await api.admin("POST", "/api/v1/devices/a1/disable", content=blank), "JSON")
    _refused_naming(await api.client.post("/internal/v1/hosts/host-a/claim?wait_s=0", content=blank,
                                          headers=Api.host_headers("host-a")), "JSON")
    assert await redis_state(api) == before


async def test_a_body_left_out_is_still_the_empty_object_where_the_document_allows_it(api: Api) -> None:
    created = await api.admin("POST", "/api/v1/enrollment-tokens", content=b"")
    assert created.status_code == 201, created.text
    claimed = await api.client.post("/internal/v1/hosts/host-a/claim?wait_s=0", headers=Api.host_headers("host-a"))
    assert claimed.status_code == 204, claimed.text
    document = (await api.client.get("/openapi.json")).json()
    assert document["paths"]["/api/v1/enrollment-tokens"]["post"]["requestBody"]["required"] is False
    assert document["paths"]["/api/v1/tasks"]["post"]["requestBody"]["required"] is True


# -- a heartbeat's agent names itself in bounded text ------------------------------------------


@pytest.mark.parametrize("field", ["hostname", "version"])
@pytest.mark.parametrize("value", [5, 1.5, True, ["lab-7"], {"name": "lab-7"}, "x" * 256])
async def test_an_agent_hostname_or_version_that_is_no_short_string_is_refused(api: Api, field: str,
                                                                               value: Any) -> None:
    assert (await api.heartbeat("host-a", ["a1"], agent={"hostname": "lab-7", "version": "0.1.0"})).status_code == 200
    before = await redis_state(api)
    _refused_naming(await api.heartbeat("host-a", ["a2"], agent={field: value}), f"agent.{field}")
    assert await redis_state(api) == before
    schema = await _schema(api, "Agent")
    assert {"type": "string", "maxLength": 255} in schema["properties"][field]["anyOf"]


async def test_an_agent_hostname_and_version_are_shown_as_sent(api: Api) -> None:
    agent = {"hostname": "h" * 255, "version": "0.1.0", "from_a_newer_agent": 1}
    assert (await api.heartbeat("host-a", ["a1"], agent=agent)).status_code == 200
    host = (await api.admin("GET", "/api/v1/hosts/host-a")).json()
    assert (host["hostname"], host["agent_version"]) == ("h" * 255, "0.1.0")
    assert (await api.heartbeat("host-a", ["a1"], agent={"hostname": None, "version": None})).status_code == 200


# -- a device named twice in one list ----------------------------------------------------------


async def test_a_snapshot_naming_a_device_twice_is_refused_as_its_document_says(api: Api) -> None:
    await api.heartbeat("host-a", ["a1"])
    before = await redis_state(api)
    twice = [{"device_id": "a2", "driver": "sim", "status": "available"},
             {"device_id": "a2", "driver": "sim", "status": "busy"}]
    _refused_naming(await api.heartbeat("host-a", twice), "device_id", "a2", "twice")
    _refused_naming(await api.heartbeat("host-a", [twice[0], twice[0]]), "device_id")
    assert await redis_state(api) == before
    devices = (await _schema(api, "Heartbeat"))["properties"]["devices"]
    assert devices["uniqueItems"] is True  # identical entries are outside the document too
    assert "device_id" in devices["description"] and "400" in devices["description"]


async def test_a_device_enrollment_naming_a_local_device_twice_is_refused_as_its_document_says(
        api: Api) -> None:
    host_id, headers = await enrolled_host(api)
    before = await redis_state(api)
    twice = {"devices": [{"local_id": "p1", "driver": "sim"}, {"local_id": "p1", "driver": "adb"}]}
    response = await api.client.post(f"/internal/v1/hosts/{host_id}/devices/enroll", json=twice, headers=headers)
    _refused_naming(response, "local_id", "p1")
    assert await redis_state(api) == before
    devices = (await _schema(api, "DeviceEnroll"))["properties"]["devices"]
    assert devices["uniqueItems"] is True and "local_id" in devices["description"]


# -- a refused body names what is wrong by its path --------------------------------------------


@pytest.mark.parametrize(("devices", "path"), [
    ([{"device_id": "a1", "driver": "sim", "status": "available"},
      {"device_id": "a2", "driver": "sim", "status": "sleeping"}], "devices[1].status"),
    ([{"device_id": "a1", "driver": "sim", "status": "available", "labels": {"room": 7}}], "devices[0].labels"),
    ([{"device_id": "a1", "status": "available"}], "devices[0].driver"),
])
async def test_a_refused_snapshot_names_the_field_by_its_path(api: Api, devices: list[dict[str, Any]],
                                                              path: str) -> None:
    _refused_naming(await api.heartbeat("host-a", devices), path)


async def test_a_refused_task_names_the_field_by_its_path_and_never_echoes_the_value(api: Api) -> None:
    response = await api.create_task(device_id="a1", max_attempts=101)
    _refused_naming(response, "max_attempts")
    response = await api.admin("POST", "/api/v1/tasks", json={
        "kind": "workflow", "workflow": {"name": "w", "params": []}, "device_id": "a1"})
    _refused_naming(response, "workflow.params")
    secret = "s3cr3t-" * 6
    response = await api.client.post("/internal/v1/enroll", headers={"authorization": "Bearer nope"},
                                     json={"enrollment_id": "e-1", "host_token": 5, "hostname": secret})
    assert response.status_code == 401  # the credential first, whatever the body
    token = (await api.admin("POST", "/api/v1/enrollment-tokens", json={})).json()["token"]
    response = await api.client.post("/internal/v1/enroll", headers={"authorization": f"Bearer {token}"},
                                     json={"enrollment_id": "e-1", "host_token": secret + "\u0001"})
    _refused_naming(response, "host_token")
    assert secret not in response.text
