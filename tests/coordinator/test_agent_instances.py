"""Two agents heartbeating as one host are noticed (issue 42, seen 6: two agents started with the
same static host id overwrote each other's devices, and a task failed ``device_gone``): the
host's record names the other agent, and the log says so once; an agent restarted in place is no
conflict."""

from __future__ import annotations

import logging

import pytest

from coordinator.api.agent_instances import AgentInstances
from tests.conftest import Api

pytestmark = [pytest.mark.anyio, pytest.mark.cluster]

HOST = "host-a"


async def _beat(api: Api, instance_id: str, hostname: str) -> None:
    response = await api.heartbeat(HOST, [f"{hostname}-phone"],
                                   agent={"instance_id": instance_id, "hostname": hostname, "version": "1"})
    assert response.status_code == 200, response.text


async def _host(api: Api) -> dict[str, object]:
    response = await api.admin("GET", f"/api/v1/hosts/{HOST}")
    assert response.status_code == 200, response.text
    body: dict[str, object] = response.json()
    return body


async def test_two_agents_alternating_are_named_in_the_host_s_record(api: Api,
                                                                     caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="coordinator.hosts")
    await _beat(api, "ai_one", "one.example")
    await _beat(api, "ai_two", "two.example")
    assert (await _host(api))["conflicting_agent"] is None  # a restart in place looks like this
    await _beat(api, "ai_one", "one.example")
    host = await _host(api)
    assert host["agent_instance_id"] == "ai_one"
    conflict = host["conflicting_agent"]
    assert isinstance(conflict, dict) and conflict["instance_id"] == "ai_two"
    assert conflict["hostname"] == "two.example" and str(conflict["last_seen"]).endswith("Z")
    await _beat(api, "ai_two", "two.example")
    conflict = (await _host(api))["conflicting_agent"]
    assert isinstance(conflict, dict) and conflict["instance_id"] == "ai_one"
    lines = [r.getMessage() for r in caplog.records if "two agents heartbeat as host" in r.getMessage()]
    assert len(lines) == 1, lines  # once per conflict, not once per heartbeat
    assert "ai_one" in lines[0] and "ai_two" in lines[0] and HOST in lines[0]


async def test_the_conflict_clears_once_one_agent_is_left(api: Api) -> None:
    for instance in ("ai_one", "ai_two", "ai_one"):
        await _beat(api, instance, instance)
    assert (await _host(api))["conflicting_agent"] is not None
    await _beat(api, "ai_one", "ai_one")  # nothing from ai_two since ai_one's previous heartbeat
    assert (await _host(api))["conflicting_agent"] is None


async def test_an_agent_restarted_in_place_is_no_conflict(api: Api) -> None:
    for instance in ("ai_old", "ai_old", "ai_new", "ai_new", "ai_new"):
        await _beat(api, instance, "lab.example")
    host = await _host(api)
    assert host["conflicting_agent"] is None and host["agent_instance_id"] == "ai_new"


def test_an_instance_silent_for_longer_than_the_window_is_forgotten() -> None:
    now = [0.0]
    instances = AgentInstances(10.0, clock=lambda: now[0])
    assert instances.saw(HOST, "a", None) is None
    now[0] = 1.0
    assert instances.saw(HOST, "b", None) is None
    now[0] = 12.0  # b last heard 11 s ago: gone, whatever a says now
    assert instances.saw(HOST, "a", None) is None
    now[0] = 13.0
    assert instances.saw("host-b", "a", None) is None  # another host's instance is another matter


def test_at_most_max_hosts_are_remembered() -> None:
    instances = AgentInstances(10.0, max_hosts=2, clock=lambda: 0.0)
    for host in ("h1", "h2", "h3"):
        instances.saw(host, "a", None)
        instances.saw(host, "b", None)
    assert instances.saw("h1", "a", None) is None  # h1 forgotten: a is heard of for the first time
    other = instances.saw("h3", "a", None)
    assert other is not None and other.instance_id == "b"
