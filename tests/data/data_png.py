#!/usr/bin/env python3
"""data_png.py — PNG images (data/png.c), checked against Pillow, which LLaVA's loaders use.

1. Decode: RGB, RGBA, palette (with transparency), greyscale, grey + alpha, 1-bit, 16-bit RGB and
   Adam7-interlaced PNGs
   decode to exactly Pillow's Image.open(f).convert("RGB") bytes (alpha dropped, not composited).
2. Patches of a PNG (image_load_patches: smart_resize grid, antialiased bilinear resize, normalise)
   against Pillow's resize(BILINEAR) of the same pixels, within data_pillow.py's bound (1/127.5 + 1e-5).
3. Poison: a 60000 x 60000 IHDR with a few bytes of data, a 65535 x 65535 one and a zero width are
   refused naming the size before any allocation (the tool's peak RSS stays under 64 MiB); a file cut
   inside its image data, a CRC error, random bytes after the signature, and a missing IEND are refused
   as corrupt PNG, naming libpng's reason.
4. pack: a manifest of JPEGs, PNGs and the bad PNGs packs the good ones, names every bad one with its
   record and reason and skips it; `rrfp-mm train` then reads the PNG samples (their images decoded by
   the loader) for 2 steps.
5. The same manifest packed with --image-preprocess llava trains 4 steps with no sample skipped: the PNGs
   decode at load time under LLaVA's preprocessing as they did in pack (one decode function).
usage: data_png.py DATA_IMAGE_TOOL RRFP_MM WORKDIR
"""
import io, json, os, resource, shutil, struct, subprocess, sys, zlib
import numpy as np
from PIL import Image

TOOL, EXE, W = sys.argv[1:4]
shutil.rmtree(W, ignore_errors=True)
os.makedirs(W)
failed = 0


def fail(msg):
    global failed
    print("FAIL:", msg)
    failed += 1


rng = np.random.default_rng(7)
base = (rng.random((37, 53, 3)) * 255).astype(np.uint8)
alpha = (rng.random((37, 53)) * 255).astype(np.uint8)
cases = {
    "rgb": Image.fromarray(base, "RGB"),
    "rgba": Image.fromarray(np.dstack([base, alpha]), "RGBA"),
    "palette": Image.fromarray(base, "RGB").quantize(colors=37),
    "grey": Image.fromarray(base[:, :, 0], "L"),
    "grey_alpha": Image.fromarray(np.dstack([base[:, :, 0], alpha]), "LA"),
    "one_bit": Image.fromarray(base[:, :, 1] > 127),
}
paths = {}
for name, im in cases.items():
    paths[name] = os.path.join(W, name + ".png")
    kw = {"transparency": 5} if name == "palette" else {}
    im.save(paths[name], **kw)
# 16-bit RGB (Pillow cannot write it from an array: written with zlib here, big-endian samples)
def png_chunk(t, d):
    return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d) & 0xFFFFFFFF)
h16, w16 = 21, 34
v16 = (rng.random((h16, w16, 3)) * 65535).astype(">u2")
raw = b"".join(b"\0" + v16[y].tobytes() for y in range(h16))
png16 = b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", struct.pack(">IIBBBBB", w16, h16, 16, 2, 0, 0, 0)) + \
        png_chunk(b"IDAT", zlib.compress(raw)) + png_chunk(b"IEND", b"")
paths["rgb16"] = os.path.join(W, "rgb16.png")
open(paths["rgb16"], "wb").write(png16)
# Adam7-interlaced RGB (Pillow cannot write interlaced PNGs): the 7 passes' reduced images, filter 0
hi, wi = 13, 11
vi = (rng.random((hi, wi, 3)) * 255).astype(np.uint8)
raw = b""
for y0, x0, dy, dx in ((0, 0, 8, 8), (0, 4, 8, 8), (4, 0, 8, 4), (0, 2, 4, 4), (2, 0, 4, 2), (0, 1, 2, 2), (1, 0, 2, 1)):
    sub = vi[y0::dy, x0::dx]
    if sub.size:
        raw += b"".join(b"\0" + sub[y].tobytes() for y in range(sub.shape[0]))
pngi = b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", struct.pack(">IIBBBBB", wi, hi, 8, 2, 0, 0, 1)) + \
       png_chunk(b"IDAT", zlib.compress(raw)) + png_chunk(b"IEND", b"")
paths["interlaced"] = os.path.join(W, "interlaced.png")
open(paths["interlaced"], "wb").write(pngi)
assert Image.open(paths["interlaced"]).info.get("interlace") == 1 and \
    Image.open(paths["interlaced"]).convert("RGB").tobytes() == vi.tobytes(), "the interlaced PNG is not what it should be"

