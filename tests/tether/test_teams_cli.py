"""Sharing the fleet from the command line, against a real coordinator: ``tether team set``,
``tether teams`` and ``tether submit --priority --team``."""

from __future__ import annotations

import secrets

import pytest

from tests.support import CoordinatorProcess
from tests.tether.conftest import tether, tether_here

pytestmark = pytest.mark.e2e


def test_a_team_set_from_the_command_line_is_listed_with_its_share(
        coordinator: CoordinatorProcess, capsys: pytest.CaptureFixture[str]) -> None:
    team = f"qa-{secrets.token_hex(3)}"
    done = tether(coordinator, "team", "set", team, "--weight", "3", "--max-devices", "2")
    assert done.code == 0, done.err
    assert team in done.out and "WEIGHT" in done.out
    submitted = tether_here(coordinator, capsys, "--json", "submit", "--goal", "g", "--driver", "nosuch",
                            "--team", team, "--priority", "7")
    assert submitted.code == 0, submitted.err
    task = submitted.json()
    assert (task["team"], task["priority"]) == (team, 7)
    listed = tether_here(coordinator, capsys, "--json", "teams").json()
    mine = next(t for t in listed["teams"] if t["team"] == team)
    assert (mine["weight"], mine["max_devices"], mine["queued"]) == (3, 2, 1)
    lifted = tether_here(coordinator, capsys, "--json", "team", "set", team, "--no-max").json()
    assert lifted["max_devices"] is None and lifted["weight"] == 3
    table = tether_here(coordinator, capsys, "teams")
    assert table.code == 0 and team in table.out


@pytest.mark.parametrize("args", [("team", "set", "qa"), ("team", "set", "qa", "--max-devices", "-1"),
                                  ("team", "set", "qa", "--max-devices", "2", "--no-max")])
def test_a_team_set_that_says_nothing_or_contradicts_itself_is_a_usage_error(
        coordinator: CoordinatorProcess, args: tuple[str, ...]) -> None:
    done = tether(coordinator, *args)
    assert done.code == 2 and "Traceback" not in done.err


def test_the_client_pages_through_the_teams(coordinator: CoordinatorProcess,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    from tests.support import ADMIN
    from tether import Client

    made = sorted(f"pg-{secrets.token_hex(3)}-{i}" for i in range(3))
    for team in made:
        assert tether_here(coordinator, capsys, "team", "set", team, "--weight", "2").code == 0
    with Client(coordinator.url, ADMIN, timeout=5) as client:
        first = client.list_teams(limit=1)
        assert len(first["teams"]) == 1 and first["next_cursor"] is not None
        paged = [t["team"] for t in client.iter_teams(page_size=1)]
        assert paged == sorted(paged) and set(made) <= set(paged)
    listed = tether_here(coordinator, capsys, "--json", "teams").json()
    assert set(made) <= {t["team"] for t in listed["teams"]} and listed["next_cursor"] is None
