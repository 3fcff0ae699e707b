"""Every Redis key name is defined once, in coordinator/state/keys.py: the scripts derive keys by the
names generated from it, docs/redis-keys.md documents exactly those names, and what a lifecycle
leaves in Redis is named by them alone (real Redis, fakeredis, cluster)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from redis.exceptions import ResponseError

from coordinator.state.keys import PER_ID_KINDS, Keys
from coordinator.state.scripts import load_scripts, lua_constants, lua_dir
from tests.conftest import Api
from tests.coordinator.helpers import claim_one
from tests.support import glob_escape

pytestmark = [pytest.mark.anyio, pytest.mark.cluster]

_DOC = Path(__file__).resolve().parents[2] / "docs" / "redis-keys.md"
_DOC_ROW = re.compile(r"^\| `([a-z_]+)(:<[^>]+>)?` \|", re.MULTILINE)
_FIXED_USED = re.compile(r"\bS\.key\.(\w+)")
_KIND_USED = re.compile(r"\bderived\(S, '(\w+)'")


def _lua_sources() -> str:
    return "\n".join(p.read_text() for p in sorted(lua_dir().rglob("*.lua")))


def test_the_layout_doc_lists_every_key_of_keys_py_and_no_other() -> None:
    rows = _DOC_ROW.findall(_DOC.read_text())
    assert {name for name, per_id in rows if not per_id} == set(Keys("x").names().values())
    assert {name for name, per_id in rows if per_id} == set(PER_ID_KINDS)


def test_each_kind_is_the_method_that_builds_its_keys() -> None:
    keys = Keys("p:{t}")
    for kind in PER_ID_KINDS:
        assert getattr(keys, kind)("id-1") == f"p:{{t}}:{kind}:id-1"


def test_the_scripts_derive_keys_by_the_names_generated_from_keys_py() -> None:
    """The names reach the library from keys.py (``lua_constants``); every name and kind a script
    derives a key by is one of them, and no script spells a name table of its own."""
    generated = lua_constants()
    names = Keys("x").names()
    for attribute, name in names.items():
        assert f"  {attribute} = '{name}'," in generated
    for kind in PER_ID_KINDS:
        assert f"{kind} = '{kind}'" in generated
    sources = _lua_sources()
    used = set(_FIXED_USED.findall(sources))
    assert {"tasks", "targets", "lease_deadlines", "host_snapshots"} <= used, "the pattern finds no use"
    assert used <= set(names), used - set(names)
    kinds = set(_KIND_USED.findall(sources))
    assert {"assigned", "polls", "inbox", "lease"} <= kinds, "the pattern finds no use"
    assert kinds <= set(PER_ID_KINDS), kinds - set(PER_ID_KINDS)
    assert not re.search(r"^local (KEY_NAMES|KEY_KINDS)\b", sources, re.MULTILINE)


_KIND_PASSED = re.compile(r"^\s+KEYS\[\d+\]\s+(\w+):<", re.MULTILINE)
_STATE = Path(__file__).resolve().parents[2] / "coordinator" / "state"
# The store and its parts by concern (coordinator/state/store.py names them).
_STORE_PARTS = [_STATE / f"{name}.py" for name in ("store", "access_scripts", "session_scripts", "script_calls")]


def test_each_kind_of_key_is_passed_or_derived_the_same_way_everywhere() -> None:
    """STYLE.md: a key of one id is either passed in KEYS (its script's header names it) or
    derived inside the scripts, never one in some scripts and the other in others; the store
    builds only the kinds that are passed."""
    sources = _lua_sources()
    passed = set(_KIND_PASSED.findall(sources))
    derived = set(_KIND_USED.findall(sources))
    assert {"auth_failures", "lease"} <= passed | derived, "the patterns find no use"
    assert passed & derived == set()
    built = set(re.findall(r"\bk(?:eys)?\.(\w+)\(", "\n".join(part.read_text() for part in _STORE_PARTS))) & set(PER_ID_KINDS)
    assert built <= passed, built - passed


async def test_a_scheduling_script_refuses_a_key_of_another_base(api: Api) -> None:
    """KEYS[1] names the slot the call runs on: one that is not the base's own tasks key would let
    the keys it touches and the slot it is routed to differ, so the call fails before any write."""
    store = api.ctx.store
    script = load_scripts()["expireHosts"]
    other = store.keys.base + "elsewhere"  # same hash tag: only the script can tell
    with pytest.raises(ResponseError, match="KEYS\\[1\\] must be the tasks key"):
        await script(store.transport, [other], [30_000, 60_000, store.keys.base, 60_000, 1000, 10])


async def test_a_lifecycle_leaves_only_keys_named_in_keys_py(api: Api) -> None:
    redis, keys = api.ctx.store.redis, api.ctx.store.keys
    await api.heartbeat("host-a", ["a1"])
    first = (await api.create_task(device_id="a1")).json()["task_id"]
    await api.create_task(selector={"driver": "sim"})  # waits: a1 holds the first
    leased = await claim_one(api, "host-a")
    assert leased["task_id"] == first
    assert (await api.renew("host-a", leased)).status_code == 200
    assert (await api.result("host-a", leased)).status_code == 200
    fixed, kinds = set(keys.names().values()), set(PER_ID_KINDS)
    found = set()
    async for raw in redis.scan_iter(match=glob_escape(keys.base) + "*", count=1000):
        rest = raw.decode()[len(keys.base):]
        found.add(rest)
        assert rest in fixed or rest.split(":", 1)[0] in kinds, rest
    assert {"tasks", "feed", "hosts_online"} <= found
    assert {"assigned", "device_runs", "host_devices"} <= {k.split(":", 1)[0] for k in found}
