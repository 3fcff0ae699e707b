"""The floors the README draws, kept: a module imports only from its own floor or those below.

Read from the source with ``ast`` (every ``import`` and ``from … import``, including those inside
functions), so a crossing fails here before anyone reads it in review. The three packages the
project ships import none of each other, and ``wire`` imports none of them.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# Top floor first. A module belongs to the first floor with a prefix of its dotted name.
FLOORS: list[tuple[str, ...]] = [
    ("coordinator.__main__", "coordinator.demo", "coordinator.serve"),
    ("coordinator.app",),
    ("coordinator.api",),
    ("coordinator.longpoll", "coordinator.feed", "coordinator.reaper", "coordinator.blobs", "coordinator.metrics",
     "coordinator.webhooks"),
    ("coordinator.state",),
    ("coordinator.transport",),
    ("coordinator.settings", "coordinator.errors", "coordinator.clock", "coordinator.cancellation",
     "coordinator.outage", "coordinator"),
]
PACKAGES = ("coordinator", "agent", "tether", "wire")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path) -> set[str]:
    """The project modules ``path`` imports (``from pkg import mod`` counted as ``pkg.mod``)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return {name for name in found if name.split(".")[0] in PACKAGES}


def _floor(module: str) -> int | None:
    for index, prefixes in enumerate(FLOORS):
        if any(module == p or module.startswith(p + ".") for p in prefixes):
            return index
    return None


def _sources(package: str) -> list[Path]:
    return sorted((ROOT / package).rglob("*.py"))


def _existing(module: str) -> bool:
    base = ROOT / module.replace(".", "/")
    return base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()


@pytest.mark.parametrize("path", _sources("coordinator"), ids=lambda p: str(p.relative_to(ROOT)))
def test_a_coordinator_module_imports_only_its_floor_and_those_below(path: Path) -> None:
    module = _module_name(path)
    floor = _floor(module)
    assert floor is not None, f"{module} is on no floor: add it to FLOORS and the README"
    upward = sorted(
        name for name in _imports(path)
        if name.startswith("coordinator") and _existing(name) and (_floor(name) or 0) < floor
    )
    assert not upward, f"{module} (floor {floor}) imports from a floor above it: {upward}"


@pytest.mark.parametrize("package", PACKAGES)
def test_the_packages_import_none_of_each_other(package: str) -> None:
    # wire is the vocabulary all three speak; it imports none of them.
    allowed = {package, "wire"}
    crossings = sorted(
        f"{_module_name(path)} -> {name}"
        for path in _sources(package) for name in _imports(path)
        if name.split(".")[0] not in allowed
    )
    assert not crossings, crossings
