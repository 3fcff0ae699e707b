"""A host's batch renewal (POST /internal/v1/hosts/{host_id}/renewals): each lease judged exactly as
a single renewal judges it, in one step, one lease's 409 failing none of the others; a malformed
batch renews nothing."""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import Api
from tests.coordinator.helpers import claim_one, expire_lease

pytestmark = [pytest.mark.anyio, pytest.mark.cluster]

EXAMPLES = settings(max_examples=25, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])


async def _renewals(api: Api, host: str, leases: list[dict[str, Any]]) -> Any:
    return await api.client.post(f"/internal/v1/hosts/{host}/renewals", json={"leases": leases},
                                 headers=Api.host_headers(host))


def _entry(assignment: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"lease_id": assignment["lease_id"], "task_id": assignment["task_id"],
            "attempt": assignment["attempt"], **extra}


async def _running(api: Api, host: str, devices: list[str]) -> list[dict[str, Any]]:
    await api.heartbeat(host, devices)
    for device in devices:
        await api.create_task(device_id=device)
    return [await claim_one(api, host) for _ in devices]


async def _deadline(api: Api, task_id: str) -> float | None:
    return await api.ctx.store.redis.zscore(api.ctx.store.keys.lease_deadlines, task_id)


async def test_a_batch_renews_every_live_lease_and_stores_each_progress(api: Api) -> None:
    leases = await _running(api, "host-a", ["a1", "a2", "a3"])
    before = [await _deadline(api, lease["task_id"]) for lease in leases]
    sent = [_entry(lease, progress={"step_index": n, "status": "running", "summary": f"step {n}"})
            for n, lease in enumerate(leases)]
    response = await _renewals(api, "host-a", sent)
    assert response.status_code == 200, response.text
    answers = response.json()["leases"]
    assert [a["lease_id"] for a in answers] == [lease["lease_id"] for lease in leases]
    for n, (lease, answer) in enumerate(zip(leases, answers, strict=True)):
        assert answer["status"] == 200 and answer["progress"] == "stored"
        assert answer["lease_ttl_ms"] == 30_000 and answer["cancel_requested"] is False
        assert (await _deadline(api, lease["task_id"]) or 0) >= (before[n] or 0)
        task = await api.task(lease["task_id"])
        assert task["progress"]["summary"] == f"step {n}" and task["status"] == "running"


async def test_one_refused_lease_fails_none_of_the_others_and_is_left_as_it_was(api: Api) -> None:
    live, stale = await _running(api, "host-a", ["a1", "a2"])
    await expire_lease(api, stale)
    response = await _renewals(api, "host-a", [_entry(stale), _entry(live), _entry(live, lease_id="l_unknown")])
    assert response.status_code == 200
    expired, renewed, unknown = response.json()["leases"]
    assert expired == {"lease_id": stale["lease_id"], "status": 409, "code": "lease_expired"}
    assert unknown == {"lease_id": "l_unknown", "status": 409, "code": "lease_not_owned"}
    assert renewed["status"] == 200
    # The stale lease is not revived: its deadline stays in the past.
    assert await _deadline(api, stale["task_id"]) == 0


async def test_a_cancelled_task_is_told_in_its_own_entry(api: Api) -> None:
    first, second = await _running(api, "host-a", ["a1", "a2"])
    await api.client.post(f"/api/v1/tasks/{second['task_id']}/cancel", headers=api.admin_headers)
    answers = (await _renewals(api, "host-a", [_entry(first), _entry(second)])).json()["leases"]
    assert [a["cancel_requested"] for a in answers] == [False, True]


@pytest.mark.parametrize("leases", [
    [{"lease_id": "l_x", "task_id": "t_x"}],
    [{"lease_id": "l_x", "task_id": "t_x", "attempt": 0}],
    [{"lease_id": "not an id!", "task_id": "t_x", "attempt": 1}],
    ["not an object"],
], ids=["no-attempt", "attempt-0", "bad-id", "not-an-object"])
async def test_a_malformed_batch_is_refused_and_renews_nothing(api: Api, leases: list[dict[str, Any]]) -> None:
    (live,) = await _running(api, "host-a", ["a1"])
    # Beside a good entry whose progress a renewal that went through would store.
    good = _entry(live, progress={"step_index": 1, "status": "running", "summary": "x"})
    response = await _renewals(api, "host-a", [good, *leases])
    assert response.status_code == 400 and response.json()["error"]["code"] == "invalid_request"
    assert (await api.task(live["task_id"])).get("progress") is None


