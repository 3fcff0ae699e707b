"""Who this host is: legacy credentials, or a managed identity enrolled once and kept on disk.

Legacy: ``HOST_AGENT_HOST_ID`` + ``HOST_AGENT_TOKEN``; no enrollment, and each device's cloud id
is its local id.

Managed: the agent mints ``enrollment_id`` and ``host_token`` itself and writes them to
``STATE_DIR/identity.json`` *before* calling ``POST /internal/v1/enroll``, so a retry after a
lost response (or after a crash) is the identical request and the coordinator answers it with
the same ``host_id``. The answer's ``host_id`` is then written into the same file; from then on a
restart reuses the stored identity and never touches the enrollment token, which is never
written anywhere. Local devices are enrolled on every start (idempotent), and devices found later
(a phone plugged in under ``adb:*``) when they are found, before they are reported; each answer
is merged into the local → cloud id map in ``STATE_DIR/devices.json`` before it is used.

An identity the coordinator no longer knows (a ``401`` on the host token: revoked, or its Redis
lost its data) is enrolled again only when ``HOST_AGENT_ENROLLMENT_TOKEN`` is set, and only by
replaying the stored enrollment (``reenroll``): the same enrollment id and host token. A revoked
host's replay is refused (the coordinator still holds that enrollment and its revocation), so an
operator's revocation stays final; a coordinator that lost the enrollment, and still accepts the
enrollment token, makes a new host of it. The device map (cloud ids of the identity that is gone)
is emptied before the new host id is written, each file atomically: a crash between the two
leaves the old host id, whose next start replays the same enrollment and gets the same answer.

Files are written atomically (temporary file, fsync, ``os.replace``, fsync of the folder) with
mode 0600 in a 0700 folder.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import stat
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import SecretStr

from agent.answers import Conflict, MalformedAnswer, Rejected, Unauthorized
from agent.client import CoordinatorClient, HostClient
from agent.retry import RetryPolicy, retry
from agent.runtime import DeviceRecord
from agent.settings import ENV_PREFIX, IDENTITY_FILE, AgentSettings, ConfigError

log = logging.getLogger("agent.identity")

DEVICES_FILE = "devices.json"
HOST_TOKEN_PREFIX = "tht_"  # recognisable, so secret scanners can find a leaked host token


class StartupError(Exception):
    """Start-up cannot continue (rejected enrollment, conflicting device, unreadable state)."""


class CredentialRefused(StartupError):
    """The coordinator refused the stored identity's host token (401) at start-up."""

    def __init__(self, message: str, identity: HostIdentity) -> None:
        super().__init__(message)
        self.identity = identity


@dataclass(frozen=True)
class HostIdentity:
    host_id: str
    token: SecretStr
    managed: bool


def new_host_token() -> SecretStr:
    return SecretStr(HOST_TOKEN_PREFIX + secrets.token_urlsafe(32))


