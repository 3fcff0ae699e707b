"""The ``adb`` driver: a real Android device driven through the ``adb`` executable.

Every call is one ``adb -s SERIAL ...`` subprocess with a timeout, so a wedged device costs one
timeout and a ``DriverError``, never a hung agent. When adb itself says it lost the device (not
found, offline, no devices, its connection to the device closed) the error is ``DeviceLost``:
the device went away, the command was not wrong. The screen comes from ``uiautomator dump``
parsed into the same ``UINode`` shape the sim driver renders.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import shlex
import xml.etree.ElementTree as ElementTree
from dataclasses import dataclass, field

from .driver import Bounds, Driver, Observation, UINode, make_node
from .errors import DeviceLost, DriverError

logger = logging.getLogger(__name__)

DUMP_PATH = "/sdcard/window_dump.xml"
KEYCODES = {
    "home": "KEYCODE_HOME",
    "back": "KEYCODE_BACK",
    "enter": "KEYCODE_ENTER",
    "menu": "KEYCODE_MENU",
    "tab": "KEYCODE_TAB",
    "delete": "KEYCODE_DEL",
    "backspace": "KEYCODE_DEL",
    "escape": "KEYCODE_ESCAPE",
    "search": "KEYCODE_SEARCH",
    "recents": "KEYCODE_APP_SWITCH",
    "power": "KEYCODE_POWER",
    "volume_up": "KEYCODE_VOLUME_UP",
    "volume_down": "KEYCODE_VOLUME_DOWN",
}
# Friendly names planners and workflows use; anything else is taken as a package name.
APP_ALIASES = {
    "settings": "com.android.settings",
    "chrome": "com.android.chrome",
    "contacts": "com.android.contacts",
    "camera": "com.android.camera2",
}
ADB_READY = "device"
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"  # the one ``adb devices`` state in which a device takes commands
_BOUNDS = re.compile(r"\[(-?\d+),(-?\d+)\]\[(-?\d+),(-?\d+)\]")
# What adb prints when it has lost the device: "adb: device 'SERIAL' not found", "error: device
# offline", "error: no devices/emulators found", and its connection to the device failing
# ("error: closed", "error: protocol fault (couldn't read status): Connection reset by peer").
_DEVICE_LOST = re.compile(
    r"device (?:'[^']*' )?not found|device offline|no devices/emulators found"
    r"|error: closed|protocol fault|connection reset",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class AdbDevice:
    """One line of ``adb devices -l``."""

    serial: str
    state: str  # "device" is usable; "unauthorized", "offline", ... are not
    properties: dict[str, str] = field(default_factory=dict)  # model, product, device, transport_id


def parse_adb_devices(output: str) -> list[AdbDevice]:
    devices = []
    for line in output.splitlines():
        line = line.strip()
        # Skip the header and adb's own chatter ("* daemon not running; starting now ...").
        if not line or line.startswith(("List of devices", "*")):
            continue
        serial, *rest = line.split()
        if not rest:
            continue
        properties = dict(item.split(":", 1) for item in rest[1:] if ":" in item)
        devices.append(AdbDevice(serial=serial, state=rest[0], properties=properties))
    return devices


async def list_adb_devices(adb_path: str = "adb", timeout: float = 10.0) -> list[AdbDevice]:
    output = await run_adb(adb_path, ["devices", "-l"], timeout=timeout, what="devices")
    return parse_adb_devices(output.decode("utf-8", "replace"))


def escape_input_text(text: str) -> str:
    """The argument for ``input text``: spaces become ``%s`` (its own convention); ``_shell``
    quotes it for the device shell as it does every argument. (A literal ``%s`` cannot be typed
    this way; that is ``input``'s limit.)"""
    return text.replace(" ", "%s")


def parse_ui_dump(xml: str | bytes) -> UINode:
    """A ``uiautomator dump`` hierarchy as a ``UINode`` tree rooted at a synthetic node."""
    data = xml.decode("utf-8", "replace") if isinstance(xml, bytes) else xml
    # Some devices print a status line around the XML; keep only the document.
    start, end = data.find("<hierarchy"), data.rfind("</hierarchy>")
    if start < 0 or end < 0:
        raise DriverError("UI dump holds no <hierarchy>")
    try:
        root = ElementTree.fromstring(data[start : end + len("</hierarchy>")])
    except ElementTree.ParseError as exc:
        raise DriverError(f"UI dump is not valid XML: {exc}") from exc
    children = [_convert(element) for element in root if element.tag == "node"]
    bounds = _union([child["bounds"] for child in children])
    return make_node(bounds=bounds, class_name="hierarchy", children=children)


def _convert(element: ElementTree.Element) -> UINode:
    attrs = element.attrib
    match = _BOUNDS.fullmatch(attrs.get("bounds", ""))
    bounds: Bounds = (int(match[1]), int(match[2]), int(match[3]), int(match[4])) if match else (0, 0, 0, 0)
    checkable = attrs.get("checkable") == "true"
    return make_node(
        # Icons carry their label in content-desc; that is what a person reads.
        attrs.get("text") or attrs.get("content-desc", ""),
        bounds=bounds,
        resource_id=attrs.get("resource-id", ""),
        class_name=attrs.get("class", ""),
        clickable=attrs.get("clickable") == "true",
        checked=(attrs.get("checked") == "true") if checkable else None,
        focused=attrs.get("focused") == "true",
        children=[_convert(child) for child in element if child.tag == "node"],
    )


def _union(boxes: list[Bounds]) -> Bounds:
    if not boxes:
        return (0, 0, 0, 0)
    return (
        min(b[0] for b in boxes),
        min(b[1] for b in boxes),
        max(b[2] for b in boxes),
        max(b[3] for b in boxes),
    )


async def run_adb(adb_path: str, args: list[str], *, timeout: float, what: str) -> bytes:
    """Run ``adb ARGS``; return stdout, or raise ``DeviceLost`` when adb says it lost the device,
    else ``DriverError``. ``what`` names the call in errors, so typed text (which may be a
    password) never ends up in an error message or a log line."""
    try:
        proc = await asyncio.create_subprocess_exec(
            adb_path,
            *args,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
    except OSError as exc:
        raise DriverError(f"cannot run adb at {adb_path!r}: {exc.strerror or exc}") from exc
    try:
        stdout, stderr = await asyncio.wait_for(proc.communicate(), timeout)
    except TimeoutError:
        await _reap(proc)
        raise DriverError(f"adb {what} timed out after {timeout:g}s") from None
    except asyncio.CancelledError:
        await _reap(proc)
        raise
    if proc.returncode != 0:
        text = stderr.decode("utf-8", "replace")
        detail = text.strip().splitlines()
        error = DeviceLost if _DEVICE_LOST.search(text) else DriverError
        raise error(f"adb {what} failed (exit {proc.returncode}): {detail[-1][:200] if detail else ''}")
    return stdout


async def _reap(proc: asyncio.subprocess.Process) -> None:
    # Kill and wait, so no zombie and no transport is left behind for the event loop to warn about.
    with contextlib.suppress(ProcessLookupError):
        proc.kill()
    with contextlib.suppress(Exception):
        await proc.communicate()


class AdbDriver(Driver):
    driver = "adb"

    def __init__(
        self,
        serial: str,
        *,
        adb_path: str = "adb",
        timeout: float = 20.0,
        attributes: dict[str, str] | None = None,
        state: str = "device",
    ) -> None:
        self.local_id = serial
        self.serial = serial
        self.adb_path = adb_path
        self.timeout = timeout
        self._attributes = dict(attributes or {})
        # The device's state in the latest ``adb devices`` listing ("device", "offline",
        # "unauthorized", ...; "missing" when not listed). The ``DeviceManager`` keeps it current
        # from one listing for all devices, rather than one adb call per device per heartbeat.
        self.state = state

    def attributes(self) -> dict[str, str]:
        return dict(self._attributes)

    def set_attributes(self, attributes: dict[str, str]) -> None:
        self._attributes = dict(attributes)

    @property
    def online(self) -> bool:
        return self.state == ADB_READY

    async def _adb(self, *args: str, what: str) -> bytes:
        return await run_adb(self.adb_path, ["-s", self.serial, *args], timeout=self.timeout, what=what)

    async def _shell(self, *args: str, what: str) -> str:
        # ``adb shell`` joins its arguments into one command line for the device's sh, which
        # would expand ``$`` (``.Outer$Inner`` launched ``.Outer``), quotes and globs: each is
        # quoted, so the device runs exactly these words.
        output = await self._adb("shell", *(shlex.quote(arg) for arg in args), what=what)
        return output.decode("utf-8", "replace")

    async def observe(self, *, screenshot: bool = False) -> Observation:
        status = await self._shell("uiautomator", "dump", DUMP_PATH, what="uiautomator dump")
        # uiautomator reports some failures ("ERROR: null root node ...") with exit status 0.
        if "ERROR" in status:
            raise DriverError(f"uiautomator dump failed: {status.strip()[:200]}")
        tree = parse_ui_dump(await self._shell("cat", DUMP_PATH, what="cat dump"))
        shot = await self.screenshot() if screenshot else None
        return Observation.from_tree(tree, shot)

    async def screenshot(self) -> bytes:
        """``adb exec-out screencap -p``: the PNG as the device encodes it (``exec-out``, unlike
        ``shell``, passes the bytes through untouched). Anything that is not a PNG is an error, so
        a device's complaint on stdout never becomes an "image"."""
        shot = await self._adb("exec-out", "screencap", "-p", what="screencap")
        if not shot.startswith(PNG_SIGNATURE):
            raise DriverError(f"adb screencap gave no PNG ({len(shot)} bytes)")
        return shot

    async def tap(self, x: int, y: int) -> None:
        await self._shell("input", "tap", str(int(x)), str(int(y)), what="input tap")

    async def type_text(self, text: str) -> None:
        if text:
            await self._shell("input", "text", escape_input_text(text), what="input text")

    async def swipe(self, x1: int, y1: int, x2: int, y2: int, duration_ms: int = 300) -> None:
        coords = (str(int(value)) for value in (x1, y1, x2, y2, duration_ms))
        await self._shell("input", "swipe", *coords, what="input swipe")

    async def key(self, name: str) -> None:
        key = name.strip()
        keycode = KEYCODES.get(key.lower()) or (key.upper() if key.upper().startswith("KEYCODE_") else None)
        if keycode is None or not re.fullmatch(r"KEYCODE_[A-Z0-9_]+", keycode):
            raise DriverError(f"unknown key {name!r}")
        await self._shell("input", "keyevent", keycode, what="input keyevent")

    async def launch_app(self, app: str) -> None:
        target = APP_ALIASES.get(app.strip().lower(), app.strip())
        if not re.fullmatch(r"[A-Za-z0-9_.]+(/[A-Za-z0-9_.$]+)?", target):
            raise DriverError(f"not an app name or package: {app!r}")
        if "/" in target:  # an explicit component: package/activity
            output = await self._shell("am", "start", "-n", target, what="am start")
            failed = "Error" in output
        else:
            output = await self._shell(
                "monkey", "-p", target, "-c", "android.intent.category.LAUNCHER", "1", what="monkey"
            )
            failed = "No activities found" in output or "aborted" in output
        if failed:
            raise DriverError(f"could not launch {target!r}")


async def read_os_version(adb_path: str, serial: str, timeout: float = 10.0) -> str | None:
    """Best effort: a device that will not say is still a device."""
    try:
        output = await run_adb(
            adb_path,
            ["-s", serial, "shell", "getprop", "ro.build.version.release"],
            timeout=timeout,
            what="getprop",
        )
    except DriverError as exc:
        logger.warning("could not read the OS version of %s: %s", serial, exc)
        return None
    return output.decode("utf-8", "replace").strip() or None
