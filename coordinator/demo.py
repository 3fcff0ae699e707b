"""``python -m coordinator demo``: a fresh machine's first run, with the real processes.

It starts ``python -m coordinator serve`` on the embedded in-memory Redis and two
``python -m agent`` hosts with simulated phones: a static host configured with a token, and a
managed host that enrolls itself with a one-time enrollment token. Then it does what an operator
does, over the operator HTTP API: submits goal and workflow tasks, follows them to their results,
prints a summary, and stops the processes (SIGTERM, then waits). Exit status 0 when every task
ended as expected (two fail on purpose) and every process stopped cleanly.

With ``--keep`` it leaves the fleet and the dashboard up after the summary, until Ctrl-C (SIGINT)
or SIGTERM, so the dashboard can be opened and signed in to (the admin token's file stays until
then) and more work submitted; then it stops the processes the same way.

Ctrl-C and SIGTERM are a request (``StopRequest``) the demo acts on where it waits, never an
exception raised at whatever bytecode the signal lands on: landing inside ``subprocess``, just
after ``Popen.poll`` took a child's wait lock and before its ``try``, such an exception left the
lock held, and every later wait for that child blocked for ever (a demo that under load did not
stop after Ctrl-C). Each wait is bounded: an HTTP call by its timeout, a child's stop by SIGKILL.

It imports nothing from the coordinator or the agent: it is a client of the contract, like any
operator's script, and the processes are started as a person would start them.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import select
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

import httpx

T = TypeVar("T")

STATIC_HOST = "lab-static"
TIMEOUT_S = 60.0
TERMINAL = ("succeeded", "failed", "cancelled")

class DemoError(Exception):
    """Something the demo cannot go on without; the message says what, in one line."""


class StopRequest:
    """Ctrl-C (SIGINT) or SIGTERM, recorded by the signal handler and acted on by ``sleep`` and
    ``check``, which raise ``KeyboardInterrupt`` in the demo's own code only. A signal wakes a
    ``sleep`` at once (the wakeup fd: one arriving just before the sleep is not lost either)."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self) -> None:
        self.requested = False
        self._reader, self._writer = socket.socketpair()
        for end in (self._reader, self._writer):
            end.setblocking(False)

    def _on_signal(self, signum: int, frame: object) -> None:
        self.requested = True  # nothing more: this may run between any two bytecodes

    @contextlib.contextmanager
    def installed(self) -> Iterator[StopRequest]:
        """The handlers in place (and the wakeup fd) while inside; the previous ones after."""
        previous = {signum: signal.signal(signum, self._on_signal) for signum in self.SIGNALS}
        previous_fd = signal.set_wakeup_fd(self._writer.fileno())
        try:
            yield self
        finally:
            signal.set_wakeup_fd(previous_fd)
            for signum, handler in previous.items():
                signal.signal(signum, handler)
            self._reader.close()
            self._writer.close()

    def check(self) -> None:
        if self.requested:
            raise KeyboardInterrupt

    def sleep(self, seconds: float) -> None:
        """Wait ``seconds``, or less if a stop is requested meanwhile (then raise)."""
        self.check()
        select.select([self._reader], [], [], seconds)
        with contextlib.suppress(BlockingIOError):
            self._reader.recv(64)  # what the signals wrote: the next sleep waits again
        self.check()


def _out(text: str = "") -> None:
    print(text, flush=True)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _wait_for(what: str, check: Callable[[], T | None], stop: StopRequest, timeout: float = TIMEOUT_S) -> T:
    deadline = time.monotonic() + timeout
    while (value := check()) is None:
        if time.monotonic() > deadline:
            raise DemoError(f"timed out waiting for {what}")
        stop.sleep(0.05)
    return value


class Process:
    """One child process; its output goes to ``<workdir>/<name>.log``."""

    def __init__(self, name: str, module: str, args: list[str], env: dict[str, str], workdir: Path) -> None:
        self.name = name
        self.log_path = workdir / f"{name}.log"
        with open(self.log_path, "wb") as log:
            # A session of its own: a Ctrl-C at the terminal reaches the demo alone, which then
            # stops the agents before the coordinator, so their last reports are answered.
            self.popen = subprocess.Popen([sys.executable, "-m", module, *args], env=env, cwd=workdir,
                                          stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

    def check_running(self) -> None:
        if self.popen.poll() is not None:
            raise DemoError(f"{self.name} exited with {self.popen.returncode}")

    def terminate(self) -> None:
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)

    def wait_stopped(self, deadline: float) -> int:
        """Wait for it to exit until ``deadline`` (monotonic), then SIGKILL it; the exit code."""
        try:
            self.popen.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.popen.wait()
        return self.popen.returncode

    def log_tail(self, lines: int = 20) -> str:
        text = self.log_path.read_text(errors="replace").splitlines()[-lines:]
        return "\n".join(f"  {self.name}| {line}" for line in text)


