"""The sim phone: real state behind real coordinates."""

from __future__ import annotations

import io

import pytest
from PIL import Image

from agent.runtime.driver import centre, find_node
from agent.runtime.errors import DriverError, ElementNotFound
from agent.runtime.sim import SimDriver

pytestmark = pytest.mark.anyio


async def test_home_lists_apps_and_a_tap_on_an_icon_opens_it() -> None:
    phone = SimDriver("phone-1")
    home = await phone.observe()
    assert "Settings" in home.text and "Notes" in home.text
    assert home.screenshot is None

    icon = home.find("Notes")
    assert icon is not None and icon["clickable"]
    await phone.tap(*centre(icon["bounds"]))
    assert phone.screen == "notes"
    assert (await phone.observe()).find("notes:id/editor") is not None


async def test_settings_toggles_flip_under_the_tapped_point() -> None:
    phone = SimDriver("phone-1")
    await phone.launch_app("settings")
    screen = await phone.observe()
    row = screen.find("Airplane mode")
    assert row is not None and row["checked"] is False
    assert "Airplane mode\nOff\nWi-Fi\nOn\nBluetooth\nOff" in screen.text

    # A point inside the row but away from its centre still hits the row.
    x1, y1, _, _ = row["bounds"]
    await phone.tap(x1 + 5, y1 + 5)
    assert phone.toggles["Airplane mode"] is True
    assert phone.toggles["Wi-Fi"] is True  # the neighbours are untouched
    screen = await phone.observe()
    row = screen.find("Airplane mode")
    assert row is not None and row["checked"] is True
    assert "Airplane mode\nOn" in screen.text

    await phone.tap_element("Wi-Fi")
    await phone.tap_element("settings:id/bluetooth")
    assert phone.toggles == {"Airplane mode": True, "Wi-Fi": False, "Bluetooth": True}


async def test_a_tap_on_empty_space_changes_nothing() -> None:
    phone = SimDriver("phone-1")
    await phone.launch_app("settings")
    before = (await phone.observe()).tree
    await phone.tap(540, 1800)  # below the last row
    await phone.tap(5000, 5000)  # off the screen
    assert (await phone.observe()).tree == before
    assert phone.screen == "settings"


async def test_notes_take_typing_only_into_the_focused_field_and_save_it() -> None:
    phone = SimDriver("phone-1")
    await phone.launch_app("com.tether.notes")  # package names work too
    await phone.type_text("lost")  # nothing focused yet: dropped, like a phone
    assert phone.draft == ""
    assert "No notes yet" in (await phone.observe()).text

    await phone.tap_element("notes:id/editor")
    editor = find_node((await phone.observe()).tree, "editor")
    assert editor is not None and editor["focused"]
    await phone.type_text("hello ")
    await phone.type_text("world")
    await phone.tap_element("Save")
    assert phone.notes == ["hello world"]

    await phone.tap_element("editor")
    await phone.type_text("second")
    await phone.tap_element("Save")
    screen = await phone.observe()
    editor = screen.find("notes:id/editor")
    assert editor is not None and editor["text"] == "" and not editor["focused"]
    notes = [n["text"] for n in screen.nodes() if n["resource_id"] == "notes:id/note"]
    assert notes == ["second", "hello world"]  # newest first
    assert "No notes yet" not in screen.text


async def test_keys_navigate_and_state_survives_leaving_an_app() -> None:
    phone = SimDriver("phone-1")
    await phone.launch_app("notes")
    await phone.tap_element("editor")
    await phone.type_text("draft")
    await phone.key("back")  # first back only hides the keyboard
    assert phone.screen == "notes" and not phone.editor_focused
    await phone.key("back")
    assert phone.screen == "home"

    await phone.launch_app("settings")
    await phone.tap_element("Bluetooth")
    await phone.key("home")
    assert phone.screen == "home"
    await phone.launch_app("Settings")
    row = (await phone.observe()).find("Bluetooth")
    assert row is not None and row["checked"] is True
    await phone.launch_app("notes")
    editor = (await phone.observe()).find("editor")
    assert editor is not None and editor["text"] == "draft"


async def test_unknown_keys_apps_and_elements_are_driver_errors() -> None:
    phone = SimDriver("phone-1")
    with pytest.raises(DriverError, match="no key"):
        await phone.key("volume_up")
    with pytest.raises(DriverError, match="not installed"):
        await phone.launch_app("camera")
    with pytest.raises(ElementNotFound):
        await phone.tap_element("Airplane mode")  # not on the home screen
    assert phone.actions == []


async def test_screenshot_only_when_asked_and_attributes() -> None:
    phone = SimDriver("phone-9")
    shot = await phone.observe(screenshot=True)
    assert shot.screenshot is not None and shot.screenshot.startswith(b"\x89PNG\r\n\x1a\n")
    assert "PNG" not in repr(shot) and "bytes" in repr(shot)
    assert phone.attributes()["model"] == "Tether Sim"
    assert phone.driver == "sim" and phone.local_id == "phone-9"


def _decoded(png: bytes) -> Image.Image:
    image = Image.open(io.BytesIO(png))
    image.load()  # decodes every pixel: a truncated or corrupt PNG raises here
    return image


async def test_screenshot_is_a_real_png_that_changes_with_the_screen() -> None:
    phone = SimDriver("phone-1")
    home = await phone.screenshot()
    assert home.startswith(b"\x89PNG\r\n\x1a\n") and len(home) < 64 * 1024
    image = _decoded(home)
    assert image.format == "PNG" and image.size[0] == 270 and image.size[1] > 480
    await phone.launch_app("notes")
    notes = await phone.screenshot()
    assert _decoded(notes).size == image.size
    assert notes != home  # another screen, another picture
    # Same state, same picture: the image is a function of the screen and the last action.
    assert await phone.screenshot() == notes
