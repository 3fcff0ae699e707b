"""The sim phone's screen as a PNG: each node's box and text drawn at a quarter of the screen's
size, and a strip at the bottom naming what was last done to the phone.

Pillow draws and encodes it (its bundled font, no font files on the host). It is small on
purpose (270x480, a few KiB): it is evidence of what the simulated phone showed at a step, not a
picture of a phone.
"""

from __future__ import annotations

import io
from functools import lru_cache

from PIL import Image, ImageDraw, ImageFont

from .driver import UINode, iter_nodes

SCALE = 4  # screen pixels per image pixel
_STRIP = 28  # the status strip's height, in image pixels
_BACKGROUND = (250, 250, 250)
_BOX = (170, 170, 170)
_CLICKABLE = (40, 110, 200)
_TEXT = (20, 20, 20)
_STRIP_BACKGROUND = (30, 30, 30)
_STRIP_TEXT = (240, 240, 240)


@lru_cache(maxsize=1)
def _font() -> ImageFont.ImageFont | ImageFont.FreeTypeFont:
    return ImageFont.load_default(size=12)


def render_png(tree: UINode, width: int, height: int, caption: str) -> bytes:
    """``tree`` (screen pixels, ``width`` x ``height``) drawn at 1/SCALE, ``caption`` below it."""
    size = (width // SCALE, height // SCALE)
    image = Image.new("RGB", (size[0], size[1] + _STRIP), _BACKGROUND)
    draw = ImageDraw.Draw(image)
    font = _font()
    for node in iter_nodes(tree):
        x1, y1, x2, y2 = (value // SCALE for value in node["bounds"])
        if x2 <= x1 or y2 <= y1 or (x1, y1, x2, y2) == (0, 0, *size):
            continue  # nothing to see, or the whole screen
        draw.rectangle((x1, y1, x2 - 1, y2 - 1), outline=_CLICKABLE if node["clickable"] else _BOX)
        text = node["text"].strip().splitlines()
        if text:
            draw.text((x1 + 4, y1 + 4), text[0][:40], fill=_TEXT, font=font)
    draw.rectangle((0, size[1], size[0], size[1] + _STRIP), fill=_STRIP_BACKGROUND)
    draw.text((6, size[1] + 7), caption[:44], fill=_STRIP_TEXT, font=font)
    out = io.BytesIO()
    image.save(out, format="PNG", optimize=False)
    return out.getvalue()
