#!/usr/bin/env python3
"""lint_cli_docs.py SRC BIN — the options a user reads are the options the parsers take (CONTRIBUTING.md "Errors"):

1. Every --option the parser of `rrfp-mm CMD [SUB]` accepts appears in that command's --help.
2. Every --option that --help, README.md, docs/*.md or recipes/README.md shows for a command is accepted by its parser.
3. Every section.key a doc shows in `--set section.key=...`, in an INI block ([section] then key = value lines in a
   code block) or as a code span `section.key` / `section.key = value` is a key `rrfp-mm train --list-keys` knows.
   (recipes/*.ini use only known keys: recipe_print_roundtrip loads every shipped recipe.)
4. recipes/README.md's key table is `rrfp-mm train --list-keys`, row for row (recipe_unit checks its default and
   allowed columns; this, the meaning and the order), so a key's text is edited in runtime/train/recipe.c and pasted.

What a parser accepts is asked of the binary, never read from the C: `rrfp-mm CMD [SUB] OPT 1 --zz-not-an-option`
stops at the first argument it does not know, so an unknown OPT is refused by name ("unknown option 'OPT'":
cli_unknown_option, runtime/cli/args.h; pack's own message), while a known one (a flag, or one taking the value 1)
lets the parser reach --zz-not-an-option. The options asked about are
every "--name" literal of the command's source files (runtime/cli/cmd_NAME*.c, found from main.c's command table),
every one its --help shows and every one the docs show for it. Options a doc shows "for a command" are those of an
invocation: `rrfp-mm CMD [SUB] ...` in a code block (to the end of the line, its `\\` continuations, a `#` comment,
`&&` or `;`) or a code span, and a code span that starts with the command (`pack --template vicuna_v1`); in --help,
also a bare `CMD [SUB] --opt ...` run; --help's other options belong to the command (or, for a command with
sub-commands that share one usage, to one of them).
The script first proves each rule on planted faults (a doc option the parser refuses, an accepted option --help does
not show, a --help option refused, unknown keys in --set, INI blocks and code spans, a key table row changed, missing
or moved, a probe that cannot tell), so a broken rule cannot pass. Its probes run in an empty folder that must stay
empty (an option that ran instead of being parsed is a finding). ~1 s of CPU. Exit 0: clean; 1: a finding (printed)."""
import os
import re
import subprocess
import sys
import tempfile

PROBE = "--zz-not-an-option"
OPT = re.compile(r"(?<![\w-])--([a-z][a-z0-9]*(?:-[a-z0-9]+)*)")
REFUSED = r"(?:unknown (?:or incomplete )?option|unexpected argument)[^'\n]*'%s'"
DOCS = ["README.md", "recipes/README.md"]


class Cli:
    """The binary, asked once per question: its commands, sub-commands, --help texts and which options it accepts."""

    def __init__(self, bin_path, work):
        self.bin, self.work, self.cache = bin_path, work, {}

    def run(self, args):
        r = subprocess.run([self.bin] + list(args), cwd=self.work, stdin=subprocess.DEVNULL, capture_output=True,
                           text=True, errors="replace", timeout=60)
        return r.returncode, r.stdout, r.stderr

    def commands(self):
        """(cmd,) or (cmd, sub) for every command `rrfp-mm --help` lists and every sub-command its usage names."""
        _, out, _ = self.run(["--help"])
        cmds = re.findall(r"^  ([a-z][a-z-]*) ", out.split("commands:", 1)[1], re.M)
        res = []
        for c in cmds:
            subs = []
            for m in re.finditer(r"rrfp-mm %s +([a-z][a-z_|-]*)(?= |$)" % re.escape(c), self.help((c,)), re.M):
                subs += [s for s in m.group(1).split("|") if s not in subs]
            res += [(c, s) for s in subs] if subs else [(c,)]
        return res

    def help(self, words):
        return self.run(list(words) + ["--help"])[1]

    def accepts(self, words, opt):
        key = (words, opt)
        if key not in self.cache:
            _, _, err = self.run(list(words) + [opt, "1", PROBE])
            self.cache[key] = not re.search(REFUSED % re.escape(opt), err)
        return self.cache[key]

    def probe_works(self, words):
        """The probe's premise: an unknown option alone is refused by name."""
        key = (words, None)
        if key not in self.cache:
            _, _, err = self.run(list(words) + [PROBE])
            self.cache[key] = re.search(REFUSED % re.escape(PROBE), err) is not None
        return self.cache[key]

    def key_table(self):
        return self.run(["train", "--list-keys"])[1]

    def keys(self):
        return set(re.findall(r"^\| `([a-z_0-9]+\.[a-z_0-9]+)`", self.key_table(), re.M))


