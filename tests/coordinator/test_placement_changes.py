"""Placement follows the fleet as it changes (PROTOCOL.md, "Sharing the fleet"): a relabelled or
handed-over device is offered the waiting work it can run now, in the heartbeat that changed it;
a team back under its quota places its waiting work by priority across all its targets, a bounded
slice a step with the reaper placing the rest; and `team_at_quota` is read, never inferred.
Through the HTTP API on real Redis, fakeredis and the cluster; any sequence of such changes is
the model test's (test_model.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson
import pytest

from coordinator.clock import ShiftedClock
from coordinator.state.keys import label_index
from coordinator.state.scripts import DEVICE_FEEDS_PER_STEP
from tests.conftest import Api
from tests.coordinator.helpers import claim_one
from tests.coordinator.invariants import check_stored, read_stored
from tests.support import glob_escape

pytestmark = [pytest.mark.anyio, pytest.mark.cluster]


def _sim(device_id: str, **labels: str) -> dict[str, Any]:
    return {"device_id": device_id, "driver": "sim", "status": "available", "labels": labels}


async def _task(api: Api, task_id: str) -> dict[str, Any]:
    response = await api.admin("GET", f"/api/v1/tasks/{task_id}")
    assert response.status_code == 200, response.text
    return dict(response.json())


async def test_a_relabelled_device_takes_the_waiting_work_it_now_matches_in_that_heartbeat(api: Api) -> None:
    assert (await api.heartbeat("host-a", [_sim("a1", rack="1")])).status_code == 200
    waiting = (await api.create_task(selector={"driver": "sim", "labels": {"rack": "3"}})).json()
    assert waiting["status"] == "queued" and waiting["waiting_reason"] == "no_matching_device"
    assert (await api.heartbeat("host-a", [_sim("a1", rack="3")])).status_code == 200
    placed = await _task(api, waiting["task_id"])
    assert (placed["status"], placed["device_id"]) == ("assigned", "a1")


async def test_a_device_handed_to_another_host_takes_work_only_that_host_runs(api: Api) -> None:
    """A workflow task waits while its device's host does not list the workflow; the device moved
    to a host that does (its old host stopped reporting it) takes it in the new host's heartbeat."""
    lists = {"capabilities": {"workflows": ["note-smoke"]}}
    assert (await api.heartbeat("host-a", [_sim("a1")], agent={"capabilities": {"workflows": []}})).status_code == 200
    waiting = (await api.create_task(kind="workflow", workflow={"name": "note-smoke", "params": {}},
                                     selector={"driver": "sim"})).json()
    assert waiting["status"] == "queued" and waiting["waiting_reason"] == "no_capable_host"
    assert (await api.heartbeat("host-a", [], agent={"capabilities": {"workflows": []}})).status_code == 200
    assert (await api.heartbeat("host-b", [_sim("a1")], agent=lists)).status_code == 200
    placed = await _task(api, waiting["task_id"])
    assert (placed["status"], placed["host_id"]) == ("assigned", "host-b")


async def test_a_team_back_under_its_quota_places_by_priority_across_its_targets(api: Api) -> None:
    """An older priority-0 pool task and a newer priority-50 task aimed at the one free phone: the
    team's cap lifted, the urgent one takes it, whichever target's queue was filed first."""
    assert (await api.admin("PUT", "/api/v1/teams/qa", json={"max_devices": 0})).status_code == 200
    assert (await api.heartbeat("host-a", [_sim("a1")])).status_code == 200
    pool = (await api.create_task(selector={"driver": "sim"}, team="qa")).json()
    urgent = (await api.create_task(device_id="a1", team="qa", priority=50)).json()
    assert pool["waiting_reason"] == urgent["waiting_reason"] == "team_at_quota"
    assert pool["candidates"]["team_at_quota"] is True
    assert (await api.admin("PUT", "/api/v1/teams/qa", json={"max_devices": 1})).status_code == 200
    assert (await _task(api, urgent["task_id"]))["status"] == "assigned"
    held = await _task(api, pool["task_id"])
    assert held["status"] == "queued" and held["waiting_reason"] == "matching_devices_busy"
    assert held["candidates"]["team_at_quota"] is True  # at its cap again, and nothing free


