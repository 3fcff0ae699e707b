"""Text for people: aligned tables, ``name  value`` blocks and short timestamps.

Times are shown in UTC, as the API gives them (and as the coordinator's logs are), shortened:
``MM-DD HH:MM:SS`` in tables, ``HH:MM:SS.mmm`` on the lines of a live watch. The feed's events
carry ``at`` in milliseconds, the API's documents RFC 3339 strings; both are accepted.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

EMPTY = "-"


def table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """Left-aligned columns two spaces apart; ``None`` and empty cells show as ``-``."""
    lines = [list(headers)] + [[cell(value) for value in row] for row in rows]
    widths = [max(len(line[i]) for line in lines) for i in range(len(headers))]
    return "\n".join("  ".join(text.ljust(width) for text, width in zip(line, widths)).rstrip()
                     for line in lines)


def fields(pairs: Iterable[tuple[str, Any]]) -> str:
    """One ``name  value`` line per pair, the values aligned."""
    pairs = [(name, cell(value)) for name, value in pairs]
    width = max((len(name) for name, _ in pairs), default=0)
    return "\n".join(f"{name.ljust(width)}  {value}".rstrip() for name, value in pairs)


def cell(value: Any) -> str:
    if value is None or value == "" or value == {}:
        return EMPTY
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, Mapping):
        return pairs_text(value)
    return " ".join(str(value).split())  # one line per row, whatever the text holds


def pairs_text(mapping: Mapping[str, Any]) -> str:
    """``a=1 b=2``: labels and parameters, compactly."""
    return " ".join(f"{k}={v}" for k, v in mapping.items())


def parse_time(value: str | float | None) -> datetime | None:
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return datetime.fromtimestamp(value / 1000, tz=UTC)
    try:
        return datetime.fromisoformat(value)
    except ValueError:
        return None


def short_time(value: str | float | None) -> str:
    """``12-02 08:00:00`` (UTC), or ``-``."""
    moment = parse_time(value)
    return moment.astimezone(UTC).strftime("%m-%d %H:%M:%S") if moment else EMPTY


def clock(value: str | float | None) -> str:
    """``08:00:00.123`` (UTC), the precision a live watch wants; blank-padded when unknown."""
    moment = parse_time(value)
    if moment is None:
        return " " * 12
    moment = moment.astimezone(UTC)
    return moment.strftime("%H:%M:%S.") + f"{moment.microsecond // 1000:03d}"
