#!/usr/bin/env python3
"""import_llava_next.py — `rrfp-mm import llava_next` and `rrfp-mm export hf` of an any-resolution model
(docs/anyres.md), on a small LlavaNextForConditionalGeneration in Hugging Face's layout written by
import_llava.py's helpers (the same CLIP tower, projector and Llama) plus LLaVA-NeXT's own: `image_newline`
(Dt) and config.json's model_type llava_next with image_grid_pinpoints (tile 6: [[6,12],[12,6],[12,12]]).
Checks:
  - the import under the hub's names and under transformers 5's (model.image_newline, model.*) are the same
    checkpoint bit for bit, hold image_newline, and print model.anyres = 5 (1 + the 2 x 2 pinpoint's tiles) and
    pack's --image-preprocess anyres --grid-pinpoints line;
  - export hf writes model_type llava_next, LlavaNextForConditionalGeneration, the same image_grid_pinpoints and
    every original tensor (image_newline included) bit for bit; importing the export gives the import back bit
    for bit;
  - a config.json without image_grid_pinpoints (on a tower of 336-pixel images) records LlavaNextConfig's
    default pinpoints, [height, width] as transformers lists them, and model.anyres = 5;
  - refusals naming the key: import llava of a llava_next folder (and the reverse), pinpoints that are not
    multiples of the tile side, vision_feature_select_strategy full.
Usage: import_llava_next.py RRFP_MM WORKDIR"""
import json
import os
import shutil
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from import_llava import (DTXT, DV, IMAGE_TOKEN, expect, FAILED, import_namings, make_config,  # noqa: E402
                          make_weights, read_dir, recipe_keys, run, same_bits, write_hf)

PINS = [[6, 12], [12, 6], [12, 12]]


def next_config(naming, **over):
    c = make_config(naming)
    c["model_type"] = "llava_next"
    c["architectures"] = ["LlavaNextForConditionalGeneration"]
    c["image_grid_pinpoints"] = PINS
    c.update(over)
    return c


