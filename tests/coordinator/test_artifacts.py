"""Artifacts through the real app and routes (real Redis and fakeredis): the upload's rules, the
operators' reads, retention and the orphan sweep on both blob stores, and the metrics."""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from coordinator.blobs.folder import namespace_of
from coordinator.clock import ShiftedClock
from tests.conftest import Api
from tests.coordinator.blob_support import S3Server
from tests.coordinator.helpers import claim_one, expire_lease, running_task
from tests.support import free_port

pytestmark = [pytest.mark.anyio, pytest.mark.cluster]

PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4


@pytest.fixture
async def art(api_factory: Callable[..., Any], tmp_path: Path) -> AsyncIterator[Api]:
    async with api_factory(artifacts_dir=tmp_path / "artifacts", max_artifact_bytes=4096,
                           max_task_artifact_bytes=10_000, max_task_artifacts=5) as api:
        yield api


async def put(api: Api, assignment: dict[str, Any], name: str, body: Any = PNG,
              content_type: str = "image/png", host: str = "host-a", **query: Any) -> httpx.Response:
    params = {"task_id": assignment["task_id"], "attempt": assignment["attempt"], **query}
    return await api.client.put(
        f"/internal/v1/hosts/{host}/leases/{assignment['lease_id']}/artifacts/{name}",
        params=params, content=body, headers={**api.host_headers(host), "content-type": content_type})


async def listed(api: Api, task_id: str) -> list[dict[str, Any]]:
    response = await api.admin("GET", f"/api/v1/tasks/{task_id}/artifacts")
    assert response.status_code == 200, response.text
    return response.json()["artifacts"]


def files_under(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file()) if root.exists() else []


# -- the upload ----------------------------------------------------------------------------


async def test_an_upload_is_stored_described_and_read_back_with_safe_headers(art: Api, tmp_path: Path) -> None:
    leased = await running_task(art)
    stored = await put(art, leased, "step-000.png", step_index=0)
    assert stored.status_code == 201, stored.text
    sha = hashlib.sha256(PNG).hexdigest()
    assert stored.json() == {"name": "step-000.png", "size": len(PNG), "sha256": sha,
                             "content_type": "image/png", "step_index": 0}
    log = await put(art, leased, "run.log", b"line 1\nline 2\n", "text/plain; charset=utf-8")
    assert log.status_code == 201 and log.json()["step_index"] is None

    artifacts = await listed(art, leased["task_id"])
    assert [(a["name"], a["attempt"], a["size"]) for a in artifacts] == [
        ("step-000.png", 1, len(PNG)), ("run.log", 1, 14)]
    assert artifacts[0]["created_at"].endswith("Z")

    image = await art.admin("GET", f"/api/v1/tasks/{leased['task_id']}/artifacts/step-000.png")
    assert image.status_code == 200 and image.content == PNG
    assert image.headers["content-type"] == "image/png"
    assert image.headers["x-content-type-options"] == "nosniff"
    assert image.headers["content-security-policy"] == "sandbox"
    assert "content-disposition" not in image.headers
    text = await art.admin("GET", f"/api/v1/tasks/{leased['task_id']}/artifacts/run.log?attempt=1")
    assert text.content == b"line 1\nline 2\n"
    assert text.headers["content-disposition"] == 'attachment; filename="run.log"'
    assert text.headers["x-content-type-options"] == "nosniff"
    # The bytes live in the folder under the task's namespace and their digest: no name of the request.
    assert [p.relative_to(tmp_path / "artifacts").as_posix() for p in files_under(tmp_path / "artifacts")] == sorted(
        f"{namespace_of(leased['task_id'])}/{hashlib.sha256(b).hexdigest()}" for b in (PNG, b"line 1\nline 2\n"))
    assert (await art.renew("host-a", leased)).status_code == 200, "an upload never ends the lease"


async def test_the_same_bytes_again_answer_200_and_other_bytes_409_artifact_conflict(art: Api) -> None:
    leased = await running_task(art)
    first = await put(art, leased, "final.png", step_index=3)
    replay = await put(art, leased, "final.png", step_index=3)
    assert (first.status_code, replay.status_code) == (201, 200)
    assert replay.json() == first.json()
    other = await put(art, leased, "final.png", PNG + b"!")
    assert other.status_code == 409 and other.json()["error"]["code"] == "artifact_conflict"
    assert [a["sha256"] for a in await listed(art, leased["task_id"])] == [first.json()["sha256"]]


