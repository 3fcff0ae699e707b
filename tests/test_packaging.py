"""What a non-editable install ships: every package of the source tree. The tests run from the
checkout, whose source tree shadows the installed package, so a package missing from
pyproject.toml's list would pass them all and fail every deployment installed with pip."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = ("wire", "coordinator", "agent", "tether")


def _source_packages() -> set[str]:
    return {".".join(init.parent.relative_to(ROOT).parts)
            for top in SHIPPED for init in (ROOT / top).rglob("__init__.py")}


def test_every_package_of_the_source_tree_is_installed() -> None:
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(setuptools["packages"])
    missing = _source_packages() - listed
    assert not missing, f"pyproject.toml's [tool.setuptools] packages lacks {sorted(missing)}"
    # The Lua scripts ship inside the coordinator, from the folder at the top of the repository.
    assert {"coordinator.lua", "coordinator.lua.includes"} <= listed
    assert setuptools["package-dir"]["coordinator.lua"] == "lua"
