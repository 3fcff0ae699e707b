"""`tether submit --driver D` warns, on stderr, when no pooled device has that driver (issue 28,
seen 6: a misspelled driver was queued for 24 h while `--wait` simply waited). It still submits,
and its exit code and standard output are what they would be without the warning."""

from __future__ import annotations

import pytest

from tests.support import CoordinatorProcess
from tests.tether.conftest import tether_here
from tether.cli import main


def test_a_driver_no_pooled_device_has_is_submitted_with_a_warning(coordinator: CoordinatorProcess,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    result = tether_here(coordinator, capsys, "submit", "--goal", "Open Settings", "--driver", "sim-typo")
    assert result.code == 0, result
    task_id = result.out.strip()
    assert task_id.startswith("t_")
    assert result.err.startswith("warning: no pooled device has driver 'sim-typo'"), result.err
    assert coordinator.task(task_id)["status"] == "queued"  # submitted all the same

    as_json = tether_here(coordinator, capsys, "--json", "submit", "--goal", "g", "--driver", "sim-typo")
    assert as_json.code == 0 and as_json.json()["task_id"].startswith("t_")  # stdout stays pure JSON
    assert "sim-typo" in as_json.err


def test_a_pooled_driver_gets_no_warning(coordinator: CoordinatorProcess, capsys: pytest.CaptureFixture[str]) -> None:
    coordinator.heartbeat("fleet-1", ["warn-1"])  # driver "sim"
    result = tether_here(coordinator, capsys, "submit", "--goal", "g", "--driver", "sim", "--label", "rack=r9")
    assert result.code == 0 and result.out.strip().startswith("t_")
    assert result.err == ""


def test_a_token_that_cannot_read_the_pool_submits_without_a_warning(
        coordinator: CoordinatorProcess, capsys: pytest.CaptureFixture[str]) -> None:
    created = coordinator.api.post("/api/v1/operator-tokens", json={"name": "warn-submit", "scopes": ["submit"]})
    assert created.status_code == 201, created.text
    capsys.readouterr()
    code = main(["--url", coordinator.url, "--token", created.json()["token"],
                 "submit", "--goal", "g", "--driver", "sim-typo"])
    captured = capsys.readouterr()
    assert code == 0 and captured.out.strip().startswith("t_")
    assert captured.err == ""
