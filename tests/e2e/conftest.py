"""What the end-to-end suites share: the workflows their agents run."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support import write_workflows


@pytest.fixture
def workflows(tmp_path: Path) -> Path:
    """An agent's ``WORKFLOWS_DIR``: ``quick`` (two steps, no waiting) and ``slow`` (a wait of
    ``${ms}`` after its first step)."""
    return write_workflows(tmp_path / "workflows", {
        "quick": [{"action": "key", "key": "home"}, {"action": "assert_text", "text": "Settings"}],
        "slow": [{"action": "key", "key": "home"}, {"action": "wait", "ms": "${ms}"}],
    })
