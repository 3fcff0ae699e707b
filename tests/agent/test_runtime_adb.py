"""The adb driver against a fake ``adb`` executable that logs its argv."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from agent.runtime import DeviceManager, RunControl, parse_device_specs, perform_command
from agent.runtime.adb import (
    AdbDriver,
    escape_input_text,
    parse_adb_devices,
    parse_ui_dump,
)
from agent.runtime.errors import DeviceLost, DriverError
from tests.agent.fake_adb import SCREENSHOT, FakeAdb

pytestmark = pytest.mark.anyio

SERIAL = "emulator-5554"


@pytest.fixture
def adb(tmp_path: Path) -> FakeAdb:
    return FakeAdb(tmp_path)


@pytest.fixture
def phone(adb: FakeAdb) -> AdbDriver:
    return AdbDriver(SERIAL, adb_path=adb.path, timeout=10)


def test_parse_adb_devices_keeps_state_and_properties() -> None:
    from tests.agent.fake_adb import DEVICES_OUTPUT

    devices = parse_adb_devices(DEVICES_OUTPUT)
    assert [(d.serial, d.state) for d in devices] == [
        ("emulator-5554", "device"),
        ("R58M123ABC", "unauthorized"),
        ("0123456789ABCDEF", "device"),
    ]
    assert devices[0].properties["model"] == "Pixel_7"


async def test_discover_expands_adb_star_to_usable_devices(adb: FakeAdb) -> None:
    specs = parse_device_specs("sim:s1,adb:*,adb:emulator-5554,adb:SERIAL-GONE")
    manager = await DeviceManager.discover(specs, adb_path=adb.path)
    local = manager.local_devices()
    # adb:* skips the unauthorized phone and the serial listed explicitly; explicit serials are
    # held even when not attached, so their identity is stable.
    assert [(d.driver, d.local_id) for d in local] == [
        ("sim", "s1"),
        ("adb", "0123456789ABCDEF"),
        ("adb", "emulator-5554"),
        ("adb", "SERIAL-GONE"),
    ]
    attributes = {d.local_id: d.attributes for d in local}
    assert attributes["emulator-5554"] == {
        "serial": "emulator-5554",
        "model": "Pixel_7",
        "product": "sdk_gphone64",
        "device": "emu64x",
        "os_version": "14",
    }
    assert attributes["SERIAL-GONE"] == {"serial": "SERIAL-GONE"}
    calls = adb.calls()
    assert calls[0] == ["devices", "-l"]
    assert ["-s", "emulator-5554", "shell", "getprop", "ro.build.version.release"] in calls
    assert not any("R58M123ABC" in call for call in calls)


async def test_discover_without_adb_fails_loudly() -> None:
    with pytest.raises(DriverError, match="cannot run adb"):
        await DeviceManager.discover(parse_device_specs("adb:*"), adb_path="/nonexistent/adb")


async def test_input_commands_reach_adb_as_argv(adb: FakeAdb, phone: AdbDriver) -> None:
    await phone.tap(540, 960)
    await phone.type_text("hello world")
    await phone.swipe(540, 1500, 540, 500, 250)
    await phone.key("home")
    await phone.key("Back")
    await phone.key("enter")
    await phone.type_text("")  # nothing to type: no call
    shell = ["-s", SERIAL, "shell"]
    assert adb.calls() == [
        [*shell, "input", "tap", "540", "960"],
        [*shell, "input", "text", "hello%sworld"],
        [*shell, "input", "swipe", "540", "1500", "540", "500", "250"],
        [*shell, "input", "keyevent", "KEYCODE_HOME"],
        [*shell, "input", "keyevent", "KEYCODE_BACK"],
        [*shell, "input", "keyevent", "KEYCODE_ENTER"],
    ]


async def test_typed_text_is_one_literal_word_for_the_device_shell(adb: FakeAdb, phone: AdbDriver) -> None:
    text = "it's $HOME & `rm` ; done"
    await phone.type_text(text)
    argv = adb.calls()[-1]
    assert argv[:5] == ["-s", SERIAL, "shell", "input", "text"]
    # adb shell joins its arguments into one command line for the device's sh.
    device_words = device_shell_words(" ".join(argv[3:]))
    assert device_words == ["input", "text", text.replace(" ", "%s")]
    assert escape_input_text("plain") == "plain"


async def test_an_inner_class_activity_reaches_the_device_shell_unexpanded(adb: FakeAdb, phone: AdbDriver) -> None:
    await phone.launch_app("com.example.app/.Outer$Inner")
    argv = adb.calls()[-1]
    assert argv[:3] == ["-s", SERIAL, "shell"]
    assert device_shell_words(" ".join(argv[3:])) == ["am", "start", "-n", "com.example.app/.Outer$Inner"]


def device_shell_words(line: str) -> list[str]:
    """The words a POSIX sh makes of the command line ``adb shell`` sends the device (expanding
    what it expands: ``$Inner`` is empty to it), run by this machine's sh."""
    done = subprocess.run(["sh", "-c", f"set -- {line}; printf '%s\\0' \"$@\""], capture_output=True, check=True,
                          env={"PATH": "/usr/bin:/bin"})
    return done.stdout.decode().split("\0")[:-1]


