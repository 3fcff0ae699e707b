"""Operator tokens: minted by an admin, limited to their scopes on every route, refused on every
process once revoked or expired, and named as the actor of everything they cause."""

from __future__ import annotations

import hashlib
import logging
from typing import Any

import httpx
import orjson
import pytest
from starlette.requests import Request

import wire
from coordinator.api.auth import BOOTSTRAP_ADMIN, Access, Operator
from coordinator.api.routes import ENDPOINTS
from coordinator.clock import ShiftedClock
from coordinator.reaper import upgrade_before_serving
from coordinator.serve.logs import REQUESTS_LOGGER
from coordinator.state.records import OperatorToken
from tests.conftest import Api, unique_prefix
from tests.coordinator.helpers import enrolled_host

pytestmark = [pytest.mark.anyio, pytest.mark.cluster]

SCOPES = wire.values(wire.OperatorScope)
OPERATOR_ROUTES = [e for e in ENDPOINTS if e.path.startswith("/api/")]


def contract_scope(method: str, path: str) -> str | None:
    """The scope PROTOCOL.md's table gives a route, written out here from the contract and not
    read from the route table, so a route that declares another one fails the test below. None:
    any valid operator credential (``GET /api/v1/me``)."""
    if path == "/api/v1/me":
        return None
    if path.startswith(("/api/v1/operator-tokens", "/api/v1/enrollment-tokens", "/api/v1/webhooks")) \
            or path.endswith("/revoke"):
        return "admin"
    if method == "GET":
        return "read"
    if (method, path) in {("POST", "/api/v1/tasks"), ("POST", "/api/v1/runs"),
                          # a live session's driving: its creator's (or the admin's), "Live sessions"
                          ("POST", "/api/v1/tasks/{task_id}/commands"), ("POST", "/api/v1/tasks/{task_id}/end")}:
        return "submit"
    if (method, path) in {
        ("POST", "/api/v1/tasks/{task_id}/cancel"),
        ("POST", "/api/v1/runs/{run_id}/cancel"),
        ("POST", "/api/v1/hosts/{host_id}/drain"),
        ("POST", "/api/v1/hosts/{host_id}/undrain"),
        ("POST", "/api/v1/devices/{device_id}/disable"),
        ("POST", "/api/v1/devices/{device_id}/enable"),
        ("DELETE", "/api/v1/devices/{device_id}"),
    }:
        return "control"
    return "admin"  # whatever else an operator may do is the admin's


def bearer(token: str) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"}


async def mint(api: Api, name: str, *scopes: str, ttl_s: int | None = None,
               headers: dict[str, str] | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"name": name, "scopes": list(scopes)}
    if ttl_s is not None:
        body["ttl_s"] = ttl_s
    response = await api.client.post("/api/v1/operator-tokens", json=body, headers=headers or Api.admin_headers)
    assert response.status_code == 201, response.text
    return response.json()


async def as_token(api: Api, token: dict[str, Any], method: str, path: str, **kwargs: Any) -> httpx.Response:
    return await api.client.request(method, path, headers={**bearer(token["token"]), **kwargs.pop("headers", {})},
                                    **kwargs)


async def feed_events(api: Api) -> list[dict[str, Any]]:
    """Every event of the deployment's feed, oldest first, as the feed sends them."""
    entries = await api.ctx.store.redis.xrange(api.ctx.store.keys.feed)
    return [orjson.loads(fields[b"e"]) for _, fields in entries]


def test_every_api_route_is_an_operator_route_that_names_its_scope() -> None:
    assert OPERATOR_ROUTES
    for endpoint in OPERATOR_ROUTES:
        assert endpoint.security == "operator" and endpoint.scope is not None, (endpoint.method, endpoint.path)