def source_options(src, cmd):
    """The "--name" literals of the files that implement CMD: main.c's table names its function, whose file is
    runtime/cli/cmd_X.c; cmd_X_*.c belong to it too."""
    cli = os.path.join(src, "runtime", "cli")
    main = open(os.path.join(cli, "main.c")).read()
    m = re.search(r'\{"%s", (\w+),' % re.escape(cmd), main)
    if not m:
        return None
    files = sorted(n for n in os.listdir(cli) if n.endswith(".c"))
    home = [n for n in files if re.search(r"^int %s\(" % m.group(1), open(os.path.join(cli, n)).read(), re.M)]
    if len(home) != 1:
        return None
    stem = home[0][:-2]
    opts = set()
    for n in files:
        if n == home[0] or n.startswith(stem + "_"):
            opts |= {"--" + o for o in re.findall(r'"--([a-z][a-z0-9-]*[a-z0-9])=?"', open(os.path.join(cli, n)).read())}
    return opts


def invocations(text, commands, bare):
    """(words, options, start) for every invocation in TEXT (one logical line): `rrfp-mm CMD [SUB] ...` to its end;
    with bare, also `CMD [SUB] --opt [value] ...` runs. words: (cmd,), (cmd, sub), or (cmd, None) for a command
    with sub-commands named without one (its options then belong to any of them); start: where it begins."""
    tops = {c[0] for c in commands}
    subs = {}
    for c in commands:
        if len(c) == 2:
            subs.setdefault(c[0], []).append(c[1])
    out = []
    names = "|".join(sorted((re.escape(t) for t in tops), key=len, reverse=True))
    pat = r"(?:(?<![\w./-])rrfp-mm(?:-emu)?\s+)(%s)(?![\w.:-])" % names
    if bare:
        pat = r"(?:(?<![\w./-])rrfp-mm(?:-emu)?\s+|(?<![\w.'\"/-]))(%s)(?![\w.:'-])" % names
    taken = 0
    for m in re.finditer(pat, text):
        if m.start() < taken:  # the sub-command word of the invocation before (`tokenizer train`)
            continue
        cmd, rest = m.group(1), text[m.end():]
        taken = m.end()
        prefixed = "rrfp-mm" in m.group(0)
        words = [(cmd,)]
        if cmd in subs:
            s = re.match(r"\s+([a-z][a-z_|-]*)(?![\w.])", rest)
            alts = s.group(1).split("|") if s else []
            if alts and all(a in subs[cmd] for a in alts):
                words = [(cmd, a) for a in alts]
                taken = m.end() + s.end()
                rest = rest[s.end():]
            else:
                words = [(cmd, None)]
        if prefixed:
            rest = re.split(r"\s#|&&|;|(?<![\w.-])rrfp-mm", rest)[0]
            opts = OPT.findall(rest)
        else:
            run = re.match(r"(?:\s+--[a-z][a-z0-9-]*(?:[ =](?!-)[^\s,;)]+)?)+", rest)
            if not run:
                continue
            opts = OPT.findall(run.group(0))
        for w in words:
            out.append((w, ["--" + o for o in opts], m.start()))
    return out


def doc_blocks(text):
    """(kind, text, line) of a markdown file: each logical line of a fenced code block ("code", `\\` continuations
    joined), each code span outside them ("span"), and the code blocks whole ("block")."""
    out, lines, i = [], text.split("\n"), 0
    while i < len(lines):
        if lines[i].lstrip().startswith("```"):
            start, body = i + 1, []
            i += 1
            while i < len(lines) and not lines[i].lstrip().startswith("```"):
                body.append(lines[i])
                i += 1
            out.append(("block", "\n".join(body), start + 1))
            j = 0
            while j < len(body):
                logical, first = body[j], j
                while logical.rstrip().endswith("\\") and j + 1 < len(body):
                    j += 1
                    logical = logical.rstrip()[:-1] + " " + body[j]
                out.append(("code", logical, start + first + 1))
                j += 1
        else:
            for m in re.finditer(r"`([^`\n]+)`", lines[i]):
                out.append(("span", m.group(1), i + 1))
        i += 1
    return out


FILEISH = re.compile(r"\.(md|json|jsonl|safetensors|ini|cmake|c|h|cu|py|sh|rrs|svg|html|txt|bin)$")


