"""The CLI's one time format: local time with its explicit offset, the date left out today."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

from tether import render
from tether.tables import clock, short_time


@pytest.fixture
def berlin() -> Iterator[None]:
    """The process's local zone is Europe/Berlin (CET, +01:00 in December) for the test."""
    before = os.environ.get("TZ")
    os.environ["TZ"] = "Europe/Berlin"
    time.tzset()
    try:
        yield
    finally:
        if before is None:
            del os.environ["TZ"]
        else:
            os.environ["TZ"] = before
        time.tzset()


NOW = datetime(2026, 12, 3, 15, 30, tzinfo=UTC)


def test_today_shows_the_time_and_its_offset(berlin: None) -> None:
    assert short_time("2026-12-03T15:04:24.123Z", now=NOW) == "16:04:24 +01:00"


def test_another_day_shows_the_date_too(berlin: None) -> None:
    assert short_time("2026-12-02T08:00:00.000Z", now=NOW) == "2026-12-02 09:00:00 +01:00"
    # Today in UTC but tomorrow in Berlin: the local date decides.
    assert short_time("2026-12-03T23:30:00.000Z", now=NOW) == "2026-12-04 00:30:00 +01:00"


def test_epoch_ms_reads_the_same_as_rfc3339(berlin: None) -> None:
    ms = int(datetime(2026, 12, 2, 8, tzinfo=UTC).timestamp() * 1000)
    assert short_time(ms, now=NOW) == short_time("2026-12-02T08:00:00.000Z", now=NOW)


def test_unknown_times_are_a_dash_and_a_watch_line_stays_aligned() -> None:
    assert short_time(None) == "-" and short_time("yesterday") == "-"
    assert len(clock(None)) == len(clock(datetime.now(UTC).isoformat()))


def test_every_surface_of_the_cli_uses_it(berlin: None) -> None:
    at = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.000Z")
    shown = short_time(at)
    assert shown.endswith(" +01:00") and len(shown) == len("16:04:24 +01:00")
    event = {"type": "claimed", "at": at, "attempt": 1, "host_id": "h", "device_id": "d"}
    assert render.event_line(event).startswith(shown)
    assert shown in render.events_table([event])


def test_a_cell_shows_no_control_character_whatever_the_coordinator_stored() -> None:
    from tether.tables import cell, table

    assert cell("nightly\x9b31m\x85run\x1b[0m\tx\x7f") == "nightly31m run[0m x"
    assert "\x9b" not in table(["NAME"], [["a\x9bb"]])