@pytest.mark.parametrize("endpoint", OPERATOR_ROUTES, ids=lambda e: f"{e.method} {e.path}")
async def test_every_scope_against_the_route(api: Api, endpoint: Any) -> None:
    """A token holding one scope gets 403 insufficient_scope exactly where the contract's table
    says; elsewhere it passes the scope check (whatever the route then answers)."""
    required = contract_scope(endpoint.method, endpoint.path)
    await api.heartbeat("host-a", ["a1"])
    tokens = {scope: await mint(api, f"only-{scope}", scope) for scope in SCOPES}
    for scope in SCOPES:  # "admin" last: what it changes cannot hide another scope's answer
        task = (await api.create_task(device_id="a1")).json()  # an admin's, not this token's
        run = (await api.admin("POST", "/api/v1/runs", json={"tasks": [{"kind": "goal", "goal": "x",
                                                                       "device_id": "a1"}]})).json()
        path = endpoint.path.format(task_id=task["task_id"], host_id="host-a", device_id="a1",
                                    token_id="ot_none", name="a.png", team="qa", run_id=run["run_id"],
                                    webhook_id="wh_none", command_id="c_none")
        kwargs: dict[str, Any] = {}
        if endpoint.path == "/api/v1/events":
            kwargs["headers"] = {"last-event-id": "not-an-id"}  # past the scope: 400, not a stream
        elif endpoint.method in ("POST", "PUT"):
            kwargs["json"] = {"kind": "goal", "goal": "x", "device_id": "a1"} if path == "/api/v1/tasks" else {}
        response = await as_token(api, tokens[scope], endpoint.method, path, **kwargs)
        allowed = required is None or scope in (required, "admin")
        if allowed:
            assert response.status_code not in (401, 403), (scope, response.text)
        else:
            assert response.status_code == 403, (scope, response.text)
            error = response.json()["error"]
            assert error["code"] == "insufficient_scope" and error["details"] == {"required": required}


async def test_a_token_is_shown_once_stored_as_a_digest_and_tells_who_it_is(api: Api) -> None:
    created = await mint(api, "wall-screen", "read", ttl_s=3600)
    secret = created["token"]
    assert secret.startswith("tto_") and len(secret) > 40
    assert created["name"] == "wall-screen" and created["scopes"] == ["read"] and created["expires_at"]
    me = (await api.client.get("/api/v1/me", headers=bearer(secret))).json()
    assert me["name"] == "wall-screen" and me["scopes"] == ["read"] and me["expires_at"] == created["expires_at"]
    admin_me = (await api.client.get("/api/v1/me", headers=Api.admin_headers)).json()
    assert admin_me["name"] == "admin" and admin_me["scopes"] == ["admin"] and admin_me["expires_at"] is None
    listed = (await api.client.get("/api/v1/operator-tokens", headers=Api.admin_headers)).json()
    [entry] = listed["operator_tokens"]
    assert listed["next_cursor"] is None
    assert {"id", "name", "scopes", "created_at", "expires_at", "last_used_at"} <= entry.keys()
    assert entry["id"] == created["id"] and entry["last_used_at"] is not None  # it was used just now
    assert secret not in orjson.dumps(listed).decode()
    # Redis holds no secret: only its SHA-256.
    redis = api.ctx.store.redis
    async for key in redis.scan_iter(match=api.ctx.store.keys.base.replace("{", "\\{").replace("}", "\\}") + "*"):
        assert secret.encode() not in orjson.dumps(await _dump(redis, key))


async def _dump(redis: Any, key: bytes) -> Any:
    kind = (await redis.type(key)).decode()
    if kind == "hash":
        return {k.decode(): v.decode() for k, v in (await redis.hgetall(key)).items()}
    if kind == "stream":
        return [str(e) for e in await redis.xrange(key)]
    if kind == "zset":
        return [m.decode() for m in await redis.zrange(key, 0, -1)]
    if kind == "set":
        return sorted(m.decode() for m in await redis.smembers(key))
    if kind == "list":
        return [m.decode() for m in await redis.lrange(key, 0, -1)]
    return str(await redis.get(key))


