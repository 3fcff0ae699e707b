"""luacheck over the Lua as Redis runs it, each warning named at its file and line.

The scripts of ``lua/`` are not programs of their own: the loader (``coordinator/state/
scripts.py``) makes them one function library, the generated constants and every include at its
top, each script a function of it. Checked file by file, every helper and constant would be an
unknown name; checked as the library, a name no file defines is an error, and a helper that no
script calls is an unused function. So the library is built from a copy of ``lua/`` whose every
line ends in a comment naming where it came from, luacheck checks it (configured in
``.luacheckrc``: Lua 5.1 and Redis's globals), and each warning is reported at its origin; a
line with none is the loader's own (the constants, a function's wrapper). Line lengths are
checked on the files themselves, as written.

    .venv/bin/python -m tests.lua_lint        # the README's check command runs it beside ruff

Exit status 0 when luacheck finds nothing, 1 otherwise (or when luacheck is not installed:
Debian's ``lua-check``, which ``.ci/run`` installs).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from coordinator.state.scripts import load_scripts, lua_dir

_DIRECTIVE = re.compile(r"^--- @(include|flags) ")  # the loader's own lines: left as they are
_ORIGIN = re.compile(r" --@(?P<file>[\w/.-]+):(?P<line>\d+)$")
_ON_LINE = re.compile(r"on line (\d+)")  # a message's reference to another line of the library
_WARNING = re.compile(r"^[^:]+:(?P<line>\d+):(?P<column>\d+): (?P<message>.*)$")


def _marked_copy(source: Path, target: Path) -> None:
    for path in source.rglob("*.lua"):
        relative = path.relative_to(source)
        lines = path.read_text().split("\n")
        marked = [line if _DIRECTIVE.match(line) or not line.strip() else f"{line} --@lua/{relative}:{number}"
                  for number, line in enumerate(lines, 1)]
        (target / relative).parent.mkdir(parents=True, exist_ok=True)
        (target / relative).write_text("\n".join(marked))


def _luacheck(root: Path, path: str, *options: str) -> list[str]:
    done = subprocess.run(["luacheck", path, "--formatter", "plain", "--codes", *options], cwd=root,
                          capture_output=True, text=True, check=False)
    if done.returncode > 2:  # 1: warnings, 2: errors; more: luacheck itself failed
        raise SystemExit(f"luacheck failed: {done.stderr.strip() or done.stdout.strip()}")
    return [line for line in done.stdout.splitlines() if line.strip()]


def _origin(lines: list[str], number: int) -> str:
    """Where line ``number`` of the library came from."""
    origin = _ORIGIN.search(lines[number - 1])
    return f"{origin['file']}:{origin['line']}" if origin else f"(the loader's line {number})"


def library_warnings(root: Path) -> list[str]:
    """luacheck's warnings of the library built from ``root/lua``, each at its origin."""
    with tempfile.TemporaryDirectory() as folder:
        copy = Path(folder) / "lua"
        _marked_copy(lua_dir(), copy)
        library = next(iter(load_scripts(copy).values())).library
        lines = library.source.split("\n")[1:]  # after the #!lua line, which is no Lua
        text = Path(folder) / "library.lua"
        text.write_text("\n".join(lines))
        found = _luacheck(root, str(text), "--no-max-line-length")
    warnings = []
    for found_line in found:
        match = _WARNING.match(found_line)
        if match is None:
            warnings.append(found_line)
            continue
        message = _ON_LINE.sub(lambda on: f"at {_origin(lines, int(on[1]))}", match["message"])
        warnings.append(f"{_origin(lines, int(match['line']))}:{match['column']}: {message}")
    return warnings


def main() -> int:
    if shutil.which("luacheck") is None:
        print("luacheck is not installed (Debian: apt-get install lua-check)", file=sys.stderr)
        return 1
    root = Path(__file__).resolve().parents[1]
    warnings = [*library_warnings(root), *_luacheck(root, "lua", "--only", "631")]
    for warning in warnings:
        print(warning)
    print(f"luacheck: {len(warnings)} warnings in the Lua library", file=sys.stderr)
    return 1 if warnings else 0


if __name__ == "__main__":
    sys.exit(main())
