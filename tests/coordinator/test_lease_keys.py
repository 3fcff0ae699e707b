"""A live lease is a key of its own, `lease:<task id>`, whose TTL is the lease's time left, as the
design card asks (docs/redis-keys.md): set at the claim, extended by each renewal, deleted when
the attempt ends (real Redis, fakeredis, cluster)."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from coordinator.api.auth import HostPrincipal, token_digest
from tests.conftest import Api
from tests.coordinator.helpers import claim_one, expire_lease, running_task
from tests.support import HOSTS

pytestmark = [pytest.mark.anyio, pytest.mark.cluster]


async def lease_key(api: Api, task_id: str) -> tuple[dict[str, Any] | None, int]:
    """The lease key's value and its PTTL (ms; -2 when there is no key)."""
    redis, key = api.ctx.store.redis, api.ctx.store.keys.lease(task_id)
    raw = await redis.get(key)
    return (orjson.loads(raw) if raw is not None else None), await redis.pttl(key)


async def test_a_claim_sets_the_lease_key_with_the_lease_ttl(api: Api) -> None:
    assignment = await running_task(api)
    held, ttl_ms = await lease_key(api, assignment["task_id"])
    assert held == {"lease_id": assignment["lease_id"], "host_id": "host-a", "attempt": 1}
    assert 0 < ttl_ms <= assignment["lease_ttl_ms"]


async def test_a_renewal_extends_the_key_by_its_ttl(api: Api) -> None:
    assignment = await running_task(api)
    host = HostPrincipal("host-a", "static", token_digest(HOSTS["host-a"]))
    longer_ms = assignment["lease_ttl_ms"] * 4
    await api.ctx.store.renew(host, assignment["lease_id"], assignment["task_id"], 1, longer_ms, "")
    held, ttl_ms = await lease_key(api, assignment["task_id"])
    assert held is not None and held["lease_id"] == assignment["lease_id"]
    assert assignment["lease_ttl_ms"] < ttl_ms <= longer_ms


async def test_the_key_holds_the_latest_step_a_renewal_sent(api: Api) -> None:
    assignment = await running_task(api)
    step = {"step_index": 2, "status": "running", "summary": "Opened Settings"}
    assert (await api.renew("host-a", assignment, progress=step)).status_code == 200
    assert (await api.renew("host-a", assignment)).status_code == 200  # none sent: kept
    held, _ = await lease_key(api, assignment["task_id"])
    assert held == {"lease_id": assignment["lease_id"], "host_id": "host-a", "attempt": 1, "progress": step}


async def test_a_refused_renewal_leaves_the_key_alone(api: Api) -> None:
    assignment = await running_task(api)
    before, _ = await lease_key(api, assignment["task_id"])
    refused = await api.renew("host-a", {**assignment, "lease_id": "l_someone_else"})
    assert refused.status_code == 409
    assert (await lease_key(api, assignment["task_id"]))[0] == before


async def test_a_result_deletes_the_key(api: Api) -> None:
    assignment = await running_task(api)
    assert (await api.result("host-a", assignment)).status_code == 200
    assert await lease_key(api, assignment["task_id"]) == (None, -2)


async def test_an_expired_lease_loses_its_key_and_the_next_attempt_gets_its_own(api: Api) -> None:
    assignment = await running_task(api)
    await expire_lease(api, assignment)
    assert (await api.sweep())["leases"] == 1
    assert await lease_key(api, assignment["task_id"]) == (None, -2)
    second = await claim_one(api, "host-a")
    held, ttl_ms = await lease_key(api, second["task_id"])
    assert held == {"lease_id": second["lease_id"], "host_id": "host-a", "attempt": 2} and ttl_ms > 0


@pytest.mark.parametrize("extension", ["renewal", "claim replay"])
async def test_a_live_lease_without_its_key_is_judged_by_its_deadline_and_gets_its_key_back(
        api: Api, extension: str) -> None:
    # A lease claimed by a version before lease keys has its deadline and no key: a renewal (or a
    # repeated claim) asks the deadline, which is ahead, and writes the key.
    assignment = await running_task(api)  # claimed with claim id c-1
    await api.ctx.store.redis.delete(api.ctx.store.keys.lease(assignment["task_id"]))
    if extension == "renewal":
        assert (await api.renew("host-a", assignment)).status_code == 200
    else:
        assert (await claim_one(api, "host-a", claim_id="c-1"))["lease_id"] == assignment["lease_id"]
    held, ttl_ms = await lease_key(api, assignment["task_id"])
    assert held == {"lease_id": assignment["lease_id"], "host_id": "host-a", "attempt": 1}
    assert 0 < ttl_ms <= assignment["lease_ttl_ms"]


async def test_a_renewal_past_the_deadline_writes_no_key(api: Api) -> None:
    assignment = await running_task(api)
    await expire_lease(api, assignment)
    refused = await api.renew("host-a", assignment)
    assert refused.status_code == 409 and refused.json()["error"]["code"] == "lease_expired"
    assert await lease_key(api, assignment["task_id"]) == (None, -2)