@pytest.mark.parametrize("name", ["..%2F..%2Fescape", "..%2Fx.png", "a%20b", "%2Fetc%2Fpasswd", "x" * 129])
async def test_a_name_outside_the_grammar_is_refused_and_writes_nothing(art: Api, tmp_path: Path,
                                                                        name: str) -> None:
    leased = await running_task(art)
    refused = await put(art, leased, name)
    assert refused.status_code in (400, 404), refused.text  # a "/" is another path: no such route
    assert refused.json()["error"]["code"] in ("invalid_request", "not_found")
    assert files_under(tmp_path) == [] and await listed(art, leased["task_id"]) == []


async def test_a_name_of_dots_is_only_a_name(art: Api, tmp_path: Path) -> None:
    leased = await running_task(art)
    assert (await put(art, leased, "...")).status_code == 201  # (a client folds "..")
    assert [p.parent.parent for p in files_under(tmp_path)] == [tmp_path / "artifacts"]


@pytest.mark.parametrize("content_type", ["text/html", "image/svg+xml", "application/octet-stream", ""])
async def test_a_content_type_outside_the_allow_list_is_refused(art: Api, tmp_path: Path, content_type: str) -> None:
    leased = await running_task(art)
    refused = await put(art, leased, "page.html", b"<script>alert(1)</script>", content_type)
    assert refused.status_code == 400 and refused.json()["error"]["code"] == "invalid_request"
    assert "Content-Type" in refused.json()["error"]["message"]
    assert files_under(tmp_path) == []


async def test_bad_query_values_are_400_before_any_byte_is_stored(art: Api, tmp_path: Path) -> None:
    leased = await running_task(art)
    for query in ({"attempt": "0"}, {"attempt": "x"}, {"task_id": "a b"}, {"step_index": "-1"}):
        assert (await put(art, leased, "a.png", **query)).status_code == 400, query
    assert files_under(tmp_path) == []


async def test_an_artifact_over_its_cap_is_413_whether_declared_or_streamed(art: Api, tmp_path: Path) -> None:
    leased = await running_task(art)
    declared = await put(art, leased, "big.png", b"x" * 4097)
    assert declared.status_code == 413 and declared.json()["error"]["code"] == "payload_too_large"

    async def undeclared() -> AsyncIterator[bytes]:  # chunked: no Content-Length to judge by
        for _ in range(5):
            yield b"x" * 1000

    streamed = await put(art, leased, "big.png", undeclared())
    assert streamed.status_code == 413 and streamed.json()["error"]["code"] == "payload_too_large"
    assert files_under(tmp_path) == [] and await listed(art, leased["task_id"]) == []
    assert (await put(art, leased, "big.png", b"x" * 4096)).status_code == 201


async def test_the_tasks_bytes_and_count_caps_are_409_artifact_limit(art: Api) -> None:
    leased = await running_task(art)
    for i in range(2):  # 2 x 4096 of the task's 10,000 bytes
        assert (await put(art, leased, f"s{i}.png", bytes([i]) * 4096)).status_code == 201
    over = await put(art, leased, "s2.png", b"z" * 4096)
    assert over.status_code == 409 and over.json()["error"]["code"] == "artifact_limit"
    for i in range(3):  # small ones fit, up to 5 artifacts
        assert (await put(art, leased, f"t{i}.txt", b"t%d" % i, "text/plain")).status_code == 201
    sixth = await put(art, leased, "t9.txt", b"t9", "text/plain")
    assert sixth.status_code == 409 and sixth.json()["error"]["code"] == "artifact_limit"
    assert len(await listed(art, leased["task_id"])) == 5


async def test_an_upload_after_the_lease_was_replaced_is_refused_like_a_renewal(art: Api) -> None:
    await art.heartbeat("host-a", ["a1"])
    await art.create_task(device_id="a1")
    first = await claim_one(art, "host-a")
    await expire_lease(art, first)
    await art.sweep()
    second = await claim_one(art, "host-a")
    assert second["attempt"] == 2
    stale = await put(art, first, "late.png")
    assert stale.status_code == 409 and stale.json()["error"]["code"] == "lease_replaced"
    assert (await art.renew("host-a", first)).json()["error"]["code"] == "lease_replaced"
    assert (await put(art, second, "late.png")).status_code == 201
    assert [a["attempt"] for a in await listed(art, first["task_id"])] == [2]


