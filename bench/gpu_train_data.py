#!/usr/bin/env python3
"""gpu_train_data.py OUT N [SEED] [IMAGES] [SCALE] — bench/gpu_train.sh's data: OUT/train.json, a LLaVA manifest of N
records shaped like LLaVA-665k's, over OUT/images/*.png (IMAGES generated images, default 64, that the records
share as the data set's records share COCO's). Standard library only; the same arguments give the same bytes.

The records follow LLaVA-665k's mix (llava_v1_5_mix665k.json: LLaVA-Instruct 158k, ShareGPT 40k, VQAv2 83k,
GQA 72k, OKVQA 9k, OCR-VQA 80k, A-OKVQA 66k, TextCaps 22k, RefCOCO 48k, VG 86k): 6% text-only (ShareGPT's
share), the rest one image each with the turn counts and question / answer lengths (in words, one token each
under the tokenizer gpu_train.sh trains on them, within a few) of their source: many short single-phrase
answers (the VQA sets), region descriptions, multiple choice, captions, and LLaVA's own conversations,
detailed descriptions and reasoning; ShareGPT's long turns cut at about 2,000 words. Images are PNGs of
COCO's common sizes (640 x 480, 480 x 640, 640 x 427, 500 x 375, 612 x 612), smooth gradients with blocks
of colour; pack --image-preprocess llava pads and resizes each to 336 x 336 (576 patches). OUT/template.txt: the
vicuna_v1 template's own text, for the tokenizer. SCALE (default 1)
multiplies every length (the CI's tiny run: 0.1), images then 1/4 the size."""
import json
import os
import random
import struct
import sys
import zlib

WORDS = ("the a of and to in is on with that this for are it as at by an be from or which image picture shows "
         "person man woman people dog cat car street table room building sign red blue green white black yellow "
         "left right top bottom front behind near next large small two three many some standing sitting holding "
         "wearing looking walking playing there what how where why who when does do can could would should will "
         "answer question word phrase single using describe detail scene object color number count visible appears "
         "background foreground water sky tree grass road window door light plate food bus train bike horse bird "
         "kitchen bathroom bed chair computer phone book clock umbrella bag hat shirt jacket glass cup bowl pizza "
         "however because therefore also likely possible might suggests indicates overall several various each "
         "code function value list return python data example first second step then result use make new time "
         ).split()
SIZES = ((640, 480), (480, 640), (640, 427), (500, 375), (612, 612))
# (weight, kind): the mix above in records per 1000
KINDS = ((60, "sharegpt"), (125, "vqav2"), (108, "gqa"), (14, "okvqa"), (120, "ocrvqa"), (99, "aokvqa"),
         (33, "textcaps"), (72, "refcoco"), (129, "vg"), (87, "conv"), (35, "detail"), (118, "reason"))


def png(w, h, seed):
    """A w x h RGB PNG: a gradient with a few solid blocks (rows built as bytes: fast in pure Python)."""
    rnd = random.Random(seed)
    base = [rnd.randrange(256) for _ in range(3)]
    blocks = [(rnd.randrange(w), rnd.randrange(h), rnd.randrange(20, w // 2), rnd.randrange(20, h // 2),
               bytes(rnd.randrange(256) for _ in range(3))) for _ in range(4)]
    ramp = bytes(v for x in range(w) for v in ((base[0] + x) & 255, base[1], base[2]))
    raw = bytearray()
    for y in range(h):
        row = bytearray(ramp)
        g = (base[1] + y) & 255
        row[1::3] = bytes([g]) * w
        for bx, by, bw, bh, col in blocks:
            if by <= y < by + bh:
                x1 = min(w, bx + bw)
                row[3 * bx:3 * x1] = col * (x1 - bx)
        raw += b"\0" + row

    def chunk(t, d):
        return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d) & 0xFFFFFFFF)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)) +
            chunk(b"IDAT", zlib.compress(bytes(raw), 1)) + chunk(b"IEND", b""))


def text(rnd, lo, hi, scale=1.0):
    n = rnd.randint(max(1, round(lo * scale)), max(1, round(hi * scale)))
    return " ".join(rnd.choice(WORDS) for _ in range(n)).capitalize() + "."


def turns(rnd, kind):
    """(question words lo, hi), (answer words lo, hi), turns lo, hi — per source."""
    return {
        "sharegpt": ((15, 150), (60, 400), 1, 6),
        "vqav2": ((6, 12), (1, 2), 2, 8),
        "gqa": ((8, 16), (1, 2), 3, 10),
        "okvqa": ((8, 14), (1, 3), 1, 3),
        "ocrvqa": ((6, 10), (2, 6), 3, 8),
        "aokvqa": ((25, 40), (1, 2), 1, 2),
        "textcaps": ((8, 12), (10, 25), 1, 1),
        "refcoco": ((12, 20), (6, 14), 2, 8),
        "vg": ((12, 20), (8, 18), 3, 10),
        "conv": ((8, 20), (25, 110), 2, 6),
        "detail": ((8, 14), (80, 180), 1, 1),
        "reason": ((12, 35), (90, 220), 1, 2),
    }[kind]


def main():
    out, n = sys.argv[1], int(sys.argv[2])
    seed = int(sys.argv[3]) if len(sys.argv) > 3 else 1
    n_img = int(sys.argv[4]) if len(sys.argv) > 4 else 64
    scale = float(sys.argv[5]) if len(sys.argv) > 5 else 1.0
    rnd = random.Random(seed)
    os.makedirs(os.path.join(out, "images"), exist_ok=True)
    for i in range(n_img):
        w, h = SIZES[i % len(SIZES)]
        if scale < 1:
            w, h = w // 4, h // 4
        with open(os.path.join(out, "images", "img%05d.png" % i), "wb") as f:
            f.write(png(w, h, seed * 100003 + i))
    total = sum(w for w, _ in KINDS)
    recs = []
    for r in range(n):
        x, kind = rnd.randrange(total), None
        for w, k in KINDS:
            if x < w:
                kind = k
                break
            x -= w
        q, a, t0, t1 = turns(rnd, kind)
        conv, budget = [], 2000 * scale
        for t in range(rnd.randint(t0, t1)):
            qs, ans = text(rnd, *q, scale), text(rnd, *a, scale)
            budget -= len(qs.split()) + len(ans.split())
            if t and budget < 0:  # ShareGPT's conversations cut at the context
                break
            if t == 0 and kind != "sharegpt":
                qs = "<image>\n" + qs
            conv += [{"from": "human", "value": qs}, {"from": "gpt", "value": ans}]
        rec = {"id": "%s-%06d" % (kind, r), "conversations": conv}
        if kind != "sharegpt":
            rec["image"] = "img%05d.png" % rnd.randrange(n_img)
        recs.append(rec)
    with open(os.path.join(out, "train.json"), "w") as f:
        json.dump(recs, f, indent=0)
    # the chat template's own text (vicuna_v1's system prompt and roles), for the tokenizer to learn as Vicuna's
    # knows it: about 35 tokens a sample, not the bytes of words it never saw
    with open(os.path.join(out, "template.txt"), "w") as f:
        f.write(("A chat between a curious user and an artificial intelligence assistant. The assistant gives helpful, "
                 "detailed, and polite answers to the user's questions. USER: <image>\n ASSISTANT:\n") * 4)
    print("gpu_train_data: %d records (%d text-only), %d images in %s" %
          (n, sum("image" not in r for r in recs), n_img, out))


if __name__ == "__main__":
    main()
