#!/usr/bin/python3
"""anyres_ref.py — an independent reference of LLaVA-NeXT's any-resolution rules (docs/anyres.md), written from
transformers' semantics (image_processing_utils.select_best_resolution / get_patch_output_size,
LlavaNextImageProcessor._pad_for_patching, modeling_llava_next.get_anyres_image_grid_shape / unpad_image /
pack_image_features, processing_llava_next._get_number_of_features / _get_unpadded_features), in plain Python
and numpy, sharing nothing with data/anyres.c.

Run as a test: anyres_ref.py TOOL. TOOL is tests/data/data_image_tool (its `anyres` subcommand prints the C
layout of data/anyres.h for "h w" lines). For LLaVA-1.6's pinpoints (tile 336, patch 14), a LLaVA-OneVision-like
6 x 6 grid set (tile 384, patch 16) and an uneven list, over thousands of image sizes — every size 1..64 by
1..64, sizes at, just below and just above every pinpoint and its halves, extreme aspect ratios up to 1:65500,
and log-uniform random sizes — every field must equal the reference:
  - best resolution and tile grid (select_best_resolution, pinpoints [height, width]),
  - the aspect-preserving resize and the paste offsets (get_patch_output_size, _pad_for_patching),
  - the unpadded feature rows / columns, computed twice: by the processor's count formula and by running the
    model's reshape -> permute -> unpad_image -> newline concatenation on an arange feature tensor (numpy),
  - the position count (base + unpadded + newlines; `full` adds the class token as the processor does),
  - the order of the LM positions' features (a signature of data/anyres.h's anyres_feature_map against the
    model's packing above).
Sizes whose unpadded side is mathematically an integer are searched for, so that cases where int(round(x, 7))
gives another count than int(x) occur; they are counted and must occur (the rounding rule is exercised).
Exit 77 without numpy."""
import math
import random
import subprocess
import sys

try:
    import numpy as np
except ImportError:
    print("numpy missing: skipped")
    sys.exit(77)


def select_best_resolution(original_size, possible_resolutions):
    original_height, original_width = original_size
    best_fit = None
    max_effective_resolution = 0
    min_wasted_resolution = float("inf")
    for height, width in possible_resolutions:
        scale = min(width / original_width, height / original_height)
        downscaled_width, downscaled_height = int(original_width * scale), int(original_height * scale)
        effective_resolution = min(downscaled_width * downscaled_height, original_width * original_height)
        wasted_resolution = (width * height) - effective_resolution
        if effective_resolution > max_effective_resolution or (
            effective_resolution == max_effective_resolution and wasted_resolution < min_wasted_resolution
        ):
            max_effective_resolution = effective_resolution
            min_wasted_resolution = wasted_resolution
            best_fit = (height, width)
    return best_fit


def patch_output_size(original_size, target_resolution):
    original_height, original_width = original_size
    target_height, target_width = target_resolution
    scale_w = target_width / original_width
    scale_h = target_height / original_height
    if scale_w < scale_h:
        new_width = target_width
        new_height = min(math.ceil(original_height * scale_w), target_height)
    else:
        new_height = target_height
        new_width = min(math.ceil(original_width * scale_h), target_width)
    return new_height, new_width


def unpadded_features(height, width, patches_height, patches_width, scale_height, scale_width):
    """the processor's count: (rows kept x columns kept, rows kept)"""
    current_height = patches_height * scale_height
    current_width = patches_width * scale_width
    original_aspect_ratio = width / height
    current_aspect_ratio = current_width / current_height
    if original_aspect_ratio > current_aspect_ratio:
        new_height = int(round(height * (current_width / width), 7))
        padding = (current_height - new_height) // 2
        current_height -= padding * 2
    else:
        new_width = int(round(width * (current_height / height), 7))
        padding = (current_width - new_width) // 2
        current_width -= padding * 2
    return current_height * current_width, current_height


