"""The live feed's reading: server-sent events decoded as a browser would, and a ``Feed`` that
reconnects with ``Last-Event-ID`` so nothing is missed. Scripted answers (``httpx.MockTransport``)
make the drops happen exactly where the test wants them; the real coordinator's side is in
``test_client.py``."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator

import httpx
import pytest

from tether import TetherError
from tether.feed import Feed
from tether.sse import ServerSentEvent, decode


def test_decode_follows_the_event_stream_format() -> None:
    lines = ["retry: 2000", "", ": keepalive", "", "id: 1-0", "data: {\"a\":", "data: 1}", "", "id: 2-0", "",
             "event: x", "data:no space", "unknown: field", "", "data: never dispatched"]
    assert list(decode(lines)) == [
        ServerSentEvent(None, retry_ms=2000),
        ServerSentEvent('{"a":\n1}', id="1-0"),
        ServerSentEvent(None, id="2-0"),  # an id alone still moves the position
        ServerSentEvent("no space", event="x"),
    ]


def frame(event_id: str, event: dict[str, object]) -> bytes:
    return f"id: {event_id}\ndata: {json.dumps(event)}\n\n".encode()


class Script:
    """Answers the feed's requests in turn, recording the Last-Event-ID each one sent."""

    def __init__(self, *answers: Callable[[], httpx.Response]) -> None:
        self.answers = list(answers)
        self.resumed_from: list[str | None] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.resumed_from.append(request.headers.get("last-event-id"))
        assert request.url.params.get("task_id") == "t1"
        return self.answers.pop(0)()

    def feed(self, sleeps: list[float]) -> Feed:
        http = httpx.Client(transport=httpx.MockTransport(self), base_url="http://coordinator")
        return Feed(http, "/api/v1/events", {"task_id": "t1"}, sleep=sleeps.append)


def stream(*chunks: bytes, then: Exception | None = None) -> Callable[[], httpx.Response]:
    def chunks_then_drop() -> Iterator[bytes]:
        yield from chunks
        if then is not None:
            raise then

    return lambda: httpx.Response(200, content=chunks_then_drop(), headers={"content-type": "text/event-stream"})


def refused() -> httpx.Response:
    raise httpx.ConnectError("connection refused")


def test_a_dropped_feed_resumes_from_its_last_event_after_a_backoff() -> None:
    script = Script(
        stream(b"retry: 500\n\n", frame("1-0", {"type": "created"}), then=httpx.ReadError("reset")),
        refused,
        lambda: httpx.Response(503, json={"error": {"code": "unavailable", "message": "no Redis"}}),
        stream(frame("2-0", {"type": "claimed"}), b": keepalive\n\n"),  # then the stream ends
        stream(b"data: not json\n\n", frame("3-0", {"type": "result"})),
    )
    sleeps: list[float] = []
    with script.feed(sleeps) as feed:
        assert [next(feed)["type"] for _ in range(3)] == ["created", "claimed", "result"]
        assert feed.last_event_id == "3-0" and feed.reconnects == 2
    assert script.resumed_from == [None, "1-0", "1-0", "1-0", "2-0"]
    assert len(sleeps) == 4 and all(0 < s <= 0.5 for s in sleeps)  # capped by the server's retry:
    assert sleeps[1] > sleeps[0] / 2  # it grows while the coordinator stays away


def test_the_first_connection_reports_what_went_wrong() -> None:
    sleeps: list[float] = []
    for answer, code in ((refused, "unavailable"),
                         (lambda: httpx.Response(401, json={"error": {"code": "unauthorized", "message": "no"}}),
                          "unauthorized")):
        with pytest.raises(TetherError) as raised:
            Script(answer).feed(sleeps).open()
        assert raised.value.code == code
    assert sleeps == []


def test_a_refusal_after_a_drop_is_raised_not_retried() -> None:
    script = Script(stream(frame("1-0", {"type": "created"})),
                    lambda: httpx.Response(401, json={"error": {"code": "unauthorized", "message": "no"}}))
    feed = script.feed([])
    assert next(feed)["type"] == "created"
    with pytest.raises(TetherError) as raised:
        next(feed)
    assert (raised.value.code, raised.value.status) == ("unauthorized", 401)
