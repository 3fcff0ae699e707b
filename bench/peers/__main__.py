"""python -m bench.peers [--only saq,celery]: one Markdown column per peer.

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
client already subscribed to). CPU: utime+stime of this process and of each worker's process group."""


def print_table(columns: dict[str, dict[str, str]]) -> None:
    names = list(columns)
    print("| measure | " + " | ".join(names) + " |")
    print("|---" * (len(names) + 1) + "|")
    for row in columns[names[0]]:
        print(f"| {row} | " + " | ".join(columns[n][row] for n in names) + " |")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--only", default=",".join(PEERS), help="comma-separated: " + ", ".join(PEERS))
    parser.add_argument("worker", nargs="*", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        if len(args.worker) != 4 or args.worker[0] != "worker" or args.worker[1] not in PEERS:
            parser.error("unexpected arguments: " + " ".join(args.worker))
        _, name, tag, index = args.worker
        importlib.import_module(f"bench.peers.{PEERS[name]}").work(tag, name, int(index))
        return

    names = [n.strip() for n in args.only.split(",") if n.strip()]
    if not names or set(names) - set(PEERS):
        parser.error(f"--only takes some of: {', '.join(PEERS)}")
    # SIGTERM (timeout, kill) as an exception, so the workers are stopped and the keys unlinked
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    redis = Redis.from_url(REDIS_URL)
    started = time.monotonic()
    columns: dict[str, dict[str, str]] = {}
    for name in names:
        # A tag in every key a peer writes, which the cleanup matches.
        tag = f"tb{secrets.token_hex(4)}"
        columns[name] = measure(name, make(name, tag), tag, redis)
    print_table(columns)
    busy = [n for n in names if int(columns[n][IDLE_ROW].replace(",", "")) > 100]
    if busy:
        print(f"\nOther clients were busy on Redis during {', '.join(busy)}: their commands and "
              "Redis CPU per job include others' traffic (see the idle row).")
    server = redis.info("server")
    print(f"\nVersions: {versions(names)}; redis-py {version('redis')}; Redis {server['redis_version']}. "
          f"Took {time.monotonic() - started:.0f} s.\n\n{NOTES}")


if __name__ == "__main__":
    main()