def atomic_write_json(path: Path, data: Any) -> None:
    """Replace ``path`` with ``data`` so a reader (or a crash) sees the old or the new file, whole."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    payload = json.dumps(data, indent=2, sort_keys=True).encode() + b"\n"
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(6)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.fchmod(fd, 0o600)  # the umask only ever removes bits; make the mode exact
        with os.fdopen(fd, "wb") as file:
            file.write(payload)
            file.flush()
            os.fsync(file.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)  # make the rename itself durable
    finally:
        os.close(dir_fd)


class StateStore:
    """``identity.json`` and ``devices.json`` in the state folder."""

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = state_dir
        self.identity_path = state_dir / IDENTITY_FILE
        self.devices_path = state_dir / DEVICES_FILE

    def _read(self, path: Path) -> dict[str, Any] | None:
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise StartupError(f"cannot read {path}: {exc.strerror}") from None
        mode = stat.S_IMODE(path.stat().st_mode)
        if mode & 0o077:
            log.warning("%s is readable by others (mode %o); tightening to 0600", path, mode)
            os.chmod(path, 0o600)
        try:
            data = json.loads(raw)
        except ValueError:
            raise StartupError(f"{path} is not valid JSON; fix or remove it") from None
        if not isinstance(data, dict):
            raise StartupError(f"{path} does not hold a JSON object; fix or remove it")
        return data

    def load_identity(self) -> dict[str, Any] | None:
        data = self._read(self.identity_path)
        if data is None:
            return None
        if not isinstance(data.get("enrollment_id"), str) or not isinstance(data.get("host_token"), str):
            raise StartupError(f"{self.identity_path} lacks enrollment_id/host_token; fix or remove it")
        if data.get("host_id") is not None and not isinstance(data["host_id"], str):
            raise StartupError(f"{self.identity_path} has a bad host_id; fix or remove it")
        return data

    def save_identity(self, enrollment_id: str, host_token: SecretStr, host_id: str | None) -> None:
        atomic_write_json(
            self.identity_path,
            {
                "enrollment_id": enrollment_id,
                "host_token": host_token.get_secret_value(),
                "host_id": host_id,
            },
        )

    def load_device_map(self) -> dict[str, dict[str, str]]:
        data = self._read(self.devices_path) or {}
        devices = data.get("devices", {})
        return devices if isinstance(devices, dict) else {}

    def save_device_map(self, devices: dict[str, dict[str, str]]) -> None:
        atomic_write_json(self.devices_path, {"devices": devices})


async def resolve_identity(
    settings: AgentSettings, client: CoordinatorClient, retry_policy: RetryPolicy
) -> HostIdentity:
    """Legacy credentials as configured, or the managed identity (enrolling if not yet done)."""
    if settings.legacy:
        assert settings.host_id is not None and settings.token is not None
        return HostIdentity(settings.host_id, settings.token, managed=False)
    assert settings.state_dir is not None
    store = StateStore(settings.state_dir)
    stored = store.load_identity()
    if stored is None:
        if settings.enrollment_token is None:
            raise ConfigError(f"{ENV_PREFIX}ENROLLMENT_TOKEN is needed for a first enrollment")
        enrollment_id = uuid.uuid4().hex
        host_token = new_host_token()
        store.save_identity(enrollment_id, host_token, None)  # before the call: retries match
        log.info("new managed identity (enrollment %s) stored in %s", enrollment_id, settings.state_dir)
    else:
        enrollment_id = stored["enrollment_id"]
        host_token = SecretStr(stored["host_token"])
        if stored.get("host_id"):
            log.info("reusing enrolled identity: host %s", stored["host_id"])
            return HostIdentity(stored["host_id"], host_token, managed=True)
        log.info("finishing enrollment %s stored in %s", enrollment_id, settings.state_dir)
        if settings.enrollment_token is None:
            raise ConfigError(
                f"enrollment in {settings.state_dir} is unfinished and {ENV_PREFIX}ENROLLMENT_TOKEN is not set"
            )
    answer = await _enroll(settings, client, retry_policy, store, enrollment_id, host_token)
    host_id = answer["host_id"]
    store.save_identity(enrollment_id, host_token, host_id)
    log.info("enrolled as host %s (%s)", host_id, "created" if answer.get("created") else "existing")
    return HostIdentity(host_id, host_token, managed=True)


async def _enroll(settings: AgentSettings, client: CoordinatorClient, retry_policy: RetryPolicy,
                  store: StateStore, enrollment_id: str, host_token: SecretStr) -> dict[str, Any]:
    """``POST /internal/v1/enroll`` with the configured token, retried while unanswered."""
    enrollment_token = settings.enrollment_token
    assert enrollment_token is not None
    try:
        return await retry(
            lambda: client.enroll(
                enrollment_token,
                enrollment_id=enrollment_id,
                host_token=host_token,
                hostname=settings.hostname,
                labels=settings.labels,
            ),
            retry_policy.backoff(),
            what="enrollment",
        )
    except Unauthorized:
        raise StartupError(
            "the coordinator rejected the enrollment token (unknown, expired, revoked or used up) "
            "or this host was revoked"
        ) from None
    except Conflict as exc:
        raise StartupError(
            f"enrollment refused ({exc.code}): this enrollment id is bound to another host token; "
            f"remove {store.identity_path} to enroll afresh"
        ) from None
    except (Rejected, MalformedAnswer) as exc:
        raise StartupError(f"enrollment failed: {exc}") from None


async def reenroll(settings: AgentSettings, client: CoordinatorClient, retry_policy: RetryPolicy,
                   refused: HostIdentity) -> HostIdentity:
    """Enroll again a managed identity whose host token the coordinator refused, by replaying its
    stored enrollment with ``HOST_AGENT_ENROLLMENT_TOKEN``. ``StartupError`` when it cannot."""
    assert settings.state_dir is not None and settings.enrollment_token is not None
    store = StateStore(settings.state_dir)
    stored = store.load_identity()
    if stored is None or stored["host_token"] != refused.token.get_secret_value():
        raise StartupError(f"{store.identity_path} no longer holds this host's identity")
    enrollment_id = stored["enrollment_id"]
    answer = await _enroll(settings, client, retry_policy, store, enrollment_id, refused.token)
    host_id = answer["host_id"]
    if host_id == refused.host_id:
        raise StartupError(f"the coordinator still holds host {host_id} yet refuses its credential")
    store.save_device_map({})  # cloud ids of the host that is gone; before the new id is kept
    store.save_identity(enrollment_id, refused.token, host_id)
    return HostIdentity(host_id, refused.token, managed=True)


class DeviceEnroller:
    """Cloud ids for local devices: legacy hosts keep the local id; managed hosts enroll the
    devices (``POST .../devices/enroll``, idempotent) and persist the map before returning it.

    ``enroll`` raises the client's errors (``TransientError``, ``Unauthorized``, ``Rejected``,
    ``MalformedAnswer``): at start-up ``enroll_devices`` retries and turns them into
    ``StartupError``; for devices found later the executor decides (see ``agent/executor.py``).
    """

    def __init__(self, identity: HostIdentity, host: HostClient, state_dir: Path | None) -> None:
        self._host = host
        self._store: StateStore | None = None
        if identity.managed:
            assert state_dir is not None
            self._store = StateStore(state_dir)

    async def enroll(self, devices: list[DeviceRecord]) -> dict[str, str]:
        if self._store is None:
            return {device.local_id: device.local_id for device in devices}
        if not devices:
            return {}
        body = [
            {"local_id": device.local_id, "driver": device.driver, "attributes": device.attributes}
            for device in devices
        ]
        enrolled = await self._host.enroll_devices(body)
        mapping: dict[str, str] = {}
        records: dict[str, dict[str, str]] = {}
        for sent, got in zip(devices, enrolled, strict=True):  # the client checked the lengths
            device_id = got.get("device_id") if isinstance(got, dict) else None
            if not isinstance(device_id, str) or not device_id or got.get("local_id") != sent.local_id:
                raise MalformedAnswer("device enrollment answer does not match the devices sent")
            mapping[sent.local_id] = device_id
            records[sent.local_id] = {"driver": sent.driver, "device_id": device_id}
        # Merged, not replaced: a phone unplugged today keeps its record (and its cloud id is
        # the same whenever it comes back, since enrollment is idempotent).
        self._store.save_device_map({**self._store.load_device_map(), **records})
        return mapping


async def enroll_devices(
    identity: HostIdentity,
    host: HostClient,
    devices: list[DeviceRecord],
    state_dir: Path | None,
    retry_policy: RetryPolicy,
) -> dict[str, str]:
    """Start-up: map every local device id to its cloud device id (legacy: the same id),
    retrying while the coordinator is unreachable."""
    enroller = DeviceEnroller(identity, host, state_dir)
    try:
        mapping = await retry(lambda: enroller.enroll(devices), retry_policy.backoff(), what="device enrollment")
    except Unauthorized:  # only managed hosts call the coordinator here
        assert state_dir is not None
        raise CredentialRefused(
            f"the coordinator rejected this host's credential (revoked?); remove "
            f"{StateStore(state_dir).identity_path} and enroll again with a new {ENV_PREFIX}ENROLLMENT_TOKEN",
            identity,
        ) from None
    except (Rejected, MalformedAnswer) as exc:
        raise StartupError(f"device enrollment failed: {exc}") from None
    if identity.managed and mapping:
        log.info("enrolled %d device(s): %s", len(mapping), ", ".join(f"{k}→{v}" for k, v in mapping.items()))
    return mapping
