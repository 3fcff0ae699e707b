"""Sharing the fleet (PROTOCOL.md): priorities, weighted fair share between teams, quotas, teams
named by tokens, and the teams' listing, through the HTTP API on real Redis, fakeredis and the
cluster. The order rules over any sequence of steps are the model test's (test_model.py)."""

from __future__ import annotations

from typing import Any

import pytest

from coordinator.clock import ShiftedClock
from coordinator.reaper import upgrade_before_serving
from tests.conftest import Api
from tests.coordinator.helpers import claim_one

pytestmark = [pytest.mark.anyio, pytest.mark.cluster]

SIM = {"driver": "sim"}


async def _create(api: Api, **body: Any) -> dict[str, Any]:
    """A task of any sim device, unless ``device_id`` names one."""
    target = {} if "device_id" in body else {"selector": SIM}
    response = await api.create_task(**target, **body)
    assert response.status_code == 201, response.text
    return response.json()


async def _finish_on(api: Api, host: str) -> dict[str, Any]:
    """Claim the host's next assignment and report it: its device is freed."""
    assignment = await claim_one(api, host)
    assert (await api.result(host, assignment)).status_code == 200
    return assignment


async def _set_team(api: Api, team: str, **settings: Any) -> Any:
    return await api.admin("PUT", f"/api/v1/teams/{team}", json=settings)


async def _teams(api: Api) -> dict[str, dict[str, Any]]:
    response = await api.admin("GET", "/api/v1/teams")
    assert response.status_code == 200, response.text
    return {t["team"]: t for t in response.json()["teams"]}


async def test_a_freed_device_takes_the_highest_priority_first(api: Api) -> None:
    await api.heartbeat("host-a", ["a1"])
    await _create(api)  # holds a1
    low = await _create(api, priority=-5)
    normal = await _create(api)
    urgent = await _create(api, priority=50)
    aimed = await _create(api, device_id="a1", priority=10)
    order = [(await _finish_on(api, "host-a"))["task_id"] for _ in range(5)]
    assert order[1:] == [urgent["task_id"], aimed["task_id"], normal["task_id"], low["task_id"]]


async def test_a_freed_device_goes_to_the_team_holding_fewest_devices_for_its_weight(api: Api) -> None:
    await api.heartbeat("host-a", ["a1", "a2", "a3", "a4"])
    assert (await _set_team(api, "big", weight=3)).status_code == 200
    held = [await _create(api, team="big") for _ in range(3)] + [await _create(api, team="small")]
    assert all(t["status"] == "assigned" for t in held)
    # Saturated: both teams wait. big holds 3 for weight 3 (1.0), small 1 for weight 1 (1.0):
    # a tie, so the older waiting task; then small has 2 (2.0) against big's 3 (1.0): big.
    small_first = await _create(api, team="small")
    big_next = await _create(api, team="big")
    big_last = await _create(api, team="big")
    assert (await api.task(small_first["task_id"]))["status"] == "queued"
    taken = [(await _finish_on(api, "host-a"))["task_id"] for _ in range(3)]
    assert taken == [t["task_id"] for t in held[:3]]
    tasks = [await api.task(t["task_id"]) for t in (small_first, big_next, big_last)]
    assert [t["status"] for t in tasks] == ["assigned", "assigned", "assigned"]


async def test_a_team_arriving_late_gets_the_next_freed_devices_until_it_holds_its_share(api: Api) -> None:
    await api.heartbeat("host-a", ["a1", "a2", "a3", "a4"])
    early = [await _create(api, team="early") for _ in range(8)]
    late = [await _create(api, team="late") for _ in range(3)]
    # early holds all four; the next two freed devices go to late (0, then 1 against early's 3),
    # then they alternate.
    for _ in range(2):
        await _finish_on(api, "host-a")
    statuses = [(await api.task(t["task_id"]))["status"] for t in late]
    assert statuses == ["assigned", "assigned", "queued"]
    assert (await _teams(api))["late"]["running"] == 2 and (await _teams(api))["early"]["running"] == 2
    early_statuses = [(await api.task(t["task_id"]))["status"] for t in early]
    assert early_statuses.count("queued") == 4 and early_statuses.count("succeeded") == 2