@pytest.mark.parametrize("body", [
    {"scopes": ["read"]},
    {"name": "has space", "scopes": ["read"]},
    {"name": "x" * 129, "scopes": ["read"]},
    {"name": "admin", "scopes": ["read"]},  # the bootstrap admin's name
    {"name": "ci", "scopes": []},
    {"name": "ci", "scopes": ["everything"]},
    {"name": "ci", "scopes": ["read", "read"]},
    {"name": "ci", "scopes": "read"},
    {"name": "ci", "scopes": ["read"], "ttl_s": 59},
    {"name": "ci", "scopes": ["read"], "ttl_s": wire.OPERATOR_TOKEN_TTL_MAX_S + 1},
    {"name": "ci", "scopes": ["read"], "ttl_s": "3600"},
    {"name": "ci", "scopes": ["read"], "tll_s": 3600},  # a typo, not a wish
])
async def test_a_bad_create_is_400_and_mints_nothing(api: Api, body: dict[str, Any]) -> None:
    response = await api.client.post("/api/v1/operator-tokens", json=body, headers=Api.admin_headers)
    assert response.status_code == 400 and response.json()["error"]["code"] == "invalid_request", response.text
    listed = (await api.client.get("/api/v1/operator-tokens", headers=Api.admin_headers)).json()
    assert listed["operator_tokens"] == []


async def test_only_an_admin_mints_lists_and_revokes_operator_tokens(api: Api) -> None:
    minter = await mint(api, "minter", "admin")
    control = await mint(api, "oncall", "read", "submit", "control")
    made = await mint(api, "made-by-token", "read", headers=bearer(minter["token"]))
    for method, path, body in [("POST", "/api/v1/operator-tokens", {"name": "x", "scopes": ["admin"]}),
                               ("GET", "/api/v1/operator-tokens", None),
                               ("DELETE", f"/api/v1/operator-tokens/{made['id']}", None)]:
        response = await as_token(api, control, method, path, json=body)
        assert response.status_code == 403 and response.json()["error"]["details"] == {"required": "admin"}
    revoked = await as_token(api, minter, "DELETE", f"/api/v1/operator-tokens/{made['id']}")
    assert revoked.status_code == 200 and revoked.json()["revoked"] is True
    missing = await api.client.delete("/api/v1/operator-tokens/ot_none", headers=Api.admin_headers)
    assert missing.status_code == 404


async def test_live_tokens_are_bounded_and_a_revoked_one_frees_its_place(api_factory: Any) -> None:
    async with api_factory(max_operator_tokens=2) as api:
        first = await mint(api, "one", "read")
        await mint(api, "two", "read")
        third = await api.client.post("/api/v1/operator-tokens", json={"name": "three", "scopes": ["read"]},
                                      headers=Api.admin_headers)
        assert third.status_code == 409 and third.json()["error"]["code"] == "token_limit"
        assert (await api.client.delete(f"/api/v1/operator-tokens/{first['id']}",
                                        headers=Api.admin_headers)).status_code == 200
        await mint(api, "three", "read")


async def test_a_revocation_through_one_process_holds_on_the_other_from_its_next_request(
        api_factory: Any) -> None:
    prefix = unique_prefix()
    async with api_factory(prefix=prefix) as first, api_factory(prefix=prefix) as second:
        token = await mint(first, "oncall", "read", "control")
        await second.heartbeat("host-a", ["a1"])
        assert (await as_token(second, token, "GET", "/api/v1/hosts")).status_code == 200
        assert (await as_token(second, token, "POST", "/api/v1/hosts/host-a/drain")).status_code == 200
        revoke = await first.client.delete(f"/api/v1/operator-tokens/{token['id']}", headers=Api.admin_headers)
        assert revoke.status_code == 200 and revoke.json()["revoked"] is True
        unknown = await second.client.get("/api/v1/hosts", headers=bearer("tto_" + "x" * 43))
        assert unknown.status_code == 401
        # Credential first: a bad path or a bad body still gets the uniform 401.
        for method, path, body in [("GET", "/api/v1/hosts", None),
                                   ("POST", "/api/v1/hosts/host-a/undrain", None),
                                   ("GET", "/api/v1/tasks/not%20an%20id", None),
                                   ("POST", "/api/v1/devices/a1/disable", {"reason": 7}),
                                   ("GET", "/api/v1/me", None)]:
            response = await as_token(second, token, method, path, json=body)
            assert response.status_code == 401, (path, response.text)
            assert response.json() == unknown.json()
        host = (await second.client.get("/api/v1/hosts/host-a", headers=Api.admin_headers)).json()
        assert host["draining"] is True  # the undrain was refused and changed nothing


