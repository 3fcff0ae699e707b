"""Operations endpoints, script loading and the Lua/Python error-code mirror."""

from __future__ import annotations

import contextlib
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import redis.asyncio as aioredis
from redis.exceptions import ResponseError

from coordinator.mcp.endpoint import PATH as MCP_PATH
from coordinator.state.keys import Keys
from coordinator.state.scripts import Deployment, load_scripts, lua_dir
from coordinator.transport.base import PlainTransport, RedisTransport
from tests.conftest import HOSTS, Api

pytestmark = [pytest.mark.anyio, pytest.mark.cluster]


def test_every_script_documents_its_input_and_takes_the_deployment_first() -> None:
    """The one rule for keys (lua/includes/deployment.lua), in each header: KEYS[1] and ARGV[1..5]
    are the deployment, and no other key is passed."""
    scripts = load_scripts()
    assert {"heartbeat", "claimAssignment", "renewLease", "recordResult", "createTask", "cancelTask",
            "expireLeases", "expireHosts"} <= set(scripts)
    for path in lua_dir().glob("*.lua"):
        text = path.read_text()
        assert "Input:" in text and "Output:" in text and "Invariant" in text, path.name
        assert "    KEYS[1], ARGV[1..5]  the deployment (includes/deployment.lua)" in text, path.name
        assert set(re.findall(r"KEYS\[(\d+)\]", text)) == {"1"}, path.name


def _header(text: str) -> str:
    return f"--[[\n  {text}\n  Input: Output: Invariant: none\n]]\n"


_DEPLOYMENT = "local S = deployment(KEYS, ARGV)\n"


@pytest.mark.parametrize(("name", "body"), [
    ("first-2.lua", _DEPLOYMENT + "return 0\n"),  # two keys
    ("first-1.lua", "return rcall('GET', KEYS[1])\n"),  # no deployment
    ("first-1.lua", _DEPLOYMENT + "return rcall('GET', KEYS[2])\n"),  # a key passed besides it
    ("first-1.lua", _DEPLOYMENT + _DEPLOYMENT + "return 0\n"),  # S built twice
])
def test_the_loader_refuses_a_script_that_breaks_the_rule_for_keys(tmp_path: Path, name: str, body: str) -> None:
    (tmp_path / name).write_text(_header("first") + body)
    with pytest.raises(ValueError, match="deployment"):
        load_scripts(tmp_path)


def test_the_loader_reads_the_rule_in_code_not_in_comments(tmp_path: Path) -> None:
    (tmp_path / "first-1.lua").write_text(_header("first KEYS[2] in a comment") + _DEPLOYMENT
                                          + "-- KEYS[3], said in passing\nreturn rcall('HKEYS', S.key.tasks)\n")
    assert set(load_scripts(tmp_path)) == {"first"}


def test_includes_load_once_each_after_the_includes_they_name(tmp_path: Path) -> None:
    """An include may name includes of its own: the library defines each once, at its top, every
    one after those it names, whichever script names it first."""
    includes = tmp_path / "includes"
    includes.mkdir()
    (includes / "a.lua").write_text("local function fromA() return 1 end\n")
    (includes / "b.lua").write_text('--- @include "includes/a"\nlocal function fromB() return fromA() end\n')
    (includes / "c.lua").write_text('--- @include "includes/b"\n--- @include "includes/a"\n'
                                    "local function fromC() return fromB() end\n")
    (tmp_path / "first-1.lua").write_text(_header("first") + '--- @include "includes/c"\n' + _DEPLOYMENT
                                          + "return fromC()\n")
    (tmp_path / "second-1.lua").write_text(_header("second") + '--- @include "includes/a"\n'
                                           '--- @include "includes/b"\n' + _DEPLOYMENT + "return fromB()\n")
    source = load_scripts(tmp_path)["first"].library.source
    assert [source.count(f"local function from{n}(") for n in "ABC"] == [1, 1, 1]
    assert source.index("function fromA(") < source.index("function fromB(") < source.index("function fromC(")


