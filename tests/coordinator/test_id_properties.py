"""Properties of ids and keys over any string (issue 26, seen 5): an id field is accepted exactly as
sent or refused with `400 invalid_request`, never silently changed, and two distinct idempotency
keys never yield the same task.

Hypothesis drives the in-process coordinator of the ``api`` fixture (real Redis and fakeredis),
created once per test: the examples run in a worker thread, each handing its requests back to the
test's event loop, where the app and its client live."""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import anyio.from_thread
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import Api

pytestmark = pytest.mark.anyio

# The contract's id grammar (PROTOCOL.md, Conventions), written out here as the oracle.
CONTRACT_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")
EXAMPLES = settings(max_examples=50, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow])

_controls = [chr(c) for c in range(32)]
# Strings near the ids that stripping would merge: id characters mixed with every C0 control;
# valid ids with one control slipped in; and any text at all.
_near_ids = st.text(alphabet=st.sampled_from([*"ab-.:", " ", "\x7f", "é", *_controls]), max_size=6)
_spliced = st.builds(lambda base, control, at: base[:at] + control + base[at:],
                     st.from_regex(CONTRACT_ID, fullmatch=True).map(lambda s: s[:12]),
                     st.sampled_from(_controls), st.integers(0, 12))
ANY_STRING = st.one_of(_near_ids, _spliced, st.text(max_size=20))


def _run(examples: Callable[[], None]) -> Awaitable[None]:
    """Run a hypothesis test function off the event loop, which stays free to serve its requests."""
    return anyio.to_thread.run_sync(examples)


def _refused(response: Any) -> bool:
    if response.status_code == 400:
        assert response.json()["error"]["code"] == "invalid_request", response.text
        return True
    assert response.status_code in (200, 201), response.text
    return False


async def _host_a_devices(api: Api) -> list[dict[str, Any]]:
    response = await api.admin("GET", "/api/v1/devices", params={"host_id": "host-a"})
    assert response.status_code == 200, response.text
    return response.json()["devices"]


async def _task_count(api: Api) -> int:
    response = await api.admin("GET", "/api/v1/tasks", params={"limit": 500})
    assert response.status_code == 200, response.text
    return len(response.json()["tasks"])


BASE_DEVICE = {"device_id": "base", "driver": "sim", "status": "available", "labels": {"k": "v"}}


async def _heartbeat_field(api: Api, field: str, value: str) -> None:
    """A snapshot carrying ``value`` in one field is taken exactly or refused, leaving the last one."""
    assert (await api.heartbeat("host-a", [BASE_DEVICE])).status_code == 200
    device: dict[str, Any] = {**BASE_DEVICE, "device_id": "d1"}
    if field == "label name":
        device["labels"] = {value: "v"}
    elif field == "label value":
        device["labels"] = {"k": value}
    else:
        device[field] = value
    response = await api.heartbeat("host-a", [device])
    listed = await _host_a_devices(api)
    if _refused(response):
        assert [d["device_id"] for d in listed] == ["base"]
        assert listed[0]["labels"] == {"k": "v"}
        return
    assert len(listed) == 1
    stored = listed[0]
    if field.startswith("label"):
        assert stored["labels"] == device["labels"]
    else:
        assert stored[field] == value
        assert CONTRACT_ID.fullmatch(value)


async def _task_field(api: Api, field: str, value: str) -> None:
    """A create carrying ``value`` as its target is taken exactly or refused, creating nothing."""
    before = await _task_count(api)
    if field == "device_id":
        response = await api.create_task(device_id=value)
    else:
        response = await api.create_task(selector={"driver": value})
    if _refused(response):
        assert await _task_count(api) == before
        return
    task = response.json()
    assert (task["device_id"] if field == "device_id" else task["selector"]["driver"]) == value
    assert CONTRACT_ID.fullmatch(value)
    assert await _task_count(api) == before + 1


FIELDS: dict[str, Callable[[Api, str], Awaitable[None]]] = {
    "heartbeat device_id": lambda api, v: _heartbeat_field(api, "device_id", v),
    "heartbeat driver": lambda api, v: _heartbeat_field(api, "driver", v),
    "heartbeat label name": lambda api, v: _heartbeat_field(api, "label name", v),
    "heartbeat label value": lambda api, v: _heartbeat_field(api, "label value", v),
    "task device_id": lambda api, v: _task_field(api, "device_id", v),
    "task selector driver": lambda api, v: _task_field(api, "driver", v),
}


async def test_an_id_is_taken_exactly_as_sent_or_refused(api: Api) -> None:
    @EXAMPLES
    @given(field=st.sampled_from(sorted(FIELDS)), value=ANY_STRING)
    def examples(field: str, value: str) -> None:
        anyio.from_thread.run(FIELDS[field], api, value)

    await _run(examples)


async def test_distinct_idempotency_keys_never_yield_the_same_task(api: Api) -> None:
    task_of: dict[str, str] = {}  # every key accepted so far, over all examples
    key_of: dict[str, str] = {}

    async def create_each(keys: list[str]) -> None:
        for key in keys:
            before = await _task_count(api)
            response = await api.create_task(device_id="a1", idempotency_key=key)
            if _refused(response):
                assert key not in task_of
                assert await _task_count(api) == before
                continue
            task = response.json()
            assert task["idempotency_key"] == key
            assert CONTRACT_ID.fullmatch(key)
            if key in task_of:  # a replay: the same task, nothing new
                assert response.status_code == 200 and task["task_id"] == task_of[key]
                assert await _task_count(api) == before
            else:
                assert response.status_code == 201 and task["task_id"] not in key_of
                task_of[key], key_of[task["task_id"]] = task["task_id"], key

    @EXAMPLES
    @given(keys=st.lists(ANY_STRING, min_size=2, max_size=4))
    def examples(keys: list[str]) -> None:
        anyio.from_thread.run(create_each, keys)

    await _run(examples)
