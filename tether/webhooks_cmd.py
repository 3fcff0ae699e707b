"""``tether webhooks`` lists the webhooks; ``tether webhooks add URL --event E… [--team T]``
registers one (its signing secret printed once), ``tether webhooks remove ID`` removes one, and
``tether webhooks deliveries ID`` shows its latest deliveries (PROTOCOL.md, "Webhooks"; admin
only)."""

from __future__ import annotations

import argparse
from argparse import Namespace

import wire
from tether.client import Client, Json
from tether.commands import Output
from tether.tables import cell, fields, short_time, table

EVENTS = wire.values(wire.WebhookEvent)


def add_arguments(webhooks: argparse.ArgumentParser, common: argparse.ArgumentParser) -> None:
    """``webhooks``' subcommands, on its parser (made in cli.py like every other command's)."""
    sub = webhooks.add_subparsers(title="webhook commands", metavar="COMMAND")
    add = sub.add_parser("add", parents=[common], help="register a webhook (its secret shown once)")
    add.set_defaults(run=webhooks_add)
    # Not "url": that is where the coordinator is (--url, TETHER_URL).
    add.add_argument("endpoint", metavar="URL", help="where deliveries are posted (http or https)")
    add.add_argument("--event", metavar="E", action="append", required=True, choices=EVENTS,
                     help=f"what it is told of (repeatable): {', '.join(EVENTS)}")
    add.add_argument("--team", metavar="T", help="only this team's task and run events")
    remove = sub.add_parser("remove", parents=[common], help="remove a webhook")
    remove.set_defaults(run=webhooks_remove)
    remove.add_argument("id", metavar="ID", help="a webhook id, or a unique prefix of one")
    shown = sub.add_parser("deliveries", parents=[common], help="a webhook's latest deliveries, newest first")
    shown.set_defaults(run=webhooks_deliveries)
    shown.add_argument("id", metavar="ID", help="a webhook id, or a unique prefix of one")


def webhooks_table(document: Json) -> str:
    rows = [(w["id"], w["url"], ",".join(w["events"]), w.get("team") or "-", short_time(w.get("created_at")))
            for w in document["webhooks"]]
    return table(("ID", "URL", "EVENTS", "TEAM", "CREATED"), rows)


def created_webhook(webhook: Json) -> str:
    return fields([
        ("secret", webhook["secret"]), ("id", webhook["id"]), ("url", webhook["url"]),
        ("events", ",".join(webhook["events"])), ("team", webhook.get("team") or "-"),
    ]) + ("\nThe secret is shown only now: the receiver checks each delivery's Tether-Signature with it "
          "(tether.verify_signature, or docs/operations.md, \"Webhooks\").")


def deliveries_table(document: Json) -> str:
    rows = [(d["id"], d["event"], d.get("subject") or "-", short_time(d.get("created_at")), d["state"],
             d["attempts"], cell(d.get("last_status")) if d.get("last_status") is not None else
             (d.get("last_error") or "-"), short_time(d.get("next_attempt_at")) if d.get("next_attempt_at") else "-")
            for d in document["deliveries"]]
    return table(("DELIVERY", "EVENT", "SUBJECT", "AT", "STATE", "ATTEMPTS", "LAST", "NEXT"), rows)


def webhooks(client: Client, args: Namespace, out: Output) -> int:
    return out.show(client.list_webhooks(), webhooks_table)


def webhooks_add(client: Client, args: Namespace, out: Output) -> int:
    return out.show(client.create_webhook(args.endpoint, list(dict.fromkeys(args.event)), team=args.team),
                    created_webhook)


def webhooks_remove(client: Client, args: Namespace, out: Output) -> int:
    removed = client.delete_webhook(client.resolve_webhook_id(args.id))
    return out.show(removed, lambda w: f"webhook {w['id']} ({w['url']}) removed")


def webhooks_deliveries(client: Client, args: Namespace, out: Output) -> int:
    return out.show(client.webhook_deliveries(client.resolve_webhook_id(args.id)), deliveries_table)
