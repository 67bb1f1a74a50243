#!/usr/bin/python3
"""data_anyres_pillow.py — any-resolution pixels (data/image_anyres.c, through tests/data/data_image_tool.c)
against LlavaNextImageProcessor's preprocessing written here with Pillow and numpy from transformers'
semantics (docs/anyres.md):
  select_best_resolution over the pinpoints ([height, width]); get_patch_output_size; resize with
  Image.resize((new_w, new_h), BICUBIC) of the RGB image; np.pad with zeros to the pinpoint
  ((paste_y, paste_y + r_y), (paste_x, paste_x + r_x)) with divmod; tiles row-major
  (divide_to_patches); the base image Image.resize((tile, tile), BICUBIC) first; x / 255, (x - mean) / std;
  patches of each tile row-major, each flattened (row, col, channel).
1. The RGB8 tiles must be the reference's byte for byte (every tile, the padding included).
2. The normalised patches within 1e-6 of the float64 normalisation of the reference's bytes.
Images: python3-skimage's photographs (JPEG, decoded by both sides to the same bytes), PNGs made from them
in portrait, very wide (1:6), tiny (below every pinpoint) and large (above every pinpoint) shapes, a
greyscale PNG; LLaVA-1.6's pinpoints at tile 336 and another list at tile 224. Exit 77 without Pillow /
numpy."""
import os
import subprocess
import sys

try:
    import numpy as np
    from PIL import Image
except ImportError:
    print("Pillow or numpy missing: skipped")
    sys.exit(77)

SKIMAGE = "/usr/lib/python3/dist-packages/skimage/data"
MEAN = [0.48145466, 0.4578275, 0.40821073]
STD = [0.26862954, 0.26130258, 0.27577711]


def select_best_resolution(original_size, possible_resolutions):
    oh, ow = original_size
    best, best_eff, best_waste = None, 0, float("inf")
    for h, w in possible_resolutions:
        scale = min(w / ow, h / oh)
        eff = min(int(ow * scale) * int(oh * scale), ow * oh)
        waste = w * h - eff
        if eff > best_eff or (eff == best_eff and waste < best_waste):
            best, best_eff, best_waste = (h, w), eff, waste
    return best


def processor(img, pinpoints, tile):
    """LlavaNextImageProcessor.get_image_patches on a PIL RGB image: the RGB8 tiles, base first"""
    ow, oh = img.size
    th, tw = select_best_resolution((oh, ow), pinpoints)
    sw, sh = tw / ow, th / oh
    if sw < sh:
        nw, nh = tw, min(int(np.ceil(oh * sw)), th)
    else:
        nh, nw = th, min(int(np.ceil(ow * sh)), tw)
    resized = np.asarray(img.resize((nw, nh), Image.BICUBIC), dtype=np.uint8)
    px, rx = divmod(tw - nw, 2)
    py, ry = divmod(th - nh, 2)
    padded = np.pad(resized, ((py, py + ry), (px, px + rx), (0, 0)), mode="constant", constant_values=0)
    tiles = [np.asarray(img.resize((tile, tile), Image.BICUBIC), dtype=np.uint8)]
    for i in range(0, th, tile):
        for j in range(0, tw, tile):
            tiles.append(padded[i : i + tile, j : j + tile])
    return np.stack(tiles)


def patches(tiles, p):
    x = (tiles.astype(np.float64) / 255.0 - np.array(MEAN)) / np.array(STD)
    n, t = tiles.shape[0], tiles.shape[1]
    g = t // p
    return x.reshape(n, g, p, g, p, 3).transpose(0, 1, 3, 2, 4, 5).reshape(-1)


def main():
    TOOL, WORK = sys.argv[1], sys.argv[2]
    os.makedirs(WORK, exist_ok=True)
    photos = sorted(os.path.join(SKIMAGE, f) for f in os.listdir(SKIMAGE) if f.endswith(".jpg") and f != "truncated.jpg")
    if not photos:
        print("no photographs in %s (python3-skimage)" % SKIMAGE)
        sys.exit(1)
    base = Image.open(photos[0]).convert("RGB")
    images = photos[:3]
    rot = Image.Transpose.ROTATE_90 if hasattr(Image, "Transpose") else Image.ROTATE_90
    for name, im in (("portrait.png", base.transpose(rot)),
                     ("wide.png", base.resize((1200, 200))),
                     ("tiny.png", base.resize((40, 23))),
                     ("large.png", base.resize((1500, 1100))),
                     ("tall_grey.png", base.convert("L").resize((120, 700)))):
        path = os.path.join(WORK, name)
        im.save(path)
        images.append(path)

    failed = []
    n = 0
    for pins, tile, p in (("[[336,672],[672,336],[672,672],[1008,336],[336,1008]]", 336, 14),
                          ("[[224,448],[448,224],[448,448],[224,896],[672,224]]", 224, 14)):
        pinpoints = eval(pins)
        for path in images:
            img = Image.open(path).convert("RGB")
            ref = processor(img, pinpoints, tile)
            out = os.path.join(WORK, "px.raw")
            r = subprocess.run([TOOL, "anyres_px", path, pins, str(tile), out], capture_output=True, text=True)
            if r.returncode:
                failed.append("%s: %s" % (path, r.stderr))
                continue
            got = np.fromfile(out, dtype=np.uint8)
            if got.size != ref.size:
                failed.append("%s tile %d: %d tiles, expected %d" % (path, tile, got.size // (tile * tile * 3), ref.shape[0]))
                continue
            got = got.reshape(ref.shape)
            if not np.array_equal(got, ref):
                d = np.abs(got.astype(int) - ref.astype(int))
                failed.append("%s tile %d: RGB8 differs in %d values (max %d, first tile %d)" %
                              (path, tile, int((d > 0).sum()), int(d.max()), int(np.argmax(d.reshape(ref.shape[0], -1).max(1)))))
                continue
            r = subprocess.run([TOOL, "anyres_patches", path, pins, str(tile), str(p), out], capture_output=True, text=True)
            if r.returncode:
                failed.append("%s: %s" % (path, r.stderr))
                continue
            gotp = np.fromfile(out, dtype=np.float32).astype(np.float64)
            refp = patches(ref, p)
            err = np.abs(gotp - refp).max() if gotp.size == refp.size else float("inf")
            if not err <= 1e-6:
                failed.append("%s tile %d: patches differ by %g" % (path, tile, err))
                continue
            n += 1
            print("%-16s %5d x %-5d tile %d: %d tiles (%s) equal, patches within %.1e" %
                  (os.path.basename(path), img.size[0], img.size[1], tile, ref.shape[0], r.stdout.strip(), err))
    for f in failed:
        print("FAIL", f)
    if failed or n == 0:
        sys.exit(1)
    print("anyres pillow: ok (%d images x settings)" % n)


if __name__ == "__main__":
    main()
