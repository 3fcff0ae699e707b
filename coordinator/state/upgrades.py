"""Every upgrade of an earlier Redis layout, in one place: the script that rewrites it, the layout
it upgrades from (that of the commits before the one named), whether it also runs on every reaper
pass, and the test that shows it.

Those that walk a collection once run as a process starts, before it serves
(``coordinator/reaper.py``, ``upgrade_before_serving``), never waiting for replicas, and mark
themselves done in ``upgrades`` (a later start costs one read). Those marked ``every_sweep`` run
on each reaper pass instead (the first as the process starts its reaper), because a process of
the earlier version still running beside this one (a rolling upgrade: each version calls its own
library, ``coordinator/state/scripts.py``) keeps writing their earlier layout, a drain or a
status change; a pass with none left costs one read.

A new upgrade: its script ``lua/upgradeX-1.lua`` (Input, Output, what it rewrites, as every
script), one ``Store`` method, an entry here, and a test that writes the earlier layout and reads
the current one; ``tests/coordinator/test_upgrades.py`` fails on a script not listed here.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from coordinator.state.store import Store, Sweep


@dataclass(frozen=True)
class Upgrade:
    script: str  # lua/<script>-1.lua
    upgrades_from: str  # the layout of the commits before this one
    call: Callable[[Store, int], Awaitable[int | Sweep]]  # a batch of at most N entries
    tested_by: str  # the test (path::name) that writes the earlier layout and reads the current one
    every_sweep: str | None = None  # the reaper pass's count of it, when it runs on each pass too


UPGRADES: tuple[Upgrade, ...] = (
    # First: until it has run, a host drained on the earlier layout could take work.
    Upgrade("upgradeHostState", "a3c48f0", Store.upgrade_host_state,
            "tests/coordinator/test_fleet_control.py::test_a_reaper_pass_moves_the_earlier_layout_of_host_standing",
            every_sweep="upgraded_hosts"),
    Upgrade("upgradeStatusIndex", "000278e", Store.upgrade_status_index,
            "tests/coordinator/test_listings.py::test_a_reaper_pass_upgrades_the_earlier_status_index",
            every_sweep="upgraded"),
    Upgrade("upgradeDeviceRuns", "474f7b9", Store.upgrade_device_runs,
            "tests/coordinator/test_history.py::test_a_start_takes_off_the_expiry_earlier_versions_gave_pooled_devices_runs"),
    Upgrade("upgradeTeamNames", "351bc6b", Store.upgrade_team_names,
            "tests/coordinator/test_sharing.py::test_teams_named_before_the_upgrade_are_listed_and_kept"),
    # After upgradeTeamNames, which names every team whose device time it walks.
    Upgrade("upgradeTeamUsage", "20311dc", Store.upgrade_team_usage,
            "tests/coordinator/test_sharing.py::test_a_start_moves_the_device_time_an_earlier_version_kept_by_minute_60"),
    Upgrade("upgradeIdempotencyKeys", "58ef45a", Store.upgrade_idempotency_keys,
            "tests/coordinator/test_operator_tokens.py::"
            "test_a_start_moves_the_keys_an_earlier_version_stored_bare_under_their_tokens"),
    Upgrade("upgradePlacement", "4d84934", Store.upgrade_placement,
            "tests/coordinator/test_placement_changes.py::test_an_upgrade_moves_the_earlier_layouts_queues_and_free_devices"),
)