async def test_an_expired_token_gets_the_uniform_401(api_factory: Any) -> None:
    clock = ShiftedClock()
    async with api_factory(clock=clock, max_operator_tokens=1) as api:
        token = await mint(api, "short", "read", ttl_s=wire.OPERATOR_TOKEN_TTL_MIN_S)
        assert (await as_token(api, token, "GET", "/api/v1/tasks")).status_code == 200
        clock.advance(wire.OPERATOR_TOKEN_TTL_MIN_S * 1000 - 2000)  # the real clock runs on too
        assert (await as_token(api, token, "GET", "/api/v1/tasks")).status_code == 200
        clock.advance(2000)
        unknown = await api.client.get("/api/v1/tasks", headers=bearer("tto_unknown"))
        for path in ("/api/v1/tasks", "/api/v1/tasks/not%20an%20id", "/api/v1/me"):
            expired = await as_token(api, token, "GET", path)
            assert expired.status_code == 401 and expired.json() == unknown.json()
        listed = (await api.client.get("/api/v1/operator-tokens", headers=Api.admin_headers)).json()
        assert listed["operator_tokens"][0]["expired"] is True
        await mint(api, "next", "read")  # an expired token no longer counts against the limit


async def test_last_used_at_is_written_at_most_once_a_minute(api_factory: Any) -> None:
    clock = ShiftedClock()
    async with api_factory(clock=clock) as api:
        token = await mint(api, "ci", "read")

        async def last_used() -> str | None:
            listed = (await api.client.get("/api/v1/operator-tokens", headers=Api.admin_headers)).json()
            return listed["operator_tokens"][0]["last_used_at"]

        assert await last_used() is None
        assert (await as_token(api, token, "GET", "/api/v1/tasks")).status_code == 200
        first = await last_used()
        assert first is not None
        clock.advance(59_000)
        for _ in range(5):
            assert (await as_token(api, token, "GET", "/api/v1/tasks")).status_code == 200
        assert await last_used() == first
        clock.advance(1_000)
        assert (await as_token(api, token, "GET", "/api/v1/tasks")).status_code == 200
        later = await last_used()
        assert later is not None and later > first


async def test_a_submit_token_cancels_only_the_tasks_it_created(api: Api) -> None:
    ci, other = await mint(api, "ci", "submit", "read"), await mint(api, "ci-other", "submit")
    oncall = await mint(api, "oncall", "control")
    body = {"kind": "goal", "goal": "x", "selector": {"driver": "sim"}}
    mine = (await as_token(api, ci, "POST", "/api/v1/tasks", json=body)).json()
    theirs = (await as_token(api, other, "POST", "/api/v1/tasks", json=body)).json()
    admins = (await api.create_task(selector={"driver": "sim"})).json()
    assert mine["created_by"] == "ci" and theirs["created_by"] == "ci-other" and admins["created_by"] == "admin"
    for task in (theirs, admins):
        refused = await as_token(api, ci, "POST", f"/api/v1/tasks/{task['task_id']}/cancel")
        assert refused.status_code == 403, refused.text
        assert refused.json()["error"] == {**refused.json()["error"], "code": "insufficient_scope",
                                           "details": {"required": "control"}}
        assert (await api.task(task["task_id"]))["status"] == "queued"  # nothing changed
    cancelled = await as_token(api, ci, "POST", f"/api/v1/tasks/{mine['task_id']}/cancel")
    assert cancelled.status_code == 200 and cancelled.json()["status"] == "cancelled"
    assert (await as_token(api, oncall, "POST", f"/api/v1/tasks/{theirs['task_id']}/cancel")).status_code == 200
    assert (await api.task(theirs["task_id"]))["status"] == "cancelled"


