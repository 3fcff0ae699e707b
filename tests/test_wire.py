"""The wire vocabulary's own functions, against what they promise."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

import wire

# From the epoch to the year 9999: every time Redis's clock can give, and then some.
MAX_MS = int((datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC) - datetime(1970, 1, 1, tzinfo=UTC)).total_seconds()) * 1000


@given(st.integers(min_value=0, max_value=MAX_MS))
def test_iso_ms_is_rfc3339_utc_with_milliseconds_of_exactly_that_instant(ms: int) -> None:
    text = wire.iso_ms(ms)
    assert text is not None and text.endswith("Z") and len(text) == len("2026-12-02T08:00:00.123Z")
    parsed = datetime.fromisoformat(text)
    assert parsed == datetime(1970, 1, 1, tzinfo=UTC) + timedelta(milliseconds=ms)


def test_iso_ms_keeps_none() -> None:
    assert wire.iso_ms(None) is None
