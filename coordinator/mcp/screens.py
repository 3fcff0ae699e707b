"""What a session's observation becomes for a model: the screen as a PNG whose long side is at
most ``MAX_SIDE`` pixels, with the scale that maps its points back to the device's, and the
elements as one compact line each (``[3] "Wi-Fi" id=android:id/title bounds=0,310,1080,420
clickable``), so a model can tap by element rather than guess at pixels.

A screen is a host's bytes and never trusted: one that is not an image Pillow reads, or larger
than ``MAX_PIXELS``, is no screen (``None``), never an error of the request.
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from PIL import Image, UnidentifiedImageError

MAX_SIDE = 1280
# Far above any phone's screen (a 4K tablet is 8.3 M), far below Pillow's decompression-bomb
# threshold: a host cannot make the coordinator decode a huge image.
MAX_PIXELS = 40_000_000
# Elements a host may send with one observation (PROTOCOL.md, "Live sessions").
MAX_ELEMENTS = 500
_FLAGS = ("clickable", "focused")


@dataclass(frozen=True)
class Screen:
    """A screen as sent to the model: ``png`` is ``width`` × ``height`` pixels, and a point
    (x, y) on it is (x × ``scale``, y × ``scale``) on the device (``scale`` ≥ 1: the device's
    pixels per image pixel)."""

    png: bytes
    width: int
    height: int
    device_width: int
    device_height: int

    @property
    def scale(self) -> float:
        """Of the long side, which is exact (the short one is rounded to whole pixels)."""
        if self.device_width >= self.device_height:
            return self.device_width / self.width
        return self.device_height / self.height

    def caption(self) -> str:
        """What the model is told about the image: its size, the device's, and the scale."""
        if self.width == self.device_width and self.height == self.device_height:
            return f"screen {self.width}x{self.height} px, shown at full size: its coordinates are the device's"
        return (f"screen {self.device_width}x{self.device_height} px, shown at {self.width}x{self.height} "
                f"(scale {self.scale:.4g}): multiply a point on the image by {self.scale:.4g} for the device's "
                "coordinates, which tap and swipe take; element bounds are in the device's coordinates")


def scaled(raw: bytes, max_side: int = MAX_SIDE) -> Screen | None:
    """``raw`` (a PNG, JPEG or WebP screen) as a PNG whose long side is at most ``max_side``,
    or None when it is no image we read. CPU-bound (a phone's screen: some 100 ms): the caller
    runs it off the event loop."""
    try:
        with Image.open(io.BytesIO(raw)) as image:
            width, height = image.size
            if width < 1 or height < 1 or width * height > MAX_PIXELS:
                return None
            factor = max(width, height) / max_side
            if factor <= 1 and image.format == "PNG":
                return Screen(raw, width, height, width, height)
            size = (width, height) if factor <= 1 else (max(1, round(width / factor)), max(1, round(height / factor)))
            picture = image.convert("RGBA" if image.mode in ("RGBA", "LA", "P") else "RGB")
            if size != (width, height):
                # A box filter down to within twice the size, then bilinear: text stays legible, at
                # half LANCZOS's time on a phone's screen. PNG's fastest compression, for the same
                # reason (a screen is mostly flat colour, which compresses well at any level).
                picture = picture.resize(size, Image.Resampling.BILINEAR, reducing_gap=2.0)
            out = io.BytesIO()
            picture.save(out, "PNG", compress_level=1)
            return Screen(out.getvalue(), size[0], size[1], width, height)
    except (UnidentifiedImageError, OSError, ValueError, Image.DecompressionBombError):
        return None


def element_line(index: int, element: Mapping[str, Any]) -> str:
    """One element as the model reads it: ``[3] "Wi-Fi" id=android:id/title bounds=0,310,1080,420
    clickable`` (text JSON-quoted, so a line is one line whatever the text holds)."""
    parts = [f"[{index}]"]
    text = element.get("text")
    if isinstance(text, str) and text.strip():
        parts.append(json.dumps(text.strip(), ensure_ascii=False))
    ident = element.get("id")
    if isinstance(ident, str) and ident:
        parts.append(f"id={ident}")
    bounds = element.get("bounds")
    if isinstance(bounds, list | tuple) and len(bounds) == 4 and all(isinstance(b, int) for b in bounds):
        parts.append("bounds=" + ",".join(str(b) for b in bounds))
    checked = element.get("checked")
    if isinstance(checked, bool):
        parts.append("checked" if checked else "unchecked")
    parts.extend(flag for flag in _FLAGS if element.get(flag) is True)
    return " ".join(parts)


def elements_text(elements: Iterable[Mapping[str, Any]]) -> str:
    """Every element, one line each, numbered from 0 in the order the host sent them."""
    lines = [element_line(i, e) for i, e in enumerate(elements) if i < MAX_ELEMENTS and isinstance(e, Mapping)]
    return "\n".join(lines) if lines else "(no elements)"


def element_centre(element: Mapping[str, Any]) -> tuple[int, int] | None:
    """The centre of an element's bounds, where a tap on it lands; None without bounds."""
    bounds = element.get("bounds")
    if not (isinstance(bounds, list | tuple) and len(bounds) == 4 and all(isinstance(b, int) for b in bounds)):
        return None
    x1, y1, x2, y2 = bounds
    return (x1 + x2) // 2, (y1 + y2) // 2