async def test_an_upload_with_an_ended_or_foreign_lease_is_refused(art: Api, tmp_path: Path) -> None:
    leased = await running_task(art)
    foreign = await put(art, leased, "x.png", host="host-b")
    assert foreign.status_code == 409 and foreign.json()["error"]["code"] == "lease_not_owned"
    unknown = await put(art, {**leased, "lease_id": "l-nope"}, "x.png")
    assert unknown.json()["error"]["code"] == "lease_not_owned"
    other_host = await art.client.put(
        f"/internal/v1/hosts/host-a/leases/{leased['lease_id']}/artifacts/x.png",
        params={"task_id": leased["task_id"], "attempt": 1}, content=PNG,
        headers={**art.host_headers("host-b"), "content-type": "image/png"})
    assert other_host.status_code == 403
    assert (await art.result("host-a", leased)).status_code == 200
    ended = await put(art, leased, "x.png")
    assert ended.status_code == 409 and ended.json()["error"]["code"] == "lease_expired"
    assert await listed(art, leased["task_id"]) == []
    assert files_under(tmp_path) == [], "a lease that has ended is refused before any byte is stored"


async def test_an_upload_never_moves_the_lease_and_a_revoked_host_gets_401(art: Api, tmp_path: Path) -> None:
    leased = await running_task(art)
    redis, keys = art.ctx.store.redis, art.ctx.store.keys
    deadline = await redis.zscore(keys.lease_deadlines, leased["task_id"])
    assert (await put(art, leased, "a.png")).status_code == 201
    assert await redis.zscore(keys.lease_deadlines, leased["task_id"]) == deadline
    assert (await art.admin("POST", "/api/v1/hosts/host-a/revoke")).status_code == 200
    revoked = await put(art, leased, "b.png", PNG + b"b")
    assert revoked.status_code == 401 and revoked.json()["error"]["code"] == "unauthorized"
    assert [a["name"] for a in await listed(art, leased["task_id"])] == ["a.png"]


async def test_uploads_past_the_processs_bound_are_answered_503_at_once(api_factory: Callable[..., Any],
                                                                       tmp_path: Path) -> None:
    async with api_factory(artifacts_dir=tmp_path, max_concurrent_uploads=1) as api:
        leased = await running_task(api)
        started, release = asyncio.Event(), asyncio.Event()

        async def slow() -> AsyncIterator[bytes]:
            yield b"first"
            started.set()
            await release.wait()
            yield b"rest"

        holding = asyncio.create_task(put(api, leased, "slow.txt", slow(), "text/plain"))
        await started.wait()
        busy = await put(api, leased, "other.txt", b"x", "text/plain")
        assert busy.status_code == 503 and busy.json()["error"]["code"] == "unavailable"
        assert "retry-after" in busy.headers
        release.set()
        assert (await holding).status_code == 201
        assert (await put(api, leased, "other.txt", b"x", "text/plain")).status_code == 201


# -- reads ---------------------------------------------------------------------------------


async def test_reads_of_a_missing_task_or_artifact_are_404(art: Api) -> None:
    leased = await running_task(art)
    assert (await art.admin("GET", "/api/v1/tasks/t-missing/artifacts")).status_code == 404
    assert (await art.admin("GET", f"/api/v1/tasks/{leased['task_id']}/artifacts/none.png")).status_code == 404
    await put(art, leased, "a.png")
    assert (await art.admin("GET", f"/api/v1/tasks/{leased['task_id']}/artifacts/a.png?attempt=2")).status_code == 404
    assert (await art.admin("GET", f"/api/v1/tasks/{leased['task_id']}/artifacts/a.png?attempt=z")).status_code == 400


async def test_a_head_answers_the_headers_alone_and_a_blob_gone_behind_is_404(art: Api, tmp_path: Path) -> None:
    leased = await running_task(art)
    await put(art, leased, "a.png")
    path = f"/api/v1/tasks/{leased['task_id']}/artifacts/a.png"
    head = await art.client.head(path, headers=art.admin_headers)
    assert head.status_code == 200 and head.content == b""
    assert (head.headers["content-length"], head.headers["x-content-type-options"]) == (str(len(PNG)), "nosniff")
    for blob in files_under(tmp_path):
        blob.unlink()  # an operator emptied the folder
    gone = await art.admin("GET", path)
    assert gone.status_code == 404 and gone.json()["error"]["code"] == "not_found"