# -- idempotency keys are their token's ----------------------------------------------------------


async def _create(api: Api, token: dict[str, Any] | None, path: str, body: dict[str, Any]) -> httpx.Response:
    if token is None:
        return await api.client.post(path, json=body, headers=Api.admin_headers)
    return await as_token(api, token, "POST", path, json=body)


@pytest.mark.parametrize("path", ["/api/v1/tasks", "/api/v1/runs"])
async def test_an_idempotency_key_is_its_tokens_another_tokens_replay_is_another_request(
        api: Api, path: str) -> None:
    """As Stripe scopes a key to its API key: a submit token replaying another token's body and key
    never gets that token's task or run (which it may not even read), and another body under the
    same key is no conflict of theirs."""
    ci, other = await mint(api, "ci", "submit", "read"), await mint(api, "ci-other", "submit")
    task = {"kind": "goal", "goal": "x", "device_id": "nowhere"}
    body = {**task, "idempotency_key": "nightly"} if path == "/api/v1/tasks" else {
        "tasks": [task], "idempotency_key": "nightly"}
    ident = "task_id" if path == "/api/v1/tasks" else "run_id"
    first = await _create(api, ci, path, body)
    assert first.status_code == 201, first.text
    mine = first.json()[ident]
    # the same token again: its own earlier one
    again = await _create(api, ci, path, body)
    assert again.status_code == 200 and again.json()[ident] == mine
    # another token, the same body and key: a new one of its own, then that one on its replay
    theirs = await _create(api, other, path, body)
    assert theirs.status_code == 201 and theirs.json()[ident] != mine, theirs.text
    assert (await _create(api, other, path, body)).json()[ident] == theirs.json()[ident]
    # the bootstrap admin's key is its own too
    admins = await _create(api, None, path, body)
    assert admins.status_code == 201 and admins.json()[ident] not in (mine, theirs.json()[ident])
    # another body under the key: a conflict only with the token's own
    changed = {**body, "priority": 5}
    conflict = await _create(api, ci, path, changed)
    assert conflict.status_code == 409 and conflict.json()["error"]["code"] == "idempotency_conflict"
    fresh = await mint(api, "ci-fresh", "submit")
    assert (await _create(api, fresh, path, changed)).status_code == 201


async def test_team_bound_tokens_using_one_key_never_conflict(api: Api) -> None:
    made = []
    for team in ("checkout", "search"):
        body = {"name": f"ci-{team}", "scopes": ["submit"], "team": team}
        made.append((await api.admin("POST", "/api/v1/operator-tokens", json=body)).json())
    task = {"kind": "goal", "goal": "x", "device_id": "nowhere", "idempotency_key": "build-41"}
    answers = [await as_token(api, token, "POST", "/api/v1/tasks", json=task) for token in made]
    assert [a.status_code for a in answers] == [201, 201], [a.text for a in answers]
    assert [a.json()["team"] for a in answers] == ["checkout", "search"]


@pytest.mark.parametrize(("path", "ident", "index"), [("/api/v1/tasks", "task_id", "idempotency"),
                                                     ("/api/v1/runs", "run_id", "run_idempotency")])
