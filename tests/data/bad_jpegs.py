#!/usr/bin/env python3
"""bad_jpegs.py — the damaged JPEGs (random bytes after a marker, huge or zero sizes, 12-bit, cut), made from one good baseline JPEG, for the tests that
check a bad image costs only itself (tests/data/data_pack_errors.sh, test_data --bad-images) and for the
image fuzz target's regression seeds (tests/fuzz/run_fuzz.sh).

usage: bad_jpegs.py GOOD.jpg OUT_DIR   writes OUT_DIR/bad-*.jpg (deterministic bytes)

  bad-marker-random.jpg   ff d8 then 2000 random bytes
  bad-65535x65535.jpg     the good file with its frame header (SOF) claiming 65535 x 65535
  bad-zero-height.jpg     SOF height 0
  bad-12bit.jpg           SOF sample precision 12
  bad-huge-random.jpg     the good headers up to the scan header, SOF 60000 x 60000, then 2000 random
                          bytes (a decoder that sizes its buffer from the header allocates 10 GB)
  bad-header-random.jpg   the good headers up to the scan header, then 2000 random bytes
  bad-cut.jpg             the good file cut in the middle of its entropy-coded data
"""
import os
import random
import struct
import sys


def segments(d):
    """(marker, start, length) of each marker segment before the scan data."""
    i = 2
    while i + 4 <= len(d):
        if d[i] != 0xFF:
            raise SystemExit("bad_jpegs.py: unexpected byte at %d (not a baseline JPEG?)" % i)
        m = d[i + 1]
        n = struct.unpack(">H", d[i + 2:i + 4])[0]
        yield m, i, n
        if m == 0xDA:
            return
        i += 2 + n


def main():
    good, out = sys.argv[1], sys.argv[2]
    d = open(good, "rb").read()
    assert d[:2] == b"\xff\xd8", good
    segs = list(segments(d))
    sof = next(s for s in segs if s[0] in (0xC0, 0xC1, 0xC2))
    sos = segs[-1]
    assert sos[0] == 0xDA
    scan = sos[1] + 2 + sos[2]  # first byte of entropy-coded data
    rnd = random.Random(9)
    noise = bytes(rnd.getrandbits(8) for _ in range(2000))

    def patch(data, w=None, h=None, prec=None):
        b = bytearray(data)
        at = sof[1] + 4  # precision byte, then height, width
        if prec is not None:
            b[at] = prec
        if h is not None:
            b[at + 1:at + 3] = struct.pack(">H", h)
        if w is not None:
            b[at + 3:at + 5] = struct.pack(">H", w)
        return bytes(b)

    files = {
        "bad-marker-random.jpg": b"\xff\xd8" + noise,
        "bad-65535x65535.jpg": patch(d, w=65535, h=65535),
        "bad-zero-height.jpg": patch(d, h=0),
        "bad-12bit.jpg": patch(d, prec=12),
        "bad-huge-random.jpg": patch(d[:scan], w=60000, h=60000) + noise,
        "bad-header-random.jpg": d[:scan] + noise,
        "bad-cut.jpg": d[:scan + (len(d) - scan) // 2],
    }
    os.makedirs(out, exist_ok=True)
    for name, b in files.items():
        with open(os.path.join(out, name), "wb") as f:
            f.write(b)


if __name__ == "__main__":
    main()