async def test_a_team_at_its_quota_waits_and_the_devices_go_to_others(api: Api) -> None:
    await api.heartbeat("host-a", ["a1", "a2", "a3"])
    assert (await _set_team(api, "nightly", max_devices=1)).json()["max_devices"] == 1
    first = await _create(api, team="nightly")
    second = await _create(api, team="nightly")
    assert first["status"] == "assigned" and second["status"] == "queued"
    assert second["waiting_reason"] == "team_at_quota"
    other = await _create(api, team="release")
    assert other["status"] == "assigned"
    assert (await api.task(second["task_id"]))["waiting_reason"] == "team_at_quota"
    teams = await _teams(api)
    assert (teams["nightly"]["running"], teams["nightly"]["queued"]) == (1, 1)
    # Lifting the quota takes effect at once: a3 is free.
    lifted = await _set_team(api, "nightly", max_devices=None)
    assert lifted.status_code == 200 and lifted.json()["max_devices"] is None
    assert (await api.task(second["task_id"]))["status"] == "assigned"
    assert (await _teams(api))["nightly"]["running"] == 2


async def test_a_team_below_its_quota_again_takes_a_free_device_it_waited_beside(api: Api) -> None:
    await api.heartbeat("host-a", ["a1"])
    await api.heartbeat("host-b", ["b1"])
    await _set_team(api, "nightly", max_devices=1)
    running = await _create(api, team="nightly", device_id="a1")
    waiting = await _create(api, team="nightly", device_id="b1")
    assert waiting["waiting_reason"] == "team_at_quota"
    await _finish_on(api, "host-a")  # a1 is freed, but the waiting task is b1's: it takes b1 now
    assert running["task_id"] != waiting["task_id"]
    assert (await api.task(waiting["task_id"]))["status"] == "assigned"


async def test_a_tokens_team_is_its_tasks_team(api: Api) -> None:
    made = await api.admin("POST", "/api/v1/operator-tokens",
                           json={"name": "ci", "scopes": ["submit"], "team": "checkout"})
    assert made.status_code == 201 and made.json()["team"] == "checkout"
    headers = {"authorization": f"Bearer {made.json()['token']}"}
    body = {"kind": "goal", "goal": "g", "selector": SIM}
    own = await api.client.post("/api/v1/tasks", json=body, headers=headers)
    assert own.status_code == 201 and own.json()["team"] == "checkout"
    named = await api.client.post("/api/v1/tasks", json={**body, "team": "checkout"}, headers=headers)
    assert named.status_code == 201
    other = await api.client.post("/api/v1/tasks", json={**body, "team": "payments"}, headers=headers)
    assert other.status_code == 403 and other.json()["error"]["code"] == "insufficient_scope"
    assert (await _create(api))["team"] == "default"
    assert (await _create(api, team="payments"))["team"] == "payments"
    assert {"checkout", "default", "payments"} <= set(await _teams(api))


@pytest.mark.parametrize("body", [
    {"priority": 101}, {"priority": -101}, {"priority": "1"}, {"priority": 1.5}, {"team": "not an id"},
    {"team": None}, {"priority": None},
])
async def test_a_bad_priority_or_team_is_refused_and_creates_nothing(api: Api, body: dict[str, Any]) -> None:
    response = await api.create_task(selector=SIM, **body)
    assert response.status_code == 400 and response.json()["error"]["code"] == "invalid_request"
    listed = await api.admin("GET", "/api/v1/tasks")
    assert listed.json()["tasks"] == []


@pytest.mark.parametrize("body", [
    {"weight": 0}, {"weight": 1001}, {"weight": None}, {"max_devices": -1}, {"max_devices": "3"},
    {"weight": 2, "color": "red"},
])
async def test_bad_team_settings_are_refused_and_change_nothing(api: Api, body: dict[str, Any]) -> None:
    assert (await _set_team(api, "qa", weight=2, max_devices=5)).status_code == 200
    response = await _set_team(api, "qa", **body)
    assert response.status_code == 400 and response.json()["error"]["code"] == "invalid_request"
    qa = (await _teams(api))["qa"]
    assert (qa["weight"], qa["max_devices"]) == (2, 5)


async def test_only_the_admin_sets_a_team(api: Api) -> None:
    made = await api.admin("POST", "/api/v1/operator-tokens", json={"name": "ops", "scopes": ["control", "read"]})
    headers = {"authorization": f"Bearer {made.json()['token']}"}
    refused = await api.client.put("/api/v1/teams/qa", json={"weight": 5}, headers=headers)
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "insufficient_scope"
    assert (await api.client.get("/api/v1/teams", headers=headers)).status_code == 200
    assert "qa" not in await _teams(api)