async def test_reads_need_the_read_scope_and_never_a_host_token(art: Api) -> None:
    leased = await running_task(art)
    await put(art, leased, "a.png")
    tokens = {}
    for scope in ("read", "submit"):
        made = await art.admin("POST", "/api/v1/operator-tokens", json={"name": f"t-{scope}", "scopes": [scope]})
        tokens[scope] = {"authorization": f"Bearer {made.json()['token']}"}
    for path in (f"/api/v1/tasks/{leased['task_id']}/artifacts", f"/api/v1/tasks/{leased['task_id']}/artifacts/a.png"):
        assert (await art.client.get(path, headers=tokens["read"])).status_code == 200
        refused = await art.client.get(path, headers=tokens["submit"])
        assert refused.status_code == 403 and refused.json()["error"]["details"] == {"required": "read"}
        assert (await art.client.get(path, headers=art.host_headers("host-a"))).status_code == 401


# -- retention and the orphan sweep, on both stores ----------------------------------------


@pytest.fixture(params=["local", "s3"])
async def stored_api(request: pytest.FixtureRequest, api_factory: Callable[..., Any],
                     tmp_path: Path) -> AsyncIterator[tuple[Api, Callable[[], list[str]]]]:
    """An app on each blob store, and a function listing the store's keys (read around the app)."""
    if request.param == "local":
        root = tmp_path / "artifacts"
        settings: dict[str, Any] = {"artifacts_dir": root}

        def keys() -> list[str]:
            return [p.relative_to(root).as_posix() for p in files_under(root)]
    else:
        server: S3Server = request.getfixturevalue("s3_server")
        request.getfixturevalue("s3_env")
        bucket = server.new_bucket()
        settings = {"artifacts_url": f"s3://{bucket}/deploy-1", "artifacts_endpoint": server.url}

        def keys() -> list[str]:
            return sorted(key.removeprefix("deploy-1/") for key in server.keys(bucket))
    async with api_factory(clock=ShiftedClock(), **settings) as api:
        yield api, keys


async def test_retention_deletes_the_tasks_blobs_and_only_its_own(
        stored_api: tuple[Api, Callable[[], list[str]]]) -> None:
    api, keys = stored_api
    await api.heartbeat("host-a", ["a1", "a2"])
    await api.create_task(device_id="a1")
    await api.create_task(device_id="a2")
    first, second = await claim_one(api, "host-a"), await claim_one(api, "host-a")
    for leased in (first, second):  # the same bytes in both tasks, and twice in the first
        assert (await put(api, leased, "shot.png")).status_code == 201
    assert (await put(api, first, "shot-again.png")).status_code == 201
    assert (await put(api, first, "run.log", b"log", "text/plain")).status_code == 201
    assert len(keys()) == 3  # first: PNG and the log; second: PNG
    metrics = (await api.client.get("/metrics")).text
    assert f"tether_artifact_bytes {float(2 * len(PNG) + 3)}" in metrics

    assert (await api.result("host-a", first)).status_code == 200
    api.ctx.store.clock.advance(api.ctx.settings.task_retention_ms)  # the retention has passed
    assert (await api.sweep())["purged"] == 1
    assert keys() == [f"{namespace_of(second['task_id'])}/{hashlib.sha256(PNG).hexdigest()}"]
    assert (await api.admin("GET", f"/api/v1/tasks/{first['task_id']}/artifacts")).status_code == 404
    kept = await api.admin("GET", f"/api/v1/tasks/{second['task_id']}/artifacts/shot.png")
    assert kept.content == PNG
    assert f"tether_artifact_bytes {float(len(PNG))}" in (await api.client.get("/metrics")).text


async def test_the_orphan_sweep_removes_old_blobs_no_description_names(
        stored_api: tuple[Api, Callable[[], list[str]]]) -> None:
    api, keys = stored_api
    leased = await running_task(api)
    assert (await put(api, leased, "kept.png")).status_code == 201

    async def body() -> AsyncIterator[bytes]:
        yield b"bytes whose description was never written"

    artifacts = api.ctx.artifacts
    orphan = await artifacts.put(namespace_of(leased["task_id"]), body(), 1000)  # as if the process died here
    assert len(keys()) == 2
    assert await artifacts.sweep_orphans() == 0, "a fresh blob may be an upload between its two writes"
    assert len(keys()) == 2
    later = time.time() + api.ctx.settings.artifact_orphan_grace_s + 1
    assert await artifacts.sweep_orphans(now_s=later) == 1
    assert orphan.key not in keys() and len(keys()) == 1
    assert (await api.admin("GET", f"/api/v1/tasks/{leased['task_id']}/artifacts/kept.png")).content == PNG


