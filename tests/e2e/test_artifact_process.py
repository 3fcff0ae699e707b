"""Artifacts through a real ``python -m coordinator serve`` process on real Redis: an upload
streamed in chunks lands in the blob store (the default folder the README names, in the process's
working directory; or an S3 bucket on moto's real S3 server, configured through the environment
as an operator would), reads back with its safe headers, and leaves with its task at retention."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from tests.coordinator.blob_support import S3_ENV, moto_available, running_s3_server
from tests.support import (
    HOSTS,
    coordinator_env,
    coordinator_process,
    fresh_prefix,
    wait_until,
)

pytestmark = pytest.mark.e2e

HOST = {"authorization": f"Bearer {HOSTS['host-a']}"}


def _chunks(data: bytes, size: int = 64 * 1024) -> Iterator[bytes]:
    for start in range(0, len(data), size):
        yield data[start:start + size]


@pytest.fixture(params=["local", "s3"])
def blob_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[dict[str, str], Callable[[], list[str]]]]:
    """The coordinator's settings for a blob store, and a function listing the blob names it holds."""
    if request.param == "local":
        def local_names() -> list[str]:
            return sorted(p.name for p in (tmp_path / "tether-artifacts").rglob("*") if p.is_file())
        yield {}, local_names
        return
    if not moto_available():
        pytest.skip("moto_server is not installed")
    with running_s3_server() as server:
        bucket = server.new_bucket()

        def s3_names() -> list[str]:
            return sorted(key.rsplit("/", 1)[-1] for key in server.keys(bucket))
        yield {**S3_ENV, "COORDINATOR_ARTIFACTS_URL": f"s3://{bucket}/tether",
               "COORDINATOR_ARTIFACTS_ENDPOINT": server.url}, s3_names


def test_an_upload_streams_to_the_store_and_leaves_with_its_task(
        tmp_path: Path, blob_store: tuple[dict[str, str], Callable[[], list[str]]]) -> None:
    settings, blob_names = blob_store
    with fresh_prefix() as prefix, coordinator_process(
            coordinator_env(prefix, COORDINATOR_TASK_RETENTION_S="0.5", **settings), workdir=tmp_path) as coordinator:
        url, api = coordinator.url, coordinator.api
        coordinator.heartbeat("host-a", ["art-1"])
        task_id = coordinator.create_task(goal="g", device_id="art-1")["task_id"]
        leased = httpx.post(f"{url}/internal/v1/hosts/host-a/claim?wait_s=5", headers=HOST).json()
        assert leased["task_id"] == task_id

        data = os.urandom(3 * 1024 * 1024)  # sent chunked: no Content-Length, so the cap is judged as it streams
        upload = f"{url}/internal/v1/hosts/host-a/leases/{leased['lease_id']}/artifacts/final-screen.png"
        params = {"task_id": task_id, "attempt": 1, "step_index": 5}
        headers = {**HOST, "content-type": "image/png"}
        stored = httpx.put(upload, params=params, content=_chunks(data), headers=headers, timeout=30)
        assert stored.status_code == 201, stored.text
        sha = hashlib.sha256(data).hexdigest()
        assert stored.json()["sha256"] == sha and stored.json()["size"] == len(data)
        replay = httpx.put(upload, params=params, content=_chunks(data), headers=headers, timeout=30)
        assert (replay.status_code, replay.json()) == (200, stored.json())

        assert blob_names() == [sha], "one blob, named by its digest"

        read = api.get(f"/api/v1/tasks/{task_id}/artifacts/final-screen.png")
        assert read.status_code == 200 and read.content == data
        assert read.headers["x-content-type-options"] == "nosniff"
        assert read.headers["content-security-policy"] == "sandbox"
        assert [a["name"] for a in api.get(f"/api/v1/tasks/{task_id}/artifacts").json()["artifacts"]] == [
            "final-screen.png"]

        result = {"task_id": task_id, "attempt": 1, "lease_id": leased["lease_id"], "status": "succeeded"}
        assert httpx.post(f"{url}/internal/v1/hosts/host-a/results", json=result, headers=HOST).status_code == 200
        wait_until(lambda: blob_names() == [], what="the blob deleted with its task at retention")
        assert api.get(f"/api/v1/tasks/{task_id}/artifacts").status_code == 404
        metrics = api.get("/metrics").text
        assert 'tether_artifact_uploads_total{outcome="stored"} 1.0' in metrics
        assert "tether_artifact_bytes 0.0" in metrics
