"""Cut a PNG to its top rows, with the standard library only: headless Chromium draws small windows short (a window
under about 200 pixels shows only part of the page), so charts are drawn in a taller window and cut to size."""

from __future__ import annotations

import math
import struct
import zlib

SIGNATURE = b"\x89PNG\r\n\x1a\n"
CHANNELS = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}
"""Samples per pixel of each PNG colour type (grey, RGB, palette, grey + alpha, RGBA)."""


def chunks(data: bytes) -> list[tuple[bytes, bytes]]:
    """A PNG's chunks as (type, data), after checking the signature."""
    if not data.startswith(SIGNATURE):
        raise ValueError("not a PNG file")
    found, at = [], len(SIGNATURE)
    while at < len(data):
        (length,) = struct.unpack(">I", data[at:at + 4])
        found.append((data[at + 4:at + 8], data[at + 8:at + 8 + length]))
        at += 12 + length
    return found


def chunk(kind: bytes, body: bytes) -> bytes:
    """One chunk: length, type, data, CRC of type and data."""
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))


def crop_height(data: bytes, height: int) -> bytes:
    """The PNG with only its top `height` rows (each row is filtered against the one above, so the top rows of the
    decompressed data are themselves a valid image)."""
    parts = chunks(data)
    width, old_height, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", parts[0][1])
    if interlace or height > old_height:
        raise ValueError("cannot cut an interlaced PNG, or to more rows than it has")
    row = 1 + math.ceil(width * CHANNELS[colour] * depth / 8)  # the filter byte, then the samples
    pixels = zlib.decompress(b"".join(body for kind, body in parts if kind == b"IDAT"))[:row * height]
    header = struct.pack(">IIBBBBB", width, height, depth, colour, 0, 0, 0)
    kept = [chunk(kind, body) for kind, body in parts[1:] if kind not in (b"IDAT", b"IEND")]
    body = chunk(b"IHDR", header) + b"".join(kept) + chunk(b"IDAT", zlib.compress(pixels, 9))
    return SIGNATURE + body + chunk(b"IEND", b"")
