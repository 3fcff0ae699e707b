"""The claim reads ``wait_s`` from its query string without Starlette's parser when the text is
plain; it must read exactly what ``QueryParams`` would."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from starlette.datastructures import QueryParams

from coordinator.host_api import query_value

_PART = st.text(alphabet="wait_s=&%+0123456789.ab -é", max_size=12)


@given(st.lists(_PART, max_size=5).map("&".join), st.sampled_from(["wait_s", "a", ""]))
def test_a_query_value_is_what_starlette_reads(query: str, name: str) -> None:
    raw = query.encode()
    assert query_value(raw, name) == QueryParams(raw).get(name)


def test_the_last_of_repeated_values_counts() -> None:
    assert query_value(b"wait_s=1&wait_s=2", "wait_s") == "2"
    assert query_value(b"wait_s=1%2E5", "wait_s") == "1.5"
