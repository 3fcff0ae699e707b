"""``python -m coordinator serve --help``: every setting, read from ``Settings`` itself (its
environment variable and its default), so the help cannot leave one out. What each means is
docs/operations.md's "Coordinator configuration" table, which a test keeps naming every
variable listed here: one description of each, not two to drift apart. It needs no Redis and no configuration."""

from __future__ import annotations

import textwrap

from pydantic import SecretStr

from coordinator.settings import Settings

DESCRIPTION = (
    "Run the coordinator: the operator API, the host API and the dashboard (/ui) on one port. "
    "Configured by environment variables; with no REDIS_URL it runs on an embedded in-memory Redis. "
    "Exit codes: 0 after SIGTERM/SIGINT, 2 a setting that does not validate, 3 Redis not answering at start."
)


def variables() -> list[str]:
    """Every setting's environment variable, in the order ``Settings`` declares them."""
    return [Settings.variable(name) for name in Settings.model_fields]


def _default(name: str) -> str:
    value = Settings.model_fields[name].get_default(call_default_factory=True)
    if value is None or value in ({}, "") or isinstance(value, SecretStr):
        return "unset"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def settings_help(width: int = 100) -> str:
    """The help's epilog: one line per setting, its variable and default."""
    names = list(Settings.model_fields)
    column = max(len(Settings.variable(name)) for name in names) + 2
    lines = ["settings (environment variables, with their defaults):"]
    lines += [f"  {Settings.variable(name):<{column}}{_default(name)}" for name in names]
    lines.append("")
    lines += textwrap.wrap('What each means, and its bounds: docs/operations.md, "Coordinator configuration". '
                           "Durations are seconds and accept fractions.", width, break_on_hyphens=False)
    return "\n".join(lines)


def description(width: int = 100) -> str:
    return textwrap.fill(DESCRIPTION, width, break_on_hyphens=False)