def main():
    rrfp, work = sys.argv[1:3]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    W = make_weights()
    newline = torch.randn(DTXT, generator=torch.Generator().manual_seed(5)) * 0.3
    cases = [(n, os.path.join(work, "hf_" + n), os.path.join(work, "ckpt_" + n), next_config(n), {nl: ("F32", newline)})
             for n, nl in (("hub", "image_newline"), ("tf5", "model.image_newline"))]
    got = import_namings(rrfp, "llava_next", W, cases)
    if got is None:
        return 1
    ck, out, stored = got
    keys = recipe_keys(out["hub"])
    print(out["hub"])
    expect(keys.get("anyres") == "5", f"model.anyres = 5 printed (got {keys.get('anyres')})")
    expect('--image-preprocess anyres --image-size 6 --grid-pinpoints "[[6,12],[12,6],[12,12]]"' in out["hub"],
           "the pack line with the checkpoint's pinpoints printed")
    expect(recipe_keys(out["tf5"]) == keys, "transformers 5's names imply the same recipe keys")
    C = read_dir(ck["hub"])
    expect(same_bits(read_dir(ck["tf5"]), C), "transformers 5's names import to the same checkpoint, bit for bit")
    expect("image_newline" in C and torch.equal(C["image_newline"], newline.to(torch.float32)),
           "the checkpoint holds image_newline as it was")
    state = json.load(open(os.path.join(ck["hub"], "state.json")))
    expect(state.get("grid_pinpoints") == "[[6,12],[12,6],[12,12]]", "state.json records the pinpoints")

    # ---- export hf and back ---------------------------------------------------------------------------
    ex = os.path.join(work, "export")
    r = run([rrfp, "export", "hf", "--checkpoint", ck["hub"], "--out", ex, "--image-token-id", str(IMAGE_TOKEN)])
    expect(r.returncode == 0, f"export hf exits 0: {r.stdout.strip()[-300:]} {r.stderr.strip()[-400:]}")
    if r.returncode:
        return 1
    E = read_dir(ex)
    orig = {n: stored[n].to(torch.float32) for n in stored}
    orig["image_newline"] = newline.to(torch.float32)
    expect(same_bits(E, orig), "the export holds every original tensor (image_newline too) under its hub name, bit for bit")
    ecfg = json.load(open(os.path.join(ex, "config.json")))
    expect(ecfg["model_type"] == "llava_next" and ecfg["architectures"] == ["LlavaNextForConditionalGeneration"] and
           ecfg["image_grid_pinpoints"] == PINS and ecfg["vision_feature_select_strategy"] == "default",
           f"export's config.json: llava_next, its pinpoints ({ecfg.get('model_type')}, {ecfg.get('image_grid_pinpoints')})")
    back = os.path.join(work, "ckpt_back")
    r = run([rrfp, "import", "llava_next", "--hf", ex, "--out", back])
    expect(r.returncode == 0 and recipe_keys(r.stdout) == keys, f"import of the export: {r.stderr.strip()[-300:]}")
    expect(same_bits(read_dir(back), C), "export then import equals the import, bit for bit")

    # ---- no image_grid_pinpoints: LlavaNextConfig's default, on a tower of 336-pixel images ----------------
    # (LlavaNextConfig: [[336, 672], [672, 336], [672, 672], [1008, 336], [336, 1008]], [height, width]; the largest
    # grid 2 x 2 or 3 x 1: model.anyres 5). The tower's image_size 336 and patch 14: a 24 x 24 position grid.
    cfg = next_config("hub")
    del cfg["image_grid_pinpoints"]
    cfg["vision_config"].update(image_size=336, patch_size=14)
    W336 = dict(W)
    g = torch.Generator().manual_seed(7)
    W336["vision_tower.vision_model.embeddings.patch_embedding.weight"] = torch.randn(DV, 3, 14, 14, generator=g) * 0.05
    W336["vision_tower.vision_model.embeddings.position_embedding.weight"] = torch.randn(1 + 24 * 24, DV, generator=g) * 0.5
    got = import_namings(rrfp, "llava_next", W336, [("hub", os.path.join(work, "hf_defpins"), os.path.join(work, "ckpt_defpins"),
                                                     cfg, {"image_newline": ("F32", newline)})], "no image_grid_pinpoints: ")
    if got is not None:
        dstate = json.load(open(os.path.join(got[0]["hub"], "state.json")))
        expect(dstate.get("grid_pinpoints") == "[[336,672],[672,336],[672,672],[1008,336],[336,1008]]" and
               recipe_keys(got[1]["hub"]).get("anyres") == "5",
               f"no image_grid_pinpoints: LlavaNextConfig's default recorded ({dstate.get('grid_pinpoints')}, "
               f"model.anyres {recipe_keys(got[1]['hub']).get('anyres')})")

    # ---- refusals -------------------------------------------------------------------------------------
    r = run([rrfp, "import", "llava", "--hf", os.path.join(work, "hf_hub"), "--out", os.path.join(work, "no1")])
    expect(r.returncode != 0 and "use import llava_next" in r.stderr, f"import llava of a llava_next: {r.stderr.strip()[-200:]}")
    for name, cfg, msg in (("pins", next_config("hub", image_grid_pinpoints=[[6, 10]]), "multiple of the tile side 6"),
                           ("full", next_config("hub", vision_feature_select_strategy="full"), "vision_feature_select_strategy")):
        hf = os.path.join(work, "hf_bad_" + name)
        write_hf(hf, W, "hub", cfg=cfg, extra={"image_newline": ("F32", newline)})
        r = run([rrfp, "import", "llava_next", "--hf", hf, "--out", os.path.join(work, "no_" + name)])
        expect(r.returncode != 0 and msg in r.stderr and not os.path.exists(os.path.join(work, "no_" + name)),
               f"refused ({name}): {r.stderr.strip()[-200:]}")
    if FAILED:
        print(f"{len(FAILED)} check(s) failed")
        return 1
    print("import llava_next: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