async def test_an_empty_batch_is_refused(api: Api) -> None:
    response = await _renewals(api, "host-a", [])
    assert response.status_code == 400 and response.json()["error"]["code"] == "invalid_request"


async def test_more_leases_than_a_host_may_have_devices_is_refused(api_factory: Any) -> None:
    async with api_factory(max_devices_per_host=2) as api:
        (live,) = await _running(api, "host-a", ["a1"])
        before = await _deadline(api, live["task_id"])
        response = await _renewals(api, "host-a", [_entry(live)] * 3)
        assert response.status_code == 400 and response.json()["error"]["code"] == "invalid_request"
        assert await _deadline(api, live["task_id"]) == before
        assert (await _renewals(api, "host-a", [_entry(live)] * 2)).status_code == 200


async def test_another_hosts_path_or_no_credential_is_refused(api: Api) -> None:
    (live,) = await _running(api, "host-a", ["a1"])
    foreign = await api.client.post("/internal/v1/hosts/host-a/renewals", json={"leases": [_entry(live)]},
                                    headers=Api.host_headers("host-b"))
    assert foreign.status_code == 403
    anonymous = await api.client.post("/internal/v1/hosts/host-a/renewals", json={"leases": [_entry(live)]})
    assert anonymous.status_code == 401


def _single_view(response: Any, lease_id: str) -> dict[str, Any]:
    """A single renewal's answer, as a batch states it."""
    if response.status_code == 409:
        return {"lease_id": lease_id, "status": 409, "code": response.json()["error"]["code"]}
    body = response.json()
    return {"lease_id": lease_id, "status": 200, "cancel_requested": body["cancel_requested"],
            "progress": body["progress"]}


async def test_every_entry_is_answered_as_its_single_renewal_would_be(api: Api) -> None:
    """The contract's invariant, over any batch drawn from leases in every state a lease can be
    in (live, expired, replaced by a newer attempt, unknown, another host's, the wrong attempt),
    in any order, repeated, with good and bad progress: each entry's answer is the one a single
    renewal of it gets right after."""
    live = await _running(api, "host-a", ["a1", "a2"])
    (replaced,) = await _running(api, "host-a", ["a3"])
    await expire_lease(api, replaced)
    await api.sweep()
    await claim_one(api, "host-a")  # attempt 2 of a3's task
    (expired,) = await _running(api, "host-a", ["a4"])
    await expire_lease(api, expired)
    (foreign,) = await _running(api, "host-b", ["b1"])
    pool = [*live, replaced, expired, foreign, {**live[0], "lease_id": "l_unknown"}, {**live[1], "attempt": 2}]
    progress = st.sampled_from([None, {"step_index": 2, "status": "running", "summary": "ok"},
                                {"step_index": 2, "status": "running", "screenshot": "AAAA"}])
    batches = st.lists(st.tuples(st.sampled_from(pool), progress), min_size=1, max_size=8)

    async def check(batch: list[tuple[dict[str, Any], Any]]) -> None:
        sent = [_entry(lease, **({} if p is None else {"progress": p})) for lease, p in batch]
        response = await _renewals(api, "host-a", sent)
        assert response.status_code == 200, response.text
        for entry, answer in zip(sent, response.json()["leases"], strict=True):
            single = await api.renew("host-a", entry, **({"progress": entry["progress"]} if "progress" in entry else {}))
            expected = _single_view(single, entry["lease_id"])
            assert {k: answer[k] for k in expected} == expected

    @EXAMPLES
    @given(batch=batches)
    def examples(batch: list[tuple[dict[str, Any], Any]]) -> None:
        anyio.from_thread.run(check, batch)

    await anyio.to_thread.run_sync(examples)