def test_every_helper_of_the_library_is_defined_before_it_is_called() -> None:
    """The library's helpers are locals: one called above its definition would be an undefined
    global when the script runs, on whichever path reaches it first."""
    source = next(iter(load_scripts().values())).library.source
    code = re.sub(r"--\[\[.*?\]\]", "", source, flags=re.DOTALL)
    code = re.sub(r"--[^\n]*", "", code)
    defined = {m.group(1): m.start() for m in re.finditer(r"^local function (\w+)", code, re.MULTILINE)}
    assert {"deployment", "taskEvent", "placeTask", "requeueTask", "pauseHost", "wakePolls"} <= set(defined)
    early = [name for name, at in defined.items() for m in re.finditer(rf"\b{name}\(", code) if m.start() < at]
    assert early == []


def test_installed_package_ships_the_dashboard(tmp_path: Path) -> None:
    # Outside the checkout: every file the dashboard serves is in the installed package (wire.js
    # is written from the wire package, no file).
    code = ("from importlib import resources; from coordinator.api import ui as ui_api; "
            "print(all((resources.files('coordinator.ui') / n).is_file() for n in [*ui_api.ASSETS, 'index.html'] "
            "if n != ui_api.WIRE_JS))")
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, check=True)
    assert out.stdout.decode().strip() == "True"


def test_installed_package_ships_the_scripts(tmp_path: Path) -> None:
    # Run outside the checkout, so the installed package (not the source tree) is imported.
    code = "from coordinator.state.scripts import load_scripts; print(len(load_scripts()))"
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, check=True)
    assert int(out.stdout) == len(load_scripts())


async def test_healthz_readyz(api: Api) -> None:
    assert (await api.client.get("/healthz")).json() == {"status": "ok"}
    ready = await api.client.get("/readyz")
    assert ready.status_code == 200 and ready.json()["scripts"] is True


async def test_scripts_reloaded_after_redis_forgets_them(api: Api) -> None:
    library = load_scripts()["renewLease"].library.name  # the same text, so the same name
    assert await api.ctx.store.scripts_loaded()
    # Function libraries are the server's, shared with tests running beside this one, whose
    # stores load them again at any moment: delete until a check sees them gone.
    for _ in range(50):
        with contextlib.suppress(ResponseError):  # another test's store may have deleted it too
            await api.ctx.store.redis.function_delete(library)
        if not await api.ctx.store.scripts_loaded():
            break
    else:
        pytest.fail("scripts_loaded() never saw the deleted library gone")
    assert (await api.heartbeat("host-a", ["a1"])).status_code == 200  # function missing -> load, retry
    assert (await api.client.get("/readyz")).status_code == 200
    assert await api.ctx.store.scripts_loaded()


def _flags(listed: object, function: str) -> list[bytes] | None:
    """The flags of ``function`` in a FUNCTION LIST reply (one node's, or a cluster's per node)."""
    libraries = next(iter(listed.values())) if isinstance(listed, dict) else listed
    for library in libraries:
        for entry in dict(zip(library[::2], library[1::2], strict=True))[b"functions"]:
            fields = dict(zip(entry[::2], entry[1::2], strict=True))
            if fields[b"name"].decode() == function:
                return list(fields[b"flags"])
    return None


