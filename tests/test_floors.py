"""The floors the README draws, kept: a module imports only from its own floor or those below.

Read from the source with ``ast``: every ``import`` and ``from … import``, inside functions too,
relative ones resolved against the importing module's package (``from .api import routes`` in
``coordinator/reaper.py`` is ``coordinator.api.routes``), and ``from pkg import name`` counted as
the module ``pkg.name`` where there is one, else as ``pkg``. Every module of the four packages is
on a floor named below: a module is named itself, or by its subpackage (``coordinator.api`` holds
every module under ``coordinator/api/``); a module on no floor fails, so a new one gets its floor
when it is written. The three packages the project ships import none of each other, and ``wire``
imports none of them.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# Each package's floors, top floor first.
FLOORS: dict[str, list[tuple[str, ...]]] = {
    "coordinator": [
        ("coordinator.__main__", "coordinator.demo", "coordinator.demo_processes", "coordinator.serve"),
        ("coordinator.app",),
        ("coordinator.mcp",),
        ("coordinator.api",),
        ("coordinator.longpoll", "coordinator.feed", "coordinator.reaper", "coordinator.blobs",
         "coordinator.metrics", "coordinator.webhooks", "coordinator.webhook_endpoints"),
        ("coordinator.state",),
        ("coordinator.transport",),
        ("coordinator.settings", "coordinator.errors", "coordinator.clock", "coordinator.cancellation",
         "coordinator.outage", "coordinator.ui", "coordinator.webhook_targets", "coordinator"),
    ],
    "agent": [
        ("agent.__main__", "agent.app", "agent.usage"),
        ("agent.host", "agent.identity"),
        ("agent.heartbeat", "agent.lease_run", "agent.host_config"),
        ("agent.artifacts", "agent.renewals", "agent.executor", "agent.settings", "agent.session_run",
         "agent.report"),
        ("agent.runtime",),
        ("agent.client", "agent.retry", "agent.run_log"),
        ("agent.answers", "agent"),
    ],
    "tether": [
        ("tether.__main__", "tether.cli"),
        ("tether.artifacts_cmd", "tether.runs_cmd", "tether.teams_cmd", "tether.webhooks_cmd",
         "tether.session_cmd"),
        ("tether.commands",),
        ("tether.watch",),
        ("tether", "tether.render", "tether.render_fleet"),
        ("tether.client",),
        ("tether.feed", "tether.waiting", "tether.tables", "tether.arg_types", "tether.sessions", "tether.admin"),
        ("tether.errors", "tether.sse", "tether.run_files", "tether.calls"),
    ],
    "wire": [
        ("wire", "wire.signatures"),
    ],
}
PACKAGES = tuple(FLOORS)


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _existing(module: str) -> bool:
    base = ROOT / module.replace(".", "/")
    return base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()


def _is_subpackage(name: str) -> bool:
    return "." in name and (ROOT / name.replace(".", "/") / "__init__.py").is_file()


def _imports(path: Path) -> set[str]:
    """The project modules ``path`` imports, relative imports resolved."""
    module = _module_name(path)
    # The package a relative import starts from: the module's own, or itself for an __init__.
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - (node.level - 1)]
                source = ".".join([*base, *([node.module] if node.module else [])])
            else:
                source = node.module or ""
            for alias in node.names:
                submodule = f"{source}.{alias.name}"
                found.add(submodule if _existing(submodule) else source)
    return {name for name in found if name.split(".")[0] in PACKAGES and _existing(name)}


def _floor(module: str) -> int | None:
    """The index of ``module``'s floor in its package (0 the top), None if it is on none."""
    for index, names in enumerate(FLOORS.get(module.split(".")[0], [])):
        if any(module == name or (_is_subpackage(name) and module.startswith(name + ".")) for name in names):
            return index
    return None


def _sources(package: str) -> list[Path]:
    return sorted((ROOT / package).rglob("*.py"))


ALL_SOURCES = [path for package in PACKAGES for path in _sources(package)]


@pytest.mark.parametrize("path", ALL_SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_a_module_imports_only_its_floor_and_those_below(path: Path) -> None:
    module = _module_name(path)
    package = module.split(".")[0]
    floor = _floor(module)
    assert floor is not None, f"{module} is on no floor: add it to FLOORS (tests/test_floors.py) and the README"
    floors = {name: _floor(name) for name in _imports(path) if name.split(".")[0] == package}
    upward = sorted(f"{name} (floor {other})" for name, other in floors.items() if other is None or other < floor)
    assert not upward, f"{module} (floor {floor} of {package}) imports from a floor above it: {upward}"


def test_every_floor_names_a_module_that_exists() -> None:
    stale = [name for floors in FLOORS.values() for names in floors for name in names if not _existing(name)]
    assert not stale, f"floors name modules that are gone: {stale}"


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
