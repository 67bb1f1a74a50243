#!/usr/bin/python3
"""data_pillow.py — our image preprocessing (data/image.c, through tests/data/data_image_tool.c) against
independent references:

1. smart_resize grids against Qwen2-VL's smart_resize (transformers' image_processing_qwen2_vl.py,
   factor = p, min_pixels = min_patches p^2, max_pixels = max_patches p^2), over 20,000 random sizes.
   Our one documented addition (the longer side loses patches while the grid is above max_patches)
   is applied to the reference's output and counted separately.
2. The DCT-scaled decode against Pillow's Image.draft (the same libjpeg-turbo, same scale rule):
   identical bytes.
3. The resize against Pillow's Image.resize(BILINEAR) on real photographs (python3-skimage's data
   folder), a greyscale JPEG, a progressive JPEG, a 4:4:4 JPEG and a small image that is up-scaled.
   Bound: |ours - Pillow| <= 1.0 (+1e-3 float slack) in 0..255 units. Why: Pillow's 8-bit path
   rounds twice — the horizontal pass is stored as uint8 (error <= 0.5, and the vertical pass's
   weights are non-negative and sum to 1, so it stays <= 0.5) and the output is rounded again
   (<= 0.5); its 22-bit fixed-point weights add < 1e-4. We keep float throughout, so the two differ
   by at most 1.0; the mean difference is printed to show it is rounding, not a shifted filter.
4. The normalised patches (x/127.5 - 1, row-major grid, (row, col, channel) per patch) against a
   numpy patchify of Pillow's resize: bound 1/127.5 (+1e-5), the same bound in normalised units.
Exit 77 when Pillow or numpy is missing.
"""
import math
import os
import random
import subprocess
import sys

try:
    import numpy as np
    from PIL import Image
except ImportError as e:  # pragma: no cover
    print("skipped: %s" % e)
    sys.exit(77)

TOOL, WORK = sys.argv[1], sys.argv[2]
os.makedirs(WORK, exist_ok=True)
SKIMAGE = "/usr/lib/python3/dist-packages/skimage/data"
fails = 0


def fail(msg):
    global fails
    fails += 1
    print("FAIL:", msg)


def qwen_smart_resize(height, width, factor, min_pixels, max_pixels):
    """transformers.models.qwen2_vl.image_processing_qwen2_vl.smart_resize (v4.45)."""
    if max(height, width) / min(height, width) > 200:
        raise ValueError("aspect ratio")
    h_bar = max(factor, round(height / factor) * factor)
    w_bar = max(factor, round(width / factor) * factor)
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt((height * width) / max_pixels)
        h_bar = max(factor, math.floor(height / beta / factor) * factor)
        w_bar = max(factor, math.floor(width / beta / factor) * factor)
    elif h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h_bar = math.ceil(height * beta / factor) * factor
        w_bar = math.ceil(width * beta / factor) * factor
    return h_bar, w_bar


# ---- 1. smart_resize ------------------------------------------------------------------------------
rng = random.Random(1)
cases = []
for _ in range(20000):
    p = rng.choice([8, 14, 16, 28])
    mn, mx = rng.choice([(16, 64), (4, 1024), (64, 64), (1, 16384), (256, 1280), (100, 101)])
    h = rng.randint(1, 3000)
    w = max(1, min(3000, int(h * math.exp(rng.uniform(-5, 5)))))
    if max(h, w) / min(h, w) > 200:
        continue
    cases.append((h, w, p, mn, mx))
out = subprocess.run([TOOL, "smart"], input="".join("%d %d %d %d %d\n" % c for c in cases), capture_output=True,
                     text=True, check=True).stdout.split("\n")
clamped = 0
for c, line in zip(cases, out):
    h, w, p, mn, mx = c
    hb, wb = qwen_smart_resize(h, w, p, mn * p * p, mx * p * p)
    gh, gw = hb // p, wb // p
    if gh * gw > mx:  # our documented addition: max_patches is a hard bound
        clamped += 1
        while gh * gw > mx:
            if gh >= gw and gh > 1:
                gh -= 1
            else:
                gw -= 1
    got = tuple(int(x) for x in line.split())
    if got != (gh, gw):
        fail("smart_resize%s: ours %s, Qwen2-VL %s" % (c, got, (gh, gw)))
        break
print("smart_resize: %d sizes equal to Qwen2-VL's (%d needed the max_patches clamp)" % (len(cases), clamped))

