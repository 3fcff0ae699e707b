"""python -m bench.peers [--only saq,celery,tether,tether-floor] [--turns N]: one Markdown column per peer and turn.

(`python -m bench.peers worker NAME TAG INDEX` is how the bench starts a peer's worker.)
"""

from __future__ import annotations

import argparse
import importlib
import secrets
import signal
import sys
import time
from importlib.metadata import version

from redis import Redis

from bench.peers import IDLE_ROW, PEERS, REDIS_URL, make, measure


def versions(names: list[str]) -> str:
    modules = dict.fromkeys(PEERS[n] for n in names)
    kombu = f" (kombu {version('kombu')})"
    return ", ".join(f"{m} {version(m)}{kombu if m == 'celery' else ''}" for m in modules)


NOTES = """\
Dispatch: time.time() at the job function's start in a worker, minus time.time() just before the
enqueue in the bench; one job at a time, 10 ms apart.
Jobs/s: not a closed loop: every job is enqueued at once (saq's client 20 at a time, celery's
in one loop) to two idle, ready workers, and the window closes when the bench sees the last one done
(saq: a ZCARD every 10 ms, left out of the command counts; celery: the results, which its
client already subscribed to). CPU: utime+stime of this process and of each worker's process group.
Tether (bench/peers/tether.py): two coordinators, and two workers of 10 one-device hosts each on
the agent's client, every result asking `next` (eager dispatch). Dispatch: an operator create on
one coordinator to the job's start on a host whose claim waits on the other. Jobs/s: the creates
(raw HTTP, bench/loadgen.py, as the main bench sends them) sent 20 at a time, alternating between
the coordinators; the window closes when the workers' counts of jobs done (written every 10 ms)
reach them. CPU includes the coordinators' process groups (servers).
Tether-floor: the same, with two bare floor processes (bench/floor_app.py) for the coordinators:
each request one script of the lifecycle floor (bench/floor_lifecycle.py), a result asking `next`
leasing the device's next queued job in the same script."""


def print_table(columns: dict[str, dict[str, str]]) -> None:
    names = list(columns)
    print("| measure | " + " | ".join(names) + " |")
    print("|---" * (len(names) + 1) + "|")
    for row in columns[names[0]]:
        print(f"| {row} | " + " | ".join(columns[n][row] for n in names) + " |")


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    """The arguments; ``names`` is the peers to measure (none when this process is a worker)."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--only", default=",".join(PEERS), help="comma-separated: " + ", ".join(PEERS))
    parser.add_argument("--turns", type=int, default=1,
                        help="measure every peer this many times, in turns (this machine's speed drifts)")
    parser.add_argument("worker", nargs="*", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        if len(args.worker) != 4 or args.worker[0] != "worker" or args.worker[1] not in PEERS:
            parser.error("unexpected arguments: " + " ".join(args.worker))
        args.names = []
        return args
    args.names = [n.strip() for n in args.only.split(",") if n.strip()]
    if not args.names or set(args.names) - set(PEERS):
        parser.error(f"--only takes some of: {', '.join(PEERS)}")
    if args.turns < 1:
        parser.error("--turns takes a whole number of at least 1")
    return args


def main() -> None:
    args = parse()
    if args.worker:
        _, name, tag, index = args.worker
        importlib.import_module(f"bench.peers.{PEERS[name]}").work(tag, name, int(index))
        return

    names = args.names
    # SIGTERM (timeout, kill) as an exception, so the workers are stopped and the keys unlinked
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    redis = Redis.from_url(REDIS_URL)
    started = time.monotonic()
    columns: dict[str, dict[str, str]] = {}
    for turn in range(1, args.turns + 1):
        for name in names:
            # A tag in every key a peer writes, which the cleanup matches.
            tag = f"tb{secrets.token_hex(4)}"
            column = name if args.turns == 1 else f"{name}, turn {turn}"
            columns[column] = measure(name, make(name, tag), tag, redis)
    print_table(columns)
    busy = [n for n in columns if int(columns[n][IDLE_ROW].replace(",", "")) > 100]
    if busy:
        print(f"\nOther clients were busy on Redis during {', '.join(busy)}: their commands and "
              "Redis CPU per job include others' traffic (see the idle row).")
    server = redis.info("server")
    print(f"\nVersions: {versions(names)}; redis-py {version('redis')}; Redis {server['redis_version']}. "
          f"Took {time.monotonic() - started:.0f} s.\n\n{NOTES}")


if __name__ == "__main__":
    main()
