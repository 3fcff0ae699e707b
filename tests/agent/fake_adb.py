"""A fake ``adb`` executable for driver tests: logs its argv, prints canned output.

The script is written into a test's tmp_path and reads its behaviour from a JSON file next to it,
so a test can change what "the device" answers between calls.
"""

from __future__ import annotations

import io
import json
import os
import sys
from pathlib import Path
from typing import Any

from PIL import Image

DEVICES_OUTPUT = """\
* daemon not running; starting now at tcp:5037
* daemon started successfully
List of devices attached
emulator-5554          device product:sdk_gphone64 model:Pixel_7 device:emu64x transport_id:1
R58M123ABC             unauthorized usb:1-1 transport_id:2
0123456789ABCDEF       device usb:1-2 product:beyond1 model:SM_G973F device:beyond1 transport_id:3

"""

UI_DUMP = """<?xml version='1.0' encoding='UTF-8' standalone='yes' ?>\
<hierarchy rotation="0">\
<node index="0" text="" resource-id="" class="android.widget.FrameLayout" \
package="com.android.settings" content-desc="" checkable="false" checked="false" clickable="false" focused="false" bounds="[0,0][1080,2400]">\
<node index="0" text="Network &amp; internet" resource-id="android:id/title" class="android.widget.TextView" \
content-desc="" checkable="false" checked="false" clickable="false" focused="false" bounds="[0,100][1080,250]" />\
<node index="1" text="Wi-Fi" resource-id="com.android.settings:id/wifi_row" class="android.widget.LinearLayout" \
content-desc="" checkable="true" checked="true" clickable="true" focused="false" bounds="[0,300][1080,500]">\
<node index="0" text="" resource-id="android:id/switch_widget" class="android.widget.Switch" \
content-desc="" checkable="true" checked="true" clickable="false" focused="false" bounds="[900,350][1040,450]" />\
</node>\
<node index="2" text="" resource-id="com.android.settings:id/search" class="android.widget.ImageButton" \
content-desc="Search settings" checkable="false" checked="false" clickable="true" focused="false" bounds="[960,20][1060,90]" />\
</node>\
</hierarchy>"""



def _png(width: int = 72, height: int = 128) -> bytes:
    """What a device's ``screencap -p`` writes: a real PNG (small, one colour)."""
    out = io.BytesIO()
    Image.new("RGB", (width, height), (16, 96, 160)).save(out, format="PNG")
    return out.getvalue()


SCREENSHOT = _png()

_SCRIPT = """#!{python}
import json, sys, time
HERE = {here!r}
args = sys.argv[1:]
with open(HERE + "/calls.jsonl", "a") as log:
    log.write(json.dumps(args) + "\\n")
with open(HERE + "/config.json") as f:
    config = json.load(f)
if args[:2] == ["devices", "-l"]:
    sys.stdout.write(config["devices"])
    sys.exit(0)
serial, rest = (args[1], args[2:]) if args[:1] == ["-s"] else (None, args)
if serial in config["missing_serials"]:
    sys.stderr.write("adb: device '%s' not found\\n" % serial)
    sys.exit(1)
if config["fail_stderr"] is not None:
    sys.stderr.write(config["fail_stderr"] + "\\n")
    sys.exit(1)
if config["hang"]:
    time.sleep(30)
if rest[:2] == ["shell", "uiautomator"]:
    print(config["dump_status"])
elif rest[:2] == ["shell", "cat"]:
    sys.stdout.write(config["dump"])
elif rest[:2] == ["exec-out", "screencap"]:
    sys.stdout.buffer.write(bytes.fromhex(config["screenshot_hex"]))
elif rest[:2] == ["shell", "getprop"]:
    print("14")
elif rest[:2] == ["shell", "monkey"] and rest[3] in config["missing_packages"]:
    print("** No activities found to run, monkey aborted.")
"""


class FakeAdb:
    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.path = str(folder / "adb")
        self.config: dict[str, Any] = {
            "devices": DEVICES_OUTPUT,
            "dump": UI_DUMP,
            "dump_status": "UI hierchary dumped to: /sdcard/window_dump.xml",
            "screenshot_hex": SCREENSHOT.hex(),
            "missing_serials": [],
            "missing_packages": [],
            "fail_stderr": None,  # what every device command prints to stderr before exiting 1
            "hang": False,
        }
        self.save()
        Path(self.path).write_text(_SCRIPT.format(python=sys.executable, here=str(folder)))
        os.chmod(self.path, 0o755)

    def save(self) -> None:
        (self.folder / "config.json").write_text(json.dumps(self.config))

    def set(self, **changes: Any) -> None:
        self.config.update(changes)
        self.save()

    def calls(self) -> list[list[str]]:
        log = self.folder / "calls.jsonl"
        if not log.exists():
            return []
        return [json.loads(line) for line in log.read_text().splitlines()]
