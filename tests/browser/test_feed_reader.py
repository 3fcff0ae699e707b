"""The dashboard's server-sent-events parser (``coordinator/ui/feed.js``), run in Chromium on
the chunks a network may cut a stream into."""

from __future__ import annotations

import json

import pytest

from tests.browser.driver import Tab
from tests.support import CoordinatorProcess

pytestmark = pytest.mark.e2e

STREAM = "retry: 2000\n\n: keepalive\n\nid: 1-0\ndata: {\"type\": \"created\"}\n\nid: 2-0\r\ndata: a\r\ndata: b\r\n\r\n"


def parse(page: Tab, chunks: list[str]) -> list[dict[str, str | None]]:
    return page.js(f"""import('/ui/feed.js').then(({{ SseParser }}) => {{
        const parser = new SseParser();
        return {json.dumps(chunks)}.flatMap((chunk) => parser.push(chunk));
    }})""")


def test_events_are_parsed_however_the_stream_is_cut(coordinator: CoordinatorProcess, page: Tab) -> None:
    page.goto(f"{coordinator.url}/ui")
    expected = [{"id": "1-0", "data": '{"type": "created"}'}, {"id": "2-0", "data": "a\nb"}]
    assert parse(page, [STREAM]) == expected
    assert parse(page, list(STREAM)) == expected  # one character at a time, CR and LF apart
    assert parse(page, [STREAM[:40], STREAM[40:]]) == expected
    assert parse(page, [": only a comment\n\n", "data: no id\n\n"]) == [{"id": None, "data": "no id"}]
