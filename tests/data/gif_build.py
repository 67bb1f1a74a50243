"""gif_build.py — GIF files written byte by byte for the tests (tests/data/data_cmyk_gif.py, tests/fuzz/run_fuzz.sh):
Pillow writes only some kinds (no frame smaller than or outside the logical screen on the first frame, no zero-size
screen, no file without a colour table, no index past its table), so these are made here: the LZW data without
compression (a clear code before every run of literals short enough that the code width never grows), which any
decoder reads; sub-blocks, colour tables, graphic control extensions (transparency) and interlacing as the GIF89a
specification lays them out."""
import struct


def lzw(indices, min_bits=8):
    clear, eoi = 1 << min_bits, (1 << min_bits) + 1
    width = min_bits + 1
    room = (1 << width) - (eoi + 1) - 1  # literals after a clear before the table would need a wider code
    codes = []
    for i in range(0, len(indices), room):
        codes.append(clear)
        codes.extend(indices[i:i + room])
    codes.append(eoi)
    acc = nbits = 0
    out = bytearray()
    for c in codes:
        assert 0 <= c < (1 << width)
        acc |= c << nbits
        nbits += width
        while nbits >= 8:
            out.append(acc & 255)
            acc >>= 8
            nbits -= 8
    if nbits:
        out.append(acc & 255)
    return bytes(out)


def sub_blocks(data):
    return b"".join(bytes([len(data[i:i + 255])]) + data[i:i + 255] for i in range(0, len(data), 255)) + b"\0"


def _table(pal):
    bits = max(1, (len(pal) // 3 - 1).bit_length())
    return bits, pal + b"\0" * (3 * (1 << bits) - len(pal))


def interlace_order(h):
    """the image rows in the order an interlaced frame stores them"""
    return [y for y0, dy in ((0, 8), (4, 8), (2, 4), (1, 2)) for y in range(y0, h, dy)]


def gif(sw, sh, frames, gpal=None, version=b"GIF89a", trailer=True):
    """A GIF of logical screen sw x sh. frames: dicts of x, y, w, h, px (h rows of w indices, top to bottom),
    optional lpal (a local colour table, bytes RGB...), trns (a transparency index), interlace, min_bits (the
    LZW minimum code size, 8 unless given), data (the LZW bytes themselves, instead of px's)."""
    out = version + struct.pack("<HH", sw, sh)
    if gpal is not None:
        bits, table = _table(gpal)
        out += bytes([0x80 | (bits - 1) | ((bits - 1) << 4), 0, 0]) + table
    else:
        out += b"\0\0\0"
    for f in frames:
        if f.get("trns") is not None:
            out += b"\x21\xf9\x04\x01\0\0" + bytes([f["trns"]]) + b"\0"
        flags = 0x40 if f.get("interlace") else 0
        local = b""
        if f.get("lpal") is not None:
            bits, local = _table(f["lpal"])
            flags |= 0x80 | (bits - 1)
        out += b"," + struct.pack("<HHHH", f["x"], f["y"], f["w"], f["h"]) + bytes([flags]) + local
        mb = f.get("min_bits", 8)
        if "data" in f:
            data = f["data"]
        else:
            rows = [list(r) for r in f["px"]]
            order = interlace_order(len(rows)) if f.get("interlace") else range(len(rows))
            data = lzw([v for y in order for v in rows[y]], mb)
        out += bytes([mb]) + sub_blocks(data)
    return out + (b";" if trailer else b"")
