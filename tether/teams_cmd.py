"""``tether teams`` lists every team's share of the fleet (every page of the listing); ``tether
team set TEAM [--weight W] [--max-devices N | --no-max]`` sets one (PROTOCOL.md, "Sharing the
fleet"; admin only)."""

from __future__ import annotations

import argparse
from argparse import Namespace

from tether.arg_types import positive_int
from tether.client import Client, Json
from tether.commands import Output, UsageError
from tether.tables import table


def add_set_arguments(command: argparse.ArgumentParser) -> None:
    """``team set``'s arguments, on its parser (made in cli.py like every other command's)."""
    command.add_argument("team", metavar="TEAM")
    command.add_argument("--weight", metavar="W", type=positive_int, help="its weight, 1..1000 (default 1)")
    cap = command.add_mutually_exclusive_group()
    cap.add_argument("--max-devices", metavar="N", type=int, help="at most N devices at once")
    cap.add_argument("--no-max", action="store_true", help="no cap on the devices it holds")


def teams_table(document: Json) -> str:
    """Each team's share: devices held against its weight's part, its cap, queued, last hour."""
    teams = document["teams"]
    weights = sum(t["weight"] for t in teams if t["running"] or t["queued"]) or 1
    held = sum(t["running"] for t in teams) or 1
    rows = [(t["team"], t["weight"], f"{t['running']} ({t['running'] / held:.0%} of held)",
             f"{t['weight'] / weights:.0%}" if t["running"] or t["queued"] else "-",
             "-" if t["max_devices"] is None else t["max_devices"], t["queued"],
             f"{t['device_seconds_1h'] / 60:.1f} min") for t in teams]
    return table(("TEAM", "WEIGHT", "RUNNING", "WEIGHT SHARE", "MAX", "QUEUED", "LAST HOUR"), rows)


def teams(client: Client, args: Namespace, out: Output) -> int:
    # Every page: each team's weight share is of all the teams with work.
    return out.show({"teams": list(client.iter_teams()), "next_cursor": None}, teams_table)


def team_set(client: Client, args: Namespace, out: Output) -> int:
    if args.weight is None and args.max_devices is None and not args.no_max:
        raise UsageError("nothing to set: give --weight, --max-devices or --no-max")
    if args.max_devices is not None and args.max_devices < 0:
        raise UsageError("--max-devices is a count of devices, 0 or more")
    changed = client.set_team(args.team, weight=args.weight, max_devices=args.max_devices, no_max=args.no_max)
    return out.show(changed, lambda t: teams_table({"teams": [t]}))