def doc_keys(kind, text):
    """section.key names a doc shows: in --set, in an INI block, or as a code span of its own."""
    keys = [m.group(1) for m in re.finditer(r"--set[ =]([a-z_][a-z_0-9]*\.[a-z_0-9]+)=", text)
            if m.group(1) != "section.key"]  # the usage's placeholder
    if kind == "block":
        section = None
        for line in text.split("\n"):
            s = re.match(r"^\s*\[([a-z_]+)\]\s*$", line)
            k = re.match(r"^\s*([a-z_][a-z_0-9]*)\s*=", line)
            if s:
                section = s.group(1)
            elif k and section:
                keys.append(section + "." + k.group(1))
            elif line.strip() and not line.strip().startswith(("#", ";")):
                section = None
    if kind == "span":
        m = re.match(r"^([a-z_]+)\.([a-z_0-9]+)(?: = .*)?$", text)
        if m and not FILEISH.search(m.group(0).split(" ")[0]):
            keys.append(m.group(1) + "." + m.group(2))
    return keys


def table_findings(readme, listed):
    """recipes/README.md's table (from its "| key |" header to the first line that is no table row) against
    --list-keys."""
    lines = readme.split("\n")
    start = next((i for i, l in enumerate(lines) if l.startswith("| key | type |")), None)
    if start is None:
        return ["recipes/README.md: no key table (a '| key | type | ...' header)"]
    end = start
    while end < len(lines) and lines[end].startswith("|"):
        end += 1
    want = listed.rstrip("\n").split("\n")
    out = []
    for n, (have, row) in enumerate(zip(lines[start:end], want)):
        if have != row:
            out.append("recipes/README.md:%d: the key table differs from `rrfp-mm train --list-keys` (paste its output):"
                       "\n  here: %s\n  keys: %s" % (start + n + 1, have[:160], row[:160]))
            break
    if not out and end - start != len(want):
        out.append("recipes/README.md:%d: the key table has %d rows, `rrfp-mm train --list-keys` %d (paste its output)"
                   % (start + 1, end - start, len(want)))
    return out


def findings(cli, src, docs, helps, commands, known_keys):
    out = []
    family = {}
    for c in commands:
        family.setdefault(c[0], []).append(c)
    sections = {k.split(".")[0] for k in known_keys}
    for c in commands:
        if not cli.probe_works(c):
            out.append("rrfp-mm %s: '%s' alone is not refused by name, so what the parser accepts cannot be asked"
                       % (" ".join(c), PROBE))
    # 1. accepted => in --help
    for c in commands:
        cand = source_options(src, c[0])
        if cand is None:
            out.append("rrfp-mm %s: its function is not found in runtime/cli/ from main.c's command table" % c[0])
            continue
        shown = {"--" + o for o in OPT.findall(helps[c])}
        for o in sorted(cand | shown):
            if o != "--help" and cli.accepts(c, o) and o not in shown:
                out.append("rrfp-mm %s accepts %s, which its --help does not show" % (" ".join(c), o))
    # 2. shown for a command => accepted
    def check(words, opts, where):
        group = family.get(words[0], []) if len(words) == 1 or words[1] is None else [words]
        for o in opts:
            if o in ("--help",) or not group:
                continue
            if not any(cli.accepts(w, o) for w in group):
                out.append("%s shows `rrfp-mm %s %s`, which the parser refuses" % (where, " ".join(w for w in words if w), o))
    for c in commands:
        for n, line in enumerate(helps[c].split("\n")):
            invs = invocations(line, commands, bare=True)
            for words, opts, _ in invs:
                check(words, opts, "rrfp-mm %s --help, line %d," % (" ".join(c), n + 1))
            # the options before the line's first invocation are the command's own (those after belong to it, or
            # to a shell construct around it, as in `rrfp-mm sim $(...; printf -- '--durations %s ' ...) --mode`)
            own = OPT.findall(line[:min([i[2] for i in invs] + [len(line)])])
            check((c[0], None) if len(c) == 2 else c, ["--" + o for o in own],
                  "rrfp-mm %s --help, line %d," % (" ".join(c), n + 1))
    for path, text in sorted(docs.items()):
        for kind, chunk, line in doc_blocks(text):
            where = "%s:%d" % (path, line)
            if kind in ("code", "span"):
                for words, opts, _ in invocations(chunk, commands, bare=(kind == "span" and not chunk.startswith("rrfp-mm ") and
                                                                        re.match(r"^[a-z-]+ ", chunk) is not None)):
                    check(words, opts, where)
            for k in doc_keys(kind, chunk):
                if k.split(".")[0] in sections or kind != "span":
                    if k not in known_keys:
                        out.append("%s shows the recipe key '%s', which `rrfp-mm train --list-keys` does not know" % (where, k))
    return out


