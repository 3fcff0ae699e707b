"""Small real PNG images for the tests that act as a host uploading screenshots: a browser must be
able to draw them (the dashboard's thumbnails), so they are whole, valid files, not magic bytes.
The test environment has no imaging library; the format needs only zlib and CRC-32."""

from __future__ import annotations

import struct
import zlib


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def solid_png(width: int, height: int, rgb: tuple[int, int, int]) -> bytes:
    """A ``width`` x ``height`` 8-bit RGB image of one colour."""
    row = b"\x00" + bytes(rgb) * width  # filter type 0, then the pixels
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", header) + _chunk(b"IDAT", zlib.compress(row * height))
            + _chunk(b"IEND", b""))
