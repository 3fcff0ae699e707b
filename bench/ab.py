"""python -m bench ab REF [--only calls,lifecycle] [--turns 3] [--preset small]

Another commit against this checkout, in turns, in one run: so that no change is slower by
surprise. REF is checked out in a temporary git worktree with a venv of its own (its own
dependencies, installed from its own pyproject), and each turn runs the chosen scenarios once for
each build, the order alternating between turns, so drift in the machine's speed hits both alike.
The load generators, the floors and Redis are this checkout's and the same for both builds: only
the coordinator processes differ.

For each row it prints both builds' medians over the turns, their ratio (this checkout ÷ REF) and
each build's values, so a reader sees the spread beside the difference. A row's value is its
ratio column where it has one (a multiple of the floor measured in the same turn), else the first
number of its result.
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path

from bench.context import Bench
from bench.procs import REPO, Build
from bench.report import Row
from bench.scenarios import SCENARIOS

_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")


@dataclass
class Measured:
    """One row's values per build, one per turn."""

    item: str
    measure: str
    ref: list[float]
    head: list[float]


def row_value(row: Row) -> float | None:
    """The number a row is compared by: its ratio to the floor where it has one, else its result."""
    for text in (row.ratio, row.result):
        match = _NUMBER.search(text or "")
        if match:
            return float(match.group().replace(",", ""))
    return None


def build_ref(ref: str, folder: Path) -> Build:
    """REF in a worktree under ``folder``, with a venv holding REF's own dependencies."""
    tree = folder / "tree"
    subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", "--quiet", str(tree), ref], check=True)
    venv = folder / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    # Installed, not editable: the server runs from REF's tree (its cwd), the venv brings its deps.
    subprocess.run([str(venv / "bin" / "pip"), "install", "-q", str(tree)], check=True)
    return Build(tree=tree, python=str(venv / "bin" / "python"))


def remove_ref(folder: Path) -> None:
    subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(folder / "tree")], check=False)


async def run_turns(bench: Bench, ref: Build, names: list[str], turns: int) -> list[Measured]:
    measured: dict[tuple[str, str], Measured] = {}
    for turn in range(turns):
        order = [("ref", ref), ("head", Build())]
        if turn % 2:
            order.reverse()
        for label, build in order:
            runner = replace(bench, build=build)
            for name in names:
                print(f"bench ab: turn {turn + 1}/{turns}, {label}, {name} ...", file=sys.stderr, flush=True)
                for row in await SCENARIOS[name](runner):
                    value = row_value(row)
                    if value is None:
                        continue
                    entry = measured.setdefault((row.item, row.measure), Measured(row.item, row.measure, [], []))
                    (entry.ref if label == "ref" else entry.head).append(value)
    return list(measured.values())


def _values(values: list[float]) -> str:
    return ", ".join(f"{v:g}" for v in values)


def table(rows: list[Measured], ref: str) -> str:
    lines = [f"| # | measure | {ref} median (each turn) | this checkout median (each turn) | this ÷ {ref} |",
             "|---|---|---|---|---|"]
    for r in rows:
        if not r.ref or not r.head:
            continue
        a, b = statistics.median(r.ref), statistics.median(r.head)
        ratio = f"{b / a:.2f}" if a else "n/a"
        lines.append(f"| {r.item} | {r.measure.replace('|', '/')} | {a:g} ({_values(r.ref)}) | "
                     f"{b:g} ({_values(r.head)}) | {ratio} |")
    return "\n".join(lines)


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench ab", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("ref", help="the commit to compare with (anything git rev-parse takes)")
    parser.add_argument("--only", default="calls,lifecycle",
                        help=f"comma-separated scenarios (default calls,lifecycle) of: {', '.join(SCENARIOS)}")
    parser.add_argument("--turns", type=int, default=3, help="turns per build (default 3)")
    parser.add_argument("--preset", default="small")
    args = parser.parse_args(argv)
    unknown = set(args.only.split(",")) - set(SCENARIOS)
    if unknown:
        parser.error(f"--only takes names from: {', '.join(SCENARIOS)}")
    if args.turns < 1:
        parser.error("--turns must be 1 or more")
    return args


async def run(args: argparse.Namespace, bench: Bench) -> int:
    with tempfile.TemporaryDirectory(prefix="bench-ab-") as tmp:
        folder = Path(tmp)
        try:
            ref = build_ref(args.ref, folder)
            rows = await run_turns(bench, ref, args.only.split(","), args.turns)
        finally:
            remove_ref(folder)
    print(table(rows, args.ref))
    return 0
