"""``tether.Client``'s live sessions and ``tether session …`` against a fake operator API
(``httpx.MockTransport``): a session starts once it runs, ends when its block is left (also on an
exception), waits out a pending command, fetches its screen from this coordinator only, and the
command line turns ``do ACTION ARGS`` into the contract's action."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from tether import Client, TetherError
from tether.cli import build_parser
from tether.commands import Output
from tether.session_cmd import action_of, session_do

URL = "http://coordinator.test"
PNG = b"\x89PNG\r\n\x1a\nfake"


class FakeSessions:
    """The session routes of the operator API: a session runs from its second read on, and each
    command is pending at first, answered when asked again."""

    def __init__(self, *, runs: bool = True) -> None:
        self.runs = runs
        self.requests: list[httpx.Request] = []
        self.status = "queued"
        self.sent: list[dict[str, Any]] = []

    def answer(self, command_id: str) -> dict[str, Any]:
        return {"command_id": command_id, "status": "done", "error": None, "duration_ms": 12, "round_trip_ms": 15,
                "observation": {"screen_url": f"/api/v1/tasks/t_1/artifacts/screen-{command_id}.png",
                                "width": 1080, "height": 1920,
                                "elements": [{"text": "Wi-Fi", "id": "settings:id/wifi", "bounds": [0, 380, 1080, 560],
                                              "clickable": True}]}}

    def handle(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        path, method = request.url.path, request.method
        body = json.loads(request.content) if request.content else None
        task = {"task_id": "t_1", "kind": "session", "status": self.status, "device_id": "phone-1",
                "host_id": "host-a", "waiting_reason": "matching_devices_busy" if self.status == "queued" else None}
        if (method, path) == ("POST", "/api/v1/tasks"):
            assert body["kind"] == "session"
            return httpx.Response(201, json=task)
        if (method, path) == ("GET", "/api/v1/tasks/t_1"):
            if self.runs and self.status == "queued":
                self.status = "running"
                task["status"] = "running"
            return httpx.Response(200, json=task)
        if (method, path) == ("POST", "/api/v1/tasks/t_1/cancel"):
            self.status = "cancelled"
            return httpx.Response(200, json={**task, "status": "cancelled"})
        if (method, path) == ("POST", "/api/v1/tasks/t_1/end"):
            if self.status != "running":
                return httpx.Response(409, json={"error": {"code": "session_ended", "message": "ended"}})
            self.status = "succeeded"
            return httpx.Response(200, json={**task, "status": "succeeded"})
        if (method, path) == ("POST", "/api/v1/tasks/t_1/commands"):
            self.sent.append(body["action"])
            return httpx.Response(202, json={"command_id": f"c_{len(self.sent)}", "status": "pending"})
        if method == "GET" and path.startswith("/api/v1/tasks/t_1/commands/"):
            return httpx.Response(200, json=self.answer(path.rsplit("/", 1)[-1]))
        if method == "GET" and path.startswith("/api/v1/tasks/t_1/artifacts/screen-"):
            return httpx.Response(200, content=PNG, headers={"content-type": "image/png"})
        return httpx.Response(404, json={"error": {"code": "not_found", "message": path}})

    def client(self) -> Client:
        return Client(URL, "admin-token", transport=httpx.MockTransport(self.handle))

    def paths(self, method: str) -> list[str]:
        return [r.url.path for r in self.requests if r.method == method]


def test_a_session_runs_its_actions_and_ends_when_its_block_is_left() -> None:
    fake = FakeSessions()
    with fake.client() as client, client.start_session(driver="sim", labels={"rack": "3"}, wait_s=5) as session:
        assert session.device_id == "phone-1"
        tapped = session.tap(280, 550)
        assert tapped.ok and tapped.find("Wi-Fi") is not None and tapped.width == 1080
        assert tapped.screen() == PNG
        session.tap(text="Wi-Fi")
        session.type("hello", observe=False)
        session.swipe(1, 2, 3, 4)
        session.key("back")
        session.launch("notes")
        session.observe()
    create = json.loads(fake.requests[0].content)
    assert create == {"kind": "session", "selector": {"driver": "sim", "labels": {"rack": "3"}}}
    assert fake.sent == [{"action": "tap", "x": 280, "y": 550}, {"action": "tap", "text": "Wi-Fi"},
                         {"action": "type", "text": "hello", "observe": False},
                         {"action": "swipe", "x1": 1, "y1": 2, "x2": 3, "y2": 4}, {"action": "key", "key": "back"},
                         {"action": "launch", "app": "notes"}, {"action": "observe"}]
    assert fake.paths("POST")[-1] == "/api/v1/tasks/t_1/end" and fake.status == "succeeded"


def test_an_exception_in_the_block_still_ends_the_session_and_is_the_one_raised() -> None:
    fake = FakeSessions()
    with pytest.raises(ZeroDivisionError), fake.client() as client, client.start_session(device_id="phone-1"):
        1 / 0  # noqa: B018 -- the script's own failure
    assert fake.status == "succeeded"


def test_a_session_that_does_not_run_in_time_is_cancelled_and_says_why() -> None:
    fake = FakeSessions(runs=False)
    with fake.client() as client, pytest.raises(TetherError) as info:
        client.start_session(device_id="phone-1", wait_s=0.3)
    assert info.value.code == "session_not_running" and "matching_devices_busy" in info.value.message
    assert fake.status == "cancelled"


def test_a_screen_is_fetched_from_this_coordinator_only() -> None:
    fake = FakeSessions()
    with fake.client() as client:
        with pytest.raises(TetherError) as info:
            client.get_screen("https://elsewhere.example/api/v1/tasks/t_1/artifacts/screen-c_1.png")
        assert info.value.code == "invalid_response"
        assert client.get_screen(f"{URL}/api/v1/tasks/t_1/artifacts/screen-c_1.png") == PNG
    assert all(r.url.host == "coordinator.test" for r in fake.requests)


@pytest.mark.parametrize(("argv", "action"), [
    (["tap", "540", "365"], {"action": "tap", "x": 540, "y": 365}),
    (["tap", "--text", "Wi-Fi"], {"action": "tap", "text": "Wi-Fi"}),
    (["type", "hello", "world"], {"action": "type", "text": "hello world"}),
    (["swipe", "1", "2", "3", "4"], {"action": "swipe", "x1": 1, "y1": 2, "x2": 3, "y2": 4}),
    (["key", "back"], {"action": "key", "key": "back"}),
    (["launch", "settings"], {"action": "launch", "app": "settings"}),
    (["observe"], {"action": "observe"}),
])
def test_do_turns_its_arguments_into_the_contracts_action(argv: list[str], action: dict[str, Any]) -> None:
    assert action_of(build_parser().parse_args(["session", "do", "t_1", *argv])) == action


@pytest.mark.parametrize("argv", [["tap", "540"], ["tap", "x", "y"], ["tap", "1", "2", "--text", "A"], ["key"],
                                  ["observe", "now"]])
def test_do_with_arguments_that_make_no_action_is_bad_usage(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    args = build_parser().parse_args(["session", "do", "t_1", *argv])
    assert session_do(FakeSessions().client(), args, Output(as_json=False)) == 2
    assert capsys.readouterr().err.startswith("warning: ")


def test_do_prints_the_answer_and_elements_and_saves_the_screen(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    fake = FakeSessions()
    fake.status = "running"
    target = tmp_path / "screen.png"
    args = build_parser().parse_args(["session", "do", "t_1", "tap", "280", "550", "-o", str(target)])
    assert session_do(fake.client(), args, Output(as_json=False)) == 0
    out = capsys.readouterr().out
    assert "done" in out and "Wi-Fi" in out and "settings:id/wifi" in out and f"to {target}" in out
    assert target.read_bytes() == PNG
