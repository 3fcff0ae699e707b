"""A `tether` command refused `429 rate_limited` says how long to wait, from the answer's
`Retry-After` (issue 42: the message said only "rate_limited"). This module's coordinator
throttles after two failed credentials from one address."""

from __future__ import annotations

import re

import pytest

from tests.support import CoordinatorProcess
from tests.tether.conftest import tether


@pytest.fixture(scope="module")
def coordinator_settings() -> dict[str, str]:
    return {"COORDINATOR_AUTH_FAILURES_MAX": "2", "COORDINATOR_AUTH_THROTTLE_S": "120"}


def test_rate_limited_says_how_long_to_wait(coordinator: CoordinatorProcess) -> None:
    results = [tether(coordinator, "hosts", TETHER_TOKEN="not-a-valid-token-0123456789") for _ in range(4)]
    assert [r.code for r in results] == [1] * 4
    limited = [r.err.strip() for r in results if "(rate_limited)" in r.err]
    assert limited, [r.err for r in results]
    wait = re.search(r"; try again in (\d+) s \(rate_limited\)$", limited[-1])
    assert wait is not None and 0 < int(wait[1]) <= 120, limited[-1]
    assert "not-a-valid-token" not in "".join(r.err for r in results)
