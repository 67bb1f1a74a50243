#!/usr/bin/env python3
"""safetensors_peer.py — checks rrfp-mm's safetensors I/O against an independent implementation.

The `safetensors` package is not in Debian, so this file carries its own reader and writer written
from the format description (8-byte little-endian header length, JSON header, data buffer), using
only json and struct. It:
  1. has the C writer write the fixture and reads it back here, checking every value and the layout
     rules (header padded with spaces to a multiple of 8, offsets tiling the buffer);
  2. writes the fixture here (another tensor order, a different padding) and has the C reader check it;
  3. writes damaged files and checks the C reader rejects each one with the expected message.
Usage: safetensors_peer.py TEST_SAFETENSORS_BINARY WORKDIR
"""
import json
import os
import struct
import subprocess
import sys

SIZES = {"F32": 4, "BF16": 2, "I32": 4}


def st_read(path):
    data = open(path, "rb").read()
    (n,) = struct.unpack("<Q", data[:8])
    header = data[8:8 + n]
    assert header[:1] == b"{", "header must start with {"
    meta = json.loads(header.decode("utf-8"))
    buf = data[8 + n:]
    out = {}
    spans = []
    for name, info in meta.items():
        if name == "__metadata__":
            continue
        b, e = info["data_offsets"]
        numel = 1
        for s in info["shape"]:
            numel *= s
        assert e - b == numel * SIZES[info["dtype"]], name
        spans.append((b, e, name))
        raw = buf[b:e]
        if info["dtype"] == "F32":
            vals = list(struct.unpack("<%df" % numel, raw))
        elif info["dtype"] == "I32":
            vals = list(struct.unpack("<%di" % numel, raw))
        else:  # BF16: the high half of an f32
            hs = struct.unpack("<%dH" % numel, raw)
            vals = [struct.unpack("<f", struct.pack("<I", h << 16))[0] for h in hs]
        out[name] = (info["dtype"], info["shape"], vals)
    spans.sort()
    at = 0
    for b, e, name in spans:
        assert b == at, "tensor %s does not start where the previous ends" % name
        at = e
    assert at == len(buf), "data buffer not fully covered"
    return n, header, meta.get("__metadata__", {}), out


def encode(dtype, vals):
    if dtype == "F32":
        return struct.pack("<%df" % len(vals), *vals)
    if dtype == "I32":
        return struct.pack("<%di" % len(vals), *vals)
    # BF16 of values that are exact in bf16: truncate the f32 bits
    return b"".join(struct.pack("<H", struct.unpack("<I", struct.pack("<f", v))[0] >> 16) for v in vals)


def st_write(path, tensors, metadata=None, pad_to=8, raw_header=None, order=None):
    """tensors: list of (name, dtype, shape, values). Returns the bytes written."""
    header = {}
    if metadata is not None:
        header["__metadata__"] = metadata
    blobs = []
    off = 0
    for name, dtype, shape, vals in (order or tensors):
        blob = encode(dtype, vals)
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + len(blob)]}
        blobs.append(blob)
        off += len(blob)
    hj = raw_header if raw_header is not None else json.dumps(header).encode()
    if pad_to:
        hj += b" " * ((-len(hj)) % pad_to)
    data = struct.pack("<Q", len(hj)) + hj + b"".join(blobs)
    open(path, "wb").write(data)
    return data


FIXTURE = [
    ("a.f32", "F32", [3, 5], [i * 0.25 - 1.5 for i in range(15)]),
    ("b.bf16", "BF16", [4], [1.0, -2.5, 3.140625, 65280.0]),
    ("c.i32", "I32", [2, 3, 2], [7 * i - 20 for i in range(12)]),
    ("d.scalar", "F32", [], [42.5]),
    ("e.empty", "F32", [0, 4], []),
]
META = {"format": "pt", "step": "17"}


