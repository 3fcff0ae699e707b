"""What every part of ``tether.Client`` shares: the HTTP client it holds, one call and its
errors (``TetherError``), a listing's pages followed, and an id made a path segment."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from types import TracebackType
from typing import Any, Self
from urllib.parse import quote

import httpx

import wire
from tether.errors import TetherError

DEFAULT_TIMEOUT_S = 10.0
Json = dict[str, Any]
# An ambiguous prefix names at most this many of its matches (and says there are more).
AMBIGUOUS_MATCHES_SHOWN = 10


class Calls:
    """The base of ``tether.Client`` and its parts (``sessions.SessionMethods``,
    ``admin.AdminMethods``): the connection and the plumbing every route's method uses."""

    def __init__(self, url: str, token: str, *, timeout: float | httpx.Timeout = DEFAULT_TIMEOUT_S,
                 transport: httpx.BaseTransport | None = None, feed_read_timeout_s: float = 45.0) -> None:
        if not token or not token.isascii() or not token.isprintable() or " " in token:
            # httpx would put an illegal header value, token included, into its exception text.
            raise ValueError("the token must be printable ASCII without spaces")
        scheme = url.partition("://")[0].lower() if "://" in url else ""
        if scheme not in ("http", "https"):
            # httpx would take "coordinator:8000" as a scheme of its own, or send nothing at all.
            raise ValueError(f"the coordinator URL needs its scheme: http://{url} or https://{url}"
                             if not scheme else f"the coordinator URL must be http:// or https://, not {scheme}://")
        self.url = url.rstrip("/")
        self._feed_read_timeout_s = feed_read_timeout_s
        self._http = httpx.Client(
            base_url=self.url,
            headers={"Authorization": f"Bearer {token}", "User-Agent": "tether-client"},
            timeout=timeout,
            transport=transport,
        )

    def __repr__(self) -> str:
        return f"Client({self.url!r})"

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    # -- plumbing ------------------------------------------------------------------------------

    def _send(self, method: str, path: str, *, params: Mapping[str, Any] | None = None,
              json: Any = None, timeout: float | None = None) -> httpx.Response:
        """The answer of one call that succeeded (2xx or 3xx); ``TetherError`` otherwise.
        ``timeout`` (seconds) replaces the client's for a call that waits at the server."""
        query = {k: str(v) for k, v in (params or {}).items() if v is not None}
        try:
            if timeout is None:
                response = self._http.request(method, path, params=query, json=json)
            else:
                response = self._http.request(method, path, params=query, json=json, timeout=timeout)
        except httpx.TransportError as exc:
            raise TetherError.unreachable(self.url, exc) from exc
        if response.status_code >= 400:
            raise TetherError.from_response(response)
        return response

    def _call(self, method: str, path: str, *, params: Mapping[str, Any] | None = None,
              json: Any = None, timeout: float | None = None) -> Json:
        response = self._send(method, path, params=params, json=json, timeout=timeout)
        try:
            answer = response.json()
        except ValueError:
            answer = None
        if not isinstance(answer, dict):
            raise TetherError("invalid_response", f"{method} {path} answered {response.status_code} without a "
                              "JSON object", status=response.status_code)
        return answer

    @staticmethod
    def _items(list_page: Callable[..., Json], key: str, **filters: Any) -> Iterator[Json]:
        cursor = None
        while True:
            page = list_page(**filters, cursor=cursor)
            yield from page[key]
            cursor = page.get("next_cursor")
            if cursor is None or cursor == "":
                return


def starting_with(prefix: str, ids: Iterable[str]) -> list[str]:
    """The ids starting with ``prefix``, in the listing's order; once there are more than can be
    shown the search stops: it is ambiguous whatever follows."""
    found: list[str] = []
    for candidate in ids:
        if candidate.startswith(prefix):
            found.append(candidate)
            if len(found) > AMBIGUOUS_MATCHES_SHOWN:
                break
    return found


def segment(value: str, what: str) -> str:
    """A path segment: refused here when it is outside the contract's id grammar, so it can
    never turn into another path."""
    if not wire.is_valid_id(value):
        raise TetherError("invalid_request", f"not a valid {what}: {value!r}")
    return quote(value, safe="")
