"""How /ui is served (no browser needed): only the package's known files, each with headers that
keep the page to its own origin."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from enum import Enum

import fakeredis
import httpx
import pytest

import wire
from coordinator.api import ui as ui_api
from coordinator.app import create_app
from coordinator.transport.base import PlainTransport
from tests.conftest import make_settings
from tests.support import unique_prefix

pytestmark = pytest.mark.anyio


@pytest.fixture
async def asgi_client() -> AsyncIterator[httpx.AsyncClient]:
    # No lifespan: serving files touches no Redis.
    app = create_app(make_settings(unique_prefix()), redis=PlainTransport(fakeredis.FakeAsyncRedis()))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://coordinator") as asgi_client:
        yield asgi_client


async def test_the_page_and_its_files_are_served_with_strict_headers(asgi_client: httpx.AsyncClient) -> None:
    for path in ["/ui", *(ui_api.PREFIX + name for name in ui_api.ASSETS)]:
        response = await asgi_client.get(path)
        assert response.status_code == 200, path
        assert response.headers["content-security-policy"].startswith("default-src 'self'")
        assert response.headers["x-content-type-options"] == "nosniff"
        assert response.headers["cache-control"] == "no-cache"
        assert response.content, path
    assert (await asgi_client.get("/ui")).headers["content-type"].startswith("text/html")
    assert (await asgi_client.get("/ui/app.js")).headers["content-type"].startswith("text/javascript")
    assert (await asgi_client.get("/ui/style.css")).headers["content-type"].startswith("text/css")


async def test_every_file_the_page_loads_is_served(asgi_client: httpx.AsyncClient) -> None:
    page = (await asgi_client.get("/ui")).text
    scripts = "".join([(await asgi_client.get(ui_api.PREFIX + n)).text for n in ui_api.ASSETS if n.endswith(".js")])
    referenced = set(re.findall(r'"/ui/([\w.]+)"', page)) | set(re.findall(r'from "\./([\w.]+)"', scripts))
    assert referenced <= set(ui_api.ASSETS)
    assert {n for n in ui_api.ASSETS if n.endswith(".js")} - {"app.js"} <= referenced


async def test_only_known_files_are_served(asgi_client: httpx.AsyncClient) -> None:
    for path in ["/ui/__init__.py", "/ui/../ui_api.py", "/ui/%2e%2e/settings.py", "/ui/nothing.js", "/ui/index.html/"]:
        response = await asgi_client.get(path)
        assert response.status_code == 404, path
        assert response.json()["error"]["code"] == "not_found"


async def test_an_unchanged_file_is_not_sent_again(asgi_client: httpx.AsyncClient) -> None:
    first = await asgi_client.get("/ui/app.js")
    again = await asgi_client.get("/ui/app.js", headers={"if-none-match": first.headers["etag"]})
    assert again.status_code == 304 and again.content == b""


async def test_wire_js_states_every_enum_and_constant_of_wire(asgi_client: httpx.AsyncClient) -> None:
    module = (await asgi_client.get(ui_api.PREFIX + ui_api.WIRE_JS)).text
    stated = {name: json.loads(value) for name, value in
              re.findall(r"^export const (\w+) = (?:Object\.freeze\()?(.+?)\)?;$", module, re.MULTILINE)}
    for name, value in vars(wire).items():
        if isinstance(value, type) and issubclass(value, Enum) and value.__module__ == wire.__name__:
            assert stated[name] == {member.name: member.value for member in value}, name
        elif name.isupper() and isinstance(value, int | str):
            assert stated[name] == value, name
        elif name.isupper() and isinstance(value, tuple | frozenset):
            assert sorted(stated[name]) == sorted(value), name
