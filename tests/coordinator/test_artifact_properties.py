"""Properties of artifacts over any sequence of uploads (real Redis and fakeredis, the in-process
app of ``api_factory``): each answer is what a model of the contract says (a name's bytes never
change; the task's caps hold), Redis's totals agree with the descriptions, and retention leaves
no description, no blob and no byte counted.

Hypothesis runs the examples in a worker thread, each handing its requests back to the test's
event loop, where the app and its client live (as tests/coordinator/test_id_properties.py does)."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import anyio.from_thread
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from coordinator.clock import ShiftedClock
from tests.conftest import Api
from tests.coordinator.helpers import claim_one

pytestmark = pytest.mark.anyio

EXAMPLES = settings(max_examples=30, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
PAYLOADS = [b"a" * 300, b"b" * 700, b"c" * 1500]
MAX_TASK_BYTES = 2500
MAX_TASK_ARTIFACTS = 2
UPLOADS = st.lists(st.tuples(st.sampled_from(["x", "y", "z"]), st.integers(0, len(PAYLOADS) - 1)), max_size=8)


async def _one_task(api: Api, root: Path, uploads: list[tuple[str, int]]) -> None:
    redis, keys = api.ctx.store.redis, api.ctx.store.keys
    await api.heartbeat("host-a", ["a1"])
    await api.create_task(device_id="a1")
    leased = await claim_one(api, "host-a")
    described: dict[str, int] = {}
    for name, payload in uploads:
        response = await api.client.put(
            f"/internal/v1/hosts/host-a/leases/{leased['lease_id']}/artifacts/{name}",
            params={"task_id": leased["task_id"], "attempt": 1}, content=PAYLOADS[payload],
            headers={**api.host_headers("host-a"), "content-type": "text/plain"})
        used = sum(len(PAYLOADS[p]) for p in described.values())
        if name in described:
            expected = (200, None) if described[name] == payload else (409, "artifact_conflict")
        elif used + len(PAYLOADS[payload]) > MAX_TASK_BYTES or len(described) >= MAX_TASK_ARTIFACTS:
            expected = (409, "artifact_limit")
        else:
            expected = (201, None)
            described[name] = payload
        code = response.json()["error"]["code"] if response.status_code >= 400 else None
        assert (response.status_code, code) == expected, (name, payload, response.text)

    listed = (await api.admin("GET", f"/api/v1/tasks/{leased['task_id']}/artifacts")).json()["artifacts"]
    assert {a["name"]: a["sha256"] for a in listed} == {
        name: hashlib.sha256(PAYLOADS[p]).hexdigest() for name, p in described.items()}
    assert int(await redis.hget(keys.artifact_usage, leased["task_id"]) or 0) == sum(
        len(PAYLOADS[p]) for p in described.values())
    distinct = {PAYLOADS[p] for p in described.values()}
    assert int(await redis.hget(keys.stats, "artifact_bytes") or 0) == sum(map(len, distinct))
    in_store = {f"{p.parent.name}/{p.name}" for p in _files(root)}
    named = in_store & {m.decode() for m in await redis.smembers(keys.artifact_blobs)}
    assert len(named) == len(distinct), "every blob a description names is in the store"

    assert (await api.result("host-a", leased)).status_code == 200
    api.ctx.store.clock.advance(api.ctx.settings.task_retention_ms)  # the retention has passed
    assert (await api.sweep())["purged"] == 1
    # What is left are the blobs of refused uploads (a conflict, a cap): orphans, for the sweep.
    assert {p.name for p in _files(root)} <= {hashlib.sha256(b).hexdigest() for b in PAYLOADS} - {
        hashlib.sha256(PAYLOADS[p]).hexdigest() for p in described.values()}
    later = time.time() + api.ctx.settings.artifact_orphan_grace_s + 1
    while await api.ctx.artifacts.sweep_orphans(now_s=later):
        pass
    assert _files(root) == []
    assert int(await redis.hget(keys.stats, "artifact_bytes") or 0) == 0
    for key in (keys.artifacts, keys.artifact_usage):
        assert await redis.hlen(key) == 0
    assert await redis.zcard(keys.artifact_index) == 0 and await redis.scard(keys.artifact_blobs) == 0


def _files(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file()] if root.exists() else []


async def test_any_uploads_answer_as_the_model_says_and_retention_leaves_nothing(
        api_factory: Callable[..., Any], tmp_path: Path) -> None:
    root = tmp_path / "artifacts"
    async with api_factory(artifacts_dir=root, max_task_artifact_bytes=MAX_TASK_BYTES,
                           max_task_artifacts=MAX_TASK_ARTIFACTS, clock=ShiftedClock()) as api:
        @EXAMPLES
        @given(uploads=UPLOADS)
        def examples(uploads: list[tuple[str, int]]) -> None:
            anyio.from_thread.run(_one_task, api, root, uploads)

        await anyio.to_thread.run_sync(examples)
