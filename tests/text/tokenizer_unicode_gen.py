"""tokenizer_unicode_gen.py — random lines of code points for the tokenizer peer test.

Lines mix ASCII letters, digits, spaces, tabs and apostrophes with code points drawn from every plane,
kept only if assigned in Unicode 14 (this Python's unicodedata, the tables of Debian 12's PCRE2 10.42).
Hugging Face's Oniguruma knows Unicode 16: characters assigned after 14 (e.g. U+13A48) are letters to it
and not to PCRE2 10.42, a known difference that these lines leave out.
usage: python3 tokenizer_unicode_gen.py SEED LINES > out.txt
"""
import random
import sys
import unicodedata

seed, n_lines = int(sys.argv[1]), int(sys.argv[2])
random.seed(seed)
if unicodedata.unidata_version != "14.0.0":
    sys.stderr.write(f"note: unicodedata is {unicodedata.unidata_version}, not 14.0.0\n")
ranges = [(0x20, 0x7E), (0x80, 0x2FF), (0x300, 0x36F), (0x370, 0x52F), (0x530, 0x10FF), (0x1100, 0x1FFF),
          (0x2000, 0x206F), (0x2070, 0x2BFF), (0x2C00, 0x2FFF), (0x3000, 0x9FFF), (0xA000, 0xD7FF),
          (0xE000, 0xE0FF), (0xF900, 0xFFFD), (0x10000, 0x1FFFF), (0x20000, 0x3FFFF), (0xE0000, 0xE01EF)]
out = []
while len(out) < n_lines:
    s = []
    for _ in range(random.randint(1, 40)):
        if random.random() < 0.25:
            s.append(random.choice(" \t 'sSdtm0123"))
            continue
        a, b = random.choice(ranges)
        c = chr(random.randint(a, b))
        if unicodedata.category(c) in ("Cn", "Cs") or c in "\n\r":
            continue
        s.append(c)
    out.append("".join(s))
sys.stdout.write("\n".join(out) + "\n")
