"""Which devices this host has (``HOST_AGENT_DEVICES``), and which cloud id each one runs as.

The set is not fixed at start-up: ``DeviceManager.refresh`` re-reads ``adb devices -l`` (one call
for every adb device), so an adb device's ``online`` follows the cable, ``adb:*`` adopts a phone
plugged in later and drops one that left the listing. An explicit ``adb:SERIAL`` is never
dropped: it stays held (offline) while unplugged, so its identity is stable.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Mapping

from wire import is_valid_id

from .adb import ADB_READY, AdbDevice, AdbDriver, list_adb_devices, read_os_version
from .base import DeviceRecord, DeviceSpec
from .driver import Driver
from .errors import DriverError
from .sim import SimDriver

logger = logging.getLogger(__name__)

KNOWN_DRIVERS = ("adb", "sim")


class DeviceNotFound(KeyError):
    """No local device is bound to this cloud device id. A ``KeyError``: it is a failed lookup."""

    def __init__(self, device_id: str) -> None:
        super().__init__(f"no local device is bound to {device_id!r}")
        self.device_id = device_id


def _valid_local_id(local_id: str) -> bool:
    """The wire's id grammar (adb serials include ':' for network devices, "192.168.1.5:5555"),
    and a letter or digit first: a leading '-' would read as an option on adb's command line."""
    return is_valid_id(local_id) and local_id[0].isalnum()


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
        elif not _valid_local_id(local_id):
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
    """Holds this host's drivers by local id, and after ``bind`` serves them by cloud id.

    ``adb_wildcard`` (``adb:*`` was configured) makes ``refresh`` adopt newly attached devices;
    ``adopted`` names the serials that came from ``adb:*`` and may therefore be dropped when they
    leave the listing. Any other adb driver is held for good.
    """

    def __init__(
        self,
        drivers: Iterable[Driver],
        *,
        adb_path: str = "adb",
        adb_timeout: float = 10.0,
        adb_wildcard: bool = False,
        adopted: Iterable[str] = (),
    ) -> None:
        self._drivers: dict[str, Driver] = {}
        for driver in drivers:
            if driver.local_id in self._drivers:
                raise ValueError(f"two devices share the local id {driver.local_id!r}")
            self._drivers[driver.local_id] = driver
        self._by_cloud: dict[str, str] | None = None  # cloud id -> local id, None until bound
        self._adb_path = adb_path
        self._adb_timeout = adb_timeout
        self._adb_wildcard = adb_wildcard
        self._adopted = set(adopted)
        self._adb_listed = True  # the last ``adb devices`` answered; only failures after success are logged
        # One refresh at a time: two interleaved ones could adopt the same new serial twice.
        self._refresh_lock = asyncio.Lock()

    @classmethod
    async def discover(
        cls, specs: Iterable[DeviceSpec], adb_path: str = "adb", *, adb_timeout: float = 10.0
    ) -> DeviceManager:
        """Build the drivers for ``specs``, in order.

        ``adb:*`` becomes every attached device in state ``device`` (sorted by serial, skipping
        serials listed explicitly). ``adb:SERIAL`` is always held, attached or not, so its identity
        is stable; while it is not attached it is offline (reported ``unavailable``). Raises
        ``DriverError`` when adb specs are given but ``adb`` cannot be run.
        """
        specs = list(specs)
        attached: dict[str, AdbDevice] = {}
        if any(spec.driver == "adb" for spec in specs):
            attached = {device.serial: device for device in await list_adb_devices(adb_path, adb_timeout)}
        explicit = {spec.local_id for spec in specs if spec.driver == "adb" and spec.local_id != "*"}
        drivers: list[Driver] = []
        adopted: list[str] = []
        for spec in specs:
            if spec.driver == "sim":
                drivers.append(SimDriver(spec.local_id))
                continue
            if spec.local_id == "*":
                serials = sorted(s for s, d in attached.items() if d.state == ADB_READY and s not in explicit)
                adopted.extend(serials)
            else:
                serials = [spec.local_id]
                state = attached[spec.local_id].state if spec.local_id in attached else "missing"
                if state != ADB_READY:
                    logger.warning("adb device %s is configured but its state is %s", spec.local_id, state)
            drivers.extend([await _adb_driver(adb_path, serial, attached.get(serial), adb_timeout)
                            for serial in serials])
        wildcard = any(spec.driver == "adb" and spec.local_id == "*" for spec in specs)
        return cls(drivers, adb_path=adb_path, adb_timeout=adb_timeout, adb_wildcard=wildcard, adopted=adopted)

    async def refresh(self) -> None:
        """Bring adb devices up to date from one ``adb devices -l``: each held device's state
        (so ``online`` is current), ``adb:*`` devices adopted when newly attached and ready,
        dropped when no longer listed. Hosts without adb devices do nothing.

        Never raises ``DriverError``: when adb cannot list, every adb device is offline until
        it can (nothing is dropped on a failed listing)."""
        if not self._adb_wildcard and not any(isinstance(d, AdbDriver) for d in self._drivers.values()):
            return
        async with self._refresh_lock:
            adb_drivers = [d for d in self._drivers.values() if isinstance(d, AdbDriver)]
            try:
                listed = {d.serial: d for d in await list_adb_devices(self._adb_path, self._adb_timeout)}
            except DriverError as exc:
                if self._adb_listed:
                    logger.warning("adb devices failed (%s); adb devices are unavailable until it answers", exc)
                self._adb_listed = False
                for driver in adb_drivers:
                    driver.state = "unknown"
                return
            if not self._adb_listed:
                logger.info("adb devices answers again")
            self._adb_listed = True
            for driver in adb_drivers:
                device = listed.get(driver.serial)
                if device is None and driver.serial in self._adopted:
                    self._drop(driver)
                    continue
                state = device.state if device is not None else "missing"
                if state == driver.state:
                    continue
                logger.info("adb device %s is now %s (was %s)", driver.serial, state, driver.state)
                driver.state = state
                if state == ADB_READY:
                    # Attributes (model, OS version) are only readable from a ready device: an
                    # explicit serial configured while unplugged gets them on its first plug-in.
                    attributes = await _adb_attributes(self._adb_path, driver.serial, device, self._adb_timeout)
                    driver.set_attributes(attributes)
            if self._adb_wildcard:
                for serial, device in sorted(listed.items()):
                    if device.state == ADB_READY and serial not in self._drivers:
                        logger.info("adb device %s attached; adopting it", serial)
                        self._drivers[serial] = await _adb_driver(self._adb_path, serial, device, self._adb_timeout)
                        self._adopted.add(serial)

    def _drop(self, driver: AdbDriver) -> None:
        logger.info("adb device %s is no longer attached; dropping it", driver.serial)
        # A run that still holds this driver object sees it offline, whatever it was before.
        driver.state = "missing"
        del self._drivers[driver.local_id]
        self._adopted.discard(driver.local_id)
        if self._by_cloud is not None:
            self._by_cloud = {cloud: local for cloud, local in self._by_cloud.items() if local != driver.local_id}

    def local_devices(self) -> list[DeviceRecord]:
        """Every device this host holds, bound or not (``device_id`` is ``None`` until bound)."""
        by_local = {local_id: device_id for device_id, local_id in (self._by_cloud or {}).items()}
        return [_record(driver, by_local.get(driver.local_id)) for driver in self._drivers.values()]

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

    def unbound_devices(self) -> list[DeviceRecord]:
        """Local devices found since the last ``bind``/``bind_new``: they need a cloud id."""
        bound = set(self._bound().values())
        return [_record(d, None) for d in self._drivers.values() if d.local_id not in bound]

    def bind_new(self, id_map: Mapping[str, str]) -> None:
        """Add cloud ids for devices found after start-up. An entry for a device gone meanwhile,
        or whose cloud id is already bound to another local device, is skipped (and logged)."""
        by_cloud = dict(self._bound())
        for local_id, device_id in id_map.items():
            if local_id not in self._drivers or local_id in by_cloud.values():
                continue
            if not device_id or device_id in by_cloud:
                logger.error("cloud device id %r for %s is empty or taken; not using the device", device_id, local_id)
                continue
            by_cloud[device_id] = local_id
        self._by_cloud = by_cloud

    def rebind(self, id_map: Mapping[str, str]) -> dict[str, str]:
        """Give bound devices the cloud ids an enrollment now answers (a device the coordinator
        forgot gets a new one when enrolled again); return ``{local id: new cloud id}`` for the
        devices whose id changed. Entries for devices not bound (gone, or never enrolled) are
        skipped; an empty id, or one bound to another local device, is refused and logged."""
        by_cloud = self._bound()
        current = {local_id: device_id for device_id, local_id in by_cloud.items()}
        taken = set(by_cloud)
        changed: dict[str, str] = {}
        for local_id, device_id in id_map.items():
            old = current.get(local_id)
            if old is None or device_id == old:
                continue
            if not device_id or device_id in taken:
                logger.error("cloud device id %r for %s is empty or taken; keeping %r", device_id, local_id, old)
                continue
            taken.discard(old)
            taken.add(device_id)
            changed[local_id] = device_id
        # Rebuilt in the same order, so the heartbeat keeps listing the devices as before.
        self._by_cloud = {changed.get(local_id, device_id): local_id for device_id, local_id in by_cloud.items()}
        return changed

    def bound_devices(self) -> list[DeviceRecord]:
        """The device snapshot a heartbeat reports, in binding order."""
        return [_record(self._drivers[local_id], device_id) for device_id, local_id in self._bound().items()]

    def driver_for(self, device_id: str) -> Driver:
        """The driver for a cloud device id; ``DeviceNotFound`` (a ``KeyError``) if this host
        does not have it."""
        local_id = self._bound().get(device_id)
        if local_id is None:
            raise DeviceNotFound(device_id)
        return self._drivers[local_id]

    def _bound(self) -> dict[str, str]:
        if self._by_cloud is None:
            # Serving local ids as cloud ids by accident would misroute work on a managed host.
            raise RuntimeError("DeviceManager is not bound: call bind() first")
        return self._by_cloud


def _record(driver: Driver, device_id: str | None) -> DeviceRecord:
    # attributes() is a fresh dict: a record compared later is not changed under it.
    return DeviceRecord(
        driver=driver.driver,
        local_id=driver.local_id,
        attributes=driver.attributes(),
        device_id=device_id,
        online=driver.online,
    )


async def _adb_driver(adb_path: str, serial: str, listed: AdbDevice | None, timeout: float) -> AdbDriver:
    attributes = await _adb_attributes(adb_path, serial, listed, timeout)
    state = listed.state if listed is not None else "missing"
    return AdbDriver(serial, adb_path=adb_path, attributes=attributes, state=state)


async def _adb_attributes(adb_path: str, serial: str, listed: AdbDevice | None, timeout: float) -> dict[str, str]:
    attributes = {"serial": serial}
    if listed is None:
        return attributes
    for key in ("model", "product", "device"):
        if key in listed.properties:
            attributes[key] = listed.properties[key]
    if listed.state == ADB_READY:
        os_version = await read_os_version(adb_path, serial, timeout)
        if os_version:
            attributes["os_version"] = os_version
    return attributes
