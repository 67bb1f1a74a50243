#!/usr/bin/python3
"""data_cmyk_gif.py — CMYK / YCCK JPEGs and GIFs (data/image.c, data/gif.c), which LLaVA's data holds (OCR-VQA's
GIFs under .jpg names), against Pillow's Image.open(f).convert("RGB"), the decode LLaVA's own code runs.
1. Decode, byte for byte against Pillow: CMYK JPEGs with Adobe's marker (as Pillow and Photoshop write them), without
   it, YCCK (Adobe transform 2, written by libjpeg-turbo), progressive CMYK; each at DCT scale 1, and at 2, 4 and 8
   against Pillow's draft. GIFs: Pillow's own (real LZW, interlaced and not, animated: the first frame), and
   written byte by byte (tests/data/gif_build.py): a first frame smaller than the screen at an offset (outside it
   index 0, or the transparency index), a local colour table, indices past the table, no table at all, a frame
   reaching past the screen, a zero-size screen, an interlaced frame of 13 rows (all four passes), GIF87a, a
   2-bit LZW code size, a transparent index inside the frame (its colour, not composited).
2. pack -> shards -> the loader's pixels (tests/data/test_image_loader.c), under --image-preprocess smart and llava:
   each new image is packed beside a PNG twin holding Pillow's convert("RGB") bytes of it; the loader's patches of
   the two must be equal bit for bit (the PNG path is Pillow's: tests/data/data_png.py), and under llava also
   within 1e-6 of LLaVA's preprocessing of Pillow's bytes in numpy (a byte off misses by > 1e-2). A CMYK JPEG the
   loader decodes DCT-scaled (smart) within data_pillow.py's bound of Pillow's draft + resize(BILINEAR).
3. Damage: a GIF cut in its image data, a bad LZW code, LZW data that ends before the frame does, an empty frame on
   a zero-size screen, no frame before the trailer, a 65535 x 65535 screen and a 60000 x 60000 frame in a few
   bytes, a truncated CMYK JPEG: the tool refuses each with its reason (peak RSS under 64 MiB: nothing allocated
   for a refused size) and pack names each one's record and file and skips it.
usage: data_cmyk_gif.py DATA_IMAGE_TOOL TEST_IMAGE_LOADER RRFP_MM WORKDIR. Exit 77 without Pillow / numpy."""
import ctypes
import ctypes.util
import io
import json
import math
import os
import shutil
import subprocess
import sys

try:
    import numpy as np
    from PIL import Image
except ImportError:
    print("Pillow or numpy missing: skipped")
    sys.exit(77)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gif_build  # noqa: E402

TOOL, LOADER, EXE, W = sys.argv[1:5]
shutil.rmtree(W, ignore_errors=True)
os.makedirs(W)
failed = 0


def fail(msg):
    global failed
    print("FAIL:", msg)
    failed += 1


SKIMAGE = "/usr/lib/python3/dist-packages/skimage/data"
photo = Image.open(os.path.join(SKIMAGE, "rocket.jpg")).convert("RGB")
rng = np.random.default_rng(11)


def ycck_jpeg(cmyk, quality=90):
    """libjpeg-turbo's TurboJPEG compresses CMYK pixels as YCCK (an Adobe marker with transform 2)"""
    lib = ctypes.CDLL(ctypes.util.find_library("turbojpeg") or "libturbojpeg.so.0")
    lib.tjInitCompress.restype = ctypes.c_void_p
    h = lib.tjInitCompress()
    buf, n = ctypes.POINTER(ctypes.c_ubyte)(), ctypes.c_ulong(0)
    px = cmyk.tobytes()
    TJPF_CMYK, TJSAMP_420 = 11, 2
    rc = lib.tjCompress2(ctypes.c_void_p(h), px, cmyk.size[0], 0, cmyk.size[1], TJPF_CMYK, ctypes.byref(buf),
                         ctypes.byref(n), TJSAMP_420, quality, 0)
    assert rc == 0, "tjCompress2 failed"
    out = ctypes.string_at(buf, n.value)
    lib.tjFree(buf)
    lib.tjDestroy(ctypes.c_void_p(h))
    return out


def strip_app14(jpeg):
    """the file without its Adobe (APP14) marker segment"""
    i = 2
    while i + 4 <= len(jpeg) and jpeg[i] == 0xFF:
        m, n = jpeg[i + 1], (jpeg[i + 2] << 8) | jpeg[i + 3]
        if m == 0xEE:
            return jpeg[:i] + jpeg[i + 2 + n:]
        if m == 0xDA:
            break
        i += 2 + n
    raise AssertionError("no APP14 marker")