async def test_two_versions_of_the_scripts_run_side_by_side(
        redis_client: aioredis.Redis, transport: RedisTransport, prefix: str, tmp_path: Path) -> None:
    """Two versions' libraries live side by side in one Redis (after an upgrade, or deployments of
    different versions sharing it): each loads its own and calls its own functions, whatever
    order they load in."""
    changed = tmp_path / "lua"
    shutil.copytree(lua_dir(), changed)
    renew = changed / "renewLease-1.lua"
    renew.write_text(renew.read_text() + "\n-- the next version\n")
    old, new = load_scripts()["readWaiting"], load_scripts(changed)["readWaiting"]
    assert old.library.name != new.library.name and old.function != new.function
    deployment = Deployment(Keys(prefix), host_offline_after_ms=60_000)
    try:
        await new.library.load(redis_client)
        await old.library.load(redis_client)
        for script in (old, new):
            assert await script(transport, deployment, ['{"driver": "adb"}', 10]) == [0] * 10  # no device
        # it only reads: Redis may run it when out of memory
        assert _flags(await redis_client.function_list(library=new.library.name), new.function) == [b"no-writes"]
    finally:
        await redis_client.function_delete(new.library.name)


async def test_readyz_is_503_without_redis() -> None:
    import httpx
    import redis.asyncio as aioredis
    from redis.asyncio.retry import Retry
    from redis.backoff import NoBackoff

    from coordinator.app import create_app
    from tests.conftest import make_settings
    from tests.support import free_port

    # No retries: redis-py's default retries a refused connection with a backoff, and what is
    # tested is the answer once Redis has failed, not how long the client tries.
    unreachable = aioredis.Redis(port=free_port(), socket_connect_timeout=0.5, retry=Retry(NoBackoff(), 0))
    app = create_app(make_settings("unused:{t}"), redis=PlainTransport(unreachable))
    # no lifespan: the process is up, but Redis is not there
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://c") as client:
        assert (await client.get("/healthz")).status_code == 200
        response = await client.get("/readyz")
        assert response.status_code == 503 and response.json()["redis"] is False


async def test_metrics_count_requests_claims_renewals_results(api: Api) -> None:
    await api.heartbeat("host-a", ["a1"])
    await api.create_task(device_id="a1")
    assignment = (await api.claim("host-a")).json()
    await api.renew("host-a", assignment)
    await api.renew("host-a", {**assignment, "lease_id": "l_other"})
    await api.result("host-a", assignment)
    await api.claim("host-a")
    text = (await api.client.get("/metrics")).text
    assert 'tether_http_requests_total{method="PUT",route="/internal/v1/hosts/{host_id}/heartbeat",status="200"} 1.0' in text
    assert 'tether_claims_total{outcome="assigned"} 1.0' in text
    assert 'tether_claims_total{outcome="empty"} 1.0' in text
    assert 'tether_renewals_total{outcome="ok"} 1.0' in text
    assert 'tether_renewals_total{outcome="lease_not_owned"} 1.0' in text
    assert 'tether_results_total{outcome="recorded"} 1.0' in text
    assert "tether_waiting_polls 0.0" in text
    for secret in HOSTS.values():
        assert secret not in text


async def test_openapi_describes_every_route(api: Api) -> None:
    document = (await api.client.get("/openapi.json")).json()
    assert document["openapi"].startswith("3.")
    described = {(method.upper(), path) for path, ops in document["paths"].items() for method in ops}
    # /mcp is the Model Context Protocol's, described by its own tools/list, not by OpenAPI.
    for route in (r for r in api.app.routes if r.path != MCP_PATH):
        for method in route.methods - {"HEAD"}:
            assert (method, route.path) in described, (method, route.path)


async def test_the_root_leads_to_the_dashboard_and_the_favicon_is_no_404(api: Api) -> None:
    # Issue 42: `GET /` answered a JSON 404, and every dashboard session logged a favicon 404.
    for method in ("GET", "HEAD"):
        root = await api.client.request(method, "/")
        assert (root.status_code, root.headers["location"]) == (302, "/ui"), root.text
        icon = await api.client.request(method, "/favicon.ico")
        assert (icon.status_code, icon.content) == (204, b""), icon.text
        assert "max-age" in icon.headers["cache-control"]
    dashboard = await api.client.get("/", follow_redirects=True)
    assert dashboard.status_code == 200 and dashboard.headers["content-type"].startswith("text/html")
