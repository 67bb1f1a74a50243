#!/usr/bin/python3
"""data_llava_pillow.py — `--image-preprocess llava` (data/image.c, through tests/data/data_image_tool.c) against
LLaVA-1.5's own preprocessing written here with Pillow and numpy, as LLaVA's train.py (image_aspect_ratio =
pad) and Hugging Face's CLIPImageProcessor run it:
  expand2square: Image.new("RGB", (s, s), tuple(int(x * 255) for x in image_mean)), paste at
  ((s - w) // 2, (s - h) // 2); resize shortest edge to SIZE with Image.resize(BICUBIC) (a square: SIZE x
  SIZE), centre crop SIZE (nothing left to crop), x / 255, (x - mean) / std; patches row-major, each
  flattened (row, col, channel).
1. The padded, resized RGB8 image must be Pillow's byte for byte (the same fixed-point bicubic).
2. The normalised patches within 1e-6 of the float64 normalisation of Pillow's bytes (|values| < 2.7:
   a float32 rounding is <= 1.6e-7; a wrong mean, std or channel order misses by > 1e-2).
Images: python3-skimage's photographs (landscape and portrait: padding both ways), a greyscale JPEG, a
progressive one, one smaller than SIZE (up-scaled), PNGs (RGBA, palette with transparency, greyscale
portrait: read as Image.open(f).convert("RGB")), and SIZE 336 and 224 with patch 14. Exit 77 without
Pillow / numpy."""
import os
import subprocess
import sys

try:
    import numpy as np
    from PIL import Image
except ImportError:
    print("Pillow or numpy missing: skipped")
    sys.exit(77)

TOOL, WORK = sys.argv[1], sys.argv[2]
os.makedirs(WORK, exist_ok=True)
SKIMAGE = "/usr/lib/python3/dist-packages/skimage/data"
MEAN = [0.48145466, 0.4578275, 0.40821073]
STD = [0.26862954, 0.26130258, 0.27577711]
failed = []

photos = sorted(os.path.join(SKIMAGE, f) for f in os.listdir(SKIMAGE) if f.endswith(".jpg") and f != "truncated.jpg")
if not photos:
    print("no photographs in %s (python3-skimage)" % SKIMAGE)
    sys.exit(1)
base = Image.open(photos[0]).convert("RGB")
extra = []
for name, im, kw in (("grey.jpg", base.convert("L"), {}),
                     ("progressive.jpg", base.resize((base.size[0] // 2, base.size[1] // 2)), {"progressive": True}),
                     ("portrait.jpg", base.transpose(Image.Transpose.ROTATE_90) if hasattr(Image, "Transpose") else base.transpose(Image.ROTATE_90), {}),
                     ("small.jpg", base.resize((150, 90)), {})):
    p = os.path.join(WORK, name)
    im.save(p, quality=90, **kw)
    extra.append(p)
# PNGs (LLaVA's mixes hold them beside JPEGs): RGBA (alpha dropped, as convert("RGB")), a palette with
# transparency, greyscale; decoded by the same function as the JPEGs
small = base.resize((base.size[0] // 3, base.size[1] // 4))
alpha = Image.linear_gradient("L").resize(small.size)
for name, im, kw in (("rgba.png", Image.merge("RGBA", small.split() + (alpha,)), {}),
                     ("palette.png", small.quantize(colors=50), {"transparency": 3}),
                     ("grey.png", small.convert("L").transpose(Image.Transpose.ROTATE_90 if hasattr(Image, "Transpose") else Image.ROTATE_90), {})):
    p = os.path.join(WORK, name)
    im.save(p, **kw)
    extra.append(p)
images = photos[:4] + extra


def expand2square(img):
    w, h = img.size
    bg = tuple(int(x * 255) for x in MEAN)
    if w == h:
        return img
    s = max(w, h)
    out = Image.new(img.mode, (s, s), bg)
    out.paste(img, ((s - w) // 2, (s - h) // 2))
    return out


n = 0
for size, p in ((336, 14), (224, 14)):
    for path in images:
        ref = expand2square(Image.open(path).convert("RGB")).resize((size, size), Image.BICUBIC)
        ref = np.asarray(ref, dtype=np.uint8)
        out = os.path.join(WORK, "px.raw")
        r = subprocess.run([TOOL, "llava_px", path, str(size), out], capture_output=True, text=True)
        if r.returncode:
            failed.append("%s: %s" % (path, r.stderr))
            continue
        got = np.fromfile(out, dtype=np.uint8).reshape(size, size, 3)
        diff = int(np.abs(got.astype(int) - ref.astype(int)).max())
        if diff != 0:
            failed.append("%s at %d: pixels differ from Pillow's by up to %d (%d of %d bytes)" %
                          (os.path.basename(path), size, diff, int((got != ref).sum()), got.size))
        norm = (ref.astype(np.float64) / 255.0 - np.array(MEAN)) / np.array(STD)
        g = size // p
        want = norm.reshape(g, p, g, p, 3).transpose(0, 2, 1, 3, 4).reshape(g * g, p * p * 3)
        out2 = os.path.join(WORK, "patches.f32")
        r = subprocess.run([TOOL, "llava", path, str(p), str(size), out2], capture_output=True, text=True)
        if r.returncode:
            failed.append("%s: %s" % (path, r.stderr))
            continue
        pt = np.fromfile(out2, dtype=np.float32).reshape(g * g, p * p * 3)
        e = float(np.abs(pt - want).max())
        if e > 1e-6:
            failed.append("%s at %d: normalised patches differ by %.3g (bound 1e-6)" % (os.path.basename(path), size, e))
        n += 1
for f in failed:
    print("FAIL " + f)
print("llava preprocessing: %d image x size cases, RGB8 equal to Pillow's, patches within 1e-6: %s" %
      (n, "no" if failed else "yes"))
sys.exit(1 if failed else 0)