async def test_unknown_key_is_refused_before_running_adb(adb: FakeAdb, phone: AdbDriver) -> None:
    with pytest.raises(DriverError, match="unknown key"):
        await phone.key("home; reboot")
    await phone.key("KEYCODE_CAMERA")
    assert adb.calls() == [["-s", SERIAL, "shell", "input", "keyevent", "KEYCODE_CAMERA"]]


async def test_launch_by_alias_package_or_component(adb: FakeAdb, phone: AdbDriver) -> None:
    await phone.launch_app("settings")
    await phone.launch_app("com.example.app/.MainActivity")
    adb.set(missing_packages=["com.example.missing"])
    with pytest.raises(DriverError, match="could not launch"):
        await phone.launch_app("com.example.missing")
    with pytest.raises(DriverError, match="not an app name"):
        await phone.launch_app("x; reboot")
    shell = ["-s", SERIAL, "shell"]
    assert adb.calls() == [
        [*shell, "monkey", "-p", "com.android.settings", "-c", "android.intent.category.LAUNCHER", "1"],
        [*shell, "am", "start", "-n", "com.example.app/.MainActivity"],
        [*shell, "monkey", "-p", "com.example.missing", "-c", "android.intent.category.LAUNCHER", "1"],
    ]


async def test_observe_parses_the_uiautomator_dump(adb: FakeAdb, phone: AdbDriver) -> None:
    screen = await phone.observe()
    assert adb.calls() == [
        ["-s", SERIAL, "shell", "uiautomator", "dump", "/sdcard/window_dump.xml"],
        ["-s", SERIAL, "shell", "cat", "/sdcard/window_dump.xml"],
    ]
    assert screen.screenshot is None
    assert screen.text == "Network & internet\nWi-Fi\nSearch settings"
    frame = screen.tree["children"][0]
    assert frame["class_name"] == "android.widget.FrameLayout" and frame["bounds"] == (0, 0, 1080, 2400)
    wifi = screen.find("Wi-Fi")
    assert wifi is not None
    assert wifi["resource_id"] == "com.android.settings:id/wifi_row"
    assert wifi["clickable"] and wifi["checked"] is True and wifi["bounds"] == (0, 300, 1080, 500)
    assert wifi["children"][0]["class_name"] == "android.widget.Switch"
    title = screen.find("Network & internet")
    assert title is not None and title["checked"] is None  # not checkable
    search = screen.find("Search settings")  # content-desc stands in for text
    assert search is not None and search["clickable"]


async def test_tap_element_taps_the_centre_of_the_node(adb: FakeAdb, phone: AdbDriver) -> None:
    await phone.tap_element("wifi_row")
    assert adb.calls()[-1] == ["-s", SERIAL, "shell", "input", "tap", "540", "400"]


async def test_screenshot_bytes_come_from_exec_out(adb: FakeAdb, phone: AdbDriver) -> None:
    screen = await phone.observe(screenshot=True)
    assert screen.screenshot == SCREENSHOT
    assert adb.calls()[-1] == ["-s", SERIAL, "exec-out", "screencap", "-p"]


