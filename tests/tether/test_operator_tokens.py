"""Operator tokens from the command line and the client, against a real coordinator: minting
(the secret printed once), listing, revoking, ``tether me``, a token outside its scopes, and the
``actor`` that every operator action leaves on the task's history."""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator

import pytest

from tests.support import ADMIN, CoordinatorProcess
from tests.tether.conftest import Result, tether, tether_here
from tether import Client, TetherError
from tether.cli import main

pytestmark = pytest.mark.e2e


def one_line(text: str) -> str:
    lines = text.strip().splitlines()
    assert len(lines) == 1, text
    assert "Traceback" not in text
    return lines[0]


def fields_of(result: Result) -> dict[str, str]:
    return dict(line.split(None, 1) for line in result.out.splitlines() if len(line.split(None, 1)) == 2)


def unique(name: str) -> str:
    """Names are per coordinator and its tests share one: each test mints its own."""
    return f"{name}-{secrets.token_hex(3)}"


@pytest.fixture
def admin(coordinator: CoordinatorProcess) -> Iterator[Client]:
    with Client(coordinator.url, ADMIN, timeout=5) as client:
        yield client


@pytest.mark.parametrize("args", [
    ["operator-tokens", "create", "ci"],  # no --scope
    ["operator-tokens", "create", "ci", "--scope", "root"],  # no such scope
    ["operator-tokens", "create", "--scope", "read"],  # no name
    ["operator-tokens", "create", "ci", "--scope", "read", "--ttl", "0"],
    ["operator-tokens", "revoke"],
])
def test_bad_operator_token_usage_exits_2(args: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--url", "http://127.0.0.1:9", "--token", "t", *args])
    assert exited.value.code == 2
    assert "usage: tether" in capsys.readouterr().err


def test_create_list_me_and_revoke(coordinator: CoordinatorProcess, capsys: pytest.CaptureFixture[str]) -> None:
    name = unique("ci-submit")
    created = tether(coordinator, "operator-tokens", "create", name, "--scope", "submit", "--scope", "read",
                     "--ttl", "600")
    assert created.code == 0, created
    fields = fields_of(created)
    secret, token_id = fields["token"], fields["id"]
    assert secret.startswith("tto_") and created.out.count(secret) == 1
    assert fields["name"] == name and fields["scopes"] == "read,submit"
    assert "shown only now" in created.out

    listed = tether(coordinator, "operator-tokens")
    assert listed.code == 0 and secret not in listed.out
    lines = listed.out.splitlines()
    assert lines[0].split() == ["ID", "NAME", "SCOPES", "STATE", "EXPIRES", "LAST", "USED", "CREATED", "CREATED",
                                "BY"]
    row = next(line.split() for line in lines if line.startswith(token_id + " "))
    assert row[1:4] == [name, "read,submit", "active"] and row[-1] == "admin"
    as_json = tether_here(coordinator, capsys, "operator-tokens", "--json").json()
    assert token_id in {t["id"] for t in as_json["operator_tokens"]} and secret not in json.dumps(as_json)

    me = tether(coordinator, "me", TETHER_TOKEN=secret)
    assert me.code == 0, me
    about = fields_of(me)
    assert about["name"] == name and about["scopes"] == "read,submit" and about["id"] == token_id
    assert about["expires"] != "never" and secret not in me.out
    assert tether(coordinator, "me", "--json", TETHER_TOKEN=secret).json()["name"] == name
    bootstrap = fields_of(tether_here(coordinator, capsys, "me"))
    assert (bootstrap["name"], bootstrap["scopes"], bootstrap["expires"]) == ("admin", "admin", "never")

    # Used once, it shows when (kept at most once a minute; the first use is always kept).
    used = tether_here(coordinator, capsys, "operator-tokens", "--json").json()["operator_tokens"]
    assert next(t for t in used if t["id"] == token_id)["last_used_at"] is not None

    revoked = tether(coordinator, "operator-tokens", "revoke", token_id)
    assert (revoked.code, revoked.out) == (0, f"operator token {token_id} ({name}): revoked\n")
    refused = tether(coordinator, "me", TETHER_TOKEN=secret)
    assert refused.code == 1 and one_line(refused.err).endswith("(unauthorized)")
    assert secret not in refused.err
    row = next(line.split() for line in tether_here(coordinator, capsys, "operator-tokens").out.splitlines()
               if line.startswith(token_id + " "))
    assert row[3] == "revoked"  # kept in the listing, for the audit


def test_created_with_json_the_secret_is_in_the_answer(coordinator: CoordinatorProcess) -> None:
    made = tether(coordinator, "operator-tokens", "create", unique("wall"), "--scope", "read", "--json")
    assert made.code == 0, made
    answer = made.json()
    assert answer["token"].startswith("tto_") and answer["scopes"] == ["read"] and answer["expires_at"]


def test_a_token_outside_its_scopes_gets_one_line_insufficient_scope(coordinator: CoordinatorProcess) -> None:
    coordinator.heartbeat("drain-1", ["dr-9"])
    secret = tether(coordinator, "operator-tokens", "create", unique("wall"), "--scope", "read",
                    "--json").json()["token"]

    assert tether(coordinator, "hosts", TETHER_TOKEN=secret).code == 0  # it may watch
    for args in (["drain", "drain-1"], ["operator-tokens"],
                 ["operator-tokens", "create", unique("escalate"), "--scope", "admin"]):
        result = tether(coordinator, *args, TETHER_TOKEN=secret)
        assert result.code == 1 and result.out == "", (args, result)
        assert one_line(result.err).endswith("(insufficient_scope)"), (args, result)
        assert secret not in result.err
    assert tether(coordinator, "host", "drain-1", "--json").json()["draining"] is False


def test_events_name_the_actor_of_each_operator_action(coordinator: CoordinatorProcess, admin: Client,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    ci_name, on_call_name = unique("ci"), unique("on-call")
    ci_token = admin.create_operator_token(ci_name, ["submit"], ttl_s=600)
    on_call_token = admin.create_operator_token(on_call_name, ["control", "read"], ttl_s=600)
    ci, on_call = ci_token["token"], on_call_token["token"]

    task_id = tether(coordinator, "submit", "--goal", "Open Settings", "--device", "nowhere-7",
                     TETHER_TOKEN=ci).out.strip()
    assert task_id.startswith("t_")
    cancelled = tether(coordinator, "cancel", task_id, TETHER_TOKEN=on_call)
    assert cancelled.code == 0, cancelled

    history = tether(coordinator, "events", task_id)
    assert history.code == 0, history
    lines = history.out.splitlines()
    assert lines[0].split()[-1] == "ACTOR"
    # The ACTOR column: the token's name, its id short beside it (names may repeat).
    actors = {line.split()[2]: line[lines[0].index("ACTOR"):] for line in lines[1:]}
    events = tether_here(coordinator, capsys, "events", task_id, "--json").json()["events"]
    assert actors["created"] == f"{ci_name} ({ci_token['id'][:9]}…)"
    assert actors["cancelled"] == f"{on_call_name} ({on_call_token['id'][:9]}…)"
    named = {e["type"]: (e.get("actor"), e.get("actor_id")) for e in events}
    assert named["created"] == (ci_name, ci_token["id"])
    assert fields_of(tether(coordinator, "task", task_id))["creator"] == ci_name


def test_a_submit_token_cannot_cancel_another_token_s_task(coordinator: CoordinatorProcess, admin: Client) -> None:
    ci_a = admin.create_operator_token(unique("ci-a"), ["submit"], ttl_s=600)["token"]
    ci_b = admin.create_operator_token(unique("ci-b"), ["submit"], ttl_s=600)["token"]
    theirs = tether(coordinator, "submit", "--goal", "x", "--device", "nowhere-8", TETHER_TOKEN=ci_a).out.strip()
    mine = tether(coordinator, "submit", "--goal", "y", "--device", "nowhere-8", TETHER_TOKEN=ci_b).out.strip()

    refused = tether(coordinator, "cancel", theirs, TETHER_TOKEN=ci_b)
    assert refused.code == 1 and one_line(refused.err).endswith("(insufficient_scope)"), refused
    assert coordinator.task(theirs)["status"] == "queued"
    assert tether(coordinator, "cancel", mine, TETHER_TOKEN=ci_b).code == 0
    assert coordinator.task(mine)["status"] == "cancelled"


def test_the_client_pages_through_operator_tokens(coordinator: CoordinatorProcess, admin: Client) -> None:
    ids = {admin.create_operator_token(unique("paged"), ["read"])["id"] for _ in range(3)}
    page = admin.list_operator_tokens(limit=1)
    assert len(page["operator_tokens"]) == 1 and page["next_cursor"] is not None
    assert ids <= {t["id"] for t in admin.iter_operator_tokens(page_size=1)}

    token_id = ids.pop()
    assert admin.revoke_operator_token(token_id)["revoked"] is True
    assert next(t for t in admin.iter_operator_tokens(page_size=2) if t["id"] == token_id)["revoked"] is True
    with pytest.raises(TetherError) as raised:
        admin.create_operator_token("not a name", ["read"])
    assert (raised.value.status, raised.value.code) == (400, "invalid_request")
    with pytest.raises(TetherError) as raised:
        admin.revoke_operator_token("../hosts")  # never becomes another path
    assert raised.value.code == "invalid_request" and raised.value.status is None