def save(name, data):
    p = os.path.join(W, name)
    open(p, "wb").write(data)
    return p


def pil_bytes(im, **kw):
    b = io.BytesIO()
    im.save(b, **kw)
    return b.getvalue()


# ---- the images --------------------------------------------------------------------------------------------
def cmyk(size):
    """the photograph as CMYK with a real black channel (Pillow's convert("CMYK") leaves K at 0, where the
    CMYK -> RGB formulas agree): K from the darkness, C, M, Y what is left of each channel"""
    im = photo.resize(size)
    k = im.convert("L").point(lambda v: (255 - v) * 3 // 5)
    return Image.merge("CMYK", [ch.point(lambda v: 255 - v) for ch in im.split()] + [k])


files = {}
c1 = cmyk((61, 45))
files["cmyk_adobe.jpg"] = pil_bytes(c1, format="JPEG", quality=90)
files["cmyk_plain.jpg"] = strip_app14(files["cmyk_adobe.jpg"])
files["ycck.jpg"] = ycck_jpeg(cmyk((53, 38)))
files["cmyk_progressive.jpg"] = pil_bytes(cmyk((47, 33)), format="JPEG", quality=85, progressive=True)
files["cmyk_big.jpg"] = pil_bytes(cmyk((331, 219)), format="JPEG", quality=90)  # DCT-scaled
q = photo.resize((57, 41)).quantize(colors=60)
files["gif_pillow.gif"] = pil_bytes(q, format="GIF", interlace=False)
files["gif_pillow_interlaced.gif"] = pil_bytes(q, format="GIF", interlace=True)
frames = [photo.resize((50, 36)).quantize(colors=40), photo.transpose(Image.FLIP_LEFT_RIGHT).resize((50, 36)).quantize(colors=40),
          Image.new("RGB", (50, 36), (10, 200, 30)).quantize(colors=4)]
files["gif_animated.gif"] = pil_bytes(frames[0], format="GIF", save_all=True, append_images=frames[1:], duration=100, loop=0)
pal = bytes(rng.integers(0, 256, 3 * 20, dtype=np.uint8))  # 20 colours: a 32-entry table, 12 of them black
lpal = bytes(rng.integers(0, 256, 3 * 7, dtype=np.uint8))


def px(h, w, top=256):
    return rng.integers(0, top, (h, w)).tolist()


F = dict
files["gif_offset.gif"] = gif_build.gif(31, 23, [F(x=5, y=7, w=17, h=11, px=px(11, 17, 20))], gpal=pal)
files["gif_offset_trns.gif"] = gif_build.gif(31, 23, [F(x=5, y=7, w=17, h=11, px=px(11, 17, 20), trns=6)], gpal=pal)
files["gif_trns_inside.gif"] = gif_build.gif(19, 13, [F(x=0, y=0, w=19, h=13, px=px(13, 19, 20), trns=3)], gpal=pal)
files["gif_local.gif"] = gif_build.gif(21, 17, [F(x=0, y=0, w=21, h=17, px=px(17, 21, 8), lpal=lpal)], gpal=pal)
files["gif_beyond.gif"] = gif_build.gif(23, 19, [F(x=0, y=0, w=23, h=19, px=px(19, 23))], gpal=pal)
files["gif_notable.gif"] = gif_build.gif(22, 14, [F(x=2, y=1, w=20, h=12, px=px(12, 20))])
files["gif_grow.gif"] = gif_build.gif(10, 8, [F(x=6, y=3, w=20, h=15, px=px(15, 20, 20))], gpal=pal)
files["gif_zero_screen.gif"] = gif_build.gif(0, 0, [F(x=4, y=2, w=18, h=13, px=px(13, 18, 20))], gpal=pal)
files["gif_interlaced13.gif"] = gif_build.gif(16, 13, [F(x=0, y=0, w=16, h=13, px=px(13, 16, 20), interlace=True)], gpal=pal)
files["gif87a.gif"] = gif_build.gif(17, 12, [F(x=0, y=0, w=17, h=12, px=px(12, 17, 20))], gpal=pal, version=b"GIF87a")
files["gif_2bit.gif"] = gif_build.gif(18, 16, [F(x=0, y=0, w=18, h=16, px=px(16, 18, 4), min_bits=2)], gpal=pal[:12])
files["gif_two_frames.gif"] = gif_build.gif(20, 15, [F(x=0, y=0, w=20, h=15, px=px(15, 20, 20)),
                                                      F(x=3, y=3, w=9, h=9, px=px(9, 9, 20), trns=2)], gpal=pal)
paths = {k: save(k, v) for k, v in files.items()}

# the files are what their names say, as Pillow reads them
info = {k: Image.open(p) for k, p in paths.items()}
assert all(info[k].mode == "CMYK" for k in paths if k.endswith(".jpg")), "not every CMYK JPEG opens as CMYK"
assert info["cmyk_adobe.jpg"].info.get("adobe_transform") == 0 and "adobe" not in info["cmyk_plain.jpg"].info
assert info["ycck.jpg"].info.get("adobe_transform") == 2, "the YCCK JPEG is not YCCK"
assert min(np.asarray(info[k])[:, :, 3].max() for k in paths if k.endswith(".jpg")) > 60, "a CMYK JPEG with no black"
assert info["cmyk_progressive.jpg"].info.get("progressive")
assert info["gif_pillow_interlaced.gif"].info.get("interlace") or files["gif_pillow_interlaced.gif"] != files["gif_pillow.gif"]
assert getattr(info["gif_animated.gif"], "n_frames", 1) == 3, "the animated GIF has not 3 frames"
assert info["gif_zero_screen.gif"].size == (22, 15) and info["gif_grow.gif"].size == (26, 18)
assert info["gif_notable.gif"].mode == "L"

# ---- 1. decode ---------------------------------------------------------------------------------------------
same = 0
for name, path in paths.items():
    scales = (1, 2, 4, 8) if name.endswith(".jpg") else (1,)
    for s in scales:
        out = os.path.join(W, "%s-%d.rgb" % (name, s))
        r = subprocess.run([TOOL, "decode", path, str(s), out], capture_output=True, text=True)
        if r.returncode != 0:
            fail("%s scale %d: decode failed: %s" % (name, s, r.stderr.strip()))
            continue
        w, h = (int(x) for x in r.stdout.split())
        im = Image.open(path)
        if s > 1:
            im.draft("RGB", (im.size[0] // s, im.size[1] // s))
            full = Image.open(path).size
            if im.size != (math.ceil(full[0] / s), math.ceil(full[1] / s)):
                fail("%s: Pillow's draft at 1/%d gives %s (the test's sizes must give that scale)" % (name, s, im.size))
        ref = im.convert("RGB")
        ours = open(out, "rb").read()
        if (w, h) != ref.size:
            fail("%s scale %d: %dx%d, Pillow %dx%d" % (name, s, w, h, *ref.size))
        elif ours != ref.tobytes():
            d = np.abs(np.frombuffer(ours, np.uint8).astype(int) - np.frombuffer(ref.tobytes(), np.uint8).astype(int))
            fail("%s scale %d: bytes differ from Pillow's convert('RGB') (%d of %d, max %d)" % (name, s, (d > 0).sum(), d.size, d.max()))
        else:
            same += 1
print("decode: %d of %d (image, scale) equal to Pillow's convert('RGB') byte for byte (%d CMYK/YCCK JPEGs at scales "
      "1, 2, 4, 8; %d GIFs)" % (same, sum(4 if k.endswith(".jpg") else 1 for k in paths),
                                sum(k.endswith(".jpg") for k in paths), sum(k.endswith(".gif") for k in paths)))

# ---- 2. pack -> shards -> the loader ------------------------------------------------------------------------
img = os.path.join(W, "images")
os.makedirs(img)
recs = []
twins = []
for i, (name, path) in enumerate(sorted(paths.items())):
    stem = name.rsplit(".", 1)[0]
    # LLaVA's .jpg names whatever the file is
    shutil.copy(path, os.path.join(img, stem + ".jpg"))
    Image.open(path).convert("RGB").save(os.path.join(img, stem + "_twin.png"))
    for sid, f in ((stem, stem + ".jpg"), (stem + "_twin", stem + "_twin.png")):
        recs.append({"id": sid, "image": f, "conversations": [
            {"from": "human", "value": "<image>\nWhat is it?"}, {"from": "gpt", "value": "a picture" if i % 2 else "a photo"}]})
    twins.append(stem)
man = os.path.join(W, "m.json")
json.dump(recs, open(man, "w"))
tok = os.path.join(W, "tok.json")
subprocess.run([EXE, "tokenizer", "train", "--vocab", "270", "--manifest", man, "--out", tok, "--quiet"], check=True)
MEAN = np.array([0.48145466, 0.4578275, 0.40821073])
STD = np.array([0.26862954, 0.26130258, 0.27577711])


def llava_ref(path, size, p):
    im = Image.open(path).convert("RGB")
    s = max(im.size)
    sq = Image.new("RGB", (s, s), tuple(int(x * 255) for x in MEAN))
    sq.paste(im, ((s - im.size[0]) // 2, (s - im.size[1]) // 2))
    a = (np.asarray(sq.resize((size, size), Image.BICUBIC)).astype(np.float64) / 255.0 - MEAN) / STD
    g = size // p
    return a.reshape(g, p, g, p, 3).transpose(0, 2, 1, 3, 4).reshape(g * g, -1)


def loader_patches(shards, p, mn, mx, tag):
    out = os.path.join(W, tag)
    r = subprocess.run([LOADER, shards, str(p), str(mn), str(mx), out], capture_output=True, text=True)
    if r.returncode != 0:
        fail("%s: the loader failed: %s" % (tag, (r.stdout + r.stderr)[-800:]))
        return {}
    raw = np.fromfile(out + ".f32", np.float32)
    got, at = {}, 0
    for line in open(out + ".txt"):
        sid, gh, gw = line.split()
        n = int(gh) * int(gw) * 3 * p * p
        got[sid] = (int(gh), int(gw), raw[at:at + n].reshape(int(gh) * int(gw), -1))
        at += n
    return got


for prep, extra, p, mn, mx in (("smart", [], 8, 4, 64), ("llava", ["--image-size", "32"], 8, 16, 16)):
    shards = os.path.join(W, "shards-" + prep)
    r = subprocess.run([EXE, "pack", "--manifest", man, "--images", img, "--tokenizer", tok, "--out", shards, "--patch", str(p),
                        "--min-patches", str(mn), "--max-patches", str(mx), "--image-preprocess", prep, "--strict"] + extra,
                       capture_output=True, text=True)
    if r.returncode != 0:
        fail("pack --image-preprocess %s: %s" % (prep, (r.stdout + r.stderr)[-800:]))
        continue
    got = loader_patches(shards, p, mn, mx, "loader-" + prep)
    if len(got) != len(recs):
        fail("%s: the loader gave %d images, the manifest has %d" % (prep, len(got), len(recs)))
    equal = worst = 0
    for stem in twins:
        if stem not in got or stem + "_twin" not in got:
            fail("%s: %s or its twin missing from the loader's images" % (prep, stem))
            continue
        a, b = got[stem], got[stem + "_twin"]
        if stem == "cmyk_big" and prep == "smart":  # DCT-scaled: Pillow's draft, then resize(BILINEAR)
            gh, gw, pt = a
            im = Image.open(paths["cmyk_big.jpg"])
            im.draft("RGB", (gw * p, gh * p))
            ref = np.asarray(im.convert("RGB").resize((gw * p, gh * p), Image.BILINEAR)).astype(np.float32) / 127.5 - 1.0
            ref = ref.reshape(gh, p, gw, p, 3).transpose(0, 2, 1, 3, 4).reshape(gh * gw, -1)
            d = float(np.abs(pt - ref).max())
            if d > 1 / 127.5 + 1e-5:
                fail("smart: cmyk_big's patches differ from Pillow's draft + resize by %.5f" % d)
            continue
        if a[:2] != b[:2] or not np.array_equal(a[2], b[2]):
            fail("%s: %s: the loader's patches (%dx%d) differ from its PNG twin's (%dx%d)%s" % (
                prep, stem, a[0], a[1], b[0], b[1],
                "" if a[:2] != b[:2] else " by up to %.5f" % float(np.abs(a[2] - b[2]).max())))
            continue
        equal += 1
        if prep == "llava":
            d = float(np.abs(a[2] - llava_ref(paths[[k for k in paths if k.startswith(stem + ".")][0]], 32, p)).max())
            worst = max(worst, d)
            if d > 1e-6:
                fail("llava: %s: the loader's patches differ from LLaVA's preprocessing of Pillow's bytes by %.2e" % (stem, d))
    print("pack --image-preprocess %s -> loader: %d of %d new-kind images equal bit for bit to their Pillow-decoded PNG "
          "twins%s" % (prep, equal, len(twins) - (prep == "smart"),
                       "; worst %.1e from LLaVA's preprocessing in numpy" % worst if prep == "llava" else
                       "; the DCT-scaled CMYK within 1/127.5 of Pillow's draft + resize"))

# ---- 3. damage ---------------------------------------------------------------------------------------------
good = files["gif_offset.gif"]
lz = gif_build.lzw(sum(px(11, 17, 20), []))
bad_code = bytearray(lz)
bad_code[5] = 0xFF  # codes far past the table (at most 258 + a few entries after a clear)
bad_code[6] = 0xFF
bad = {
    "cut": (good[:len(good) // 2], "corrupt GIF: in its first frame's image data: the file is cut short"),
    "bad_lzw": (gif_build.gif(31, 23, [F(x=5, y=7, w=17, h=11, data=bytes(bad_code))], gpal=pal),
                "corrupt GIF: in its first frame's image data: Image is defective, decoding aborted"),
    "short_lzw": (gif_build.gif(31, 23, [F(x=5, y=7, w=17, h=11, data=gif_build.lzw(sum(px(5, 17, 20), [])))], gpal=pal),
                  "corrupt GIF: in its first frame's image data: Image EOF detected before image complete"),
    "empty": (gif_build.gif(0, 0, [F(x=0, y=0, w=0, h=0, px=[])], gpal=pal), "corrupt GIF: its first frame is empty (0x0)"),
    "no_frame": (gif_build.gif(40, 30, [], gpal=pal), "corrupt GIF: no frame before its trailer"),
    "huge_screen": (gif_build.gif(65535, 65535, [F(x=0, y=0, w=4, h=4, px=px(4, 4, 20))], gpal=pal),
                    "GIF declares 65535x65535 pixels, above the limit"),
    "huge_frame": (gif_build.gif(16, 16, [F(x=0, y=0, w=60000, h=60000, data=gif_build.lzw([1] * 100))], gpal=pal),
                   "GIF declares 60000x60000 pixels, above the limit"),
    "cut_cmyk": (files["cmyk_adobe.jpg"][:len(files["cmyk_adobe.jpg"]) * 2 // 3], "corrupt JPEG: Premature end of JPEG file"),
}
for name, (data, want) in bad.items():
    path = save("bad-%s.jpg" % name, data)
    r = subprocess.run(["/usr/bin/time", "-f", "%M", TOOL, "decode", path, "1", path + ".rgb"], capture_output=True, text=True)
    last = r.stderr.strip().split("\n")[-1]
    rss_kb = int(last) if last.isdigit() else -1
    if r.returncode == 0 or want not in r.stderr:
        fail("bad-%s: exit %d, stderr %r (expected a refusal with %r)" % (name, r.returncode, r.stderr.strip()[:300], want))
    if rss_kb > 64 * 1024:
        fail("bad-%s: peak RSS %d KiB (allocated for a size it refused?)" % (name, rss_kb))
    shutil.copy(path, os.path.join(img, "bad-%s.jpg" % name))
print("damage: %d damaged files refused with their reason (peak RSS < 64 MiB each)" % len(bad))
recs2 = recs[:4] + [{"id": "bad-" + n, "image": "bad-%s.jpg" % n, "conversations": [
    {"from": "human", "value": "<image>\nWhat is it?"}, {"from": "gpt", "value": "a photo"}]} for n in bad]
man2 = os.path.join(W, "m2.json")
json.dump(recs2, open(man2, "w"))
r = subprocess.run([EXE, "pack", "--manifest", man2, "--images", img, "--tokenizer", tok, "--out", os.path.join(W, "shards-bad"),
                    "--patch", "8", "--min-patches", "4", "--max-patches", "64", "--max-reject-fraction", "1"],
                   capture_output=True, text=True)
log = r.stdout + r.stderr
if r.returncode != 0:
    fail("pack of the damaged manifest: exit %d: %s" % (r.returncode, log[-800:]))
for name, (_, want) in bad.items():
    line = "record 'bad-%s' rejected (bad_image): image '%s': %s" % (name, os.path.join(img, "bad-%s.jpg" % name), want)
    if line not in log:
        fail("pack does not name bad-%s with %r: %s" % (name, line, log[-1500:]))
if "packed 4" not in log:
    fail("pack of 4 good and %d damaged records: %s" % (len(bad), log[-400:]))
print("pack: %d damaged records named with their file and reason and skipped, 4 good ones packed" % len(bad))
if failed:
    sys.exit(1)
print("data cmyk gif: ok")
