"""Credential first, then path, then body, on every process; revocation bound to the credential."""

from __future__ import annotations

from typing import Any

import pytest

from tests.conftest import HOSTS, Api, unique_prefix
from tests.coordinator.helpers import (
    enrolled_host,
)

pytestmark = [pytest.mark.anyio, pytest.mark.cluster]

HOST = "/internal/v1/hosts/host-a"


async def test_a_revoked_static_credential_gets_401_whatever_the_path_or_body(api: Api) -> None:
    await api.heartbeat("host-a", ["a1"])
    revoke = await api.client.post("/api/v1/hosts/host-a/revoke", headers=Api.admin_headers)
    assert revoke.status_code == 200 and revoke.json()["revoked"] is True
    headers = Api.host_headers("host-a")
    for method, path, body in [
        ("PUT", "/internal/v1/hosts/host-b/heartbeat", {"devices": []}),  # another host's path
        ("PUT", f"{HOST}/heartbeat", {"devices": "not a list"}),  # a bad body
        ("POST", f"{HOST}/claim?wait_s=-1", None),  # a bad query
        ("POST", f"{HOST}/leases/l_1/renew", {"attempt": "x"}),
        ("POST", f"{HOST}/results", {}),
        ("POST", f"{HOST}/devices/enroll", {"devices": []}),
    ]:
        response = await api.client.request(method, path, headers=headers, json=body)
        assert response.status_code == 401, (path, response.text)
    # A live credential still gets the path's 403 and the body's 400.
    live = Api.host_headers("host-b")
    assert (await api.client.put(f"{HOST}/heartbeat", headers=live, json={"devices": []})).status_code == 403
    assert (await api.client.put("/internal/v1/hosts/host-b/heartbeat", headers=live,
                                 json={"devices": "x"})).status_code == 400


async def test_a_rotated_static_token_works_again(api_factory: Any) -> None:
    prefix = unique_prefix()
    async with api_factory(prefix=prefix) as api:
        await api.client.post("/api/v1/hosts/host-a/revoke", headers=Api.admin_headers)
        assert (await api.heartbeat("host-a", ["a1"])).status_code == 401
    rotated = {**HOSTS, "host-a": "a-brand-new-token-0123456789"}
    async with api_factory(prefix=prefix, static_hosts=rotated) as api:
        response = await api.client.put(f"{HOST}/heartbeat", json={"devices": []},
                                        headers={"authorization": f"Bearer {rotated['host-a']}"})
        assert response.status_code == 200
        view = (await api.client.get("/api/v1/hosts/host-a", headers=Api.admin_headers)).json()
        assert view["revoked"] is False and view["online"] is True
        old = await api.client.put(f"{HOST}/heartbeat", json={"devices": []}, headers=Api.host_headers("host-a"))
        assert old.status_code == 401


async def test_a_revocation_through_one_process_holds_on_another_that_cached_the_credential(
        api_factory: Any) -> None:
    prefix = unique_prefix()
    async with api_factory(prefix=prefix) as first, api_factory(prefix=prefix) as second:
        host_id, headers = await enrolled_host(first)
        path = f"/internal/v1/hosts/{host_id}"
        assert (await first.client.put(f"{path}/heartbeat", headers=headers, json={"devices": []})).status_code == 200
        revoke = await second.client.post(f"/api/v1/hosts/{host_id}/revoke", headers=Api.admin_headers)
        assert revoke.status_code == 200
        for method, target, body in [
            ("PUT", "/internal/v1/hosts/host-b/heartbeat", {"devices": []}),
            ("PUT", f"{path}/heartbeat", {"devices": 7}),
            ("PUT", f"{path}/heartbeat", {"devices": []}),
            ("POST", f"{path}/devices/enroll", {"devices": "x"}),
        ]:
            response = await first.client.request(method, target, headers=headers, json=body)
            assert response.status_code == 401, (target, response.text)


async def test_enroll_with_a_bad_token_and_a_bad_body_is_401(api: Api) -> None:
    bad_body = {"enrollment_id": "e-1", "host_token": "short"}
    unknown = await api.client.post("/internal/v1/enroll", headers={"authorization": "Bearer tet_nope"},
                                    json=bad_body)
    assert unknown.status_code == 401
    token = (await api.client.post("/api/v1/enrollment-tokens", headers=Api.admin_headers, json={})).json()
    good = {"authorization": f"Bearer {token['token']}"}
    assert (await api.client.post("/internal/v1/enroll", headers=good, json=bad_body)).status_code == 400
    await api.client.delete(f"/api/v1/enrollment-tokens/{token['id']}", headers=Api.admin_headers)
    assert (await api.client.post("/internal/v1/enroll", headers=good, json=bad_body)).status_code == 401
