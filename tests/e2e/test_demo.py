"""The README's first command: the demo runs the real coordinator and agent processes, drives them
through the operator API, stops them and exits 0."""

from __future__ import annotations

import os
import queue
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support import child_env

pytestmark = pytest.mark.e2e


def test_demo_runs_every_task_to_its_expected_end(tmp_path: Path) -> None:
    result = subprocess.run([sys.executable, "-m", "coordinator", "demo"], cwd=tmp_path, env=child_env(),
                            capture_output=True, timeout=120, check=False)
    out = result.stdout.decode()
    assert result.returncode == 0, out + result.stderr.decode()
    assert "embedded in-memory Redis" in out
    assert "/ui  (the admin token is in " in out  # the dashboard's address, on screen while it runs
    assert "enrolled  online" in out and "static    online" in out
    assert "step " in out  # progress was seen while a workflow ran
    # a workflow no host lists never reaches a device: it waits, saying why, until its queue timeout
    assert "waiting: no_capable_host" in out and "queue_timeout" in out and "workflow_not_found" not in out
    assert "planner_cannot_plan" in out
    assert "6 of 6 tasks finished: 4 succeeded, 2 failed" in out
    assert "Every task ended as expected." in out
    assert "Hosts and coordinator stopped." in out  # each process exited 0 after SIGTERM
    assert " -m coordinator demo --keep` keeps it and the fleet up until Ctrl-C." in out  # how to explore the dashboard
    assert "tet_" not in out and "demo-admin-" not in out and "demo-host-" not in out  # no secret is printed


def test_demo_imports_nothing_from_the_agent() -> None:
    code = ("import sys, coordinator.__main__, coordinator.demo; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('agent', 'tether')))")
    result = subprocess.run([sys.executable, "-c", code], env=child_env(), capture_output=True, check=True)
    assert result.stdout.decode().strip() == "[]"


def _lines(stream: object, into: queue.Queue[str | None]) -> None:
    for line in stream:
        into.put(line)
    into.put(None)


def _read_until(lines: queue.Queue[str | None], needle: str, seen: list[str], timeout: float = 90.0) -> str:
    """The first line holding ``needle`` (every line read is kept in ``seen``)."""
    while True:
        try:
            line = lines.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"no {needle!r} within {timeout:g} s:\n{''.join(seen)}") from None
        if line is None:
            raise AssertionError(f"the demo ended before {needle!r}:\n{''.join(seen)}")
        seen.append(line)
        if needle in line:
            return line


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM])
def test_demo_keep_stays_up_with_a_working_sign_in_until_ctrl_c(tmp_path: Path, stop: signal.Signals) -> None:
    demo = subprocess.Popen([sys.executable, "-m", "coordinator", "demo", "--keep"], cwd=tmp_path, env=child_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: queue.Queue[str | None] = queue.Queue()
    reader = threading.Thread(target=_lines, args=(demo.stdout, lines), daemon=True)
    reader.start()
    seen: list[str] = []
    try:
        kept = _read_until(lines, "The fleet keeps running: dashboard ", seen)
        _read_until(lines, "Press Ctrl-C to stop it.", seen)  # the readiness line
        found = re.search(r"dashboard (http://\S+)/ui, sign in with the token in (\S+)", kept)
        assert found, kept
        url, token_file = found[1], Path(found[2])
        assert "Every task ended as expected." in "".join(seen)
        token = token_file.read_text()
        # What the dashboard's sign-in does: who is this token (and the dashboard's page itself).
        me = httpx.get(f"{url}/api/v1/me", headers={"authorization": f"Bearer {token}"}, timeout=10)
        assert me.status_code == 200 and "admin" in me.json()["scopes"], me.text
        assert httpx.get(f"{url}/ui", timeout=10).status_code == 200
        hosts = httpx.get(f"{url}/api/v1/hosts", headers={"authorization": f"Bearer {token}"}, timeout=10).json()
        assert [host["online"] for host in hosts["hosts"]] == [True, True]  # the fleet is still up

        demo.send_signal(stop)
        assert demo.wait(60) == 0, "".join(seen)
    finally:
        if demo.poll() is None:
            demo.kill()
            demo.wait()
        reader.join(10)  # the demo's stdout is at its end once it and its children exited
        assert demo.stdout is not None
        demo.stdout.close()
    rest = []
    while (line := lines.get_nowait()) is not None:
        rest.append(line)
    assert "Hosts and coordinator stopped." in "".join(rest), "".join(seen + rest)
    assert not token_file.exists()  # the secret's file goes with the demo
    with pytest.raises(httpx.TransportError):
        httpx.get(f"{url}/readyz", timeout=2)  # and so does the coordinator


class _SignalInsidePoll:
    """A child's wait lock that has Ctrl-C arrive the moment ``Popen.poll`` has taken it, before
    its ``try``: the instant under load where an exception raised by the signal leaves the lock held
    for good, and with it every later wait for that child (issue 58, bug 6)."""

    def __init__(self, lock: Any) -> None:
        self._lock = lock
        self.fired = False

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        got: bool = self._lock.acquire(blocking, timeout)
        if got and not self.fired:
            self.fired = True
            signal.pthread_kill(threading.main_thread().ident or 0, signal.SIGINT)
        return got

    def release(self) -> None:
        self._lock.release()

    def __enter__(self) -> bool:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


def test_ctrl_c_while_the_demo_checks_its_processes_still_stops_them(tmp_path: Path) -> None:
    from coordinator import demo

    child = demo.Process("child", "http.server", ["0", "--bind", "127.0.0.1"], demo.child_env(), tmp_path)
    # The race lives inside subprocess, so the fault is put there: the lock Popen's poll and wait take.
    trap = _SignalInsidePoll(child.popen._waitpid_lock)  # noqa: SLF001 - the race is in subprocess's own lock
    child.popen._waitpid_lock = trap  # noqa: SLF001 - see above
    try:
        with demo.StopRequest().installed() as stop:  # as run_demo has it while the demo runs
            assert demo.keep_up([child], "http://127.0.0.1:9", tmp_path / "token", stop) is True
        assert trap.fired
        # Stopping it runs in a thread only so that a hang fails this test instead of holding it.
        stopper = threading.Thread(target=demo.stop_all, args=([child],), daemon=True)
        stopper.start()
        stopper.join(40)
        assert not stopper.is_alive(), "the demo could not stop its process after Ctrl-C"
        assert child.popen.returncode is not None
    finally:
        if child.popen.returncode is None:
            os.kill(child.popen.pid, signal.SIGKILL)
