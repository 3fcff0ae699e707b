"""``python -m agent --help``: what the agent is configured with, read from ``AgentSettings`` itself
(every field, its ``HOST_AGENT_*`` variable and its default), so the help cannot leave a setting
out. It needs no coordinator and no configuration: it is what a person reads before either."""

from __future__ import annotations

import textwrap
from pathlib import Path

from pydantic import SecretStr

from agent.settings import ENV_PREFIX, NO_WORKFLOWS, AgentSettings

DESCRIPTION = (
    "The Tether host agent: pools this machine's devices (simulated phones, adb) with a coordinator, "
    "long-polls it for work, runs each task under a lease and reports its result. It makes only "
    "outbound requests and listens on no port. Configured by environment variables (or a .env file "
    "in the working directory); exit codes: 0 after SIGTERM/SIGINT, 1 start-up failed or the host "
    "was revoked, 2 bad configuration."
)

# What each setting means, by field name; a test checks every field of AgentSettings is here.
MEANINGS: dict[str, str] = {
    "url": "the coordinator's base URL, http:// or https:// (required)",
    "host_id": f"a static host's id; with {ENV_PREFIX}TOKEN (configured on the coordinator as "
               "COORDINATOR_STATIC_HOSTS). No enrollment: local device ids are the pool's ids",
    "token": "a static host's token (secret)",
    "enrollment_token": f"a managed host: the one-time enrollment token (tet_..., secret), with "
                        f"{ENV_PREFIX}STATE_DIR",
    "state_dir": "a managed host's folder for its identity and device-id map (kept mode 0600)",
    "devices": "comma-separated driver:id: sim:phone-1,sim:phone-2 (simulated), adb:* (every "
               "attached Android device), adb:SERIAL (one)",
    "workflows_dir": f"folder of workflow JSON files; unset: the examples shipped with the agent "
                     f"(note-smoke, home-smoke, settings-smoke); {NO_WORKFLOWS}: no workflows",
    "poll_wait_s": "how long each claim long-poll waits at the coordinator (seconds)",
    "heartbeat_interval_s": "heartbeat period until the coordinator's first answer gives its own",
    "planner": "goal planner: scripted, or openai (then the LLM_* settings)",
    "llm_base_url": "openai planner: the model server's base URL",
    "llm_model": "openai planner: the model name",
    "llm_api_key": "openai planner: the API key (secret)",
    "shutdown_grace_s": "how long running work may take to finish after SIGTERM",
    "labels": 'labels put on every device, a JSON object: {"site": "berlin"}; a task\'s selector '
              "matches them",
    "hostname": "the hostname this host reports (shown to operators)",
    "adb_path": "the adb executable",
    "device_refresh_s": "how often device state is re-read (one adb devices -l per round)",
    "request_timeout_s": "timeout of each request to the coordinator (a claim adds its wait)",
    "backoff_cap_s": "longest pause between retries when the coordinator does not answer",
    "artifacts": "evidence of each run uploaded to the coordinator: all (a screenshot per step, the "
                 "final screen of a failed run, the run's log), failures (only a failed run's final "
                 "screen and log), off",
}


def _default(name: str) -> str:
    field = AgentSettings.model_fields[name]
    if name == "hostname":
        return "this machine's hostname"
    value = field.get_default(call_default_factory=True)
    if value is None or value == "" or value == {}:
        return "unset"
    if isinstance(value, SecretStr):
        return "set"  # never shown; no secret has a default anyway
    if isinstance(value, Path):
        return "the shipped examples"
    return str(value)


def settings_help(width: int = 100) -> str:
    """One entry per setting: its variable, its default, what it means."""
    lines = ["settings (environment variables):"]
    for name in AgentSettings.model_fields:
        variable = f"{ENV_PREFIX}{name.upper()}"
        meaning = f"{MEANINGS[name]} [default: {_default(name)}]"
        lines.append(f"  {variable}")
        lines.extend(textwrap.wrap(meaning, width, initial_indent=" " * 6, subsequent_indent=" " * 6,
                                   break_on_hyphens=False))
    lines.append("")
    lines.append("A static host: HOST_AGENT_URL, HOST_AGENT_HOST_ID, HOST_AGENT_TOKEN, HOST_AGENT_DEVICES. "
                 "A managed host: HOST_AGENT_URL, HOST_AGENT_ENROLLMENT_TOKEN, HOST_AGENT_STATE_DIR, "
                 "HOST_AGENT_DEVICES. See docs/operations.md, \"Agent configuration\".")
    return "\n".join(lines[:-1] + textwrap.wrap(lines[-1], width, break_on_hyphens=False))


def description(width: int = 100) -> str:
    return textwrap.fill(DESCRIPTION, width, break_on_hyphens=False)
