"""Every Redis key name is defined once, in coordinator/state/keys.py: the scripts derive keys by the
names generated from it, docs/redis-keys.md documents exactly those names, and what a lifecycle
leaves in Redis is named by them alone (real Redis, fakeredis, cluster)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from redis.exceptions import ResponseError

from coordinator.state.keys import PER_ID_KINDS, Keys
from coordinator.state.scripts import NO_WAIT, load_scripts, lua_constants, lua_dir
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


_STATE = Path(__file__).resolve().parents[2] / "coordinator" / "state"
# The store and its parts by concern (coordinator/state/store.py names them).
_STORE_PARTS = [_STATE / f"{name}.py" for name in ("store", "access_scripts", "session_scripts", "script_calls")]


def test_every_key_a_script_touches_is_derived_in_it() -> None:
    """The one rule for keys (lua/includes/deployment.lua): the scripts derive every key, of
    either sort, from the key base, and the store builds none to pass them (a call sends its
    ``Deployment``, whose one key names the slot)."""
    derived = set(_KIND_USED.findall(_lua_sources()))
    assert {"auth_failures", "lease", "host_state"} <= derived, "the pattern finds no use"
    built = re.findall(r"\bk(?:eys)?\.(\w+)\(", "\n".join(part.read_text() for part in _STORE_PARTS))
    assert set(built) & set(PER_ID_KINDS) == set()


async def test_a_script_refuses_a_key_of_another_base(api: Api) -> None:
    """KEYS[1] names the slot the call runs on: one that is not the base's own tasks key would let
    the keys it touches and the slot it is routed to differ, so the call fails before any write
    (a call through ``Script`` cannot send one: it sends its ``Deployment``'s)."""
    store = api.ctx.store
    await store.load_scripts()
    script = load_scripts()["expireHosts"]
    other = store.keys.base + "elsewhere"  # same hash tag: only the script can tell
    with pytest.raises(ResponseError, match="KEYS\\[1\\] must be the tasks key"):
        await store.transport.fcall(script.function, [other],
                                    [*store.deployment.script_args(), 10, 0], NO_WAIT)


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