def main():
    exe, work = sys.argv[1], sys.argv[2]
    os.makedirs(work, exist_ok=True)
    fails = 0

    # 1. C writes, Python reads.
    p = os.path.join(work, "from_c.safetensors")
    subprocess.run([exe, "write", p], check=True)
    n, header, meta, got = st_read(p)
    assert n % 8 == 0, "header length %d not a multiple of 8" % n
    assert header.rstrip(b" ") == header.rstrip(), "padding is not spaces"
    assert meta == META, meta
    assert set(got) == {t[0] for t in FIXTURE}, sorted(got)
    for name, dtype, shape, vals in FIXTURE:
        gd, gs, gv = got[name]
        assert (gd, gs) == (dtype, shape), (name, gd, gs)
        assert gv == vals, (name, gv, vals)  # exact: every fixture value is representable
    print("C writer -> Python reader: ok")

    # 2. Python writes (reversed order, padding to 8), C reads.
    p = os.path.join(work, "from_py.safetensors")
    st_write(p, FIXTURE, META, order=list(reversed(FIXTURE)))
    subprocess.run([exe, "check", p], check=True)
    # no padding at all is also valid (the format only requires the header to parse)
    p2 = os.path.join(work, "from_py_nopad.safetensors")
    st_write(p2, FIXTURE, META, pad_to=0)
    subprocess.run([exe, "check", p2], check=True)
    print("Python writer -> C reader: ok")

    # 3. Damaged files: each must be rejected with a message naming the problem.
    good = open(p, "rb").read()
    (hl,) = struct.unpack("<Q", good[:8])
    hdr = json.loads(good[8:8 + hl])

    def with_header(h, tail_delta=0):
        hj = json.dumps(h).encode()
        hj += b" " * ((-len(hj)) % 8)
        body = good[8 + hl:]
        if tail_delta < 0:
            body = body[:tail_delta]
        elif tail_delta > 0:
            body = body + b"\0" * tail_delta
        return struct.pack("<Q", len(hj)) + hj + body

    def mutate(fn):
        h = json.loads(json.dumps(hdr))
        fn(h)
        return h

    def set_off(name, b, e):
        def f(h):
            h[name]["data_offsets"] = [b, e]
        return f

    a_b, a_e = hdr["a.f32"]["data_offsets"]
    cases = [
        ("short", good[:5], "shorter than the 8-byte header length"),
        ("huge_len", struct.pack("<Q", 1 << 40) + good[8:], "exceeds"),
        ("len_past_end", struct.pack("<Q", len(good)) + good[8:], "truncated"),
        ("truncated_data", good[:-3], "run past the end"),
        ("not_json", struct.pack("<Q", 8) + b"{nope:1}" + good[8 + hl:], "not a valid JSON"),
        ("not_object", struct.pack("<Q", 8) + b"[1,2]   " + good[8 + hl:], "does not start with '{'"),
        ("bad_dtype", with_header(mutate(lambda h: h["c.i32"].update(dtype="F64"))), "dtype \"F64\" is not supported"),
        ("bad_shape", with_header(mutate(lambda h: h["a.f32"].update(shape=[3, 4]))), "'a.f32': 60 bytes"),
        ("neg_shape", with_header(mutate(lambda h: h["a.f32"].update(shape=[-3, -5]))), "shape[0]"),
        ("no_offsets", with_header(mutate(lambda h: h["a.f32"].pop("data_offsets"))), "data_offsets"),
        ("reversed", with_header(mutate(set_off("a.f32", a_e, a_b))), "end before they begin"),
        ("past_end", with_header(mutate(set_off("a.f32", len(good), len(good) + 60))), "run past the end"),
        ("overlap", with_header(mutate(set_off("a.f32", a_b - 4, a_e - 4))), "overlap"),
        ("hole", with_header(mutate(set_off("a.f32", a_b + 4, a_e + 4)), tail_delta=4), "hole"),
        ("trailing", with_header(hdr, tail_delta=8), "trailing garbage"),
        ("meta_not_str", with_header(mutate(lambda h: h["__metadata__"].update(step=17))), "not a string"),
        ("garbage_after_json", struct.pack("<Q", hl) + good[8:8 + hl - 1] + b"x" + good[8 + hl:],
         "after the header JSON"),
    ]
    # a duplicate tensor name can only be written by hand: JSON objects from json.dumps are unique
    dup = b'{"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"x":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}'
    dup += b" " * ((-len(dup)) % 8)
    cases.append(("duplicate", struct.pack("<Q", len(dup)) + dup + b"\0" * 8, "'x' appears twice"))
    for name, data, expect in cases:
        path = os.path.join(work, "bad_%s.safetensors" % name)
        open(path, "wb").write(data)
        r = subprocess.run([exe, "expect-error", path, expect], capture_output=True, text=True)
        if r.returncode != 0 or path not in r.stdout:
            print("FAIL case %s: rc=%d\n%s%s" % (name, r.returncode, r.stdout, r.stderr))
            fails += 1
        else:
            print("rejected %-18s %s" % (name, r.stdout.strip()))
    if fails:
        print("%d failure(s)" % fails)
        return 1
    print("safetensors peer: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
