"""Text for people: aligned tables, ``name  value`` blocks and short timestamps.

Times are shown in the one format of every Tether surface (the dashboard shows them the same
way): local time with its explicit UTC offset, ``2026-12-03 16:04:24 +01:00``, the date left out
when it is today's, ``16:04:24 +01:00``. The API and the feed give RFC 3339 UTC strings;
epoch milliseconds (older coordinators' feeds) are accepted too.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

EMPTY = "-"
# Control characters (C0, DEL, C1) never reach a terminal from a cell: a coordinator stores text
# without them, but an older one stored C1 controls (U+009B is an escape sequence's start).
_CONTROLS = re.compile("[\x00-\x1f\x7f-\x9f]")


def table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """Left-aligned columns two spaces apart; ``None`` and empty cells show as ``-``."""
    lines = [list(headers)] + [[cell(value) for value in row] for row in rows]
    widths = [max(len(line[i]) for line in lines) for i in range(len(headers))]
    return "\n".join("  ".join(text.ljust(width) for text, width in zip(line, widths, strict=True)).rstrip()
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
    return _CONTROLS.sub("", " ".join(str(value).split()))  # one line per row, whatever the text holds


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


def short_time(value: str | float | None, *, now: datetime | None = None) -> str:
    """``16:04:24 +01:00`` today, ``2026-12-02 08:00:00 +01:00`` another day (local time, with its
    offset), or ``-``. ``now`` (aware) is when "today" is; the current time when not given."""
    moment = parse_time(value)
    if moment is None:
        return EMPTY
    local = (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).astimezone()
    today = (now.astimezone() if now is not None else datetime.now().astimezone()).date()
    text = local.strftime("%H:%M:%S" if local.date() == today else "%Y-%m-%d %H:%M:%S")
    return f"{text} {_offset(local)}"


def _offset(moment: datetime) -> str:
    """The UTC offset as ``+01:00`` (``%z`` has no colon before Python 3.12)."""
    delta = moment.utcoffset()
    minutes = round(delta.total_seconds() / 60) if delta is not None else 0
    sign = "-" if minutes < 0 else "+"
    hours, rest = divmod(abs(minutes), 60)
    return f"{sign}{hours:02d}:{rest:02d}"


def clock(value: str | float | None) -> str:
    """The time of a live watch's line: ``short_time``, blank-padded when unknown."""
    text = short_time(value)
    return " " * len("00:00:00 +00:00") if text == EMPTY else text
