"""The ``tether`` command's text: ``tether tasks`` fits a terminal of ~120 columns whatever the
tasks hold (100 before its TEAM and PRIORITY columns, issue 58), and keeps what people copy (ids,
reasons, priorities) whole."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from tether.render import TASKS_TABLE_WIDTH, event_line, events_table, tasks_table

REASONS = ["no_matching_device", "planner_cannot_plan", "workflow_not_found", "all_devices_busy", None]


def task(task_id: str, status: str, **fields: Any) -> dict[str, Any]:
    return {"task_id": task_id, "status": status, "attempt": 1, "max_attempts": 3, "kind": "goal",
            "goal": "Turn on airplane mode", "device_id": None, "host_id": None, "selector": None,
            "updated_at": "2026-12-03T16:04:24.123+00:00", "waiting_reason": None, "failure_reason": None,
            **fields}


# What made the table ~190 columns wide: a managed host's ids, a workflow with parameters, labels.
WIDE = [
    task("t_38bc6d5b6305f05f786541ad", "succeeded", kind="workflow",
         workflow={"name": "note-smoke", "params": {"text": "hello from the first hour of Tether"}},
         host_id="h_4c09a1b2c3d4e5f6", device_id="d_0db0a1b2c3d4e5f6a7b8",
         selector={"driver": "sim", "labels": {"site": "berlin", "rack": "r12"}}),
    task("t_7dcd8bf5600ae093f50fb468", "queued", device_id="phone-9", waiting_reason="no_matching_device"),
    task("t_42dc40417d4919c090111068", "cancelled", goal="Open the settings and turn bluetooth off then on " * 3,
         selector={"driver": "android", "labels": {"site": "a-very-long-site-name", "model": "pixel-8-pro"}},
         failure_reason="planner_cannot_plan"),
]


def test_the_task_table_fits_120_columns_and_keeps_ids_and_reasons_whole() -> None:
    lines = tasks_table(WIDE).splitlines()
    assert max(len(line) for line in lines) <= TASKS_TABLE_WIDTH == 120, "\n".join(lines)
    assert lines[0].split() == ["TASK", "STATUS", "ATTEMPT", "TEAM", "PRIORITY", "WORK", "ON", "WHY"]
    assert lines[1].startswith("t_38bc6d5b6305f05f786541ad  succeeded")
    assert " d_0db0a1b2c3" in lines[1]  # where it ran: its device (clipped: the work shares the room)
    assert lines[2].rstrip().endswith("no_matching_device") and " device=phone-9 " in lines[2]
    assert lines[3].rstrip().endswith("planner_cannot_plan") and "…" in lines[3]


def test_a_wider_terminal_shows_more() -> None:
    lines = tasks_table(WIDE, width=200).splitlines()
    assert max(len(line) for line in lines) <= 200
    assert " d_0db0a1b2c3d4e5f6a7b8 " in lines[1] and 'note-smoke {"text": "hello from the first' in lines[1]


def test_a_narrow_table_is_not_clipped() -> None:
    lines = tasks_table([task("t_1", "queued", device_id="phone-1", waiting_reason="all_devices_busy")]).splitlines()
    assert lines[1].split() == ["t_1", "queued", "1/3", "-", "0", "goal", '"Turn', "on", "airplane", 'mode"',
                                "device=phone-1", "all_devices_busy"]


@given(st.lists(st.builds(
    lambda n, status, goal, device, reason, team, priority: task(
        f"t_{n:024x}", status, goal=goal, device_id=device, host_id="h_" + "a" * 16 if device else None,
        waiting_reason=reason, failure_reason=reason, team=team, priority=priority),
    st.integers(0, 2**96 - 1), st.sampled_from(["queued", "running", "succeeded", "cancelled"]),
    st.text(max_size=300), st.one_of(st.none(), st.text("abcdef0123456789_-", min_size=1, max_size=40)),
    st.sampled_from(REASONS), st.text("abcdefghij0123456789_-.:", min_size=1, max_size=128),
    st.integers(-100, 100)), min_size=1, max_size=8))
def test_any_tasks_fit_120_columns(tasks: list[dict[str, Any]]) -> None:
    assert max(len(line) for line in tasks_table(tasks).splitlines()) <= TASKS_TABLE_WIDTH


def test_an_event_names_its_actor_with_the_token_id_short_beside_it() -> None:
    # Two live tokens may share a name (a rotation): the id tells their events apart.
    event = {"type": "cancelled", "at": "2026-12-03T16:04:24.123+00:00", "status": "cancelled"}
    old = {**event, "actor": "ci", "actor_id": "ot_3f2a9c0d1e2f3a4b"}
    new = {**event, "actor": "ci", "actor_id": "ot_77b1e40d1e2f3a4b"}
    assert event_line(old).endswith("by ci (ot_3f2a9c…)") and event_line(new).endswith("by ci (ot_77b1e4…)")
    assert event_line({**event, "actor": "admin", "actor_id": "admin"}).endswith("by admin")
    assert event_line({**event, "actor": "ci"}).endswith("by ci")  # a coordinator that sends no id
    assert "by" not in event_line(event)
    header, *rows = events_table([old, new]).splitlines()
    assert [row[header.index("ACTOR"):] for row in rows] == ["ci (ot_3f2a9c…)", "ci (ot_77b1e4…)"]
