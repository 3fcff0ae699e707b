"""Loads the Lua scripts of lua/ into Redis as one function library and runs them with FCALL.

Every script keeps one rule for its keys (lua/includes/deployment.lua): it takes one key, the
deployment's ``tasks`` key, which names the slot, and the deployment first in ARGV, and derives
every key it touches from the key base. So a file is named ``verbNoun-1.lua`` (N, its number of
KEYS, is 1), its code builds the deployment with ``deployment(KEYS, ARGV)`` and reads KEYS nowhere
else: ``load_scripts`` refuses a script that does not, and a call passes a ``Deployment``, never
keys of its own. Lines
``--- @include "includes/name"`` name the helpers a script uses; a line ``--- @flags no-writes``
marks a script that only reads (Redis then runs it even when it is out of memory).

Why a library and not EVALSHA: Redis runs a script's whole text on every call, so each call
defined every helper of the includes again, most of the cost of a call that does little.
A library's top level runs once, when it is loaded: the includes are defined there, once, and
each script becomes a function (``redis.register_function``) whose body is the file's text,
with ``KEYS`` and ``ARGV`` as its two parameters. Functions are named after the library's
content digest (``createTask_<digest>``), so two versions of the coordinator sharing a Redis
(deployments of different versions, or an upgrade) each call their own. Redis keeps libraries in
its snapshots and replicates them; when it has lost one anyway (a restart without persistence, a
flush), the first call that finds its function missing loads the library again and retries.

With ``Durability(replicas=N)`` a call is acknowledged only once Redis's ``WAIT`` says N replicas
have its writes; the transport (``transport/base.py``) sends WAIT on the call's connection.
"""

from __future__ import annotations

import functools
import hashlib
import re
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import ResponseError

import wire
from coordinator.errors import ScriptError
from coordinator.state.keys import STATUS_CODES, STATUS_SPAN, Keys, lua_key_names
from coordinator.state.wait_reasons import CANDIDATE_COUNTS, HostFlag
from coordinator.transport.base import (
    NO_WAIT,
    Durability,
    NotReplicated,
    RedisTransport,
)

__all__ = ["NO_WAIT", "Deployment", "Durability", "Library", "NotReplicated", "Script", "load_scripts"]

# How long a process's inbox outlives the last wake-up pushed onto it: a live process drains it
# at once, so this only bounds what a crashed process leaves behind.
INBOX_TTL_MS = 60_000

# A device's runs are trimmed back to wire.DEVICE_RUNS_KEPT once they hold this many more: one
# LTRIM a batch of runs instead of one a run (lua/includes/events.lua, endRun).
DEVICE_RUNS_SLACK = 100

# Devices one step feeds at most, of those something may wait for (lua/includes/placement.lua,
# refreshDevice): a heartbeat relabelling 256 devices, or a host of 256 back online, feeds this many
# and leaves the rest, not free meanwhile, to the reaper's next pass (placeLeftOver, as many a
# call, up to 100 calls a pass). A feed of a device whose labels index a few tens of targets is
# some 0.2 to 0.4 ms at fleet scale (bench row 14): with four, a heartbeat relabelling a host's ten
# devices reached 6.5 ms there, over the 5 ms a step may hold Redis; with two, 3.0 and 4.7 ms.
DEVICE_FEEDS_PER_STEP = 2

_INCLUDE = re.compile(r'^--- @include "([\w/]+)"\s*$', re.MULTILINE)
_FLAGS = re.compile(r"^--- @flags ([\w -]+?)\s*$", re.MULTILINE)
_NAME = re.compile(r"^(?P<name>[a-zA-Z]+)-1\.lua$")
_COMMENT = re.compile(r"--\[\[.*?\]\]|--[^\n]*", re.DOTALL)
_DEPLOYMENT = "local S = deployment(KEYS, ARGV)"
_KEYS = re.compile(r"\bKEYS\b")


@dataclass(frozen=True)
class Deployment:
    """What every script takes first (lua/includes/deployment.lua): KEYS[1], the deployment's
    ``tasks`` key, and ARGV[1..5], its settings and key base. The same for every call a process
    makes."""

    keys: Keys
    host_offline_after_ms: int
    inbox_ttl_ms: int = INBOX_TTL_MS
    claim_timeout_ms: int = 60_000
    retention_ms: int = 7 * 24 * 3600 * 1000

    def script_keys(self) -> list[str]:
        return [self.keys.tasks]

    def script_args(self) -> list[Any]:
        return [self.host_offline_after_ms, self.inbox_ttl_ms, self.keys.base, self.claim_timeout_ms,
                self.retention_ms]