async def test_a_large_backlog_is_placed_in_bounded_slices_and_the_reaper_places_the_rest(api: Api) -> None:
    """Forty free phones, each wanted by its own target of one capped team: lifting the cap places
    a slice at once and leaves the team to the reaper, whose passes place every task."""
    devices = [_sim(f"a{n:02d}", slot=str(n)) for n in range(40)]
    assert (await api.admin("PUT", "/api/v1/teams/qa", json={"max_devices": 0})).status_code == 200
    assert (await api.heartbeat("host-a", devices)).status_code == 200
    tasks = [(await api.create_task(selector={"driver": "sim", "labels": {"slot": str(n)}}, team="qa")).json()
             for n in range(40)]
    assert (await api.admin("PUT", "/api/v1/teams/qa", json={"max_devices": None})).status_code == 200
    first = [(await _task(api, t["task_id"]))["status"] for t in tasks]
    assert 0 < first.count("assigned") < len(tasks), "one step places a bounded slice"
    while await api.ctx.store.place_left_over(1):
        pass
    assert [(await _task(api, t["task_id"]))["status"] for t in tasks] == ["assigned"] * len(tasks)
    assert (await claim_one(api, "host-a"))["task_id"] == tasks[0]["task_id"], "the oldest first"


async def test_an_upgrade_moves_the_earlier_layouts_queues_and_free_devices(api: Api) -> None:
    """A deployment of the earlier layout (a queue per driver and team, one lex `free` set): the
    upgrade a process runs as it starts moves each queued task to its target's queue and each free
    device to the free index, and the next heartbeat's freed device takes the oldest task."""
    redis, keys = api.ctx.store.redis, api.ctx.store.keys
    assert (await api.heartbeat("host-a", [_sim("a1"), _sim("a2", rack="1")])).status_code == 200
    adb = {"device_id": "b1", "driver": "adb", "status": "available"}
    assert (await api.heartbeat("host-b", [adb])).status_code == 200
    held = [(await api.create_task(device_id=d)).json() for d in ("a1", "a2")]
    waiting = [(await api.create_task(selector={"driver": "sim"})).json() for _ in range(3)]
    assignment = await claim_one(api, "host-a")
    # written back as the earlier layout had them: no targets, queues by driver, `free` by lex
    await redis.delete(keys.targets, keys.target_ids, keys.target_teams("t1"), keys.team_targets("default"),
                       keys.driver_targets("sim"), keys.device_targets("a1"), keys.device_targets("a2"))
    for task in waiting:
        record = orjson.loads(await redis.hget(keys.tasks, task["task_id"]))
        queue = keys.waiting(f"{record.pop('target_id')}|default")
        score = await redis.zscore(queue, task["task_id"])
        await redis.zrem(queue, task["task_id"])
        await redis.zadd(keys.waiting("sim|default"), {task["task_id"]: score})
        await redis.hset(keys.tasks, task["task_id"], orjson.dumps(record))
    await redis.zadd(keys.base + "queue_teams:sim", {"default": 0})
    assert await redis.zrem(keys.free_devices("adb"), "b1") == 1
    await redis.zadd(keys.base + "free", {"adb\0b1": 0})
    for index in await redis.keys(glob_escape(keys.base) + "pooled_label:*"):
        await redis.delete(index)  # the earlier layout had no index of the pool by label
    await redis.hdel(keys.upgrades, "placement")
    moved = 0
    while (sweep := await api.ctx.store.upgrade_placement(1)).taken == 1:
        moved += sweep.acted
    assert moved + sweep.acted >= len(waiting) + 3, "each queued task, then each pooled device"
    assert await redis.hget(keys.upgrades, "placement") == b"done"
    assert not await redis.exists(keys.waiting("sim|default"), keys.base + "queue_teams:sim")
    assert await redis.zscore(keys.free_devices("adb"), "b1") is not None
    assert not await redis.exists(keys.base + "free")
    check_stored(await read_stored(redis, keys, api.ctx.queries), None, 60_000, {})
    assert (await api.result("host-a", assignment)).status_code == 200  # a1 freed: the oldest waiting task
    assert (await _task(api, waiting[0]["task_id"]))["device_id"] == held[0]["device_id"]


