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

import json
import secrets
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx

from coordinator.demo_processes import (
    TIMEOUT_S,
    DemoError,
    Process,
    StopRequest,
    child_env,
    free_port,
    stop_all,
    wait_for,
)

STATIC_HOST = "lab-static"
TERMINAL = ("succeeded", "failed", "cancelled")


def _out(text: str = "") -> None:
    print(text, flush=True)


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

    port = free_port()
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

    wait_for("the coordinator to start", ready, stop)
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

        devices = wait_for("the simulated hosts to join the pool", pooled, stop)
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
