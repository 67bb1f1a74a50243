#!/usr/bin/python3
"""report_anyres.py — `rrfp-mm report` of an any-resolution run (docs/anyres.md): each held-out card shows its
image's tiles.
  1. tests/support/util/anyres_run.py's run (any-resolution shards of images of many shapes, a tiny model with
     model.anyres = 5), `rrfp-mm eval --predictions`, `rrfp-mm report`;
  2. every card's tiles figure against the reference (tests/data/anyres_ref.py, written from transformers'
     select_best_resolution / get_patch_output_size / unpad_image / _get_number_of_features) for the card's image:
     the original size, the tile grid, the tower images, the LM positions and the unpadded features; its drawing:
     one outline per tile on the padded canvas, the image resized and pasted where the processor pastes it, the
     unpadded region in the canvas's pixels; the summary names the tile side and the pinpoints;
  3. when Debian's chromium is installed: the page rendered (--dump-dom) holds the figures and logs no console error.
Usage: report_anyres.py RRFP_MM SOURCE_DIR WORKDIR. Exit 77 without Pillow / numpy."""
import html.parser
import json
import os
import shutil
import subprocess
import sys

EXE, SRC, W = sys.argv[1:4]
sys.path[:0] = [os.path.join(SRC, "tests", "support", "util"), os.path.join(SRC, "tests", "data")]
import anyres_run as ar  # noqa: E402 (exits 77 without Pillow / numpy)
from anyres_ref import reference  # noqa: E402 (the independent reference of the layout)

S = ar.make(EXE, SRC, W)
n = len(ar.SHAPES["heldout"])
ar.run(EXE, ["eval", SRC + "/recipes/demo.ini"] + S + ["--checkpoint", "latest", "--predictions", W + "/run/predictions.jsonl"])
ar.run(EXE, ["report", W + "/run", "--questions", str(n)])


class Page(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.cards = []  # [sample index, [figures: {attrs, tiles: [], image: {}, unpad: {}, caption}]]
        self.summary = ""
        self.in_summary = self.in_caption = False

    def handle_starttag(self, tag, attrs):
        at = dict(attrs)
        cls = (at.get("class") or "").split()
        if tag == "table" and "summary" in cls:
            self.in_summary = True
        if tag == "div" and "card" in cls:
            self.cards.append([int(at["data-sample"]), []])
        if tag == "figure" and "tiles" in cls:
            self.cards[-1][1].append({"attrs": at, "tiles": [], "image": None, "unpad": None, "caption": ""})
        fig = self.cards[-1][1][-1] if self.cards and self.cards[-1][1] else None
        box = lambda: tuple(int(at[k]) for k in ("x", "y", "width", "height"))
        if fig is not None and tag == "rect" and "tile" in cls:
            fig["tiles"].append(box())
        if fig is not None and tag == "rect" and "unpad" in cls:
            fig["unpad"] = box()
        if fig is not None and tag == "image":
            fig["image"] = box()
        self.in_caption = tag == "figcaption"

    def handle_endtag(self, tag):
        if tag == "table":
            self.in_summary = False
        if tag == "figcaption":
            self.in_caption = False

    def handle_data(self, data):
        if self.in_summary:
            self.summary += data
        if self.in_caption:
            self.cards[-1][1][-1]["caption"] += data


def check(page_html, what):
    p = Page()
    p.feed(page_html)
    assert len(p.cards) == n, "%s: %d cards, expected %d" % (what, len(p.cards), n)
    want_sum = "anyres (tiles of %d px, grid pinpoints %s)" % (ar.TILE, ar.PINS)
    assert want_sum in p.summary, "%s: the summary does not name the tiles: %r" % (what, p.summary)
    for idx, figs in p.cards:
        w, h = ar.SHAPES["heldout"][idx]
        ref = reference(h, w, ar.PINPOINTS, ar.TILE, ar.P, "default")
        assert len(figs) == 1, "%s: card %d: %d tiles figures" % (what, idx, len(figs))
        f = figs[0]
        got = {k: int(f["attrs"]["data-" + k]) for k in ("orig-w", "orig-h", "rows", "cols", "tower-images", "positions",
                                                          "feat-h", "feat-w")}
        exp = {"orig-w": w, "orig-h": h, "rows": ref["rows"], "cols": ref["cols"], "tower-images": ref["n_tiles"],
               "positions": ref["n_positions"], "feat-h": ref["feat_h"], "feat-w": ref["feat_w"]}
        assert got == exp, "%s: card %d (%d x %d): %s, reference %s" % (what, idx, w, h, got, exp)
        T = ar.TILE
        tiles = sorted((c * T, r * T, T, T) for r in range(ref["rows"]) for c in range(ref["cols"]))
        assert sorted(f["tiles"]) == tiles, (what, idx, f["tiles"], tiles)
        assert f["image"] == (ref["pad_left"], ref["pad_top"], ref["resized_w"], ref["resized_h"]), (what, idx, f["image"], ref)
        if ref["feat_h"] and ref["feat_w"]:
            assert f["unpad"] == (ref["left"] * ar.P, ref["top"] * ar.P, ref["feat_w"] * ar.P, ref["feat_h"] * ar.P), \
                (what, idx, f["unpad"], ref)
        else:  # every feature row (or column) is padding: an empty region
            assert f["unpad"][2:] == (ref["feat_w"] * ar.P, ref["feat_h"] * ar.P), (what, idx, f["unpad"], ref)
        cap = "%d x %d tiles of %d px + the base image = %d tower images; original %d x %d px; %d positions" % (
            ref["rows"], ref["cols"], T, ref["n_tiles"], w, h, ref["n_positions"])
        assert f["caption"].startswith(cap), (what, idx, f["caption"], cap)
    return len(p.cards)


page = open(W + "/run/report.html", encoding="utf-8").read()
k = check(page, "report.html")
print("report: %d cards, each image's tile grid, tower images, size, positions, paste and unpadded region as the "
      "reference; the summary names the tiles and pinpoints" % k)
chrome = shutil.which("chromium") or shutil.which("chromium-browser")
if chrome:
    with open(W + "/chrome.log", "w") as log:
        r = subprocess.run(["timeout", "120", chrome, "--headless", "--no-sandbox", "--disable-gpu",
                            "--enable-logging=stderr", "--v=0", "--dump-dom", "file://" + W + "/run/report.html"],
                           stdout=subprocess.PIPE, stderr=log, text=True)
    assert r.returncode == 0, "chromium exited %d" % r.returncode
    check(r.stdout, "the rendered DOM")
    errs = [l for l in open(W + "/chrome.log", errors="replace") if "CONSOLE" in l or "Uncaught" in l or "Refused to" in l]
    assert not errs, "console messages in Chromium's log: %s" % errs[:5]
    print("chromium: the rendered page holds the same figures, no console error")
else:
    print("chromium: not installed, the rendered page not checked")
print("report anyres: ok")