# 1. decode
same = 0
for name, path in paths.items():
    out = os.path.join(W, name + ".rgb")
    r = subprocess.run([TOOL, "decode", path, "1", out], capture_output=True, text=True)
    if r.returncode != 0:
        fail("%s: decode failed: %s" % (name, r.stderr.strip()))
        continue
    ours = open(out, "rb").read()
    ref = Image.open(path).convert("RGB").tobytes()
    if ours != ref:
        d = np.abs(np.frombuffer(ours, np.uint8).astype(int) - np.frombuffer(ref, np.uint8).astype(int))
        fail("%s: decoded bytes differ from Pillow's convert('RGB') (%d of %d, max %d)" % (name, (d > 0).sum(), d.size, d.max()))
    else:
        same += 1
print("decode: %d of %d PNG kinds equal to Pillow's convert('RGB') byte for byte: %s" % (same, len(paths), ", ".join(paths)))

# 2. patches against Pillow's resize
worst = 0.0
for name in ("rgb", "rgba", "palette", "grey"):
    for p, mn, mx in ((8, 4, 16), (4, 16, 64)):
        out = os.path.join(W, "%s-%d.f32" % (name, p))
        r = subprocess.run([TOOL, "patches", paths[name], str(p), str(mn), str(mx), out], capture_output=True, text=True)
        if r.returncode != 0:
            fail("%s: patches failed: %s" % (name, r.stderr.strip()))
            continue
        gh, gw = (int(x) for x in r.stdout.split())
        im = Image.open(paths[name]).convert("RGB").resize((gw * p, gh * p), Image.BILINEAR)
        a = np.asarray(im).astype(np.float32) / 127.5 - 1.0
        ref = a.reshape(gh, p, gw, p, 3).transpose(0, 2, 1, 3, 4).reshape(-1)
        ours = np.fromfile(out, np.float32)
        d = float(np.abs(ours - ref).max())
        worst = max(worst, d)
        if d > 1 / 127.5 + 1e-5:
            fail("%s p=%d: patches differ from Pillow's resize by %.5f" % (name, p, d))
print("patches vs Pillow's resize(BILINEAR): worst %.5f (bound %.5f)" % (worst, 1 / 127.5 + 1e-5))

# 3. poison
good = open(paths["rgb"], "rb").read()
def ihdr(w, h):
    return b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)) + \
           png_chunk(b"IDAT", zlib.compress(b"\0" * 100)) + png_chunk(b"IEND", b"")
idat = good.index(b"IDAT")
bad = {
    "huge": (ihdr(60000, 60000), "declares 60000x60000 pixels, above the limit"),
    "max": (ihdr(65535, 65535), "declares 65535x65535 pixels, above the limit"),
    "zero": (ihdr(0, 10), "PNG has an empty size 0x10"),
    "cut": (good[:idat + 40], "corrupt PNG"),
    "crc": (good[:idat + 10] + bytes([good[idat + 10] ^ 0xFF]) + good[idat + 11:], "corrupt PNG"),
    "random": (b"\x89PNG\r\n\x1a\n" + bytes(rng.integers(0, 256, 3000, dtype=np.uint8)), "corrupt PNG"),
    "no_iend": (good[:good.index(b"IEND") - 4], "corrupt PNG"),
}
for name, (data, want) in bad.items():
    path = os.path.join(W, "bad-%s.png" % name)
    open(path, "wb").write(data)
    r = subprocess.run(["/usr/bin/time", "-f", "%M", TOOL, "decode", path, "1", path + ".rgb"], capture_output=True, text=True)
    rss_kb = int(r.stderr.strip().split("\n")[-1]) if r.stderr.strip().split("\n")[-1].isdigit() else -1
    if r.returncode == 0 or want not in r.stderr:
        fail("bad-%s: exit %d, stderr %r (expected a refusal with %r)" % (name, r.returncode, r.stderr.strip()[:300], want))
    if rss_kb > 64 * 1024:
        fail("bad-%s: peak RSS %d KiB (allocated for a size it refused?)" % (name, rss_kb))
print("poison: %d damaged PNGs refused with their reason (peak RSS < 64 MiB each)" % len(bad))

# 4. pack a mixed manifest, then train on it
img = os.path.join(W, "images")
os.makedirs(img)
recs = []
for i in range(12):
    name = "im%02d.%s" % (i, "png" if i % 2 else "jpg")
    pic = Image.fromarray((rng.random((48, 64, 3)) * 255).astype(np.uint8), "RGB")
    if i % 2:
        pic.save(os.path.join(img, name))
    else:
        pic.save(os.path.join(img, name), quality=90)
    recs.append({"id": "r%02d" % i, "image": name, "conversations": [
        {"from": "human", "value": "<image>\nWhat colour?"}, {"from": "gpt", "value": "red" if i % 3 else "blue"}]})
