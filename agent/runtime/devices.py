"""Which devices this host has (``HOST_AGENT_DEVICES``), and which cloud id each one runs as."""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Mapping
from typing import NamedTuple

from .adb import AdbDriver, list_adb_devices, read_os_version
from .base import DeviceSpec
from .driver import Driver
from .sim import SimDriver

logger = logging.getLogger(__name__)

KNOWN_DRIVERS = ("adb", "sim")
# adb serials include ':' for network devices ("192.168.1.5:5555").
_LOCAL_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,127}")


class LocalDevice(NamedTuple):
    driver: str
    local_id: str
    attributes: dict[str, str]


class BoundDevice(NamedTuple):
    device_id: str  # the cloud id: what heartbeats report and assignments name
    driver: str
    local_id: str
    attributes: dict[str, str]


def parse_device_specs(value: str) -> list[DeviceSpec]:
    """Parse ``"sim:phone-1,sim:phone-2,adb:*"``. Empty entries are ignored; an empty string is
    a host with no devices."""
    specs: list[DeviceSpec] = []
    seen: set[str] = set()
    for raw in value.split(","):
        entry = raw.strip()
        if not entry:
            continue
        driver, sep, local_id = entry.partition(":")
        driver, local_id = driver.strip(), local_id.strip()
        if not sep or not driver or not local_id:
            raise ValueError(f"malformed device entry {entry!r}: expected driver:local_id, e.g. sim:phone-1 or adb:*")
        if driver not in KNOWN_DRIVERS:
            known = ", ".join(KNOWN_DRIVERS)
            raise ValueError(f"unknown device driver {driver!r} in {entry!r}; known drivers: {known}")
        if local_id == "*":
            if driver != "adb":
                raise ValueError(f"{entry!r}: '*' (every attached device) only works with the adb driver")
        elif not _LOCAL_ID.fullmatch(local_id):
            raise ValueError(
                f"malformed device id in {entry!r}: use letters, digits, '.', '_', ':' or '-' (at most 128)"
            )
        key = "adb:*" if local_id == "*" else local_id
        if key in seen:
            raise ValueError(f"device {local_id!r} is listed twice in the device list")
        seen.add(key)
        specs.append(DeviceSpec(driver=driver, local_id=local_id))
    return specs


class DeviceManager:
    """Holds this host's drivers by local id, and after ``bind`` serves them by cloud id."""

    def __init__(self, drivers: Iterable[Driver]) -> None:
        self._drivers: dict[str, Driver] = {}
        for driver in drivers:
            if driver.local_id in self._drivers:
                raise ValueError(f"two devices share the local id {driver.local_id!r}")
            self._drivers[driver.local_id] = driver
        self._by_cloud: dict[str, str] | None = None  # cloud id -> local id, None until bound

    @classmethod
    async def discover(
        cls, specs: Iterable[DeviceSpec], adb_path: str = "adb", *, adb_timeout: float = 10.0
    ) -> DeviceManager:
        """Build the drivers for ``specs``, in order.

        ``adb:*`` becomes every attached device in state ``device`` (sorted by serial, skipping
        serials listed explicitly). ``adb:SERIAL`` is always held, attached or not, so its identity
        is stable; running on it while it is unplugged fails with ``driver_error``. Raises
        ``DriverError`` when adb specs are given but ``adb`` cannot be run.
        """
        specs = list(specs)
        attached: dict[str, dict[str, str]] = {}
        if any(spec.driver == "adb" for spec in specs):
            for device in await list_adb_devices(adb_path, adb_timeout):
                properties = {"state": device.state, **device.properties}
                attached[device.serial] = properties
        explicit = {spec.local_id for spec in specs if spec.driver == "adb" and spec.local_id != "*"}
        drivers: list[Driver] = []
        for spec in specs:
            if spec.driver == "sim":
                drivers.append(SimDriver(spec.local_id))
                continue
            if spec.local_id == "*":
                serials = sorted(s for s, p in attached.items() if p["state"] == "device" and s not in explicit)
            else:
                serials = [spec.local_id]
                state = attached.get(spec.local_id, {}).get("state", "missing")
                if state != "device":
                    logger.warning("adb device %s is configured but its state is %s", spec.local_id, state)
            for serial in serials:
                attributes = await _adb_attributes(adb_path, serial, attached.get(serial), adb_timeout)
                drivers.append(AdbDriver(serial, adb_path=adb_path, attributes=attributes))
        return cls(drivers)

    def local_devices(self) -> list[LocalDevice]:
        return [LocalDevice(d.driver, d.local_id, d.attributes()) for d in self._drivers.values()]

    def local_driver(self, local_id: str) -> Driver:
        return self._drivers[local_id]

    def bind(self, id_map: Mapping[str, str]) -> None:
        """Map local id -> cloud device id (managed hosts, from enrollment).

        Local devices missing from the map stay unbound: they are not served or reported.
        Map entries for devices this host no longer has (a phone unplugged since it was
        enrolled) are ignored. Two local devices may not share a cloud id.
        """
        by_cloud: dict[str, str] = {}
        for local_id, device_id in id_map.items():
            if local_id not in self._drivers:
                logger.warning("device %s is enrolled but not attached; ignoring it", local_id)
                continue
            if not device_id:
                raise ValueError(f"empty cloud device id for {local_id!r}")
            if device_id in by_cloud:
                raise ValueError(f"cloud device id {device_id!r} is bound to two local devices")
            by_cloud[device_id] = local_id
        self._by_cloud = by_cloud

    def bind_identity(self) -> None:
        """Legacy hosts: the cloud id of every device is its local id."""
        self.bind({local_id: local_id for local_id in self._drivers})

    def device_ids(self) -> list[str]:
        return list(self._bound())

    def bound_devices(self) -> list[BoundDevice]:
        """The device snapshot a heartbeat reports."""
        return [
            BoundDevice(device_id, driver.driver, driver.local_id, driver.attributes())
            for device_id, local_id in self._bound().items()
            for driver in (self._drivers[local_id],)
        ]

    def driver_for(self, device_id: str) -> Driver:
        """The driver for a cloud device id; ``KeyError`` if this host does not have it."""
        local_id = self._bound().get(device_id)
        if local_id is None:
            raise KeyError(f"no local device is bound to {device_id!r}")
        return self._drivers[local_id]

    def _bound(self) -> dict[str, str]:
        if self._by_cloud is None:
            # Serving local ids as cloud ids by accident would misroute work on a managed host.
            raise RuntimeError("DeviceManager is not bound: call bind() or bind_identity() first")
        return self._by_cloud


async def _adb_attributes(
    adb_path: str, serial: str, properties: dict[str, str] | None, timeout: float
) -> dict[str, str]:
    attributes = {"serial": serial}
    if properties is None:
        return attributes
    for key in ("model", "product", "device"):
        if key in properties:
            attributes[key] = properties[key]
    if properties.get("state") == "device":
        os_version = await read_os_version(adb_path, serial, timeout)
        if os_version:
            attributes["os_version"] = os_version
    return attributes