async def test_a_start_moves_the_keys_an_earlier_version_stored_bare_under_their_tokens(
        api: Api, path: str, ident: str, index: str) -> None:
    ci, other = await mint(api, "ci", "submit"), await mint(api, "ci-other", "submit")
    task = {"kind": "goal", "goal": "x", "device_id": "nowhere"}
    bodies = {key: ({**task, "idempotency_key": key} if ident == "task_id" else
                    {"tasks": [task], "idempotency_key": key}) for key in ("k", "gone")}
    mine = (await as_token(api, ci, "POST", path, json=bodies["k"])).json()[ident]
    store = api.ctx.store
    index_key = getattr(store.keys, index)
    # the entries as an earlier version kept them: the bare key, one naming a record since gone
    await store.redis.delete(index_key)
    await store.redis.hset(index_key, mapping={"k": mine, "gone": "t-nobody"})
    for walk in ("idempotency_keys", "run_idempotency_keys"):
        await store.redis.hdel(store.keys.upgrades, walk)  # (this process's start had walked them)
    assert await upgrade_before_serving(store) == 2
    assert sorted(await store.redis.hkeys(index_key)) == [f"{ci['id']}\0k".encode()]
    replay = await as_token(api, ci, "POST", path, json=bodies["k"])
    assert replay.status_code == 200 and replay.json()[ident] == mine
    theirs = await as_token(api, other, "POST", path, json=bodies["k"])
    assert theirs.status_code == 201 and theirs.json()[ident] != mine
    assert (await as_token(api, ci, "POST", path, json=bodies["gone"])).status_code == 201
    assert await upgrade_before_serving(store) == 0  # done: a later start walks nothing


async def test_retention_frees_a_tokens_key_for_that_token_and_leaves_the_others(api_factory: Any) -> None:
    clock = ShiftedClock()
    async with api_factory(clock=clock, task_retention_s=10) as api:
        ci, other = await mint(api, "ci", "submit"), await mint(api, "ci-other", "submit")
        body = {"kind": "goal", "goal": "x", "device_id": "nowhere", "idempotency_key": "k"}
        mine = (await as_token(api, ci, "POST", "/api/v1/tasks", json=body)).json()
        await api.admin("POST", f"/api/v1/tasks/{mine['task_id']}/cancel")
        clock.advance(5_000)
        theirs = (await as_token(api, other, "POST", "/api/v1/tasks", json=body)).json()
        await api.admin("POST", f"/api/v1/tasks/{theirs['task_id']}/cancel")
        clock.advance(5_500)  # past the first task's retention, not the second's
        await api.sweep()  # (the app's own reaper may sweep too: what is left is what counts)
        assert (await api.admin("GET", f"/api/v1/tasks/{mine['task_id']}")).status_code == 404
        assert (await api.admin("GET", f"/api/v1/tasks/{theirs['task_id']}")).status_code == 200
        again = await as_token(api, ci, "POST", "/api/v1/tasks", json=body)
        assert again.status_code == 201 and again.json()["task_id"] != mine["task_id"]
        replay = await as_token(api, other, "POST", "/api/v1/tasks", json=body)
        assert replay.status_code == 200 and replay.json()["task_id"] == theirs["task_id"]