def _check_keys_rule(file_name: str, text: str) -> None:
    """Refuse a script that breaks the rule for keys (lua/includes/deployment.lua): its code (not
    its comments) builds ``S`` once from KEYS and ARGV and reads KEYS nowhere else."""
    code = _COMMENT.sub("", text)
    if code.count(_DEPLOYMENT) != 1 or len(_KEYS.findall(code)) != 1:
        raise ValueError(f"{file_name}: a script builds its keys once, with `{_DEPLOYMENT}`, and reads "
                         "KEYS nowhere else (lua/includes/deployment.lua)")


def lua_dir() -> Path:
    """The scripts folder: lua/ beside the package in a checkout, else the installed copy."""
    checkout = Path(__file__).resolve().parents[2] / "lua"
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


class Library:
    """The scripts of lua/ as one Redis function library: its name, its source, and whether this
    process has loaded it (Redis may have lost it since; a call that finds its function missing
    loads it again)."""

    def __init__(self, name: str, source: str) -> None:
        self.name = name
        self.source = source
        self.loaded = False

    async def load(self, redis: Redis) -> None:
        # REPLACE: the same name is the same text (the name is its digest), so loading it
        # again, from another process or after a restart, changes nothing.
        await redis.function_load(self.source, replace=True)
        self.loaded = True

    def forget(self) -> None:
        """Redis lost its data (``coordinator/state/epoch.py``): load the library before the next call
        rather than trust that Redis still holds it."""
        self.loaded = False

    async def present(self, redis: Redis) -> bool:
        """Whether Redis holds the library (on a cluster: every master does)."""
        listed = await redis.function_list(library=self.name)
        if isinstance(listed, dict):  # a cluster answers per master
            return bool(listed) and all(listed.values())
        return bool(listed)


def _function_missing(exc: ResponseError) -> bool:
    return str(exc).startswith("Function not found")


class Script:
    def __init__(self, name: str, function: str, library: Library) -> None:
        self.name = name
        self.function = function
        self.library = library

    async def __call__(self, redis: RedisTransport, deployment: Deployment, args: list[Any],
                       durability: Durability = NO_WAIT, clock_offset_ms: int = 0) -> Any:
        """FCALL the script in ``deployment`` with its own ``args`` (ARGV[6..]).
        ``clock_offset_ms``: how far a test moved the clock the script reads (coordinator/clock.py);
        always 0 in service."""
        keys = deployment.script_keys()
        args = [*deployment.script_args(), *args, clock_offset_ms]
        if not self.library.loaded:
            await self.library.load(redis.client)
        try:
            return await redis.fcall(self.function, keys, args, durability)
        except ResponseError as exc:
            if not _function_missing(exc):
                raise
            # Redis restarted without its data, was flushed, or a node without the library
            # took over: load it again and retry once.
            await self.library.load(redis.client)
            return await redis.fcall(self.function, keys, args, durability)


def _function(name: str, flags: list[str], body: str) -> str:
    """One script as a function of the library: its file's text, with ``KEYS`` and ``ARGV`` as its
    parameters, ``rcall`` (includes/common.lua) bound to ``redis.call`` as it starts, and the
    clock's offset taken off the end of ``ARGV`` (``Script.__call__`` always sends it), so the
    script sees exactly the arguments its header names."""
    listed = ", ".join(f"'{flag}'" for flag in flags)
    return (f"redis.register_function{{function_name = '{name}', flags = {{{listed}}},\n"
            f"callback = function(KEYS, ARGV)\nrcall = redis.call\n"
            f"clockOffsetMs = tonumber(table.remove(ARGV))\n{body}\nend}}\n")


