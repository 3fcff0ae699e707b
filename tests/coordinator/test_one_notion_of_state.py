"""One notion of each state (DESIGN.md): whatever order heartbeats, sweeps and requests arrive
in, a queued task never waits beside a device it could run on (real Redis, fakeredis, cluster).

These are the sequences found by hand and by the model-based test (tests/coordinator/
test_model.py), kept as named regressions."""

from __future__ import annotations

from typing import Any

import pytest

from tests.conftest import Api
from tests.coordinator.helpers import claim_one, silence_host

pytestmark = [pytest.mark.anyio, pytest.mark.cluster]

TARGETS = [pytest.param({"device_id": "a1"}, id="device"), pytest.param({"selector": {"driver": "sim"}}, id="selector")]


@pytest.mark.parametrize("target", TARGETS)
async def test_a_host_back_before_the_sweep_runs_the_task_queued_while_it_was_past_its_deadline(
        api: Api, target: dict[str, Any]) -> None:
    await api.heartbeat("host-a", ["a1"])
    await silence_host(api, "host-a")  # its offline deadline has passed; no sweep has run
    created = (await api.create_task(**target)).json()
    assert created["status"] == "queued"

    assert (await api.heartbeat("host-a", ["a1"])).status_code == 200  # the same snapshot as before
    assert (await api.task(created["task_id"]))["status"] == "assigned"
    assert (await claim_one(api, "host-a"))["task_id"] == created["task_id"]


@pytest.mark.parametrize("target", TARGETS)
async def test_a_host_back_after_the_sweep_runs_the_task_queued_while_it_was_offline(
        api: Api, target: dict[str, Any]) -> None:
    await api.heartbeat("host-a", ["a1"])
    await silence_host(api, "host-a")
    created = (await api.create_task(**target)).json()
    assert (await api.sweep())["hosts"] == 1

    await api.heartbeat("host-a", ["a1"])
    assert (await api.task(created["task_id"]))["status"] == "assigned"


async def test_a_host_back_before_the_sweep_feeds_its_devices_oldest_task_first(api: Api) -> None:
    await api.heartbeat("host-a", ["a1", "a2"])
    await silence_host(api, "host-a")
    first = (await api.create_task(selector={"driver": "sim"})).json()
    aimed = (await api.create_task(device_id="a2")).json()
    second = (await api.create_task(selector={"driver": "sim"})).json()

    await api.heartbeat("host-a", ["a1", "a2"])
    statuses = {t: (await api.task(t))["status"] for t in (first["task_id"], aimed["task_id"], second["task_id"])}
    # two devices, three tasks: the two oldest that fit run; the youngest waits, reason given
    assert statuses == {first["task_id"]: "assigned", aimed["task_id"]: "assigned", second["task_id"]: "queued"}
    waiting = await api.task(second["task_id"])
    assert waiting["waiting_reason"] == "matching_devices_busy"
    pooled = (await api.admin("GET", "/api/v1/devices")).json()["devices"]
    assert {d["device_id"]: d["reserved_by"] is not None for d in pooled} == {"a1": True, "a2": True}


# -- found by the model-based test -----------------------------------------------------------


async def test_a_retried_attempts_report_replayed_after_the_next_attempt_reported_gets_its_first_answer(
        api: Api) -> None:
    await api.heartbeat("host-a", ["a1"])
    await api.create_task(device_id="a1", max_attempts=3)
    first = await claim_one(api, "host-a")
    retry = {"status": "failed", "failure_reason": "device lost", "retryable": True}
    answered = await api.result("host-a", first, **retry)
    assert answered.status_code == 200 and answered.json()["task_status"] == "queued"
    second = await claim_one(api, "host-a")
    assert second["attempt"] == 2
    assert (await api.result("host-a", second, **retry)).json()["task_status"] == "queued"

    replayed = await api.result("host-a", first, **retry)
    assert replayed.status_code == 200, replayed.text
    assert replayed.json() == {**answered.json(), "replayed": True}
    other = await api.result("host-a", first, status="succeeded")
    assert other.status_code == 409 and other.json()["error"]["code"] == "result_conflict"