async def test_the_teams_listing_counts_devices_held_queued_tasks_and_device_time(api: Api) -> None:
    await api.heartbeat("host-a", ["a1"])
    await _create(api, team="qa")
    await _create(api, team="qa")
    qa = (await _teams(api))["qa"]
    assert (qa["weight"], qa["max_devices"], qa["running"], qa["queued"]) == (1, None, 1, 1)
    metrics = (await api.client.get("/metrics")).text
    assert 'tether_team_running{team="qa"} 1.0' in metrics and 'tether_team_queued{team="qa"} 1.0' in metrics
    await _finish_on(api, "host-a")
    qa = (await _teams(api))["qa"]
    assert (qa["running"], qa["queued"]) == (1, 0)
    assert qa["device_seconds_1h"] >= 0


async def _run_for(api: Api, clock: ShiftedClock, ms: int) -> None:
    """One qa task on a1, running ``ms`` by the clock before its result."""
    await api.heartbeat("host-a", ["a1"])
    await _create(api, team="qa", device_id="a1")
    assignment = await claim_one(api, "host-a")
    clock.advance(ms)
    assert (await api.result("host-a", assignment)).status_code == 200


async def test_device_time_counts_the_last_hour_of_runs_and_the_rest_is_dropped(api_factory: Any) -> None:
    clock = ShiftedClock()
    async with api_factory(clock=clock) as api:
        store = api.ctx.store
        await _run_for(api, clock, 5_000)
        assert 5 <= (await _teams(api))["qa"]["device_seconds_1h"] < 6
        clock.advance(61 * 60_000)
        assert (await _teams(api))["qa"]["device_seconds_1h"] == 0
        await _run_for(api, clock, 2_000)
        assert 2 <= (await _teams(api))["qa"]["device_seconds_1h"] < 3
        # the first result of a minute dropped every field an hour old: the hash holds the hour only
        assert await store.redis.hlen(store.keys.team_usage("qa")) == 1


async def test_a_start_moves_the_device_time_an_earlier_version_kept_by_minute_60(api: Api) -> None:
    store = api.ctx.store
    await _create(api, team="qa", device_id="nowhere")  # names the team
    # fields an earlier version wrote (minute % 60 -> "<minute>:<ms>"): this minute's, and one of
    # the minute before beside this version's field of that minute
    minute = await api.ctx.queries.redis_time_ms() // 60_000
    usage = store.keys.team_usage("qa")
    await store.redis.hset(usage, mapping={str(minute % 60): f"{minute}:3000",
                                           str((minute - 1) % 60): f"{minute - 1}:1000", str(minute - 1): 500})
    await store.redis.hdel(store.keys.upgrades, "team_usage")  # (this process's start had walked it)
    assert await upgrade_before_serving(store) >= 1
    assert await store.redis.hgetall(usage) == {str(minute).encode(): b"3000", str(minute - 1).encode(): b"1500"}
    assert 4 <= (await _teams(api))["qa"]["device_seconds_1h"] < 5
    assert await upgrade_before_serving(store) == 0  # done: a later start walks nothing


async def test_the_task_listing_filters_by_team(api: Api) -> None:
    mine = await _create(api, team="qa")
    await _create(api, team="other")
    listed = await api.admin("GET", "/api/v1/tasks", params={"team": "qa"})
    assert [t["task_id"] for t in listed.json()["tasks"]] == [mine["task_id"]]


# -- teams come and go, and are listed in pages ----------------------------------------------


async def _mint(api: Api, name: str, team: str) -> dict[str, Any]:
    made = await api.admin("POST", "/api/v1/operator-tokens", json={"name": name, "scopes": ["submit"], "team": team})
    assert made.status_code == 201, made.text
    answer: dict[str, Any] = made.json()
    return answer


