"""The one table: rows of absolute figures and ratios, printed and written to docs/benchmarks.md
with the machine it ran on."""

from __future__ import annotations

import datetime
import math
import os
import platform
from dataclasses import dataclass
from pathlib import Path

DOC = Path(__file__).resolve().parent.parent / "docs" / "benchmarks.md"


@dataclass
class Row:
    item: str
    measure: str
    result: str
    ratio: str
    target: str
    verdict: str  # "met", "MISSED", or "" where the issue sets no target
    cpu: str


def fmt_ms(ms: float) -> str:
    if math.isnan(ms):
        return "n/a"
    return f"{ms:.2f} ms" if ms < 10 else f"{ms:.1f} ms"


def cpu_note(cpu: dict[str, float], errors: int) -> str:
    """CPU per process in cores (1.00 = one core busy all the window), the whole machine, and
    what is left for everything else (kernel networking, probes, other people's jobs), plus any
    failed calls."""
    parts = [f"{name} {cores:.2f}" for name, cores in cpu.items() if name != "machine"]
    if "machine" in cpu:
        others = cpu["machine"] - sum(c for n, c in cpu.items() if n != "machine")
        parts.append(f"machine {cpu['machine']:.2f}/{os.cpu_count()} (others {max(others, 0):.2f})")
    return ", ".join(parts) + (f"; {errors} failed" if errors else "")


def machine(redis_version: str) -> dict[str, str]:
    model = ""
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            model = line.split(":", 1)[1].strip()
            break
    return {
        "CPU": model or platform.processor() or "unknown",
        "cores": str(os.cpu_count()),
        "Python": platform.python_version(),
        "Redis": redis_version,
        "kernel": platform.release(),
    }


