"""The routes that steer the fleet and its access, a part of ``tether.Client``: devices, what the
fleet can run, hosts, enrollment and operator tokens, webhooks."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence

from tether.calls import AMBIGUOUS_MATCHES_SHOWN, Calls, Json, segment, starting_with
from tether.errors import TetherError


class AdminMethods(Calls):
    """Devices, hosts, tokens and webhooks (``tether.Client``'s base class)."""

    # -- devices -------------------------------------------------------------------------------

    def list_devices(self, *, host_id: str | None = None, driver: str | None = None, status: str | None = None,
                     limit: int | None = None, cursor: str | None = None) -> Json:
        return self._call("GET", "/api/v1/devices", params={
            "host_id": host_id, "driver": driver, "status": status, "limit": limit, "cursor": cursor})

    def iter_devices(self, *, host_id: str | None = None, driver: str | None = None,
                     status: str | None = None, page_size: int | None = None) -> Iterator[Json]:
        return self._items(self.list_devices, "devices", host_id=host_id, driver=driver, status=status,
                           limit=page_size)

    def get_device(self, device_id: str) -> Json:
        return self._call("GET", f"/api/v1/devices/{segment(device_id, 'device id')}")

    def device_history(self, device_id: str, *, limit: int | None = None) -> Json:
        """Who ran what on it, newest first: ``{"runs": [...]}``."""
        return self._call("GET", f"/api/v1/devices/{segment(device_id, 'device id')}/history",
                          params={"limit": limit})

    def disable_device(self, device_id: str, reason: str = "") -> Json:
        return self._call("POST", f"/api/v1/devices/{segment(device_id, 'device id')}/disable",
                          json={"reason": reason})

    def enable_device(self, device_id: str) -> Json:
        return self._call("POST", f"/api/v1/devices/{segment(device_id, 'device id')}/enable")

    def forget_device(self, device_id: str) -> Json:
        """Un-enroll a managed host's device (``DELETE``); ``device_busy`` while it holds a task."""
        return self._call("DELETE", f"/api/v1/devices/{segment(device_id, 'device id')}")

    # -- what the fleet can run ----------------------------------------------------------------

    def list_workflows(self) -> Json:
        """``{"workflows": [{"name", "hosts", "devices"}]}``: each workflow an online host lists,
        with those hosts' ids and how many pooled devices they have."""
        return self._call("GET", "/api/v1/workflows")

    # -- hosts ---------------------------------------------------------------------------------

    def list_hosts(self, *, limit: int | None = None, cursor: str | None = None) -> Json:
        return self._call("GET", "/api/v1/hosts", params={"limit": limit, "cursor": cursor})

    def iter_hosts(self, *, page_size: int | None = None) -> Iterator[Json]:
        return self._items(self.list_hosts, "hosts", limit=page_size)

    def get_host(self, host_id: str) -> Json:
        return self._call("GET", f"/api/v1/hosts/{segment(host_id, 'host id')}")

    def drain_host(self, host_id: str) -> Json:
        return self._call("POST", f"/api/v1/hosts/{segment(host_id, 'host id')}/drain")

    def undrain_host(self, host_id: str) -> Json:
        return self._call("POST", f"/api/v1/hosts/{segment(host_id, 'host id')}/undrain")

    def revoke_host(self, host_id: str) -> Json:
        return self._call("POST", f"/api/v1/hosts/{segment(host_id, 'host id')}/revoke")

    # -- enrollment tokens ---------------------------------------------------------------------

    def create_enrollment_token(self, *, ttl_s: int | None = None, max_uses: int | None = None,
                                labels: Mapping[str, str] | None = None) -> Json:
        """``{"id", "token", "expires_at", ...}``: the secret ``token`` is in this answer only."""
        body = {"ttl_s": ttl_s, "max_uses": max_uses, "labels": dict(labels) if labels is not None else None}
        return self._call("POST", "/api/v1/enrollment-tokens", json={k: v for k, v in body.items() if v is not None})

    def list_enrollment_tokens(self, *, limit: int | None = None, cursor: str | None = None) -> Json:
        """``{"enrollment_tokens": [...], "next_cursor": ...}``, never the secrets."""
        return self._call("GET", "/api/v1/enrollment-tokens", params={"limit": limit, "cursor": cursor})

    def iter_enrollment_tokens(self, *, page_size: int | None = None) -> Iterator[Json]:
        return self._items(self.list_enrollment_tokens, "enrollment_tokens", limit=page_size)

    def revoke_enrollment_token(self, token_id: str) -> Json:
        return self._call("DELETE", f"/api/v1/enrollment-tokens/{segment(token_id, 'token id')}")

    # -- operator tokens -----------------------------------------------------------------------

    def me(self) -> Json:
        """Who this client's token is: ``{"name", "scopes", "expires_at"}`` (any valid token)."""
        return self._call("GET", "/api/v1/me")

    def create_operator_token(self, name: str, scopes: Sequence[str], *, ttl_s: int | None = None) -> Json:
        """``{"id", "name", "scopes", "token", "expires_at"}`` (admin only): the secret ``token``
        is in this answer only."""
        body: Json = {"name": name, "scopes": list(scopes)}
        if ttl_s is not None:
            body["ttl_s"] = ttl_s
        return self._call("POST", "/api/v1/operator-tokens", json=body)

    def list_operator_tokens(self, *, limit: int | None = None, cursor: str | None = None) -> Json:
        """``{"operator_tokens": [...], "next_cursor": ...}`` (admin only), never the secrets."""
        return self._call("GET", "/api/v1/operator-tokens", params={"limit": limit, "cursor": cursor})

    def iter_operator_tokens(self, *, page_size: int | None = None) -> Iterator[Json]:
        return self._items(self.list_operator_tokens, "operator_tokens", limit=page_size)

    def revoke_operator_token(self, token_id: str) -> Json:
        """Revoke (admin only): the token is refused ``401`` on every process from the next request."""
        return self._call("DELETE", f"/api/v1/operator-tokens/{segment(token_id, 'token id')}")

    # -- webhooks ------------------------------------------------------------------------------

    def list_webhooks(self) -> Json:
        """``{"webhooks": [{"id", "url", "events", "team", ...}]}`` (admin only; never a secret)."""
        return self._call("GET", "/api/v1/webhooks")

    def create_webhook(self, url: str, events: Sequence[str], *, team: str | None = None) -> Json:
        """``{"id", "url", "events", "team", "secret"}`` (admin only): the signing ``secret`` is in
        this answer only."""
        body: Json = {"url": url, "events": list(events)}
        if team is not None:
            body["team"] = team
        return self._call("POST", "/api/v1/webhooks", json=body)

    def resolve_webhook_id(self, prefix: str) -> str:
        """The id of the one webhook whose id is ``prefix`` or starts with it, as
        ``resolve_task_id`` (the listing is short: every webhook in one page)."""
        ids = [str(w["id"]) for w in self.list_webhooks()["webhooks"]]
        if prefix in ids:
            return prefix
        matches = starting_with(prefix, ids)
        if not matches:
            raise TetherError("not_found", f"no webhook {prefix!r}")
        if len(matches) > 1:
            raise TetherError.ambiguous("webhook", prefix, matches, more=len(matches) > AMBIGUOUS_MATCHES_SHOWN)
        return matches[0]

    def delete_webhook(self, webhook_id: str) -> Json:
        return self._call("DELETE", f"/api/v1/webhooks/{segment(webhook_id, 'webhook id')}")

    def webhook_deliveries(self, webhook_id: str, *, limit: int | None = None) -> Json:
        """``{"deliveries": [...]}``, newest first: each with ``attempts``, ``last_status``,
        ``next_attempt_at`` and ``state`` (pending, delivered, failed)."""
        params = {} if limit is None else {"limit": limit}
        return self._call("GET", f"/api/v1/webhooks/{segment(webhook_id, 'webhook id')}/deliveries", params=params)
