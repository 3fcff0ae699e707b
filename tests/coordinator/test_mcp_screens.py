"""A screen as /mcp sends it to a model: its long side within the bound, and the scale it states
mapping the image's points back onto the device's; its elements one line each."""

from __future__ import annotations

import io

from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image

from coordinator.mcp.screens import elements_text, scaled


def _png(width: int, height: int) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (width, height), (200, 30, 30)).save(out, "PNG")
    return out.getvalue()


@settings(max_examples=40, deadline=None)
@given(width=st.integers(1, 700), height=st.integers(1, 700), max_side=st.integers(16, 400))
def test_a_screen_fits_the_bound_and_its_scale_maps_points_back(width: int, height: int, max_side: int) -> None:
    screen = scaled(_png(width, height), max_side)
    assert screen is not None
    with Image.open(io.BytesIO(screen.png)) as image:
        assert image.format == "PNG" and image.size == (screen.width, screen.height)
    assert max(screen.width, screen.height) <= max(max_side, 1)
    assert (screen.device_width, screen.device_height) == (width, height)
    if max(width, height) <= max_side:
        assert (screen.width, screen.height) == (width, height) and screen.scale == 1
    # The far corner of the image, times the stated scale, is the device's far corner: exactly on
    # the long side, within a pixel of the image on the short one (its sides are whole pixels).
    long_side, short_side = sorted(((screen.width, width), (screen.height, height)), reverse=True)
    assert abs(long_side[0] * screen.scale - long_side[1]) < 1e-6
    assert abs(short_side[0] * screen.scale - short_side[1]) <= screen.scale


def test_bytes_that_are_no_image_are_no_screen() -> None:
    assert scaled(b"not a png") is None
    assert scaled(b"") is None


def test_elements_are_one_line_each_as_the_model_reads_them() -> None:
    lines = elements_text([
        {"text": "Wi-Fi", "id": "android:id/title", "bounds": [0, 310, 1080, 420], "clickable": True},
        {"text": "two\nlines \"quoted\"", "id": "", "bounds": [1, 2, 3, 4], "clickable": False, "checked": False},
        {"text": "", "id": "app:id/empty", "bounds": "nonsense"},
    ]).splitlines()
    assert lines == [
        '[0] "Wi-Fi" id=android:id/title bounds=0,310,1080,420 clickable',
        '[1] "two\\nlines \\"quoted\\"" bounds=1,2,3,4 unchecked',
        "[2] id=app:id/empty",
    ]
    assert elements_text([]) == "(no elements)"