async def test_the_orphan_sweep_goes_a_page_at_a_time_and_wraps_around(art: Api) -> None:
    artifacts = art.ctx.artifacts
    later = time.time() + art.ctx.settings.artifact_orphan_grace_s + 1

    async def body(i: int) -> AsyncIterator[bytes]:
        yield b"orphan %d" % i

    for i in range(5):
        await artifacts.put(namespace_of(f"t-{i}"), body(i), 100)
    assert [await artifacts.sweep_orphans(2, now_s=later) for _ in range(3)] == [2, 2, 1]
    assert await artifacts.sweep_orphans(2, now_s=later) == 0


# -- nothing refused stays, on both stores --------------------------------------------------

KIB = 1024


@pytest.fixture(params=["local", "s3"])
async def capped_store(request: pytest.FixtureRequest, api_factory: Callable[..., Any],
                       tmp_path: Path) -> AsyncIterator[tuple[Api, Callable[[], int]]]:
    """An app whose tasks hold at most 1 MiB of artifacts, on each blob store, and a function
    measuring the bytes the store holds (temporary files included), read around the app."""
    if request.param == "local":
        root = tmp_path / "artifacts"
        settings: dict[str, Any] = {"artifacts_dir": root}

        def stored_bytes() -> int:
            return sum(p.stat().st_size for p in files_under(root))
    else:
        server: S3Server = request.getfixturevalue("s3_server")
        request.getfixturevalue("s3_env")
        bucket = server.new_bucket()
        settings = {"artifacts_url": f"s3://{bucket}/deploy-1", "artifacts_endpoint": server.url}

        def stored_bytes() -> int:
            return server.stored_bytes(bucket)
    async with api_factory(max_task_artifact_bytes=1024 * KIB, **settings) as api:
        yield api, stored_bytes


async def chunked(data: bytes, size: int = 64 * KIB) -> AsyncIterator[bytes]:
    """``data`` with no Content-Length: the server learns its size only as it streams."""
    for start in range(0, len(data), size):
        yield data[start:start + size]


async def test_twenty_refused_uploads_leave_the_store_where_it_was(
        capped_store: tuple[Api, Callable[[], int]]) -> None:
    api, stored_bytes = capped_store
    leased = await running_task(api)
    assert (await put(api, leased, "shot.png", b"\x01" * 512 * KIB)).status_code == 201
    before = stored_bytes()
    assert before >= 512 * KIB
    refused = [await put(api, leased, "shot.png", bytes([2 + i]) * 512 * KIB) for i in range(10)]  # other bytes
    # Past the task's room (1 MiB less the 512 KiB held), declared, then only seen as it streams.
    refused += [await put(api, leased, f"big-{i}.png", bytes([i]) * 600 * KIB) for i in range(5)]
    refused += [await put(api, leased, f"streamed-{i}.png", chunked(bytes([i]) * 600 * KIB)) for i in range(5)]
    assert [r.json()["error"]["code"] for r in refused] == ["artifact_conflict"] * 10 + ["artifact_limit"] * 10
    assert stored_bytes() - before <= 4 * KIB
    assert [a["name"] for a in await listed(api, leased["task_id"])] == ["shot.png"]


async def test_bytes_refused_after_they_streamed_are_deleted_at_once(
        capped_store: tuple[Api, Callable[[], int]]) -> None:
    api, stored_bytes = capped_store
    leased = await running_task(api)

    async def body() -> AsyncIterator[bytes]:
        yield b"a" * 64 * KIB
        await expire_lease(api, leased)  # the lease ends while the bytes stream
        yield b"b" * 64 * KIB

    refused = await put(api, leased, "late.png", body())
    assert refused.status_code == 409 and refused.json()["error"]["code"] == "lease_expired"
    assert stored_bytes() == 0 and await listed(api, leased["task_id"]) == []


async def test_a_replay_whose_blob_went_missing_stores_it_again(art: Api, tmp_path: Path) -> None:
    leased = await running_task(art)
    assert (await put(art, leased, "a.png")).status_code == 201
    for path in files_under(tmp_path):  # as if the store failed after the description was written
        path.unlink()
    assert (await art.admin("GET", f"/api/v1/tasks/{leased['task_id']}/artifacts/a.png")).status_code == 404
    assert (await put(art, leased, "a.png")).status_code == 200
    assert (await art.admin("GET", f"/api/v1/tasks/{leased['task_id']}/artifacts/a.png")).content == PNG


# -- metrics -------------------------------------------------------------------------------


