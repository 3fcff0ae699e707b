"""A live session end to end: ``python -m coordinator serve`` on real Redis and ``python -m agent``
with a simulated phone, driven by ``tether.Client``: a tap changes the screen, typed text shows in
the field, a failed action leaves the session going, and leaving the block ends it with its
recording kept (each command, who sent it, its answer and its screen)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support import ADMIN, HOSTS, agent_process, coordinator_env, coordinator_process, fresh_prefix, wait_until
from tether import Client

pytestmark = pytest.mark.e2e

DEVICE = "session-1"


def test_a_session_drives_a_sim_phone_and_keeps_its_recording(tmp_path: Path) -> None:
    with fresh_prefix() as prefix, coordinator_process(
            coordinator_env(prefix, COORDINATOR_HEARTBEAT_INTERVAL_S="0.5", COORDINATOR_REAPER_INTERVAL_S="0.1"),
            workdir=tmp_path) as coordinator:
        agent = agent_process(coordinator.url, tmp_path / "agent", HOST_ID="host-a", TOKEN=HOSTS["host-a"],
                              DEVICES=f"sim:{DEVICE}")
        try:
            api = coordinator.api
            wait_until(lambda: any(d["device_id"] == DEVICE and d["status"] == "available"
                                   for d in api.get("/api/v1/devices").json()["devices"]), what="phone pooled")
            with Client(coordinator.url, ADMIN) as client:
                with client.start_session(device_id=DEVICE, idle_timeout_s=60, wait_s=30) as session:
                    home = session.observe()
                    assert home.ok and home.find("Settings") is not None
                    tapped = session.tap(280, 550)  # the Settings icon of the home screen
                    assert tapped.ok and tapped.find("Airplane mode") is not None, tapped.raw
                    assert tapped.screen() != home.screen(), "the tap changed what the screen shows"
                    assert tapped.screen().startswith(b"\x89PNG")
                    missing = session.tap(text="No such button")
                    assert missing.status == "failed" and missing.error
                    session.key("home")
                    session.tap(text="Notes")
                    session.tap(id="editor")
                    typed = session.type("hello")
                    editor = typed.find("notes:id/editor")
                    assert editor is not None and editor["text"] == "hello"
                    task_id = session.task_id
                task = wait_until(lambda: (t := client.get_task(task_id))["status"] != "running" and t,
                                  what="the session ended")
                assert task["status"] == "succeeded" and task["result"]["metadata"]["end_reason"] == "ended", task
                recording = list(client.iter_session_log(task_id))
                assert len(recording) == 7
                assert all(command.get("actor") == "admin" for command in recording), recording
                screens = {a["name"] for a in client.list_artifacts(task_id)["artifacts"]}
                assert f"screen-{tapped.command_id}.png" in screens
            assert agent.stop() == 0
        finally:
            agent.stop()
