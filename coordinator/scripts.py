"""Loads the Lua scripts of lua/ and runs them with EVALSHA.

A script file is named ``verbNoun-N.lua`` where N is its number of KEYS; a call with another
number of keys is refused before it reaches Redis, so key-order drift fails loudly. Lines
``--- @include "includes/name"`` are replaced by that file, once per script.
"""

from __future__ import annotations

import re
from importlib import resources
from pathlib import Path
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import NoScriptError

_INCLUDE = re.compile(r'^--- @include "([\w/]+)"\s*$', re.MULTILINE)
_NAME = re.compile(r"^(?P<name>[a-zA-Z]+)-(?P<keys>\d+)\.lua$")


def lua_dir() -> Path:
    """The scripts folder: lua/ beside the package in a checkout, else the installed copy."""
    checkout = Path(__file__).resolve().parent.parent / "lua"
    if checkout.is_dir():
        return checkout
    return Path(str(resources.files("coordinator") / "lua"))


def _expand(source: str, root: Path, seen: set[str]) -> str:
    def include(match: re.Match[str]) -> str:
        name = match.group(1)
        if name in seen:
            return ""
        seen.add(name)
        return _expand((root / f"{name}.lua").read_text(), root, seen)

    return _INCLUDE.sub(include, source)


class Script:
    def __init__(self, name: str, num_keys: int, source: str) -> None:
        self.name = name
        self.num_keys = num_keys
        self.source = source
        self.sha: str | None = None

    async def load(self, redis: Redis) -> None:
        self.sha = await redis.script_load(self.source)

    async def __call__(self, redis: Redis, keys: list[str], args: list[Any]) -> Any:
        if len(keys) != self.num_keys:
            raise ValueError(f"{self.name} takes {self.num_keys} keys, got {len(keys)}")
        if self.sha is None:
            await self.load(redis)
        try:
            return await redis.evalsha(self.sha, self.num_keys, *keys, *args)
        except NoScriptError:
            # Redis restarted or was flushed: load again and retry once.
            await self.load(redis)
            return await redis.evalsha(self.sha, self.num_keys, *keys, *args)


def load_scripts(root: Path | None = None) -> dict[str, Script]:
    root = root or lua_dir()
    scripts: dict[str, Script] = {}
    for path in sorted(root.glob("*.lua")):
        match = _NAME.match(path.name)
        if match is None:
            raise ValueError(f"{path.name}: Lua scripts are named verbNoun-N.lua")
        source = _expand(path.read_text(), root, set())
        scripts[match["name"]] = Script(match["name"], int(match["keys"]), source)
    return scripts