def lua_constants() -> str:
    """The vocabulary the scripts share with Python, as Lua, generated from Python's own
    definitions: the failure codes (``E``), what is kept, how many devices a step feeds, the
    status index's scores, the bits of a host's flags, the highest priority (a queue's scores
    count down from it), the terminal statuses (a set: ``TERMINAL_STATUSES[status]``), the
    default team, and the names of a waiting task's counts (``HOST_FLAGS``, ``CANDIDATE_COUNTS``:
    coordinator/state/wait_reasons.py), and the names of the keys (``KEY_NAMES``, ``KEY_KINDS``:
    coordinator/state/keys.py). The library defines it above every include."""
    failures = "".join(f"  {failure.name} = {failure.value},\n" for failure in ScriptError)
    statuses = ", ".join(f"{status} = {code}" for status, code in STATUS_CODES.items())
    flags = ", ".join(f"{flag.name} = {flag.value}" for flag in HostFlag)
    counts = ", ".join(f"'{name}'" for name in CANDIDATE_COUNTS)
    terminal = ", ".join(f"{status} = true" for status in sorted(wire.TERMINAL_STATUSES))
    return (f"local E = {{\n{failures}}}\n"
            f"local HOST_FLAGS = {{{flags}}}\n"
            f"local CANDIDATE_COUNTS = {{{counts}}}\n"
            f"local TASK_EVENTS_KEPT = {wire.TASK_EVENTS_KEPT}\n"
            f"local SESSION_COMMANDS_KEPT = {wire.SESSION_COMMANDS_KEPT}\n"
            f"local SESSION_COMMANDS_WAITING_MAX = {wire.SESSION_COMMANDS_WAITING_MAX}\n"
            f"local DEVICE_RUNS_KEPT = {wire.DEVICE_RUNS_KEPT}\n"
            f"local DEVICE_RUNS_SLACK = {DEVICE_RUNS_SLACK}\n"
            f"local DEVICE_FEEDS_PER_STEP = {DEVICE_FEEDS_PER_STEP}\n"
            f"local FEED_EVENTS_KEPT = {wire.FEED_EVENTS_KEPT}\n"
            f"local PRIORITY_MAX = {wire.PRIORITY_MAX}\n"
            f"local TERMINAL_STATUSES = {{{terminal}}}\n"
            f"local DEFAULT_TEAM = '{wire.DEFAULT_TEAM}'\n"
            f"local RUN_WORK_LABEL_MAX_BYTES = {wire.RUN_WORK_LABEL_MAX_BYTES}\n"
            f"local STATUS_CODES = {{{statuses}}}\n"
            f"local STATUS_SPAN = {STATUS_SPAN}\n"
            f"{lua_key_names()}")


def load_scripts(root: Path | None = None) -> dict[str, Script]:
    """Every script of lua/ by name, all in one library (not loaded into Redis yet)."""
    name, source, scripts = _library(root or lua_dir())
    library = Library(name, source)
    return {script: Script(script, function, library) for script, function in scripts}


@functools.cache
def _library(root: Path) -> tuple[str, str, tuple[tuple[str, str], ...]]:
    """The library of ``root``'s scripts: its name, its source, and each script's name with its
    function's. Made once per process: the files do not change under it, and reading them costs
    some 15 ms, which every in-process coordinator would pay again (the tests build thousands)."""
    seen: set[str] = set()
    helpers: list[str] = [lua_constants()]
    scripts: list[tuple[str, list[str], str]] = []
    for path in sorted(root.glob("*.lua")):
        match = _NAME.match(path.name)
        if match is None:
            raise ValueError(f"{path.name}: Lua scripts are named verbNoun-1.lua (one key: "
                             "lua/includes/deployment.lua)")
        text = path.read_text()
        _check_keys_rule(path.name, text)
        # Each include once, at the library's top, the ones it includes before it.
        helpers += [_expand(f'--- @include "{name}"', root, seen) for name in _INCLUDE.findall(text)]
        flags = _FLAGS.search(text)
        scripts.append((match["name"], flags[1].split() if flags else [], _FLAGS.sub("", _INCLUDE.sub("", text))))
    content = "\0".join([*helpers, *(f"{name}\0{flags}\0{body}" for name, flags, body in scripts)])
    digest = hashlib.sha1(content.encode()).hexdigest()[:12]
    source = "\n".join([
        f"#!lua name=tether_{digest}", *helpers,
        *(_function(f"{name}_{digest}", flags, body) for name, flags, body in scripts)])
    return f"tether_{digest}", source, tuple((name, f"{name}_{digest}") for name, _, _ in scripts)