def self_test(cli, src, docs, helps, commands, keys):
    """Each rule finds its planted fault; the real tree is then checked by the caller."""
    fails = []
    base = {"x.md": "clean\n"}
    before = findings(cli, src, base, helps, commands, keys)  # the real --help texts' own findings, if any

    def expect(what, d, h, needle):
        got = [f for f in findings(cli, src, d, h, commands, keys) if f not in before]
        if not any(needle in f for f in got):
            fails.append("self-test: %s not found (expected a finding with '%s'; got %s)" % (what, needle, got[:3]))

    expect("a code-block option the parser refuses", {"x.md": "```\nrrfp-mm train my.ini \\\n  --dry-run --no-such-flag\n```\n"},
           helps, "--no-such-flag")
    expect("a code-span option the parser refuses", {"x.md": "run `pack --strict --shard-sise 8` first\n"}, helps,
           "--shard-sise")
    expect("a sub-command option of another sub-command", {"x.md": "`rrfp-mm tokenizer decode --lines`\n"}, helps,
           "tokenizer decode --lines")
    h = dict(helps)
    h[("train",)] = helps[("train",)].replace("--dry-run", "--dry")
    expect("an accepted option its --help does not show", base, h, "accepts --dry-run")
    h = dict(helps)
    h[("report",)] = helps[("report",)] + "  --colour C   the curves' colour\n"
    expect("a --help option the parser refuses", base, h, "`rrfp-mm report --colour`")
    h = dict(helps)
    h[("report",)] = helps[("report",)] + "made by `rrfp-mm eval --checkpoint C --predict P`\n"
    expect("a --help option of another command the parser refuses", base, h, "`rrfp-mm eval --predict`")
    expect("an unknown key in --set", {"x.md": "```\nrrfp-mm train a.ini --set train.lr=0.1\n```\n"}, helps, "'train.lr'")
    expect("an unknown key in an INI block", {"x.md": "```\n[optim]\nlr = 1\nlearning_rate = 2\n```\n"}, helps,
           "'optim.learning_rate'")
    expect("an unknown key in a code span", {"x.md": "set `train.warmup = 5`\n"}, helps, "'train.warmup'")
    listed = cli.key_table()
    readme = "# keys\n\n" + listed + "\nafter\n"
    if table_findings(readme, listed):
        fails.append("self-test: the key table itself differs from itself: %s" % table_findings(readme, listed))
    for what, bad in (("a changed row", readme.replace("| `optim.lr` | float", "| `optim.lr` | int", 1)),
                      ("a missing row", readme.replace(listed.split("\n")[-2] + "\n", "", 1)),
                      ("two rows swapped", readme.replace(listed.split("\n")[2] + "\n" + listed.split("\n")[3],
                                                          listed.split("\n")[3] + "\n" + listed.split("\n")[2], 1))):
        if bad == readme or not table_findings(bad, listed):
            fails.append("self-test: %s in the key table is not found" % what)
    # the probe: an option is refused by name, a known one with its value is not
    if cli.accepts(("train",), "--no-such-flag") or not cli.accepts(("train",), "--set"):
        fails.append("self-test: the probe cannot tell train's --set from --no-such-flag")
    fake = Cli("/bin/true", cli.work)
    if fake.probe_works(("train",)):
        fails.append("self-test: a program that refuses nothing passes the probe's premise")
    return fails


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: lint_cli_docs.py SRC BIN")
    src, bin_path = sys.argv[1], os.path.abspath(sys.argv[2])
    with tempfile.TemporaryDirectory() as work:
        cli = Cli(bin_path, work)
        commands = cli.commands()
        helps = {c: cli.help(c) for c in commands}
        keys = cli.keys()
        if len(commands) < 10 or len(keys) < 50:
            print("FAIL: only %d commands and %d recipe keys read from %s" % (len(commands), len(keys), bin_path))
            return 1
        docs = {}
        for p in DOCS + ["docs/" + n for n in sorted(os.listdir(os.path.join(src, "docs"))) if n.endswith(".md")]:
            docs[p] = open(os.path.join(src, p), encoding="utf-8").read()
        fails = self_test(cli, src, docs, helps, commands, keys)
        fails += findings(cli, src, docs, helps, commands, keys)
        fails += table_findings(docs["recipes/README.md"], cli.key_table())
        left = os.listdir(work)
        if left:
            fails.append("the probes wrote %s into their working folder (an option ran instead of being parsed)" % left)
    for f in fails:
        print("FAIL: " + f)
    if fails:
        return 1
    print("lint cli docs: ok (%d commands, %d options asked, %d docs, %d recipe keys)"
          % (len(commands), len([k for k in cli.cache if k[1]]), len(docs), len(keys)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