def model_pack(h, w, pinpoints, tile, patch):
    """the model's pack_image_features on an arange feature tensor (1 channel holding the feature index):
    returns the LM-order list of feature ids (base 0..g^2-1, tile k's feature q as (1 + k) g^2 + q, newline -1)
    and the kept (top, rows, left, cols)"""
    g = tile // patch
    bh, bw = select_best_resolution((h, w), pinpoints)
    nph, npw = bh // tile, bw // tile
    feats = np.arange((1 + nph * npw) * g * g, dtype=np.int64).reshape(1 + nph * npw, g * g, 1)
    base = feats[0][:, 0]
    f = feats[1:].reshape(nph, npw, g, g, 1).transpose(4, 0, 2, 1, 3).reshape(1, nph * g, npw * g)
    rows_idx = np.arange(nph * g)
    cols_idx = np.arange(npw * g)
    cur_h, cur_w = f.shape[1:]
    if w / h > cur_w / cur_h:
        new_h = int(round(h * (cur_w / w), 7))
        pad = (cur_h - new_h) // 2
        f = f[:, pad : cur_h - pad, :]
        rows_idx = rows_idx[pad : cur_h - pad]
    else:
        new_w = int(round(w * (cur_h / h), 7))
        pad = (cur_w - new_w) // 2
        f = f[:, :, pad : cur_w - pad]
        cols_idx = cols_idx[pad : cur_w - pad]
    f = np.concatenate([f, np.full((1, f.shape[1], 1), -1, dtype=np.int64)], axis=2)
    seq = np.concatenate([base, f.reshape(1, -1)[0]])
    top = int(rows_idx[0]) if len(rows_idx) else None
    left = int(cols_idx[0]) if len(cols_idx) else None
    return seq, top, f.shape[1], left, f.shape[2] - 1


_packed = {}


