"""A fixture name means one thing in the whole suite: two fixtures of one name (in different
modules) give the same type, so ``client`` or ``store`` read in any test file is what it is in
every other. Read from the source with ``ast``: each fixture's return annotation, its
``Iterator[...]``/``AsyncIterator[...]`` taken off (what the test receives)."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

TESTS = Path(__file__).resolve().parent
_YIELDING = ("Iterator[", "AsyncIterator[", "Generator[", "AsyncGenerator[")


def _given(returns: ast.expr | None) -> str:
    text = ast.unparse(returns) if returns is not None else "?"
    for wrapper in _YIELDING:
        if text.startswith(wrapper):
            return text[len(wrapper):-1].split(", ")[0]
    return text


def _fixtures() -> dict[str, set[tuple[str, str]]]:
    """Each fixture name -> {(the type it gives, the file defining it)}."""
    found: dict[str, set[tuple[str, str]]] = defaultdict(set)
    for path in TESTS.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            for decorator in node.decorator_list:
                if "fixture" not in ast.unparse(decorator):
                    continue
                keywords = decorator.keywords if isinstance(decorator, ast.Call) else []
                name = next((ast.literal_eval(k.value) for k in keywords if k.arg == "name"), node.name)
                found[name].add((_given(node.returns), str(path.relative_to(TESTS))))
    return found


def test_every_fixture_name_gives_one_type_in_the_whole_suite() -> None:
    fixtures = _fixtures()
    assert {"client", "store", "redis_client", "api"} <= fixtures.keys()
    clashes = {name: sorted(defined) for name, defined in fixtures.items() if len({t for t, _ in defined}) > 1}
    assert clashes == {}