async def test_uploads_are_counted_by_outcome_and_the_store_is_timed(art: Api) -> None:
    leased = await running_task(art)
    await put(art, leased, "a.png")
    await put(art, leased, "a.png")
    await put(art, leased, "a.png", PNG + b"?")
    await put(art, leased, "b.html", b"", "text/html")
    metrics = (await art.client.get("/metrics")).text
    for outcome in ("stored", "replayed", "artifact_conflict", "invalid_request"):
        assert f'tether_artifact_uploads_total{{outcome="{outcome}"}} 1.0' in metrics, outcome
    # Only the new bytes were stored; the replay and the conflict were hashed, their name's blob
    # looked up.
    assert 'tether_artifact_store_seconds_count{operation="put"} 1.0' in metrics
    assert 'tether_artifact_store_seconds_count{operation="commit"} 1.0' in metrics
    assert 'tether_artifact_store_seconds_count{operation="head"} 2.0' in metrics
    assert f"tether_artifact_bytes {float(len(PNG))}" in metrics


async def test_the_orphan_sweep_leaves_objects_that_are_not_blobs_alone(api_factory: Callable[..., Any],
                                                                        s3_server: S3Server, s3_env: Any) -> None:
    bucket = s3_server.new_bucket()
    assert httpx.put(f"{s3_server.url}/{bucket}/deploy-1/README.txt",  # noqa: ASYNC210 - before the app starts
                     content=b"someone else's").status_code == 200
    async with api_factory(artifacts_url=f"s3://{bucket}/deploy-1", artifacts_endpoint=s3_server.url) as api:
        later = time.time() + api.ctx.settings.artifact_orphan_grace_s + 1
        assert await api.ctx.artifacts.sweep_orphans(now_s=later) == 0
    assert s3_server.keys(bucket) == ["deploy-1/README.txt"]


async def test_a_store_that_cannot_be_reached_is_503_and_records_nothing(api_factory: Callable[..., Any],
                                                                         s3_env: Any) -> None:
    closed = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    async with api_factory(artifacts_url="s3://bucket/x", artifacts_endpoint=closed) as api:
        leased = await running_task(api)
        refused = await put(api, leased, "a.png")
        assert refused.status_code == 503 and refused.json()["error"]["code"] == "unavailable"
        assert "127.0.0.1" not in refused.text and "retry-after" in refused.headers
        assert await listed(api, leased["task_id"]) == []


async def test_a_client_gone_mid_body_stores_nothing_and_is_no_internal_error(art: Api, tmp_path: Path) -> None:
    leased = await running_task(art)
    messages = iter([{"type": "http.request", "body": b"x" * 100, "more_body": True}, {"type": "http.disconnect"}])
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return next(messages)

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    headers = [(b"authorization", Api.host_headers("host-a")["authorization"].encode()),
               (b"content-type", b"image/png")]
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "PUT", "scheme": "http",
             "path": f"/internal/v1/hosts/host-a/leases/{leased['lease_id']}/artifacts/cut.png", "raw_path": b"",
             "query_string": f"task_id={leased['task_id']}&attempt=1".encode(), "headers": headers,
             "client": ("127.0.0.1", 1), "server": ("coordinator", 80), "root_path": ""}
    await art.app(scope, receive, send)
    assert sent == []  # nobody is there to read an answer
    assert files_under(tmp_path) == [] and await listed(art, leased["task_id"]) == []
    metrics = (await art.client.get("/metrics")).text
    assert 'tether_artifact_uploads_total{outcome="disconnected"} 1.0' in metrics
    route = "/internal/v1/hosts/{host_id}/leases/{lease_id}/artifacts/{name}"
    assert f'tether_http_requests_total{{method="PUT",route="{route}",status="499"}} 1.0' in metrics


async def test_each_new_artifact_is_published_on_the_feed_once(art: Api) -> None:
    leased = await running_task(art)
    await put(art, leased, "a.png", step_index=2)
    await put(art, leased, "a.png", step_index=2)  # a replay publishes nothing
    entries = await art.ctx.store.redis.xrange(art.ctx.store.keys.feed)
    published = [e for e in (orjson.loads(fields[b"e"]) for _, fields in entries) if e["type"] == "artifact"]
    assert [(e["task_id"], e["attempt"], e["name"], e["step_index"], e["size"], e["content_type"], e["device_id"])
            for e in published] == [(leased["task_id"], 1, "a.png", 2, len(PNG), "image/png", "a1")]
