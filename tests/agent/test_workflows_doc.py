"""docs/workflows.md, the workflow format (issue 58), against the agent's own vocabulary: its table
has a row for every action a workflow step may take and none other, each row's fields are what the
parser reads, its example file loads and every step of it parses, and every shipped example
workflow uses only documented actions."""

from __future__ import annotations

import json
import re
from pathlib import Path

from agent.runtime.actions import DEVICE_ACTIONS, MAX_WAIT_MS, parse_action
from agent.runtime.workflow import load_workflow
from tests.support import REPO

DOC = REPO / "docs" / "workflows.md"
EXAMPLES = REPO / "agent" / "runtime" / "example_workflows"


def _action_rows() -> dict[str, str]:
    """The actions table: action -> its row's fields cell."""
    rows = re.findall(r"^\| `(\w+)` \| (.*?) \|", DOC.read_text(), re.MULTILINE)
    return {action: fields for action, fields in rows if not action.startswith("$")}


def test_the_table_has_every_action_a_step_may_take_and_no_other() -> None:
    documented = set(_action_rows()) - {"name", "steps", "description"}
    assert documented == set(DEVICE_ACTIONS), (
        f"docs/workflows.md, \"Actions\": add {sorted(set(DEVICE_ACTIONS) - documented)}, "
        f"remove {sorted(documented - set(DEVICE_ACTIONS))}")


def test_each_row_names_the_fields_the_parser_reads() -> None:
    rows = _action_rows()
    needs = {"tap": ["text", "id", "x", "y"], "type": ["text"], "swipe": ["x1", "y1", "x2", "y2", "duration_ms"],
             "key": ["key"], "launch": ["app"], "wait": ["ms"], "assert_text": ["text", "timeout_ms"]}
    for action, fields in needs.items():
        missing = [f for f in fields if f"`{f}`" not in rows[action]]
        assert not missing, f"{action}: {missing}"
        step = {"action": action, **{f: (1 if f not in ("text", "id", "key", "app") else "x") for f in fields}}
        parse_action(step)  # the fields named are enough for the parser
    assert f"{MAX_WAIT_MS:,}" in DOC.read_text()


def test_the_example_file_loads_and_its_steps_parse(tmp_path: Path) -> None:
    block = re.search(r"```json\n(.*?)^```", DOC.read_text(), re.MULTILINE | re.DOTALL)
    assert block is not None
    path = tmp_path / "example.json"
    path.write_text(block[1])
    workflow = load_workflow(path)
    for step in workflow.steps:
        parse_action(step, allowed=DEVICE_ACTIONS)


def test_the_shipped_workflows_use_only_documented_actions() -> None:
    documented = set(_action_rows())
    for path in sorted(EXAMPLES.glob("*.json")):
        used = {step["action"] for step in json.loads(path.read_text())["steps"]}
        assert used <= documented, (path.name, used - documented)
        assert f"`{load_workflow(path).name}`" in DOC.read_text(), f"docs/workflows.md names {path.name}"