for name in ("huge", "cut", "crc"):
    shutil.copy(os.path.join(W, "bad-%s.png" % name), os.path.join(img, "bad-%s.png" % name))
    recs.append({"id": "bad-" + name, "image": "bad-%s.png" % name, "conversations": [
        {"from": "human", "value": "<image>\nWhat colour?"}, {"from": "gpt", "value": "red"}]})
man = os.path.join(W, "m.json")
json.dump(recs, open(man, "w"))
tok = os.path.join(W, "tok.json")
subprocess.run([EXE, "tokenizer", "train", "--vocab", "280", "--manifest", man, "--out", tok, "--quiet"], check=True)
r = subprocess.run([EXE, "pack", "--manifest", man, "--images", img, "--tokenizer", tok, "--out", os.path.join(W, "shards"),
                    "--patch", "8", "--min-patches", "4", "--max-patches", "48"], capture_output=True, text=True)
out = r.stdout + r.stderr
if r.returncode != 0:
    fail("pack failed: %s" % out[-800:])
for name, why in (("huge", "above the limit"), ("cut", "corrupt PNG"), ("crc", "corrupt PNG")):
    if not any(("record 'bad-%s' rejected" % name) in l and why in l for l in out.split("\n")):
        fail("pack does not name bad-%s with '%s': %s" % (name, why, out[-1500:]))
if "packed 12" not in out and "12 packed" not in out:
    print(out[-600:])
S = ["--set", "data.shards=" + os.path.join(W, "shards"), "--set", "data.tokenizer=" + tok, "--set", "model.patch=8",
     "--set", "data.min_patches=4", "--set", "data.max_patches=48", "--set", "model.vision_width=32", "--set",
     "model.vision_layers=1", "--set", "model.vision_heads=2", "--set", "model.text_width=64", "--set", "model.text_layers=2",
     "--set", "model.text_heads=2", "--set", "model.ffn_hidden=172", "--set", "data.microbatches=2", "--set",
     "data.microbatch_tokens=256", "--set", "train.steps=2", "--set", "optim.warmup=1", "--set", "runtime.threads=1",
     "--set", "train.run_dir=" + os.path.join(W, "run"), "--set", "data.on_error=fatal"]
r = subprocess.run([EXE, "train", os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "recipes", "llava.ini")] + S,
                   capture_output=True, text=True)
if r.returncode != 0:
    fail("training on the PNG shards failed: %s" % (r.stdout + r.stderr)[-800:])
else:
    rank = json.load(open(os.path.join(W, "run", "rank-0.json")))
    if rank["images_decoded"] < 4:
        fail("the loader decoded %d images" % rank["images_decoded"])
    print("pack + train: 12 records (6 PNG) packed, 3 bad PNGs named and skipped; 2 steps decoded %d images" % rank["images_decoded"])

# 5. the same manifest packed with --image-preprocess llava (LLaVA-1.5's padding and CLIP normalisation): the
# loader decodes the PNGs with the decode pack used (they were once every one skipped as "not a JPEG" at load
# time, a run on half the data with exit 0); on_error = skip, so a skip would show in the metrics
r = subprocess.run([EXE, "pack", "--manifest", man, "--images", img, "--tokenizer", tok, "--out",
                    os.path.join(W, "llava-shards"), "--patch", "8", "--image-preprocess", "llava", "--image-size", "24"],
                   capture_output=True, text=True)
if r.returncode != 0:
    fail("pack --image-preprocess llava failed: %s" % (r.stdout + r.stderr)[-800:])
L = S + ["--set", "data.shards=" + os.path.join(W, "llava-shards"), "--set", "data.on_error=skip", "--set",
          "data.min_patches=9", "--set", "data.max_patches=9", "--set", "train.steps=4", "--set",
          "train.run_dir=" + os.path.join(W, "run-llava")]  # a later --set of a key wins
r = subprocess.run([EXE, "train", os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "recipes", "llava.ini")] + L,
                   capture_output=True, text=True)
log = r.stdout + r.stderr
if r.returncode != 0:
    fail("training on the llava PNG + JPEG shards failed: %s" % log[-800:])
else:
    rows = [json.loads(l) for l in open(os.path.join(W, "run-llava", "metrics.jsonl"))]
    rank = json.load(open(os.path.join(W, "run-llava", "rank-0.json")))
    warned = [l for l in log.split("\n") if "skipped" in l and "data:" in l]
    if rows[-1]["skipped"] != 0 or warned:
        fail("llava shards: %d samples skipped in %d steps (%s)" % (rows[-1]["skipped"], len(rows), "; ".join(warned[:3])))
    if rank["images_decoded"] < 12:
        fail("llava shards: the loader decoded %d images in 4 steps over 12 records (6 PNG)" % rank["images_decoded"])
    print("pack --image-preprocess llava + train: 4 steps, %d images decoded (JPEG and PNG), 0 skipped"
          % rank["images_decoded"])
if failed:
    sys.exit(1)
print("data png: ok")