async def test_every_operator_action_names_its_actor(api: Api) -> None:
    ci = await mint(api, "ci", "submit")
    oncall = await mint(api, "oncall", "control")
    keeper = await mint(api, "keeper", "admin")
    host_id, host_headers = await enrolled_host(api)  # the enrollment token: minted by "admin"
    enrolled = await api.client.post(f"/internal/v1/hosts/{host_id}/devices/enroll", headers=host_headers,
                                     json={"devices": [{"local_id": "p1", "driver": "sim"}]})
    device_id = enrolled.json()["devices"][0]["device_id"]
    snapshot = {"devices": [{"device_id": device_id, "driver": "sim", "status": "available"}]}
    assert (await api.client.put(f"/internal/v1/hosts/{host_id}/heartbeat", headers=host_headers,
                                 json=snapshot)).status_code == 200
    await api.heartbeat("host-a", ["a1"])
    # ci creates a task; it is assigned to a1 in the same step: both events are ci's.
    task = (await as_token(api, ci, "POST", "/api/v1/tasks",
                           json={"kind": "goal", "goal": "x", "device_id": "a1"})).json()
    assert task["status"] == "assigned"
    # on-call drains host-a: the task goes back to the queue, in on-call's name.
    assert (await as_token(api, oncall, "POST", "/api/v1/hosts/host-a/drain")).status_code == 200
    assert (await as_token(api, oncall, "POST", "/api/v1/hosts/host-a/undrain")).status_code == 200
    assert (await as_token(api, oncall, "POST", f"/api/v1/tasks/{task['task_id']}/cancel")).status_code == 200
    assert (await as_token(api, oncall, "POST", f"/api/v1/devices/{device_id}/disable",
                           json={"reason": "cracked"})).status_code == 200
    assert (await as_token(api, oncall, "POST", f"/api/v1/devices/{device_id}/enable")).status_code == 200
    assert (await as_token(api, oncall, "DELETE", f"/api/v1/devices/{device_id}")).status_code == 200
    enrollment = (await as_token(api, keeper, "POST", "/api/v1/enrollment-tokens", json={})).json()
    assert (await as_token(api, keeper, "DELETE", f"/api/v1/enrollment-tokens/{enrollment['id']}")).status_code == 200
    assert (await as_token(api, keeper, "DELETE", f"/api/v1/operator-tokens/{ci['id']}")).status_code == 200
    assert (await api.admin("POST", f"/api/v1/hosts/{host_id}/revoke")).status_code == 200

    # Each event names its actor's token id beside its name; the bootstrap admin's is "admin".
    ids = {"ci": ci["id"], "oncall": oncall["id"], "keeper": keeper["id"], "admin": "admin"}
    history = [(e["type"], e["actor"], e["actor_id"]) for e in await api.events(task["task_id"])]
    assert history[:2] == [("created", "ci", ci["id"]), ("assigned", "ci", ci["id"])]
    assert ("unassigned", "oncall", oncall["id"]) in history
    assert history[-1] == ("cancelled", "oncall", oncall["id"])
    # A transition no operator caused names none: the undrain placed the task again, so that
    # `assigned` is on-call's too; nothing here was a host's or a deadline's.
    assert all(actor is not None and actor_id == ids[actor] for _, actor, actor_id in history)

    feed = await feed_events(api)
    named = {(e["type"], e.get("actor"), e.get("actor_id")) for e in feed}
    assert {(kind, actor, ids[actor]) for kind, actor in [
        ("operator_token_created", "admin"),
        ("created", "ci"),
        ("host_draining", "oncall"),
        ("unassigned", "oncall"),
        ("cancelled", "oncall"),
        ("device_disabled", "oncall"),
        ("device_enabled", "oncall"),
        ("device_forgotten", "oncall"),
        ("enrollment_token_created", "admin"),
        ("enrollment_token_created", "keeper"),
        ("enrollment_token_revoked", "keeper"),
        ("operator_token_revoked", "keeper"),
        ("host_revoked", "admin"),
    ]} <= named
    # What hosts cause names no actor.
    assert all("actor" not in e and "actor_id" not in e for e in feed if e["type"] == "host_online")


