"""Runs every scenario against real Redis and prints one table; with --write-docs (and every
scenario) it also rewrites docs/benchmarks.md, so a run leaves the checkout clean unless asked.
Exits 0 unless it could not measure (--strict: also 1 when a target is missed). `ab` measures
another commit against this checkout in turns (bench/ab.py).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import uvloop
from redis.asyncio import Redis

from bench import ab
from bench.context import PRESETS, Bench
from bench.procs import redis_info
from bench.report import Row, machine, table, write_doc
from bench.scenarios import SCENARIOS
from bench.system import raise_nofile

# One usage a line: the two ways to run it.
USAGE = """
  python -m bench [--preset small|full] [--only SCENARIOS] [--write-docs] [--strict]
  python -m bench ab REF [--only ROWS] [--turns N]"""


async def run(args: argparse.Namespace) -> int:
    redis_url = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
    redis = Redis.from_url(redis_url)
    version, redis_pid, redis_port = await redis_info(redis)
    if not os.path.exists(f"/proc/{redis_pid}"):  # noqa: ASYNC240 - once, before anything is measured
        print(f"bench: Redis (pid {redis_pid}) is not on this machine; CPU figures need it local",
              file=sys.stderr)
        return 2
    bench = Bench(PRESETS[args.preset], redis_url, redis, redis_pid, redis_port)
    if getattr(args, "ref", None) is not None:
        try:
            return await ab.run(args, bench)
        finally:
            await redis.aclose()
    names = args.only.split(",") if args.only else list(SCENARIOS)
    started = time.monotonic()
    rows: list[Row] = []
    try:
        for name in names:
            print(f"bench: {name} ...", file=sys.stderr, flush=True)
            t0 = time.monotonic()
            rows += await SCENARIOS[name](bench)
            print(f"bench: {name} done in {time.monotonic() - t0:.0f} s", file=sys.stderr, flush=True)
    finally:
        await redis.aclose()
    info = machine(version)
    print(" | ".join(f"{k}: {v}" for k, v in info.items()) + f" | preset: {args.preset}")
    print(table(rows))
    if args.write_docs and not args.only:
        write_doc(rows, info, args.preset, time.monotonic() - started)
        print("bench: wrote docs/benchmarks.md", file=sys.stderr)
    # A missed target is a verdict in the table, not a failure to measure: --strict makes it one.
    missed = [r for r in rows if "MISSED" in r.verdict]
    return 1 if args.strict and missed else 0


def main() -> int:
    if sys.argv[1:2] == ["ab"]:
        raise_nofile()
        return uvloop.run(run(ab.parse(sys.argv[2:])))
    parser = argparse.ArgumentParser(
        prog="python -m bench", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
        usage=USAGE)
    parser.add_argument("--preset", choices=sorted(PRESETS), default="small")
    parser.add_argument("--only", help=f"comma-separated subset of: {', '.join(SCENARIOS)}")
    parser.add_argument("--write-docs", action="store_true",
                        help="rewrite docs/benchmarks.md with the table (every scenario only)")
    parser.add_argument("--strict", action="store_true", help="exit 1 when any target is missed")
    args = parser.parse_args()
    if args.only and set(args.only.split(",")) - set(SCENARIOS):
        parser.error(f"--only takes names from: {', '.join(SCENARIOS)}")
    raise_nofile()
    return uvloop.run(run(args))


if __name__ == "__main__":
    sys.exit(main())