async def test_a_team_with_no_work_kept_no_setting_and_no_token_is_forgotten(api_factory: Any) -> None:
    clock = ShiftedClock()
    async with api_factory(clock=clock, task_retention_s=10) as api:
        store = api.ctx.store
        await api.heartbeat("host-a", ["a1"])
        for i in range(5):  # five teams named by a task each, cancelled at once
            task = await _create(api, team=f"gone-{i}", device_id="nowhere")
            await api.admin("POST", f"/api/v1/tasks/{task['task_id']}/cancel")
        await _run_for(api, clock, 1_000)  # qa: a task that ran on a1, so it used device time
        await _create(api, team="waiting", device_id="nowhere")  # still queued when the others go
        token = await _mint(api, "ci", "tokened")
        assert (await _set_team(api, "weighted", weight=3)).status_code == 200
        assert set(await _teams(api)) == {*(f"gone-{i}" for i in range(5)), "qa", "waiting", "tokened", "weighted"}
        clock.advance(11_000)
        await api.sweep()
        assert set(await _teams(api)) == {"waiting", "tokened", "weighted"}
        # nothing of a forgotten team is left behind: its fields, its name, its device time
        fields = {f.decode().split("|")[0] for f in await store.redis.hkeys(store.keys.teams)}
        assert fields <= {"waiting", "tokened", "weighted"}
        assert await store.redis.exists(store.keys.team_usage("qa")) == 0
        # a revoked token and a setting back to the default were what named the last two
        assert (await api.admin("DELETE", f"/api/v1/operator-tokens/{token['id']}")).status_code == 200
        back = await _set_team(api, "weighted", weight=1)
        assert back.status_code == 200 and back.json()["weight"] == 1
        assert set(await _teams(api)) == {"waiting"}
        # named again, a team starts afresh
        assert (await _create(api, team="qa", device_id="nowhere"))["team"] == "qa"
        assert (await _teams(api))["qa"]["device_seconds_1h"] == 0


async def test_a_team_with_a_task_of_a_running_run_is_kept_with_it(api_factory: Any) -> None:
    clock = ShiftedClock()
    async with api_factory(clock=clock, task_retention_s=10) as api:
        created = await api.admin("POST", "/api/v1/runs", json={"team": "nightly", "tasks": [
            {"kind": "goal", "goal": "g", "device_id": "nowhere"}, {"kind": "goal", "goal": "g", "device_id": "a1"}]})
        run = created.json()
        tasks = (await api.admin("GET", "/api/v1/tasks", params={"run_id": run["run_id"]})).json()["tasks"]
        ended = next(t for t in tasks if t["device_id"] == "nowhere")
        await api.admin("POST", f"/api/v1/tasks/{ended['task_id']}/cancel")
        clock.advance(11_000)
        await api.sweep()
        assert "nightly" in await _teams(api)


async def test_the_teams_listing_pages_by_name(api: Api) -> None:
    names = [f"team-{i:02d}" for i in range(7)]
    for name in reversed(names):
        assert (await _set_team(api, name, weight=2)).status_code == 200
    seen: list[str] = []
    cursor: str | None = None
    pages = 0
    while True:
        params: dict[str, Any] = {"limit": 3} | ({"cursor": cursor} if cursor else {})
        page = (await api.admin("GET", "/api/v1/teams", params=params)).json()
        assert len(page["teams"]) <= 3
        seen += [t["team"] for t in page["teams"]]
        pages += 1
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == names and pages == 3
    whole = (await api.admin("GET", "/api/v1/teams")).json()
    assert [t["team"] for t in whole["teams"]] == names and whole["next_cursor"] is None
    for bad in ({"limit": 0}, {"limit": 1001}, {"limit": "x"}, {"cursor": "not an id"}):
        refused = await api.admin("GET", "/api/v1/teams", params=bad)
        assert refused.status_code == 400 and refused.json()["error"]["code"] == "invalid_request", bad


async def test_teams_named_before_the_upgrade_are_listed_and_kept(api_factory: Any, redis_client: Any) -> None:
    from coordinator.state.keys import Keys
    from tests.support import unique_prefix

    prefix = unique_prefix()
    keys = Keys(prefix)
    # the teams hash as an earlier version left it: a token's team, a set one, one named by a task
    await redis_client.hset(keys.teams, mapping={"tokened": "{}", "weighted": '{"weight": 3}', "tasked|queued": "0",
                                                 "tasked|running": "0"})
    clock = ShiftedClock()
    async with api_factory(prefix=prefix, clock=clock, task_retention_s=10) as api:
        assert set(await _teams(api)) == {"tokened", "weighted", "tasked"}
        # one of its earlier tasks now purged: the team is kept (its other tasks were never counted)
        task = await _create(api, team="tasked", device_id="nowhere")
        await api.admin("POST", f"/api/v1/tasks/{task['task_id']}/cancel")
        clock.advance(11_000)
        await api.sweep()
        assert set(await _teams(api)) == {"tokened", "weighted", "tasked"}