async def test_two_live_tokens_of_one_name_are_told_apart_by_actor_id(api: Api) -> None:
    # A rotation: the new token takes the old one's name, and both are live until the old one
    # is revoked. Their events share `actor`; `actor_id` is each one's id as the listing shows it.
    old = await mint(api, "ci", "submit", "control")
    new = await mint(api, "ci", "submit", "control")
    listed = (await api.admin("GET", "/api/v1/operator-tokens")).json()["operator_tokens"]
    assert {(t["id"], t["name"]) for t in listed} >= {(old["id"], "ci"), (new["id"], "ci")}
    assert old["id"] != new["id"]
    await api.heartbeat("host-a", ["a1"])
    tasks = {}
    for token in (old, new):
        created = await as_token(api, token, "POST", "/api/v1/tasks", json={"kind": "goal", "goal": "x",
                                                                             "selector": {"driver": "sim"}})
        assert created.status_code == 201, created.text
        tasks[token["id"]] = created.json()["task_id"]
    # Each cancels the other's task, and drains or undrains the host: the id follows the caller.
    assert (await as_token(api, new, "POST", f"/api/v1/tasks/{tasks[old['id']]}/cancel")).status_code == 200
    assert (await as_token(api, old, "POST", f"/api/v1/tasks/{tasks[new['id']]}/cancel")).status_code == 200
    assert (await as_token(api, old, "POST", "/api/v1/hosts/host-a/drain")).status_code == 200
    assert (await as_token(api, new, "POST", "/api/v1/hosts/host-a/undrain")).status_code == 200
    revoked = await api.admin("DELETE", f"/api/v1/operator-tokens/{old['id']}")
    assert revoked.status_code == 200, revoked.text

    for creator, canceller in [(old, new), (new, old)]:
        history = [(e["type"], e["actor"], e["actor_id"]) for e in await api.events(tasks[creator["id"]])]
        assert history[0] == ("created", "ci", creator["id"])
        assert history[-1] == ("cancelled", "ci", canceller["id"])
    feed = [(e["type"], e.get("actor"), e.get("actor_id")) for e in await feed_events(api)]
    assert [e for e in feed if e[0] in ("host_draining", "operator_token_revoked")] == [
        ("host_draining", "ci", old["id"]), ("host_draining", "ci", new["id"]),
        ("operator_token_revoked", "admin", "admin")]


async def test_events_a_host_causes_name_no_actor(api: Api) -> None:
    await api.heartbeat("host-a", ["a1"])
    task = (await api.create_task(device_id="a1")).json()
    assignment = (await api.claim("host-a")).json()
    assert (await api.result("host-a", assignment)).status_code == 200
    history = {e["type"]: (e["actor"], e["actor_id"]) for e in await api.events(task["task_id"])}
    assert history["created"] == ("admin", "admin")  # the bootstrap admin's id is its name
    assert history["claimed"] == history["result"] == (None, None)


async def test_no_token_secret_in_a_log_line_an_error_a_metric_or_a_repr(
        api: Api, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    caplog.set_level(logging.INFO, logger=REQUESTS_LOGGER)
    reader = await mint(api, "wall", "read")
    doomed = await mint(api, "doomed", "submit")
    secrets = [reader["token"], doomed["token"]]
    bodies: list[str] = []
    for token, method, path, body in [
        (reader, "GET", "/api/v1/tasks", None),
        (reader, "POST", "/api/v1/tasks", {"kind": "goal", "goal": "x", "device_id": "a1"}),  # 403
        (doomed, "POST", "/api/v1/tasks", {"kind": "nope"}),  # 400
        (reader, "GET", "/api/v1/tasks/t_none", None),  # 404
    ]:
        bodies.append((await as_token(api, token, method, path, json=body)).text)
    await api.client.delete(f"/api/v1/operator-tokens/{doomed['id']}", headers=Api.admin_headers)
    bodies.append((await as_token(api, doomed, "GET", "/api/v1/tasks")).text)  # 401
    bodies.append((await api.client.get("/api/v1/operator-tokens", headers=Api.admin_headers)).text)
    bodies.append((await api.client.get("/metrics")).text)
    records = [repr(vars(r)) for r in caplog.records]
    assert any("/api/v1/tasks" in r for r in records)  # the request lines were captured
    stored, _ = await api.ctx.store.read_operator_token(_digest(reader["token"]))
    access = await api.ctx.auth.authorize(_request(reader["token"]), "read")
    reprs = [repr(stored), repr(access), repr(Access(Operator("x", frozenset({"read"}), "ot_1"))),
             repr(BOOTSTRAP_ADMIN), repr(OperatorToken("ot_1", "n", ["read"], 0, 1))]
    for secret in secrets:
        for text in (*bodies, *records, caplog.text, *reprs):
            assert secret not in text and secret[4:] not in text and _digest(secret) not in text


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def _request(secret: str) -> Request:
    return Request({"type": "http", "method": "GET", "path": "/", "headers": [
        (b"authorization", f"Bearer {secret}".encode())]})