async def test_a_heartbeat_feeds_a_bounded_number_of_devices_and_the_reaper_the_rest(api: Api) -> None:
    """Twenty relabelled phones, each wanted by a waiting task: the heartbeat feeds its bound
    (DEVICE_FEEDS_PER_STEP), the others wait for the reaper (not free meanwhile, so nothing jumps
    the queue), whose next calls feed them, that bound a call."""
    bound = DEVICE_FEEDS_PER_STEP
    assert (await api.heartbeat("host-a", [_sim(f"a{n:02d}") for n in range(20)])).status_code == 200
    tasks = [(await api.create_task(selector={"driver": "sim", "labels": {"slot": str(n)}})).json()
             for n in range(20)]
    assert {t["waiting_reason"] for t in tasks} == {"no_matching_device"}
    relabelled = [_sim(f"a{n:02d}", slot=str(n)) for n in range(20)]
    assert (await api.heartbeat("host-a", relabelled)).status_code == 200
    statuses = [(await _task(api, t["task_id"]))["status"] for t in tasks]
    assert statuses.count("assigned") == bound
    late = (await api.create_task(selector={"driver": "sim"})).json()
    assert late["status"] == "queued", "a device left for the reaper is not free"
    assert await api.ctx.store.place_left_over(100) == -(-(20 - bound) // bound)
    assert [(await _task(api, t["task_id"]))["status"] for t in tasks] == ["assigned"] * 20
    assert (await _task(api, late["task_id"]))["status"] == "queued"


async def test_labels_with_index_separators_are_indexed_apart_and_still_matched(api: Api) -> None:
    """A label name or value holding `%`, `|` or `=` is escaped in its index's name (so
    `a|b=c` is not `a` = `b=c`), and one without them is not: each device lands in its own label's
    index under the name the reads compute (coordinator.state.keys.label_index), and a relabelled
    device still takes the waiting task that asks for its escaped label."""
    redis, keys = api.ctx.store.redis, api.ctx.store.keys
    waiting = (await api.create_task(selector={"driver": "sim", "labels": {"a|b": "c=d%"}})).json()
    assert waiting["status"] == "queued"
    devices = [_sim("a1", **{"a|b": "c=d%"}), _sim("a2", a="b=c"), _sim("a3", rack="1")]
    assert (await api.heartbeat("host-a", devices)).status_code == 200
    for device_id, (name, value) in (("a1", ("a|b", "c=d%")), ("a2", ("a", "b=c")), ("a3", ("rack", "1"))):
        members = await redis.zrange(keys.pooled_label(label_index("sim", name, value)), 0, -1)
        assert members == [device_id.encode()], (device_id, members)
    placed = await _task(api, waiting["task_id"])
    assert (placed["status"], placed["device_id"]) == ("assigned", "a1")
    check_stored(await read_stored(redis, keys, api.ctx.queries), None, 60_000, {})


async def test_two_teams_back_under_their_caps_in_one_heartbeat_place_by_priority_across_them(api: Api) -> None:
    """Teams red and blue, cap 1 each, each hold a phone on host-a; b1 on host-b is free, and each
    team waits for it (red at priority 5, blue at 0), held back by its cap. Host-a's devices all
    go in one heartbeat: both teams are back under their caps in that step, and b1 goes to red's
    priority-5 task (PROTOCOL.md, "Sharing the fleet": priority first), whichever team's device
    the step let go first."""
    for team in ("blue", "red"):
        assert (await api.admin("PUT", f"/api/v1/teams/{team}", json={"max_devices": 1})).status_code == 200
    assert (await api.heartbeat("host-a", [_sim("a1"), _sim("a2")])).status_code == 200
    held = [(await api.create_task(device_id=device, team=team)).json() for device, team in (("a1", "blue"), ("a2", "red"))]
    assert [t["status"] for t in held] == ["assigned", "assigned"]
    assert (await api.heartbeat("host-b", [_sim("b1")])).status_code == 200
    low = (await api.create_task(device_id="b1", team="blue", priority=0)).json()
    high = (await api.create_task(selector={"driver": "sim"}, team="red", priority=5)).json()
    assert (low["status"], high["status"]) == ("queued", "queued")
    assert (await api.heartbeat("host-a", [])).status_code == 200
    assert (await _task(api, high["task_id"]))["device_id"] == "b1"
    assert (await _task(api, low["task_id"]))["status"] == "queued"


async def test_two_hosts_swept_offline_in_one_call_place_the_teams_they_free_by_priority(
        api_factory: Callable[..., Any]) -> None:
    """As above, but the step is the reaper's sweep of silent hosts: blue's phone on host-a and
    red's on host-b (assigned, unclaimed) go back to the queue in one expireHosts call, host-a's
    first (it fell silent first). c1 on host-c waits for both teams, held back by their caps; it
    goes to red's priority-5 task, not to blue's priority-0 one because blue was back under its
    cap before host-b was swept."""
    clock = ShiftedClock()
    async with api_factory(clock=clock) as api:
        for team in ("blue", "red"):
            assert (await api.admin("PUT", f"/api/v1/teams/{team}", json={"max_devices": 1})).status_code == 200
        for host, device, team in (("host-a", "a1", "blue"), ("host-b", "b1", "red")):
            assert (await api.heartbeat(host, [_sim(device)])).status_code == 200
            assert (await api.create_task(device_id=device, team=team)).json()["status"] == "assigned"
            clock.advance(1_000)
        assert (await api.heartbeat("host-c", [_sim("c1")])).status_code == 200
        low = (await api.create_task(device_id="c1", team="blue", priority=0)).json()
        high = (await api.create_task(selector={"driver": "sim"}, team="red", priority=5)).json()
        assert (low["status"], high["status"]) == ("queued", "queued")
        clock.advance(api.ctx.settings.host_offline_after_ms - 1_000)
        assert (await api.heartbeat("host-c", [_sim("c1")])).status_code == 200
        assert (await api.sweep())["hosts"] == 2
        assert (await _task(api, high["task_id"]))["device_id"] == "c1"
        assert (await _task(api, low["task_id"]))["status"] == "queued"


async def test_a_run_cancelled_feeds_the_devices_it_lets_go_once_all_are_let_go(api: Api) -> None:
    """Blue's run holds a1 and a2, over blue's cap of 1 (lowered after they were placed); blue's
    older task and red's newer one, same priority, wait for a1. Cancelling the run lets both
    devices go in one step: blue holds none after it, so a1 goes to blue's older task (PROTOCOL.md,
    "Sharing the fleet": fewest held for the weight, then the oldest), not to red's because blue
    was still counted at its cap when a1, the first, was let go."""
    assert (await api.heartbeat("host-a", [_sim("a1"), _sim("a2")])).status_code == 200
    created = await api.client.post("/api/v1/runs", headers=api.admin_headers, json={
        "team": "blue", "tasks": [{"kind": "goal", "goal": "g", "device_id": device} for device in ("a1", "a2")]})
    assert created.status_code == 201, created.text
    assert (await api.admin("PUT", "/api/v1/teams/blue", json={"max_devices": 1})).status_code == 200
    older = (await api.create_task(device_id="a1", team="blue")).json()
    newer = (await api.create_task(device_id="a1", team="red")).json()
    assert (older["status"], newer["status"]) == ("queued", "queued")

    cancelled = await api.admin("POST", f"/api/v1/runs/{created.json()['run_id']}/cancel")
    assert cancelled.status_code == 200, cancelled.text
    placed = await _task(api, older["task_id"])
    assert (placed["status"], placed["device_id"]) == ("assigned", "a1")
    assert (await _task(api, newer["task_id"]))["status"] == "queued"