async def test_screenshot_alone_is_one_screencap_and_must_be_a_png(adb: FakeAdb, phone: AdbDriver) -> None:
    before = len(adb.calls())
    assert await phone.screenshot() == SCREENSHOT
    assert adb.calls()[before:] == [["-s", SERIAL, "exec-out", "screencap", "-p"]]  # no UI dump
    adb.set(screenshot_hex=b"Error: could not take screenshot".hex())
    with pytest.raises(DriverError, match="no PNG"):
        await phone.screenshot()


async def test_dump_errors_are_driver_errors(adb: FakeAdb, phone: AdbDriver) -> None:
    adb.set(dump_status="ERROR: null root node returned by UiTestAutomationBridge.")
    with pytest.raises(DriverError, match="uiautomator dump failed"):
        await phone.observe()
    with pytest.raises(DriverError, match="no <hierarchy>"):
        parse_ui_dump("garbage")
    with pytest.raises(DriverError, match="not valid XML"):
        parse_ui_dump("<hierarchy><node></hierarchy>")


async def test_failing_and_hanging_adb_are_driver_errors(adb: FakeAdb) -> None:
    adb.set(missing_serials=["GONE"])
    gone = AdbDriver("GONE", adb_path=adb.path)
    with pytest.raises(DriverError, match=r"input tap failed \(exit 1\): adb: device 'GONE' not found"):
        await gone.tap(1, 2)

    adb.set(hang=True)
    slow = AdbDriver(SERIAL, adb_path=adb.path, timeout=0.3)
    with pytest.raises(DriverError, match="input text timed out") as info:
        await slow.type_text("secret-password")
    # The error names the call, never the typed text (it may be a password). The hung process
    # was killed: otherwise reaping it would have held this test for the fake's 30 s sleep.
    assert "secret" not in str(info.value)


@pytest.mark.parametrize(
    "stderr",
    [
        "adb: device 'emulator-5554' not found",
        "error: device offline",
        "adb: no devices/emulators found",
        "error: closed",
        "error: protocol fault (couldn't read status): Connection reset by peer",
    ],
)
async def test_adb_losing_the_device_is_device_lost(adb: FakeAdb, phone: AdbDriver, stderr: str) -> None:
    adb.set(fail_stderr=stderr)
    with pytest.raises(DeviceLost, match=r"input tap failed \(exit 1\)"):
        await phone.tap(1, 2)


async def test_other_adb_failures_are_not_device_lost(adb: FakeAdb, phone: AdbDriver) -> None:
    adb.set(fail_stderr="/system/bin/sh: input: inaccessible or not found")  # "not found", not the device
    with pytest.raises(DriverError) as info:
        await phone.tap(1, 2)
    assert not isinstance(info.value, DeviceLost)
    adb.set(fail_stderr=None, dump_status="ERROR: null root node returned by UiTestAutomationBridge.")
    with pytest.raises(DriverError) as info:
        await phone.observe()
    assert not isinstance(info.value, DeviceLost)
    adb.set(dump_status="", hang=True)
    slow = AdbDriver(SERIAL, adb_path=adb.path, timeout=0.3)
    with pytest.raises(DriverError) as info:
        await slow.key("home")
    assert not isinstance(info.value, DeviceLost)


def listing(*lines: str) -> str:
    return "List of devices attached\n" + "".join(f"{line}\n" for line in lines) + "\n"


PIXEL = "emulator-5554 device product:sdk_gphone64 model:Pixel_7 device:emu64x transport_id:1"
GALAXY = "0123456789ABCDEF device usb:1-2 product:beyond1 model:SM_G973F device:beyond1 transport_id:3"