# ---- test images ----------------------------------------------------------------------------------
photos = sorted(os.path.join(SKIMAGE, f) for f in os.listdir(SKIMAGE)
                if f.endswith(".jpg") and f != "truncated.jpg")
if not photos:
    fail("no photographs in %s (python3-skimage)" % SKIMAGE)
base = Image.open(photos[0]).convert("RGB")
grey = os.path.join(WORK, "grey.jpg")
base.convert("L").save(grey, quality=90)
prog = os.path.join(WORK, "progressive.jpg")
base.resize((base.size[0] // 2, base.size[1] // 2)).save(prog, quality=85, progressive=True)
s444 = os.path.join(WORK, "s444.jpg")
base.save(s444, quality=92, subsampling=0)
small = os.path.join(WORK, "small.jpg")
base.resize((40, 30)).save(small, quality=90)
images = photos + [grey, prog, s444, small]
assert Image.open(prog).info.get("progressive"), "PIL did not write a progressive JPEG"
assert Image.open(grey).mode == "L"

settings = [(8, 16, 64), (14, 64, 1024), (16, 256, 4096), (8, 256, 256)]
worst = 0.0
worst_patch = 0.0
n_cmp = 0
for path in images:
    for p, mn, mx in settings:
        raw = os.path.join(WORK, "ours.f32")
        gh, gw, scale = (int(x) for x in subprocess.run([TOOL, "resize", path, str(p), str(mn), str(mx), raw],
                                                         capture_output=True, text=True, check=True).stdout.split())
        ow, oh = gw * p, gh * p
        ours = np.fromfile(raw, dtype=np.float32).reshape(oh, ow, 3)

        im = Image.open(path)
        full = im.size
        im.draft("RGB", (ow, oh))  # Pillow's DCT-domain scaling: the same rule as ours
        if im.size != (-(-full[0] // scale), -(-full[1] // scale)):
            fail("%s: Pillow's draft chose %s, ours scale 1/%d of %s" % (path, im.size, scale, full))
            continue
        im = im.convert("RGB")
        # 2. decode equality at that scale
        dec = os.path.join(WORK, "dec.u8")
        w, h = (int(x) for x in subprocess.run([TOOL, "decode", path, str(scale), dec], capture_output=True,
                                               text=True, check=True).stdout.split())
        ours_dec = np.fromfile(dec, dtype=np.uint8).reshape(h, w, 3)
        pil_dec = np.asarray(im)
        if ours_dec.shape != pil_dec.shape or np.abs(ours_dec.astype(int) - pil_dec.astype(int)).max() != 0:
            fail("%s scale 1/%d: TurboJPEG and Pillow decodes differ" % (path, scale))
            continue
        # 3. resize
        ref = np.asarray(im.resize((ow, oh), Image.BILINEAR)).astype(np.float32)
        d = np.abs(ours - ref)
        worst = max(worst, float(d.max()))
        n_cmp += 1
        if d.max() > 1.0 + 1e-3:
            fail("%s p=%d [%d,%d]: resize differs from Pillow by %.4f > 1.0" % (path, p, mn, mx, d.max()))
        # 4. patches
        pt = os.path.join(WORK, "patches.f32")
        subprocess.run([TOOL, "patches", path, str(p), str(mn), str(mx), pt], capture_output=True, check=True)
        ours_p = np.fromfile(pt, dtype=np.float32).reshape(gh * gw, 3 * p * p)
        ref_p = (ref / 127.5 - 1.0).reshape(gh, p, gw, p, 3).transpose(0, 2, 1, 3, 4).reshape(gh * gw, 3 * p * p)
        dp = float(np.abs(ours_p - ref_p).max())
        worst_patch = max(worst_patch, dp)
        if dp > 1.0 / 127.5 + 1e-5:
            fail("%s p=%d: patches differ from Pillow's by %.5f > 1/127.5" % (path, p, dp))
        print("%-60s %4dx%-4d -> %3dx%-3d (1/%d decode) max|diff| %.3f mean %.3f  patches %.5f" %
              (path, full[0], full[1], ow, oh, scale, d.max(), d.mean(), dp))

if n_cmp < len(images) * len(settings):
    fail("only %d of %d comparisons ran" % (n_cmp, len(images) * len(settings)))
print("resize vs Pillow BILINEAR: %d comparisons, worst %.4f (bound 1.0); patches worst %.5f (bound %.5f)" %
      (n_cmp, worst, worst_patch, 1 / 127.5))
sys.exit(1 if fails else 0)
