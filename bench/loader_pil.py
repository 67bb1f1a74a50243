#!/usr/bin/python3
"""loader_pil.py — the Python baseline for bench/loader.sh: the same work as the C loader on the same
.rrs shards, in one thread, with the usual Python tools: header and index with struct, frames with
libzstd (ctypes; the same library the C side links), JPEG decode with Pillow (Image.draft: the same
DCT-domain scaling rule), Image.resize(BILINEAR) to the smart_resize grid, numpy for x/127.5 - 1 and the
patch layout, and fifo packing into microbatch arrays (ids with -1 at image positions, targets,
positions, patches). Prints the same line as rrfp-bench-loader.
usage: loader_pil.py SHARDS P MIN MAX BUDGET"""
import ctypes
import glob
import io
import math
import os
import struct
import sys
import time

import numpy as np
from PIL import Image

shards, P, MINP, MAXP, BUDGET = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
zstd = ctypes.CDLL("libzstd.so.1")
zstd.ZSTD_getFrameContentSize.restype = ctypes.c_ulonglong
zstd.ZSTD_getFrameContentSize.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
zstd.ZSTD_decompress.restype = ctypes.c_size_t
zstd.ZSTD_decompress.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p, ctypes.c_size_t]


def smart_resize(h, w):
    hb, wb = max(P, round(h / P) * P), max(P, round(w / P) * P)
    if hb * wb > MAXP * P * P:
        beta = math.sqrt(h * w / (MAXP * P * P))
        hb, wb = max(P, math.floor(h / beta / P) * P), max(P, math.floor(w / beta / P) * P)
    elif hb * wb < MINP * P * P:
        beta = math.sqrt(MINP * P * P / (h * w))
        hb, wb = math.ceil(h * beta / P) * P, math.ceil(w * beta / P) * P
    gh, gw = hb // P, wb // P
    while gh * gw > MAXP:
        if gh >= gw and gh > 1:
            gh -= 1
        else:
            gw -= 1
    return gh, gw


def samples():
    for path in sorted(glob.glob(os.path.join(shards, "*.rrs"))):
        data = open(path, "rb").read()
        magic, ver, hsz, n, tokh, ioff, isz, img_tok = struct.unpack_from("<8sIIQQQQi", data, 0)
        assert magic == b"RRFPSHRD" and ver == 1
        pos = ioff
        for _ in range(n):
            off, size, ntok, nsup, nimg, idl = struct.unpack_from("<QIIIHH", data, pos)
            pos += 24 + idl + 8 * nimg
            frame = data[off:off + size]
            cs = zstd.ZSTD_getFrameContentSize(frame, size)
            buf = ctypes.create_string_buffer(cs)
            got = zstd.ZSTD_decompress(buf, cs, frame, size)
            assert got == cs
            payload = buf.raw
            _, nt, ni = struct.unpack_from("<4sII", payload, 0)
            ids = np.frombuffer(payload, dtype="<i4", count=nt, offset=12)
            mask = np.frombuffer(payload, dtype=np.uint8, count=nt, offset=12 + 4 * nt)
            lens = struct.unpack_from("<%dI" % ni, payload, 12 + 5 * nt)
            o = 12 + 5 * nt + 4 * ni
            jpegs = []
            for ln in lens:
                jpegs.append(payload[o:o + ln])
                o += ln
            yield ids, mask, jpegs, img_tok, size


def image_patches(jpeg):
    im = Image.open(io.BytesIO(jpeg))
    w, h = im.size
    gh, gw = smart_resize(h, w)
    im.draft("RGB", (gw * P, gh * P))
    im = im.convert("RGB").resize((gw * P, gh * P), Image.BILINEAR)
    a = np.asarray(im, dtype=np.float32) / 127.5 - 1.0
    return a.reshape(gh, P, gw, P, 3).transpose(0, 2, 1, 3, 4).reshape(gh * gw, 3 * P * P), gh, gw


def assemble(batch):
    ids, targets, pos, patches = [], [], [], []
    for s_ids, s_sup, s_patches in batch:
        ids.append(s_ids)
        t = np.full(len(s_ids), -100, dtype=np.int32)
        nxt = np.nonzero(s_sup[1:])[0]
        t[nxt] = s_ids[nxt + 1]
        targets.append(t)
        pos.append(np.arange(len(s_ids), dtype=np.int32))
        patches.extend(s_patches)
    return (np.concatenate(ids), np.concatenate(targets), np.concatenate(pos),
            np.concatenate(patches) if patches else None)


t0, c0 = time.perf_counter(), time.process_time()
n = tokens = nbytes = 0
batch, batch_len = [], 0
for ids, mask, jpegs, img_tok, size in samples():
    nbytes += size
    imgs = [image_patches(j) for j in jpegs]
    # expand <image> into its patch positions
    out_ids, out_sup, k = [], [], 0
    for tid, m in zip(ids.tolist(), mask.tolist()):
        if tid == img_tok:
            npch = imgs[k][1] * imgs[k][2]
            out_ids.extend([-1] * npch)
            out_sup.extend([0] * npch)
            k += 1
        else:
            out_ids.append(tid)
            out_sup.append(m)
    s_ids, s_sup = np.array(out_ids, dtype=np.int32), np.array(out_sup, dtype=np.uint8)
    L = len(s_ids)
    if batch_len + L > BUDGET:
        mb = assemble(batch)
        tokens += len(mb[0])
        batch, batch_len = [], 0
    batch.append((s_ids, s_sup, [p for p, _, _ in imgs]))
    batch_len += L
    n += 1
if batch:
    tokens += len(assemble(batch)[0])
print("samples %d wall %.4f cpu %.4f mib %.4f tokens %d wait 0" %
      (n, time.perf_counter() - t0, time.process_time() - c0, nbytes / 1048576.0, tokens))
