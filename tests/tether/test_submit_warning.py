"""`tether submit` warns, on stderr, when the new task waits with `no_matching_device` or
`no_capable_host`, naming what the fleet has (PROTOCOL.md, the CLI rows; issue 28, seen 6: a
misspelled driver; issue 42, seen 1: `--workflow note-smok` exited 0 and the task waited a day).
It still submits, and its exit code and standard output are what they would be without the
warning. ``tether.Client.wait_warning`` gives scripts the same sentence."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support import ADMIN, CoordinatorProcess
from tests.tether.conftest import tether_here
from tether import Client
from tether.cli import main

WORKFLOWS = ["home-smoke", "note-smoke"]


@pytest.fixture
def pooled_fleet(coordinator: CoordinatorProcess) -> None:
    """A pooled sim device of a host that runs anything (it lists no capabilities), and one
    labelled ``pool=wf`` of a host that runs ``WORKFLOWS`` only; heartbeats are sent afresh for
    each test, so both hosts are online."""
    coordinator.heartbeat("fleet-1", ["warn-1"])
    coordinator.heartbeat("wf-1", [{"device_id": "wf-phone", "labels": {"pool": "wf"}}],
                          agent={"hostname": "wf-1.example", "capabilities": {"workflows": WORKFLOWS}})


@pytest.fixture
def client(coordinator: CoordinatorProcess) -> Iterator[Client]:
    with Client(coordinator.url, ADMIN) as client:
        yield client


@pytest.mark.usefixtures("pooled_fleet")
def test_a_driver_no_pooled_device_has_is_submitted_with_a_warning_naming_the_drivers(
        coordinator: CoordinatorProcess, capsys: pytest.CaptureFixture[str]) -> None:
    result = tether_here(coordinator, capsys, "submit", "--goal", "Open Settings", "--driver", "sim-typo")
    assert result.code == 0, result
    task_id = result.out.strip()
    assert task_id.startswith("t_")
    assert result.err.startswith("warning: no pooled device matches driver 'sim-typo': the task waits"), result.err
    assert "the pool has drivers: sim;" in result.err and len(result.err.splitlines()) == 1, result.err
    assert coordinator.task(task_id)["status"] == "queued"  # submitted all the same

    as_json = tether_here(coordinator, capsys, "--json", "submit", "--goal", "g", "--driver", "sim-typo")
    assert as_json.code == 0 and as_json.json()["task_id"].startswith("t_")  # stdout stays pure JSON
    assert "sim-typo" in as_json.err


@pytest.mark.usefixtures("pooled_fleet")
def test_a_misspelled_workflow_is_submitted_with_a_warning_naming_the_fleet_s_workflows(
        coordinator: CoordinatorProcess, capsys: pytest.CaptureFixture[str]) -> None:
    result = tether_here(coordinator, capsys, "submit", "--workflow", "note-smok", "--driver", "sim",
                         "--label", "pool=wf")
    assert result.code == 0 and result.out.strip().startswith("t_"), result
    assert coordinator.task(result.out.strip())["waiting_reason"] == "no_capable_host"
    assert result.err.startswith("warning: no online host with a matching device runs workflow 'note-smok'"), \
        result.err
    assert "the fleet runs: home-smoke, note-smoke;" in result.err, result.err


@pytest.mark.usefixtures("pooled_fleet")
def test_a_device_nobody_pooled_and_labels_no_device_has_are_named(coordinator: CoordinatorProcess,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    absent = tether_here(coordinator, capsys, "submit", "--goal", "g", "--device", "phone-9")
    assert absent.code == 0 and absent.err.startswith("warning: no pooled device matches device 'phone-9'"), absent
    labels = tether_here(coordinator, capsys, "submit", "--goal", "g", "--driver", "sim", "--label", "rack=r9")
    assert labels.code == 0, labels
    assert labels.err.startswith("warning: no pooled device matches driver 'sim' with labels rack=r9"), labels.err


@pytest.mark.usefixtures("pooled_fleet")
def test_a_task_that_is_placed_or_waits_for_a_busy_device_gets_no_warning(
        coordinator: CoordinatorProcess, capsys: pytest.CaptureFixture[str]) -> None:
    placed = tether_here(coordinator, capsys, "submit", "--workflow", "note-smoke", "--driver", "sim",
                         "--label", "pool=wf")
    assert placed.code == 0 and placed.err == "", placed
    assert coordinator.task(placed.out.strip())["status"] == "assigned"
    busy = tether_here(coordinator, capsys, "submit", "--workflow", "home-smoke", "--device", "wf-phone")
    assert busy.code == 0 and busy.err == "", busy
    assert coordinator.task(busy.out.strip())["waiting_reason"] == "matching_devices_busy"
    assert tether_here(coordinator, capsys, "cancel", placed.out.strip()).code == 0  # wf-phone free again
    coordinator.wait_task(busy.out.strip(), {"assigned"})
    assert tether_here(coordinator, capsys, "cancel", busy.out.strip()).code == 0


@pytest.mark.usefixtures("pooled_fleet")
def test_the_client_gives_scripts_the_same_warning(client: Client) -> None:
    task = client.create_task(workflow="note-smok", selector={"driver": "sim", "labels": {"pool": "wf"}})
    assert task["waiting_reason"] == "no_capable_host"
    warning = client.wait_warning(task)
    assert warning is not None and "'note-smok'" in warning and "home-smoke, note-smoke" in warning
    client.cancel_task(task["task_id"])
    assert client.wait_warning(client.get_task(task["task_id"])) is None  # not waiting any more


@pytest.mark.usefixtures("pooled_fleet")
def test_a_token_that_cannot_read_the_fleet_gets_the_warning_without_the_inventory(
        coordinator: CoordinatorProcess, capsys: pytest.CaptureFixture[str]) -> None:
    created = coordinator.api.post("/api/v1/operator-tokens", json={"name": "warn-submit", "scopes": ["submit"]})
    assert created.status_code == 201, created.text
    capsys.readouterr()
    code = main(["--url", coordinator.url, "--token", created.json()["token"],
                 "submit", "--goal", "g", "--driver", "sim-typo"])
    captured = capsys.readouterr()
    assert code == 0 and captured.out.strip().startswith("t_")
    assert captured.err.startswith("warning: no pooled device matches driver 'sim-typo'"), captured.err
    assert "this token may not read what the fleet has" in captured.err