def child_env(**settings: str) -> dict[str, str]:
    """This environment without any Tether setting (no REDIS_URL: the embedded Redis), plus
    ``settings``; the children import what this process imports."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("COORDINATOR_", "HOST_AGENT_")) and k != "REDIS_URL"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    env.update(settings)
    return env


def _describe(task: dict[str, Any]) -> str:
    if task["kind"] == "goal":
        return f'goal "{task["goal"]}"'
    workflow = task["workflow"]
    params = f" {json.dumps(workflow['params'])}" if workflow["params"] else ""
    return f"workflow {workflow['name']}{params}"


def _target(body: dict[str, Any]) -> str:
    if "device_id" in body:
        device_id: str = body["device_id"]
        return device_id
    labels = body["selector"].get("labels")
    return f"any {body['selector']['driver']} device" + (f" with {labels}" if labels else "")


def _follow(api: httpx.Client, tasks: list[dict[str, Any]], started: float,
            stop: StopRequest) -> dict[str, dict[str, Any]]:
    """Print every status change and progress update until all tasks are terminal."""
    seen: dict[str, tuple[Any, ...]] = {}
    final: dict[str, dict[str, Any]] = {}
    deadline = time.monotonic() + TIMEOUT_S
    while len(final) < len(tasks) and time.monotonic() < deadline:
        for task in tasks:
            task_id = task["task_id"]
            if task_id in final:
                continue
            current = api.get(f"/api/v1/tasks/{task_id}").raise_for_status().json()
            progress = current["progress"] or {}
            state = (current["status"], current["attempt"], progress.get("step_index"), progress.get("status"))
            if seen.get(task_id) != state:
                seen[task_id] = state
                where = (f"{current['host_id']}/{current['device_id']}" if current["host_id"]
                         else f"waiting: {current['waiting_reason']}" if current["waiting_reason"] else "waiting")
                if current["status"] in TERMINAL:
                    reason = current["result"]["failure_reason"]
                    detail = f"({reason})" if reason else ""
                elif progress:
                    detail = f"step {progress['step_index']} {progress['status']}: {progress['summary']}"
                else:
                    detail = ""
                _out(f"[{time.monotonic() - started:5.2f}s] {task_id[:10]}  {current['status']:<9} "
                     f"attempt {current['attempt']}  {where:<28} {detail}".rstrip())
            if current["status"] in TERMINAL:
                final[task_id] = current
        stop.sleep(0.05)
    return final


def _table(rows: list[list[str]]) -> str:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip() for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _seconds_between(start: str, end: str) -> float:
    return (datetime.fromisoformat(end) - datetime.fromisoformat(start)).total_seconds()


def _plan(devices: list[dict[str, Any]]) -> list[tuple[dict[str, Any], str]]:
    """The tasks to submit, each with the status it should end in."""
    managed = sorted(d["device_id"] for d in devices if d["host_id"] != STATIC_HOST)
    return [
        ({"kind": "goal", "goal": "Turn on airplane mode", "device_id": "phone-1"}, "succeeded"),
        ({"kind": "workflow", "workflow": {"name": "settings-smoke", "params": {}}, "device_id": "phone-2"},
         "succeeded"),
        ({"kind": "goal", "goal": "Write a note saying hello world", "device_id": managed[0]}, "succeeded"),
        ({"kind": "workflow", "workflow": {"name": "note-smoke", "params": {"text": "Tether says hi"}},
          "selector": {"driver": "sim", "labels": {"site": "demo-lab"}}}, "succeeded"),
        # No host lists this workflow: it waits (no_capable_host) rather than fail on a device, and
        # its short queue timeout ends it.
        ({"kind": "workflow", "workflow": {"name": "factory-reset", "params": {}}, "selector": {"driver": "sim"},
          "queue_timeout_s": 3}, "failed"),
        ({"kind": "goal", "goal": "Order a pizza", "selector": {"driver": "sim"}}, "failed"),
    ]


def _as_typed(path: Path) -> str:
    """``path`` as a person here would type it: relative to the working directory when inside it."""
    try:
        return str(path.absolute().relative_to(Path.cwd()))
    except ValueError:
        return str(path.absolute())


def _tether_command() -> str:
    """How to run ``tether`` from here: the script beside this interpreter (``.venv/bin/tether``
    when the demo was started as ``.venv/bin/python``), else the module."""
    script = Path(sys.executable).parent / "tether"
    return _as_typed(script) if script.is_file() else f"{_as_typed(Path(sys.executable))} -m tether"


def keep_up(processes: list[Process], url: str, token_file: Path, stop: StopRequest) -> bool:
    """Leave everything running until Ctrl-C or SIGTERM (``stop``, the expected end: True);
    False if a process exits meanwhile."""
    _out(f"\nThe fleet keeps running: dashboard {url}/ui, sign in with the token in {token_file}")
    _out(f"  try: TETHER_URL={url} TETHER_TOKEN=$(cat {token_file}) {_tether_command()} submit "
         "--workflow note-smoke --param text=hello --driver sim --wait")
    _out("Press Ctrl-C to stop it.")
    try:
        while True:
            for process in processes:
                process.check_running()
            stop.sleep(0.5)  # a child's exit is noticed within this; a stop ends it at once
    except KeyboardInterrupt:
        _out("\nStopping the hosts and the coordinator.")
        return True
    except DemoError as exc:
        print(f"tether demo: {exc}; the end of its log:", file=sys.stderr)
        for process in processes:
            if process.popen.poll() is not None:
                print(process.log_tail(), file=sys.stderr)
        return False


def _run(workdir: Path, processes: list[Process], stop: StopRequest, keep: bool = False) -> bool:
    admin = "demo-admin-" + secrets.token_hex(16)
    static_token = "demo-host-" + secrets.token_hex(16)

    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    started = time.monotonic()
    coordinator = Process("coordinator", "coordinator", ["serve", "--host", "127.0.0.1", "--port", str(port)],
                           child_env(
                               COORDINATOR_ADMIN_TOKEN=admin,
                               COORDINATOR_STATIC_HOSTS=json.dumps({STATIC_HOST: static_token}),
                               COORDINATOR_KEY_PREFIX="tether:{demo}",
                               COORDINATOR_LEASE_TTL_S="1.5",  # agents renew (and report progress) every 0.5 s
                               COORDINATOR_HEARTBEAT_INTERVAL_S="1",
                               COORDINATOR_HOST_OFFLINE_AFTER_S="5",
                               COORDINATOR_CLAIM_WAIT_DEFAULT_S="5",
                               COORDINATOR_REAPER_INTERVAL_S="0.5",
                           ), workdir)
    processes.append(coordinator)

    def ready() -> bool | None:
        coordinator.check_running()
        try:
            return httpx.get(f"{url}/readyz", timeout=1).status_code == 200 or None
        except httpx.TransportError:
            return None

    _wait_for("the coordinator to start", ready, stop)
    _out(f"Tether demo: coordinator at {url} on the embedded in-memory Redis")
    # The admin token is never printed: it waits in a file only its owner can read, for the
    # dashboard's sign-in and the command line, while the demo runs.
    token_file = workdir / "admin-token"
    token_file.touch(mode=0o600)
    token_file.write_text(admin)
    _out(f"  dashboard: {url}/ui  (the admin token is in {token_file})")
    _out(f"  command line: TETHER_URL={url} TETHER_TOKEN=$(cat {token_file}) {_tether_command()} tasks")

    with httpx.Client(base_url=url, headers={"authorization": f"Bearer {admin}"}, timeout=10) as api:
        token = api.post("/api/v1/enrollment-tokens",
                         json={"ttl_s": 600, "max_uses": 1, "labels": {"site": "demo-lab"}}).raise_for_status().json()
        _out(f"  enrollment token {token['id']} (one use, labels site=demo-lab) for the managed host")
        agent = {"HOST_AGENT_URL": url, "HOST_AGENT_POLL_WAIT_S": "5",
                 "HOST_AGENT_HEARTBEAT_INTERVAL_S": "1", "HOST_AGENT_PLANNER": "scripted",
                 "HOST_AGENT_SHUTDOWN_GRACE_S": "5", "HOST_AGENT_BACKOFF_CAP_S": "1"}
        processes.append(Process("lab-static", "agent", [], child_env(
            **agent, HOST_AGENT_HOST_ID=STATIC_HOST, HOST_AGENT_TOKEN=static_token,
            HOST_AGENT_DEVICES="sim:phone-1,sim:phone-2", HOST_AGENT_HOSTNAME="lab-static"), workdir))
        processes.append(Process("lab-managed", "agent", [], child_env(
            **agent, HOST_AGENT_ENROLLMENT_TOKEN=token["token"], HOST_AGENT_STATE_DIR=str(workdir / "managed-state"),
            HOST_AGENT_DEVICES="sim:pixel-1,sim:pixel-2", HOST_AGENT_HOSTNAME="lab-managed"), workdir))

        def pooled() -> list[dict[str, Any]] | None:
            for process in processes:
                process.check_running()
            devices = api.get("/api/v1/devices").raise_for_status().json()["devices"]
            return devices if sum(d["host_online"] for d in devices) >= 4 else None

        devices = _wait_for("the simulated hosts to join the pool", pooled, stop)
        for host in api.get("/api/v1/hosts").raise_for_status().json()["hosts"]:
            mine = sorted(d["device_id"] for d in devices if d["host_id"] == host["host_id"])
            _out(f"  host {host['host_id']:<20} {host['kind']:<9} online  devices: {', '.join(mine)}")

        plan = _plan(devices)
        _out(f"\nSubmitting {len(plan)} tasks:")
        submitted = []
        for body, _ in plan:
            task = api.post("/api/v1/tasks", json=body).raise_for_status().json()
            _out(f"  {task['task_id'][:10]}  {_describe(task):<55} on {_target(body)}")
            submitted.append(task)
        _out("")
        final = _follow(api, submitted, started, stop)

    rows = [["task", "what", "host", "device", "status", "failure reason", "took"]]
    ok = len(final) == len(submitted)
    for task, (_, expected) in zip(submitted, plan, strict=True):
        done = final.get(task["task_id"])
        if done is None:
            rows.append([task["task_id"][:10], _describe(task), "-", "-", "timed out", "", ""])
            continue
        took = _seconds_between(done["created_at"], done["result"]["recorded_at"])
        rows.append([task["task_id"][:10], _describe(task)[:48], done["host_id"] or "-", done["device_id"] or "-",
                     done["status"], done["result"]["failure_reason"] or "", f"{took:.2f}s"])
        ok = ok and done["status"] == expected
    succeeded = sum(1 for t in final.values() if t["status"] == "succeeded")
    _out(f"\n{_table(rows)}\n")
    _out(f"{len(final)} of {len(submitted)} tasks finished: {succeeded} succeeded, {len(final) - succeeded} "
         "failed (a workflow no host can run times out in the queue, and a goal the scripted planner "
         "cannot do fails, on purpose).")
    _out("Every task ended as expected." if ok else "Some task did not end as expected.")
    if keep:
        return keep_up(processes, url, token_file, stop) and ok
    _out(f"The dashboard goes with the demo: `{_as_typed(Path(sys.executable))} -m coordinator demo --keep` "
         "keeps it and the fleet up until Ctrl-C.")
    return ok


def stop_all(processes: list[Process], timeout: float = 15.0) -> bool:
    """The agents first, together (they finish or stop their work and report it), then the
    coordinator (``processes[0]``), each group SIGKILLed ``timeout`` after its SIGTERM."""
    clean = True
    for group in (processes[:0:-1], processes[:1]):
        for process in group:
            process.terminate()
        deadline = time.monotonic() + timeout
        for process in group:
            code = process.wait_stopped(deadline)
            if code != 0:
                clean = False
                print(f"tether demo: {process.name} exited with {code}; the end of its log:\n{process.log_tail()}",
                      file=sys.stderr)
    return clean


def run_demo(keep: bool = False) -> int:
    """``keep``: leave the fleet and the dashboard up after the summary until Ctrl-C/SIGTERM."""
    processes: list[Process] = []
    with StopRequest().installed() as stop, tempfile.TemporaryDirectory(prefix="tether-demo-") as workdir:
        try:
            ok = _run(Path(workdir), processes, stop, keep)
        except (DemoError, httpx.HTTPError) as exc:
            print(f"tether demo: {exc}", file=sys.stderr)
            ok = False
        except KeyboardInterrupt:
            print("tether demo: interrupted; stopping the processes", file=sys.stderr)
            ok = False
        finally:
            clean = stop_all(processes)
    if ok and clean:
        _out("Hosts and coordinator stopped.")
    return 0 if ok and clean else 1
