"""A real agent's evidence end to end: ``python -m coordinator serve`` on real Redis, blobs in its
default folder, and ``python -m agent`` with a simulated phone and HOST_AGENT_ARTIFACTS left at
its default. The agent's example note-smoke workflow (its default workflows folder) yields a step
screenshot per step (real PNGs, tied to their steps) and the run's log, listed by the operator's
``GET /api/v1/tasks/{id}/artifacts``."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from PIL import Image

from agent.runtime import EXAMPLE_WORKFLOWS_DIR
from tests.support import (
    FAST_COORDINATOR,
    HOSTS,
    agent_process,
    coordinator_env,
    coordinator_process,
    fresh_prefix,
    wait_until,
)

pytestmark = pytest.mark.e2e

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def test_a_workflow_leaves_a_screenshot_per_step_and_a_log(tmp_path: Path) -> None:
    step_count = len(json.loads((EXAMPLE_WORKFLOWS_DIR / "note-smoke.json").read_text())["steps"])
    with fresh_prefix() as prefix, coordinator_process(coordinator_env(prefix, **FAST_COORDINATOR),
                                                       workdir=tmp_path) as coordinator:
        agent = agent_process(coordinator.url, tmp_path / "agent", HOST_ID="host-a", TOKEN=HOSTS["host-a"],
                              DEVICES="sim:evidence-1")
        try:
            api = coordinator.api
            wait_until(lambda: any(d["device_id"] == "evidence-1" and d["status"] == "available"
                                   for d in api.get("/api/v1/devices").json()["devices"]), what="phone pooled")
            created = api.post("/api/v1/tasks", json={"kind": "workflow", "device_id": "evidence-1",
                                                      "workflow": {"name": "note-smoke", "params": {"text": "hello"}}})
            assert created.status_code == 201, created.text
            task_id = created.json()["task_id"]
            task = wait_until(lambda: (t := coordinator.task(task_id))["status"] in ("succeeded", "failed") and t,
                              what="the workflow's result")
            assert task["status"] == "succeeded", task

            # Uploaded before the result was reported: listed as soon as the task is done.
            listed = api.get(f"/api/v1/tasks/{task_id}/artifacts")
            assert listed.status_code == 200, listed.text
            found = {a["name"]: a for a in listed.json()["artifacts"]}
            steps = [f"step-{i:03d}.png" for i in range(step_count)]
            assert sorted(found) == sorted([*steps, "log.txt"])
            sizes = set()
            for index, name in enumerate(steps):
                assert (found[name]["step_index"], found[name]["content_type"], found[name]["attempt"]) == (
                    index, "image/png", 1)
                body = api.get(f"/api/v1/tasks/{task_id}/artifacts/{name}")
                assert body.status_code == 200 and body.headers["content-type"] == "image/png"
                assert body.content.startswith(PNG_SIGNATURE) and len(body.content) == found[name]["size"]
                image = Image.open(io.BytesIO(body.content))
                image.load()  # every pixel decodes
                sizes.add(image.size)
            assert len(sizes) == 1 and min(next(iter(sizes))) > 0
            assert found["log.txt"]["content_type"] == "text/plain" and found["log.txt"]["step_index"] is None
            log = api.get(f"/api/v1/tasks/{task_id}/artifacts/log.txt")
            assert log.headers["content-disposition"] == 'attachment; filename="log.txt"'
            text = log.text
            assert text.startswith(f"tether agent log of task {task_id} attempt 1 on device evidence-1")
            assert f"task {task_id} attempt 1 finished: succeeded" in text
            assert HOSTS["host-a"] not in text
            assert agent.stop() == 0
        finally:
            agent.stop()