def reference(h, w, pinpoints, tile, patch, select):
    g = tile // patch
    bh, bw = select_best_resolution((h, w), pinpoints)
    rh, rw = patch_output_size((h, w), (bh, bw))
    paste_x, _ = divmod(bw - rw, 2)
    paste_y, _ = divmod(bh - rh, 2)
    unp, nl = unpadded_features(h, w, g, g, bh // tile, bw // tile)
    extra = 1  # the processor's num_additional_image_tokens (the class token), removed under `default`
    n = unp + nl + g * g + extra - (1 if select == "default" else 0)
    key = (h, w, tuple(pinpoints), tile, patch)
    if key not in _packed:
        seq, top, kh, left, kw = model_pack(h, w, pinpoints, tile, patch)
        sig = int(((np.arange(len(seq), dtype=np.int64) + 1) * (seq + 2)).sum())
        _packed[key] = (len(seq), top, kh, left, kw, sig)
    nseq, top, kh, left, kw, sig = _packed[key]
    assert kh * kw == unp and kh == nl, (h, w, kh, kw, unp, nl)
    if select == "default":
        assert nseq == n, (h, w, nseq, n)
    return dict(best_h=bh, best_w=bw, rows=bh // tile, cols=bw // tile, resized_h=rh, resized_w=rw, pad_top=paste_y,
                pad_left=paste_x, feat_h=kh, feat_w=kw, top=top, left=left, n_tiles=1 + (bh // tile) * (bw // tile),
                n_positions=n, sig=sig)


def exact_sizes(pinpoints, tile, patch, limit):
    """sizes whose unpadded side is mathematically an integer (h cw / w or w ch / h), where the double
    product can land just below it and int(round(x, 7)) decides"""
    g = tile // patch
    out = set()
    for ph, pw in pinpoints:
        ch, cw = ph // tile * g, pw // tile * g
        for a in range(1, limit):
            for k in range(1, ch):
                if (k * a) % cw == 0:
                    out.add((k * a // cw, a))  # rows unpadded: h = k w / cw
            for k in range(1, cw):
                if (k * a) % ch == 0:
                    out.add((a, k * a // ch))  # columns unpadded: w = k h / ch
    return out


def sizes(pinpoints, tile, patch, rng):
    out = set(exact_sizes(pinpoints, tile, patch, 400))
    for h in range(1, 65):
        for w in range(1, 65):
            out.add((h, w))
    sides = set()
    for ph, pw in pinpoints:
        for v in (ph, pw, ph // 2, pw // 2, ph * 2, pw * 3):
            for d in (-1, 0, 1):
                if v + d >= 1:
                    sides.add(v + d)
    sides = sorted(sides)
    for a in sides:
        for b in sides:
            out.add((a, b))
    for n in (1, 2, 3, 7, 100, 200, 201, 1000, 65500):
        for m in (1, 2, 5, 17, 327, 65500):
            out.add((n, m))
            out.add((m, n))
    for _ in range(2000):
        h = int(math.exp(rng.uniform(0, math.log(65500))))
        w = int(math.exp(rng.uniform(0, math.log(65500))))
        out.add((max(1, h), max(1, w)))
    return sorted(out)


def main():
    tool = sys.argv[1]
    rng = random.Random(7)
    cases = [
        ("[[336,672],[672,336],[672,672],[1008,336],[336,1008]]", 336, 14),
        ("[" + ",".join("[%d,%d]" % (384 * a, 384 * b) for a in range(1, 7) for b in range(1, 7)) + "]", 384, 16),
        ("[[672,672],[336,1344],[1344,336],[336,336],[1008,672]]", 336, 14),
    ]
    total = rounded = 0
    for text, tile, patch in cases:
        pinpoints = [tuple(p) for p in eval(text)]
        szs = sizes(pinpoints, tile, patch, rng)
        for select in ("default", "full"):
            inp = "".join("%d %d\n" % hw for hw in szs)
            r = subprocess.run([tool, "anyres", text, str(tile), str(patch), select], input=inp, capture_output=True,
                               text=True)
            if r.returncode != 0:
                sys.exit("tool failed: " + r.stderr)
            lines = r.stdout.split("\n")
            for (h, w), line in zip(szs, lines):
                got = list(map(int, line.split()))
                ref = reference(h, w, pinpoints, tile, patch, select)
                exp = [ref["best_h"], ref["best_w"], ref["rows"], ref["cols"], ref["resized_h"], ref["resized_w"],
                       ref["pad_top"], ref["pad_left"]]
                exp += [ref["top"] if ref["top"] is not None else got[8], ref["feat_h"]]
                exp += [ref["left"] if ref["left"] is not None else got[10], ref["feat_w"]]
                exp += [ref["n_tiles"], ref["n_positions"], ref["sig"]]
                if got != exp:
                    sys.exit("MISMATCH %s tile %d, %d x %d (h x w), %s:\n  C   %s\n  ref %s" % (text, tile, h, w, select, got, exp))
                total += 1
                if select == "default":
                    g = tile // patch
                    cw, ch = ref["cols"] * g, ref["rows"] * g
                    x = h * (cw / w) if w / h > cw / ch else w * (ch / h)
                    if int(round(x, 7)) != int(x):
                        n_trunc = (ch - int(x)) // 2 if w / h > cw / ch else (cw - int(x)) // 2
                        n_round = (ch - int(round(x, 7))) // 2 if w / h > cw / ch else (cw - int(round(x, 7))) // 2
                        rounded += n_trunc != n_round
            if len(lines) < len(szs):
                sys.exit("tool printed %d lines for %d sizes" % (len(lines), len(szs)))
    print("anyres layouts: %d (size, pinpoints, strategy) cases equal; %d where int(round(x, 7)) instead of int(x) changes the "
          "count" % (total, rounded))
    if rounded == 0:
        sys.exit("no case exercised the round(x, 7) rule")
    # the published figures: LLaVA-1.6 at 336 / 14, default strategy
    d = [tuple(p) for p in eval(cases[0][0])]
    for (h, w), n in (((336, 336), 576 + 24 * 24 + 24), ((672, 672), 576 + 48 * 48 + 48)):
        got = reference(h, w, d, 336, 14, "default")["n_positions"]
        if got != n:
            sys.exit("reference: %d x %d gives %d positions, expected %d" % (h, w, got, n))
    print("anyres ref: ok")


if __name__ == "__main__":
    main()
