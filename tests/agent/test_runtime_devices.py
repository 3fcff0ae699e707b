"""Device specs and the DeviceManager's local-id / cloud-id binding."""

from __future__ import annotations

import pytest

from agent.runtime import DeviceManager, DeviceSpec, parse_device_specs
from agent.runtime.sim import SimDriver

pytestmark = pytest.mark.anyio


def test_parse_device_specs() -> None:
    assert parse_device_specs(" sim:phone-1, sim:phone-2 ,adb:*,adb:192.168.1.5:5555,") == [
        DeviceSpec("sim", "phone-1"),
        DeviceSpec("sim", "phone-2"),
        DeviceSpec("adb", "*"),
        DeviceSpec("adb", "192.168.1.5:5555"),
    ]
    assert parse_device_specs("") == []


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("phone-1", "malformed device entry 'phone-1'"),
        ("sim:", "malformed device entry"),
        (":phone-1", "malformed device entry"),
        ("usb:phone-1", "unknown device driver 'usb'.*known drivers: adb, sim"),
        ("sim:*", "only works with the adb driver"),
        ("sim:phone 1", "malformed device id"),
        ("sim:-x", "malformed device id"),
        ("sim:a,sim:a", "listed twice"),
        ("sim:a,adb:a", "listed twice"),
        ("adb:*,adb:*", "listed twice"),
    ],
)
def test_parse_device_specs_rejects(value: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_device_specs(value)


async def test_discover_sim_devices_without_running_adb() -> None:
    # A non-existent adb proves that sim-only hosts never need adb.
    manager = await DeviceManager.discover(parse_device_specs("sim:phone-1,sim:phone-2"), "/nonexistent/adb")
    local = manager.local_devices()
    assert [(d.driver, d.local_id) for d in local] == [("sim", "phone-1"), ("sim", "phone-2")]
    first = local[0]
    assert (first.driver, first.local_id) == ("sim", "phone-1") and first.attributes["model"] == "Tether Sim"
    assert first.device_id is None  # not bound yet


async def test_bind_serves_drivers_by_cloud_id() -> None:
    manager = await DeviceManager.discover(parse_device_specs("sim:a,sim:b,sim:c"))
    with pytest.raises(RuntimeError, match="not bound"):
        manager.bound_devices()

    manager.bind({"a": "dev_1", "b": "dev_2", "gone": "dev_9"})  # "gone" is no longer attached
    assert [d.device_id for d in manager.bound_devices()] == ["dev_1", "dev_2"]
    assert manager.driver_for("dev_2").local_id == "b"
    with pytest.raises(KeyError):
        manager.driver_for("b")  # local ids are not cloud ids on a managed host
    with pytest.raises(KeyError):
        manager.driver_for("dev_9")
    assert [(d.device_id, d.local_id, d.driver) for d in manager.bound_devices()] == [
        ("dev_1", "a", "sim"),
        ("dev_2", "b", "sim"),
    ]

    manager.bind({d.local_id: d.local_id for d in manager.local_devices()})  # each its own cloud id
    assert [d.device_id for d in manager.bound_devices()] == ["a", "b", "c"]
    assert manager.driver_for("c").local_id == "c"


def test_bind_rejects_one_cloud_id_for_two_devices() -> None:
    manager = DeviceManager([SimDriver("a"), SimDriver("b")])
    with pytest.raises(ValueError, match="bound to two local devices"):
        manager.bind({"a": "dev_1", "b": "dev_1"})
    with pytest.raises(ValueError, match="share the local id"):
        DeviceManager([SimDriver("a"), SimDriver("a")])
