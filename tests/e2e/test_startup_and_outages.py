"""What `python -m coordinator serve` says when it cannot start, and while Redis is away: one
line naming the setting at fault, and an outage as one line when it begins and one when it ends,
never a traceback. Real processes, the test's own redis-server, and the local cluster."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from coordinator.serve import usage
from tests.cluster import LocalCluster
from tests.support import (
    ADMIN,
    REPO,
    coordinator_env,
    coordinator_process,
    free_port,
    fresh_prefix,
    redis_server,
    unique_prefix,
    wait_until,
)

pytestmark = pytest.mark.e2e

SECRET = "hunter2-secret"
STARTUP_FAILURE = 3  # uvicorn's, kept for Redis not answering at start: a restart may help
BAD_CONFIGURATION = 2  # as for any setting that does not validate: a restart cannot help


def _serve(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """Run ``serve`` to its end (it must not start), with its output."""
    return subprocess.run([sys.executable, "-m", "coordinator", "serve", "--port", str(free_port())],
                          env=env, capture_output=True, text=True, timeout=30, cwd="/")


def _one_line(result: subprocess.CompletedProcess[str]) -> str:
    lines = (result.stdout + result.stderr).strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in lines[0], lines
    return lines[0]


@pytest.mark.parametrize("workers", ["1", "2"])
def test_redis_unreachable_at_start_is_one_line_naming_the_url_without_its_password(workers: str) -> None:
    port = free_port()  # nothing listens there
    env = coordinator_env(unique_prefix(), REDIS_URL=f"redis://:{SECRET}@127.0.0.1:{port}/0",
                          WEB_CONCURRENCY=workers)
    result = _serve(env)
    assert result.returncode == STARTUP_FAILURE
    line = _one_line(result)  # and, with workers, before any was forked
    assert "REDIS_URL" in line and f"127.0.0.1:{port}" in line and SECRET not in line


@pytest.mark.parametrize("url", ["127.0.0.1:6379", f"user:{SECRET}@127.0.0.1:6379/0"])
def test_a_redis_url_without_a_scheme_is_one_line_naming_redis_url(url: str) -> None:
    result = _serve(coordinator_env(unique_prefix(), REDIS_URL=url, WEB_CONCURRENCY="2"))
    assert result.returncode == BAD_CONFIGURATION
    line = _one_line(result)
    assert "REDIS_URL" in line and "redis://" in line and SECRET not in line


@pytest.mark.parametrize(("value", "why"), [
    ('{"lab-1": "' + SECRET + '"', "not valid JSON"),  # unparseable: once named EnvSettingsSource
    ('["' + SECRET + '"]', "valid dictionary"),
])
def test_bad_static_hosts_are_one_line_naming_the_variable(value: str, why: str) -> None:
    result = _serve(coordinator_env(unique_prefix(), COORDINATOR_STATIC_HOSTS=value))
    assert result.returncode == BAD_CONFIGURATION
    line = _one_line(result)
    assert line.startswith("coordinator: invalid configuration: COORDINATOR_STATIC_HOSTS: "), line
    assert why in line and "EnvSettingsSource" not in line and SECRET not in line


@pytest.mark.parametrize(("port_env", "port_arg", "named"), [
    ("99999", None, "PORT"),  # once wrapped modulo 65536 to 34463, without a word
    ("-1", None, "PORT"),  # once "[Errno -8] Servname not supported"
    (None, "70000", "--port"),  # once 4464
    (None, "-1", "--port"),
])
def test_a_port_out_of_range_is_one_line_naming_the_setting(port_env: str | None, port_arg: str | None,
                                                            named: str) -> None:
    env = coordinator_env(unique_prefix(), **({"PORT": port_env} if port_env is not None else {}))
    command = [sys.executable, "-m", "coordinator", "serve"] + (["--port", port_arg] if port_arg else [])
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=30, cwd="/")
    assert result.returncode == BAD_CONFIGURATION
    line = _one_line(result)
    assert line.startswith(f"coordinator: invalid configuration: {named}: "), line
    assert "65535" in line, line


def test_serve_help_lists_every_setting_that_operations_md_explains() -> None:
    # As the agent's --help does; it needs no configuration, not even a valid one.
    result = subprocess.run([sys.executable, "-m", "coordinator", "serve", "--help"], capture_output=True,
                            text=True, timeout=30, cwd="/", env=coordinator_env(unique_prefix(), PORT="99999"))
    assert result.returncode == 0, result.stderr
    listed = re.findall(r"^  ([A-Z_]+) +\S", result.stdout, re.MULTILINE)
    assert listed == usage.variables() and "COORDINATOR_LEASE_TTL_S" in listed, result.stdout
    assert re.search(r"^  COORDINATOR_LEASE_TTL_S +60$", result.stdout, re.MULTILINE), result.stdout
    operations = (REPO / "docs" / "operations.md").read_text()
    unexplained = [v for v in listed if f"| `{v}` |" not in operations]
    assert not unexplained, f"not in docs/operations.md's configuration table: {unexplained}"


def test_a_single_process_logs_the_address_it_listens_on(tmp_path: Path) -> None:
    with fresh_prefix() as prefix, coordinator_process(coordinator_env(prefix), tmp_path) as coordinator:
        assert f"coordinator listening on {coordinator.url} (dashboard {coordinator.url}/ui)" in \
            coordinator.process.log()


def test_a_prefix_without_a_hash_tag_is_refused_on_a_cluster(local_cluster: LocalCluster) -> None:
    result = _serve(coordinator_env("tether-test-untagged", local_cluster.url))
    assert result.returncode == BAD_CONFIGURATION
    line = _one_line(result)
    assert "COORDINATOR_KEY_PREFIX" in line and "{" in line  # names the setting and the fix


def _lines(log: str, loop: str, what: str) -> list[str]:
    return [line for line in log.splitlines() if f"{loop}: Redis {what}" in line]


@pytest.mark.skipif(shutil.which("redis-server") is None, reason="needs redis-server to stop and start")
def test_an_outage_is_one_line_as_it_begins_and_one_with_its_length_as_it_ends(tmp_path: Path) -> None:
    redis_port = free_port()
    interval_s = 0.05
    # The prefix is on the throwaway server: nothing to clean up on the shared one.
    env = coordinator_env(unique_prefix(), REDIS_URL=f"redis://:{SECRET}@127.0.0.1:{redis_port}/0",
                          COORDINATOR_REAPER_INTERVAL_S=str(interval_s))
    # Requests share the reaper's outage; the wake-up inbox's reader has its own.
    loops = ("requests and reaper", "wake-up inbox")
    with redis_server(redis_port) as redis, coordinator_process(env, tmp_path) as coordinator:
        redis.kill()  # a crash: no goodbye to the clients
        redis.wait()
        process = coordinator.process
        assert process is not None
        wait_until(lambda: _lines(process.log(), loops[0], "unreachable"), 10, what="the outage noticed")
        # The outage lasts many sweeps (the scenario, not a wait for a condition), and requests
        # meanwhile answer 503.
        outage_s = 40 * interval_s
        deadline = time.monotonic() + outage_s
        requests = 0
        with httpx.Client(base_url=coordinator.url, headers={"authorization": f"Bearer {ADMIN}"}) as client:
            while time.monotonic() < deadline:
                assert client.get("/api/v1/tasks").status_code == 503
                requests += 1
        # Redis back, empty: the scripts are loaded again on demand.
        with redis_server(redis_port):
            wait_until(lambda: all(_lines(process.log(), loop, "reachable again") for loop in loops), 20,
                       what="every loop's end of the outage")
            log = process.log()
    assert "Traceback" not in log and SECRET not in log, log
    assert requests > 10 and "Redis unavailable" not in log, log  # no line per request
    for loop in loops:
        began, ended = _lines(log, loop, "unreachable"), _lines(log, loop, "reachable again")
        assert len(began) == 1 and len(ended) == 1, log
        lasted = re.search(r"after ([0-9.]+) s \(([0-9]+) failed calls", ended[0])
        assert lasted is not None and float(lasted[1]) >= outage_s, ended
    # every request of the outage was counted in its end line, none logged a line of its own
    failed = re.search(r"\(([0-9]+) failed calls", _lines(log, loops[0], "reachable again")[0])
    assert failed is not None and int(failed[1]) > requests
