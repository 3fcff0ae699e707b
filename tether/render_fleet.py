"""How the fleet and its access read as text (the rest of ``render``): hosts, devices, workflows,
runs, enrollment and operator tokens, and who the caller is."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from tether.render import Json, host_of
from tether.tables import fields, short_time, table

# -- fleet -----------------------------------------------------------------------------------


def hosts_table(hosts: Iterable[Json], device_labels: Mapping[str, Json] | None = None) -> str:
    """One state column (``tether host ID`` shows each flag) keeps the table narrow. LABELS: the
    host's own, over those every one of its devices carries (``device_labels``, by host id: what
    ``HOST_AGENT_LABELS`` puts on each device)."""
    shared = device_labels or {}
    return table(["HOST", "HOSTNAME", "KIND", "STATE", "DEVICES", "LAST SEEN", "LABELS"],
                 ([h["host_id"], h.get("hostname"), h.get("kind"), _host_word(h), h.get("devices"),
                   short_time(h.get("last_seen")), {**shared.get(h["host_id"], {}), **(h.get("labels") or {})}]
                  for h in hosts))


def _host_word(host: Json) -> str:
    """The one state that matters most: revoked, offline, draining, else online."""
    if host.get("revoked"):
        return "revoked"
    if not host.get("online"):
        return "offline"
    return "draining" if host.get("draining") else "online"


def host_fields(host: Json) -> str:
    pairs = [
        ("host", host["host_id"]), ("kind", host.get("kind")), ("online", host.get("online")),
        ("devices", host.get("devices")), ("draining", host.get("draining")), ("revoked", host.get("revoked")),
        ("last seen", short_time(host.get("last_seen"))), ("hostname", host.get("hostname")),
        ("agent", host.get("agent_version")), ("labels", host.get("labels")),
        ("enrollment token", host.get("enrollment_token_id")), ("created", short_time(host.get("created_at"))),
    ]
    other = host.get("conflicting_agent")
    if isinstance(other, dict):  # two agents heartbeat as this host, replacing each other's devices
        where = f"instance {other.get('instance_id')} on {other.get('hostname') or '?'}"
        pairs.append(("second agent", f"{where}, last seen {short_time(other.get('last_seen'))}: stop one of them"))
    return fields(pairs)


def host_state(host: Json) -> str:
    """One line after drain, undrain or revoke: the state that matters."""
    states = ["revoked" if host.get("revoked") else "draining" if host.get("draining") else "accepting work",
              "online" if host.get("online") else "offline"]
    return f"host {host['host_id']}: {', '.join(states)}"


def devices_table(devices: Iterable[Json]) -> str:
    """``NAME`` is what people call the device (an enrolled one's serial); one status column says
    what keeps it from work, if anything (disabled, its host offline), else what it reports."""
    return table(["DEVICE", "NAME", "HOST", "DRIVER", "STATUS", "TASK", "LABELS"],
                 ([d["device_id"], d.get("name"), host_of(d), d.get("driver"), _device_word(d),
                   d.get("reserved_by"), d.get("labels")] for d in devices))


def _device_word(device: Json) -> str:
    if device.get("disabled"):
        return f"disabled ({device['disabled_reason']})" if device.get("disabled_reason") else "disabled"
    if device.get("host_online") is False:
        return "host offline"
    return str(device.get("status"))


def device_state(device: Json) -> str:
    state = f"disabled ({device['disabled_reason']})" if device.get("disabled_reason") else "disabled"
    return f"device {device['device_id']}: {state if device.get('disabled') else 'enabled'}"


def workflows_table(workflows: Iterable[Json]) -> str:
    return table(["WORKFLOW", "DEVICES", "HOSTS"],
                 ([w["name"], w.get("devices"), ", ".join(w.get("hosts") or [])] for w in workflows))


def runs_table(runs: Iterable[Json]) -> str:
    return table(["TASK", "ATTEMPT", "HOST", "STARTED", "ENDED", "OUTCOME"],
                 ([r.get("task_id"), r.get("attempt"), host_of(r), short_time(r.get("started_at")),
                   short_time(r.get("ended_at")), r.get("outcome") or "running"] for r in runs))


# -- enrollment tokens -----------------------------------------------------------------------


def token_state(token: Json) -> str:
    if token.get("revoked"):
        return "revoked"
    if token.get("expired"):
        return "expired"
    return "used up" if token.get("uses_left") == 0 else "active"


def tokens_table(tokens: Iterable[Json]) -> str:
    return table(["ID", "STATE", "USES", "EXPIRES", "CREATED", "LABELS"],
                 ([t["id"], token_state(t), f"{t.get('uses')}/{t.get('max_uses')}", short_time(t.get("expires_at")),
                   short_time(t.get("created_at")), t.get("labels")] for t in tokens))


def created_token(token: Json) -> str:
    return fields([
        ("token", token["token"]), ("id", token["id"]), ("expires", short_time(token.get("expires_at"))),
        ("uses", token.get("max_uses")), ("labels", token.get("labels")),
    ]) + "\nThe token is shown only now: give it to the host (HOST_AGENT_ENROLLMENT_TOKEN)."


# -- operator tokens, and who the caller is ----------------------------------------------------


def scopes(token: Json) -> str:
    return ",".join(str(s) for s in token.get("scopes") or [])


def me_fields(me: Json) -> str:
    return fields([("name", me.get("name")), ("scopes", scopes(me)),
                   ("expires", short_time(me.get("expires_at")) if me.get("expires_at") else "never"),
                   ("id", me.get("token_id") or "none (the bootstrap admin token)")])


def operator_token_state(token: Json) -> str:
    if token.get("revoked"):
        return "revoked"
    return "expired" if token.get("expired") else "active"


def operator_tokens_table(tokens: Iterable[Json]) -> str:
    return table(["ID", "NAME", "SCOPES", "STATE", "EXPIRES", "LAST USED", "CREATED", "CREATED BY"],
                 ([t["id"], t.get("name"), scopes(t), operator_token_state(t), short_time(t.get("expires_at")),
                   short_time(t.get("last_used_at")), short_time(t.get("created_at")), t.get("created_by")]
                  for t in tokens))


def created_operator_token(token: Json) -> str:
    return fields([
        ("token", token["token"]), ("id", token["id"]), ("name", token.get("name")), ("scopes", scopes(token)),
        ("expires", short_time(token.get("expires_at"))),
    ]) + "\nThe token is shown only now: give it to whoever it is for (TETHER_TOKEN, or the dashboard)."
