"""Weighted fair share as a property (PROTOCOL.md, "Sharing the fleet"): over a long random
workload on a saturated pool, each team's devices held, averaged over the run, is within one
device of its weighted max-min fair share (its weight's part of the pool, capped by its quota,
what a capped team cannot use shared among the others by weight)."""

from __future__ import annotations

from typing import Any

import anyio
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import Api

pytestmark = [pytest.mark.anyio]

EXAMPLES = settings(max_examples=12, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
TEAMS = ("red", "green", "blue")
STEPS = 75  # the last team arrives by step 15; 50 steps are measured after a warm-up
WARMUP = 10


def fair_shares(devices: int, weights: dict[str, int], caps: dict[str, int | None]) -> dict[str, float]:
    """Weighted max-min fair shares of ``devices`` between teams that always have work: water
    filling, each team's share its weight times the level, capped by its quota."""
    shares = dict.fromkeys(weights, 0.0)
    open_teams = set(weights)
    left = float(devices)
    while open_teams and left > 1e-9:
        level = left / sum(weights[t] for t in open_teams)
        capped = {t for t in open_teams if caps[t] is not None and shares[t] + weights[t] * level >= caps[t]}
        if not capped:
            for t in open_teams:
                shares[t] += weights[t] * level
            break
        for t in capped:
            left -= caps[t] - shares[t]  # type: ignore[operator]
            shares[t] = float(caps[t])  # type: ignore[arg-type]
        open_teams -= capped
    return shares


def test_fair_shares_fill_the_pool_by_weight_within_the_caps() -> None:
    assert fair_shares(6, {"a": 1, "b": 2}, {"a": None, "b": None}) == {"a": 2.0, "b": 4.0}
    assert fair_shares(6, {"a": 1, "b": 1}, {"a": 1, "b": None}) == {"a": 1.0, "b": 5.0}
    assert fair_shares(4, {"a": 3, "b": 1}, {"a": 2, "b": 1}) == {"a": 2.0, "b": 1.0}


async def _create(api: Api, team: str) -> None:
    response = await api.create_task(selector={"driver": "sim"}, team=team)
    assert response.status_code == 201, response.text


async def _running(api: Api) -> list[dict[str, Any]]:
    listed = await api.admin("GET", "/api/v1/tasks", params={"status": "running", "limit": 100})
    return listed.json()["tasks"]


async def _run(api: Api, devices: int, weights: dict[str, int], caps: dict[str, int | None],
               arrivals: dict[str, int], picks: list[int]) -> dict[str, float]:
    """The run: from its arrival step on, every team keeps as many tasks queued as the pool has
    devices; each step, the host claims what it was assigned and the task that has run longest
    ends (among those that started together, the pick's), freeing its device, so every device
    turns over. The devices each team holds, averaged over the steps after every team arrived
    and a warm-up."""
    await api.heartbeat("host-a", [f"a{n}" for n in range(devices)])
    for team in weights:
        cap = {"max_devices": caps[team]} if caps[team] is not None else {}
        assert (await api.admin("PUT", f"/api/v1/teams/{team}", json={"weight": weights[team], **cap})).status_code == 200
    measured_from = max(arrivals.values()) + WARMUP
    held = dict.fromkeys(weights, 0.0)
    started: dict[str, int] = {}  # task id -> the step it was first seen running
    for step, pick in enumerate(picks):
        queued = {t["team"]: t["queued"] for t in (await api.admin("GET", "/api/v1/teams")).json()["teams"]}
        for team in weights:
            if step >= arrivals[team]:
                for _ in range(devices - queued.get(team, 0)):
                    await _create(api, team)
        while (await api.claim("host-a")).status_code == 200:
            pass
        running = await _running(api)
        for task in running:
            started.setdefault(task["task_id"], step)
        if step >= measured_from:
            for task in running:
                held[task["team"]] += 1
        if not running:
            continue
        first = min(started[t["task_id"]] for t in running)
        longest = [t for t in running if started[t["task_id"]] == first]
        ending = longest[pick % len(longest)]
        assignment = {"task_id": ending["task_id"], "attempt": ending["attempt"],
                      "lease_id": await _lease_of(api, ending["task_id"])}
        assert (await api.result("host-a", assignment)).status_code == 200
    return {team: total / (len(picks) - measured_from) for team, total in held.items()}


async def _lease_of(api: Api, task_id: str) -> str:
    """The running attempt's lease id, from its lease key (the task view does not show it)."""
    lease = await api.ctx.store.redis.get(api.ctx.store.keys.lease(task_id))
    assert lease is not None
    return str(orjson.loads(lease)["lease_id"])


async def test_each_team_holds_its_weighted_max_min_share_within_one_device(api_factory: Any) -> None:
    workloads = st.fixed_dictionaries({
        "devices": st.integers(3, 6),
        "teams": st.integers(2, 3),
        "weights": st.lists(st.integers(1, 3), min_size=3, max_size=3),
        "caps": st.lists(st.one_of(st.none(), st.integers(1, 4)), min_size=3, max_size=3),
        "arrivals": st.lists(st.integers(0, 15), min_size=3, max_size=3),
        "picks": st.lists(st.integers(0, 1000), min_size=STEPS, max_size=STEPS),
    })

    async def one(workload: dict[str, Any]) -> None:
        teams = TEAMS[:workload["teams"]]
        weights = dict(zip(teams, workload["weights"], strict=False))
        caps = dict(zip(teams, workload["caps"], strict=False))
        if all(caps[t] is not None for t in teams) and sum(caps.values()) < workload["devices"]:  # type: ignore[arg-type]
            caps[teams[0]] = None  # a saturated pool: together, the teams can use every device
        arrivals = dict(zip(teams, workload["arrivals"], strict=False))
        async with api_factory() as api:
            held = await _run(api, workload["devices"], weights, caps, arrivals, workload["picks"])
        expected = fair_shares(workload["devices"], weights, caps)
        for team in teams:
            assert abs(held[team] - expected[team]) <= 1, (team, held, expected, workload)

    @EXAMPLES
    @given(workload=workloads)
    def examples(workload: dict[str, Any]) -> None:
        anyio.from_thread.run(one, workload)

    await anyio.to_thread.run_sync(examples)
