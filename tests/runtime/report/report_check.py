#!/usr/bin/env python3
"""report_check.py DOM.html CHROME.log --steps N --cards K --traced 0|1 --ranks P --microbatches M

Checks a report page as Chromium rendered it (--dump-dom): four curves with a point per step, the
recipe table, when traced one step's timeline (P x M forward and backward rects), K held-out question
cards each with a question, a reference, the model's answer and an img whose data URI decodes to a JPEG
no larger than 128 px, nothing fetched from the network, and no console error in Chromium's log.
Exit 0 when all hold, 1 with every failure listed."""
import argparse, base64, html.parser, io, re, sys

ap = argparse.ArgumentParser()
ap.add_argument("dom"), ap.add_argument("log")
ap.add_argument("--steps", type=int, required=True)
ap.add_argument("--cards", type=int, required=True)
ap.add_argument("--traced", type=int, required=True)
ap.add_argument("--ranks", type=int, default=2)
ap.add_argument("--microbatches", type=int, default=4)
a = ap.parse_args()


class Page(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.curves, self.rects, self.imgs, self.urls = {}, [], [], []
        self.cards = []           # [class, text]
        self.recipe_rows = 0
        self.stack = []           # open elements: (tag, classes, id)
        self.chart = None
        self.in_recipe = False

    def handle_starttag(self, tag, attrs):
        at = dict(attrs)
        cls = (at.get("class") or "").split()
        for k in ("src", "href"):
            v = at.get(k) or ""
            if re.match(r"(https?:)?//", v):
                self.urls.append(v)
        if tag == "figure" and "chart" in cls:
            self.chart = at.get("id")
        if tag == "path" and "curve" in cls and self.chart:
            self.curves[self.chart] = at.get("d", "")
        if tag == "rect" and "task" in cls:
            self.rects.append(cls)
        if tag == "table" and "recipe" in cls:
            self.in_recipe = True
        if tag == "tr" and self.in_recipe:
            self.recipe_rows += 1
        if tag == "div" and "card" in cls:
            self.cards.append([cls, "", []])
        if tag == "img":
            self.imgs.append(at.get("src", ""))
            if self.cards:
                self.cards[-1][2].append(at.get("src", ""))

    def handle_endtag(self, tag):
        if tag == "figure":
            self.chart = None
        if tag == "table":
            self.in_recipe = False

    def handle_data(self, data):
        if self.cards:
            self.cards[-1][1] += data


p = Page()
dom = open(a.dom, encoding="utf-8").read()
p.feed(dom)
bad = []
if "<h1>" not in dom:
    bad.append("the DOM has no <h1>: the page did not load")
for cid in ("loss", "lr", "grad_norm", "tokens_per_s"):
    d = p.curves.get(cid)
    pts = len(re.findall(r"[ML]\s*-?[\d.]+,-?[\d.]+", d or ""))
    if pts != a.steps:
        bad.append("curve %s: %d points, expected one per step (%d)" % (cid, pts, a.steps))
if p.recipe_rows < 30:
    bad.append("recipe table: %d rows (expected every key)" % p.recipe_rows)
if a.traced:
    f = sum("F" in c for c in p.rects)
    b = sum("B" in c for c in p.rects)
    want = a.ranks * a.microbatches
    if f != want or b != want:
        bad.append("timeline: %d F and %d B task rects, expected %d each (one step of %d ranks x %d microbatches)"
                   % (f, b, want, a.ranks, a.microbatches))
    if "Bubble" not in dom:
        bad.append("timeline: no bubble figure")
if len(p.cards) != a.cards:
    bad.append("%d question cards, expected %d" % (len(p.cards), a.cards))
try:
    from PIL import Image
except ImportError:
    Image = None
for i, (cls, text, srcs) in enumerate(p.cards):
    if not ("right" in cls or "wrong" in cls):
        bad.append("card %d: neither right nor wrong" % i)
    if "reference:" not in text or "model:" not in text or "?" not in text:
        bad.append("card %d: question / reference / model answer missing: %r" % (i, text.strip()[:200]))
    if len(srcs) < 1:
        bad.append("card %d: no img" % i)
    for s in srcs:
        m = re.match(r"data:image/jpeg;base64,([A-Za-z0-9+/=]+)$", s)
        if not m:
            bad.append("card %d: img src is not a base64 JPEG data URI: %r" % (i, s[:60]))
            continue
        raw = base64.b64decode(m.group(1), validate=True)
        if raw[:2] != b"\xff\xd8" or raw[-2:] != b"\xff\xd9":
            bad.append("card %d: the data URI does not hold a whole JPEG" % i)
        elif Image is not None:
            im = Image.open(io.BytesIO(raw))
            im.load()
            if max(im.size) > 128:
                bad.append("card %d: image %dx%d is not small (<= 128 px)" % (i, im.size[0], im.size[1]))
if p.urls:
    bad.append("network references in the page: %s" % p.urls[:5])
log = open(a.log, encoding="utf-8", errors="replace").read().splitlines()
errs = [l for l in log if "CONSOLE" in l or "Uncaught" in l or "Refused to" in l]
if errs:
    bad.append("console messages in Chromium's log:\n  " + "\n  ".join(errs[:10]))
for b in bad:
    print("report_check: FAIL:", b, file=sys.stderr)
if not bad:
    print("report_check: ok: 4 curves x %d points, %d recipe rows, %s%d cards with JPEG images, no console error"
          % (a.steps, p.recipe_rows, "%d task rects, " % len(p.rects) if a.traced else "", len(p.cards)))
sys.exit(1 if bad else 0)