async def test_refresh_follows_the_cable_of_an_explicit_device(adb: FakeAdb) -> None:
    adb.set(devices=listing())  # configured, but unplugged at start-up
    manager = await DeviceManager.discover(parse_device_specs("adb:emulator-5554"), adb_path=adb.path)
    manager.bind({d.local_id: d.local_id for d in manager.local_devices()})  # each its own cloud id
    [device] = manager.bound_devices()
    assert (device.device_id, device.online, device.attributes) == ("emulator-5554", False, {"serial": SERIAL})

    adb.set(devices=listing(PIXEL))
    await manager.refresh()
    [device] = manager.bound_devices()
    assert device.online
    # Facts only a ready device can give are read on its first plug-in.
    assert device.attributes["model"] == "Pixel_7" and device.attributes["os_version"] == "14"

    for state_line in (f"{SERIAL} offline transport_id:1", f"{SERIAL} unauthorized usb:1-1"):
        adb.set(devices=listing(state_line))
        await manager.refresh()
        assert [d.online for d in manager.bound_devices()] == [False]
    adb.set(devices=listing())
    await manager.refresh()
    assert [(d.device_id, d.online) for d in manager.bound_devices()] == [(SERIAL, False)]  # still held


async def test_refresh_adopts_and_drops_adb_star_devices_with_one_listing(adb: FakeAdb) -> None:
    adb.set(devices=listing(PIXEL))
    manager = await DeviceManager.discover(parse_device_specs("sim:s1,adb:*"), adb_path=adb.path)
    manager.bind({d.local_id: d.local_id for d in manager.local_devices()})  # each its own cloud id
    calls_before = len(adb.calls())

    adb.set(devices=listing(PIXEL, GALAXY, "R58M123ABC unauthorized usb:1-1"))
    await manager.refresh()
    # The new ready phone is found but has no cloud id yet: not served until bound.
    assert [d.local_id for d in manager.unbound_devices()] == ["0123456789ABCDEF"]
    assert [d.device_id for d in manager.bound_devices()] == ["s1", SERIAL]
    manager.bind_new({"0123456789ABCDEF": "dev-galaxy"})
    assert manager.driver_for("dev-galaxy").local_id == "0123456789ABCDEF"
    # One listing, plus one getprop for the newly adopted phone: never a call per known device.
    assert adb.calls()[calls_before:] == [
        ["devices", "-l"],
        ["-s", "0123456789ABCDEF", "shell", "getprop", "ro.build.version.release"],
    ]

    gone = manager.driver_for(SERIAL)
    adb.set(devices=listing(GALAXY))
    await manager.refresh()
    assert [(d.device_id, d.online) for d in manager.bound_devices()] == [("s1", True), ("dev-galaxy", True)]
    assert not gone.online  # a run still holding the driver sees the phone gone
    with pytest.raises(KeyError):
        manager.driver_for(SERIAL)


async def test_refresh_when_adb_fails_marks_adb_devices_offline_and_drops_nothing(adb: FakeAdb) -> None:
    adb.set(devices=listing(PIXEL))
    manager = await DeviceManager.discover(parse_device_specs("adb:*"), adb_path=adb.path)
    manager.bind({d.local_id: d.local_id for d in manager.local_devices()})  # each its own cloud id
    Path(adb.path).unlink()  # noqa: ASYNC240 - a local file, gone at once: adb itself is gone
    await manager.refresh()
    assert [(d.device_id, d.online) for d in manager.bound_devices()] == [(SERIAL, False)]


async def test_a_session_command_is_input_then_uiautomator_dump_then_screencap(adb: FakeAdb, phone: AdbDriver) -> None:
    before = len(adb.calls())
    answer = await perform_command(phone, {"action": "swipe", "x1": 540, "y1": 1800, "x2": 540, "y2": 600},
                                   RunControl())
    assert answer.status == "done" and answer.screen == SCREENSHOT
    assert (answer.width, answer.height) == (1080, 2400)
    assert {"text": "Search settings", "id": "com.android.settings:id/search", "bounds": [960, 20, 1060, 90],
            "clickable": True} in answer.elements
    assert [call[2:4] for call in adb.calls()[before:]] == [
        ["shell", "input"], ["shell", "uiautomator"], ["shell", "cat"], ["exec-out", "screencap"]]
    adb.set(fail_stderr="error: device offline")
    with pytest.raises(DeviceLost):
        await perform_command(phone, {"action": "observe"}, RunControl())