def table(rows: list[Row]) -> str:
    head = ["#", "measure", "result", "ratio", "target", "verdict", "CPU (cores) in the window"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [r.item, r.measure, r.result, r.ratio, r.target, r.verdict or "—", r.cpu or ""]
        lines.append("| " + " | ".join(c.replace("|", "/") for c in cells) + " |")
    return "\n".join(lines)


METHOD = """\
How each figure is made (all in one run, on the Redis at `REDIS_URL`, each scenario on its own
key prefix `bench-<run>-<name>:{b}` that is deleted afterwards):

1w/1r/2w. **Each hot call against the floor, driven by wrk** (`bench/calls.py`, `bench/wrk.py`;
   `apt-get install wrk`). The floor: `bench/floor_app.py`, a bare Starlette endpoint that reads
   the body and runs one EVALSHA of `return 1`, in its own process with the coordinator's uvicorn
   arguments and Redis pool, sent the headers and JSON body of a renewal. Then renew (with
   progress, one lease per connection), an empty claim (`wait_s=0`, nothing queued), an
   unchanged heartbeat and a create (aimed at a busy device: stored, indexed and queued), each on
   one coordinator process, every call's window right after a floor window of its own, all with
   wrk's 64 connections on 2 threads cycling through pre-built requests. wrk's own CPU is the
   `generator` column (its rusage). Beside it, what Redis alone serves of the floor's work:
   redis-benchmark, EVALSHA of `return 1`, 64 clients. Target (issue 12): each call >= 0.8 x floor.
3w. **Lifecycles**, driven by wrk (`bench/wrk.py`), the issue's method: two coordinator
   processes; every simulated host runs create (operator API) -> claim -> renew -> result back
   to back, one host per wrk thread and connection, half the hosts on each process, the claim's
   answer parsed in Lua. wrk's CPU is shown, and the row says when it is the limit (>= 0.9 core).
   Target (issue 12): >= 0.25 x the floor's requests/s of row 1w. Row 3f is the lifecycle floor:
   the same wrk script against two bare processes (`bench/floor_app.py`) that serve the four
   calls on their contract paths, each request one script of the lifecycle floor (8f). When it is
   itself below 0.25 x the floor, the verdict of 3w says the target is out of reach.
   Rows 3w and 3f and row 1w's floor are measured again for these rows, in windows alternating
   round by round (each round on hosts of its own, since wrk stops mid-lifecycle), and row 3w is
   judged against that floor: the rows are compared by their ratios, and this VM's speed drifts
   by tens of percent between rows measured minutes apart.
4. **Dispatch latency** (`bench/dispatch.py`): a host's poll waits on process B; the clock starts
   when the create request is sent to process A and stops when the poll's answer is complete (so
   it includes the create request itself and the cross-process wake-up). Idle, then during the
   load of (3w), paced at half its rate by the Python client (`bench/loadgen.py`: wrk runs
   closed loops only), in a process of its own (only samples inside its measured window). Each
   idle probe starts 10 ms after the
   last (idle latency on a VM grows with how long its vCPUs slept: 1.1 ms at 2 ms spacing, 2.3 ms
   at 10 ms, seen here). With the same spacing, and in turns with Tether's probes (six rounds,
   every process up throughout, since the machine's speed drifts over a run): 4f, the dispatch
   floor, two bare Starlette processes (`bench/floor_app.py`) where a POST to one runs one script
   that pushes onto a list and a waiting POST to the other is woken by its BLMPOP, runs one script
   and answers: every hop of Tether's path and none of its work; 4g, the same two processes doing
   the contract's work, the lifecycle floor's create (8f) on one waking its waiting claim on the
   other through the process's inbox, as Tether's do; and 4s, saq's two stock workers as
   `.venv/bin/python -m bench.peers` runs them (`bench/peers`, the `bench` extra): enqueue -> the job
   function starts in a worker. Issue 12's target is p50 <= saq's; the verdict says when the
   floor doing the work (4g) is itself above saq's.
5. **Long-poll scale**: N polls (`wait_s=60`) from N static hosts park on one process; Redis
   connections are the `CLIENT LIST` entries whose client port is a socket of that process
   (`/proc/PID/fd` matched to `/proc/net/tcp`); memory is `VmRSS`; then a task is created for one
   of them at a time and the answer timed. 5d is the memory per poll against issue 12's 10 KB;
   5f the floor: N requests parked on a bare Starlette endpoint under stock uvicorn (one future
   and one timer each, nothing else), measured the same way.
6. **Heartbeats**: every host reports 10 devices; first the whole fleet registers as fast as it
   can, then one heartbeat per host every 15 s, open loop and evenly spread, over 64 keep-alive
   connections; CPU from `/proc/PID/stat` (utime + stime) over the window.
7. **Cost growth**: one request at a time, with 10 hosts and 100 waiting tasks, then with the
   large fleet and queue (tasks aimed at a device that does not exist, written by the
   coordinator's own create script through `coordinator.state.store.Store`).

8. **Footprint** (`bench/footprint.py`): one coordinator, one host, 500 lifecycles one at a
   time; Redis commands are the change in `INFO commandstats` (which counts the commands the
   scripts run, too) and Redis CPU the change in `used_cpu_user + used_cpu_sys`, each per
   lifecycle; then 5,000 tasks are queued (aimed at a device that does not exist) and the change
   in `used_memory` is divided by them, with `MEMORY USAGE` of each key of the prefix to show
   where it goes (per-id keys summed by kind). The feed is a ring capped at 10,000 events, so 8c
   is judged without it. 8d is the floor: 5,000 task ids in a sorted set and 5,000 create
   requests' bodies in a hash, on the same Redis; a queued task is in three sorted sets (its
   queue, the queue deadlines, the status listing), so the floor is three entries and the task
   as submitted. 8e is Redis CPU per lifecycle under the load of (3w) (Redis's cores over the
   lifecycles/s), against saq's Redis CPU per job measured in the same run (4s); its floor is the
   lifecycle floor's Redis CPU per lifecycle under the same HTTP load (3f), since how many calls
   share a write, and so what each costs Redis, depends on the load.
   8f is the lifecycle floor (`bench/floor_lifecycle.py`): four scripts, one per call, that
   change only the state the contract asks of each call, one command per structure touched, with
   every merge of structures we could find (its docstring lists each obligation and its command).
   It is driven straight at Redis through the coordinator's auto-pipelining: 500 lifecycles one
   at a time (commands, and Redis CPU as in 8b), then 2,000 with 64 at once (Redis CPU batched,
   as under load), and Redis's microseconds inside the scripts, one at a time, as `INFO
   commandstats` counts them (the scripts' own time, where CPU counts the whole process). 8g drives Tether's own
   scripts the same way, through `coordinator.state.store`, so its ratio to 8f is the scripts'
   alone: in `bench ab` both builds' 8g are this checkout's, as it runs in the bench's own
   process, so a build's own Redis time is 8h, read around 8a's lifecycles through its
   coordinator (a webhook delivery or reaper pass that lands in the window counts too, as in 8b).
   8a is out of reach when 8f is above its target, 8e
   when 3f's Redis CPU per lifecycle is.

9. **Artifacts** (`bench/artifacts.py`, issue 30), on the default local-folder store in a
   temporary folder, with `COORDINATOR_MAX_CONCURRENT_UPLOADS=64` (the default, 16, answers the
   rest of 50 at once 503 for the agent to retry) and per-task caps raised so one lease can take
   every upload of the run. 9a: 50 static hosts each claim a task; wrk's 50 connections then
   upload a 100,000-byte PNG-typed body under a new name each time, for the next of the 50
   leases in turn, to one coordinator process (the bytes are the same for a lease, so each
   upload writes a temporary file and renames it over its task's one blob; 9b writes a new one
   each time). 9f, the upload floor, in windows alternating with 9a (three each): the same wrk
   script against a bare Starlette endpoint (`bench/floor_app.py`) that streams the body to a
   temporary file, hashing it, renames it to its SHA-256 and runs one EVALSHA: the least the
   contract asks of an upload's bytes (the loopback HTTP of a 100 KB PUT, the disk write, the
   hash and one script where Tether records the description). Server CPU per upload is the
   server's cores over uploads/s. 9b: row 3w's wrk lifecycles, with a PUT of one 100,000-byte
   screenshot between the renewal and the result (on) and without (off), on two coordinator
   processes, in windows alternating round by round (three each, each on hosts of its own).
   9c: the coordinator's `VmRSS`, sampled every 2 ms while the Python client sends 1 MiB,
   10 MiB, and 8 x 10 MiB at once (random bytes, one lease and connection each), each case three
   times; the largest growth over the RSS just before is shown. 9h is its control: the same
   uploads to a bare endpoint that reads each body whole before writing it, which grows by
   about twice the bytes in flight, so the method sees memory that grows with the bodies.
   Each 9 row gives the median of its windows and every window's figure.

CPU is in cores (1.00 = one core busy for the whole window); this machine has the cores listed
above for everything: Redis, every server process and the generator.
Static hosts reach the coordinator through `bench/server.py`, which reads
`COORDINATOR_STATIC_HOSTS` from a file: Linux caps one environment string at 128 KiB, less than
the JSON of 10,000 hosts.
"""


def document(rows: list[Row], info: dict[str, str], preset: str, seconds: float) -> str:
    when = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    machine_lines = "\n".join(f"- {k}: {v}" for k, v in info.items())
    return f"""# Benchmarks

Run them with one command from the repository root (a real Redis must answer at `REDIS_URL`,
default `redis://127.0.0.1:6379/0`):

<!-- doc-test: check (minutes of benchmarks) -->
```sh
.venv/bin/python -m bench --preset small   # about 4 minutes
.venv/bin/python -m bench --preset full --write-docs   # the issue's sizes; rewrites this file
```

It prints the table below; `--write-docs` also rewrites this file (`--only calls,lifecycle,...`
runs some scenarios, and never rewrites it). A missed target is
a verdict in the table; the command exits 0 unless it could not measure (`--strict` also exits 1
on a missed target).

A change that touches a hot path shows its rows against the commit before it, in turns:

<!-- doc-test: check (minutes of benchmarks) -->
```sh
.venv/bin/python -m bench ab HEAD~1 --only calls,lifecycle --turns 3
```

`ab` checks the other commit out in a temporary worktree with a venv of its own, runs the chosen
scenarios for both builds in alternating turns (floors, load generators and Redis shared), and
prints each row's two medians, their ratio and every turn's value, so the difference shows
beside the spread.

## Last run: preset `{preset}`, {when}, {seconds:.0f} s

{machine_lines}

{table(rows)}

## Method

{METHOD}"""


# Sections written by hand below the method (what the targets mean, row 14, the peers' table)
# survive a rewrite.
KEPT_FROM = "\n## What the targets mean"


def write_doc(rows: list[Row], info: dict[str, str], preset: str, seconds: float) -> None:
    kept = ""
    if DOC.exists():
        old = DOC.read_text()
        if KEPT_FROM in old:
            kept = old[old.index(KEPT_FROM):]
    DOC.write_text(document(rows, info, preset, seconds) + kept)
