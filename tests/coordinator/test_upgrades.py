"""Upgrades are in one place (coordinator/state/upgrades.py): every upgrade script of lua/ is
listed there once, with the test that writes its earlier layout and reads the current one."""

from __future__ import annotations

from pathlib import Path

import pytest

from coordinator.state.scripts import lua_dir
from coordinator.state.upgrades import UPGRADES
from tests.conftest import Api

ROOT = Path(__file__).resolve().parents[2]


def test_every_upgrade_script_is_listed_once_with_its_test() -> None:
    scripts = sorted(path.name.split("-")[0] for path in lua_dir().glob("upgrade*.lua"))
    assert sorted(upgrade.script for upgrade in UPGRADES) == scripts
    for upgrade in UPGRADES:
        path, name = upgrade.tested_by.split("::")
        assert f"def {name}(" in (ROOT / path).read_text(), upgrade


@pytest.mark.anyio
async def test_a_reaper_pass_runs_the_upgrades_an_earlier_version_may_still_need(api: Api) -> None:
    swept = await api.sweep()
    assert {upgrade.every_sweep for upgrade in UPGRADES if upgrade.every_sweep} <= swept.keys()
