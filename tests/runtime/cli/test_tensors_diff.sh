#!/usr/bin/env bash
# test_tensors_diff.sh — `rrfp-mm tensors diff` on files written by an independent Python writer:
# equal files pass bitwise; a one-ulp change fails bitwise and passes with a tolerance; a missing
# tensor, a shape change and a directory of shards merged by name behave as documented.
set -euo pipefail
BIN=$1
D=$(mktemp -d)
trap 'rm -rf "$D"' EXIT
/usr/bin/python3 - "$D" <<'PY'
import json, struct, sys, os
d = sys.argv[1]
def write(path, tensors):
    hdr, off, blobs = {}, 0, []
    for name, (shape, vals) in tensors.items():
        b = struct.pack("<%df" % len(vals), *vals)
        hdr[name] = {"dtype": "F32", "shape": shape, "data_offsets": [off, off + len(b)]}
        off += len(b); blobs.append(b)
    h = json.dumps(hdr).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    open(path, "wb").write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
a = {"x.weight": ([2, 3], [1, 2, 3, 4, 5, 6]), "y.bias": ([2], [0.5, -0.25])}
write(f"{d}/a.safetensors", a)
write(f"{d}/same.safetensors", a)
ulp = struct.unpack("<f", struct.pack("<I", struct.unpack("<I", struct.pack("<f", 5.0))[0] + 1))[0]
write(f"{d}/ulp.safetensors", {"x.weight": ([2, 3], [1, 2, 3, 4, ulp, 6]), "y.bias": ([2], [0.5, -0.25])})
write(f"{d}/missing.safetensors", {"x.weight": ([2, 3], [1, 2, 3, 4, 5, 6])})
write(f"{d}/shape.safetensors", {"x.weight": ([3, 2], [1, 2, 3, 4, 5, 6]), "y.bias": ([2], [0.5, -0.25])})
os.makedirs(f"{d}/shards")
write(f"{d}/shards/model-pp0.safetensors", {"x.weight": ([2, 3], [1, 2, 3, 4, 5, 6])})
write(f"{d}/shards/model-pp1.safetensors", {"y.bias": ([2], [0.5, -0.25])})
PY
fail() { echo "FAIL: $*"; exit 1; }
"$BIN" tensors diff "$D/a.safetensors" "$D/same.safetensors" >/dev/null || fail "identical files differ"
if "$BIN" tensors diff "$D/a.safetensors" "$D/ulp.safetensors" >/dev/null 2>&1; then fail "one ulp passed bitwise"; fi
"$BIN" tensors diff "$D/a.safetensors" "$D/ulp.safetensors" --rtol 1e-6 >/dev/null || fail "one ulp failed rtol 1e-6"
grep -q "y.bias is in .* but not in" <<<"$({ "$BIN" tensors diff "$D/a.safetensors" "$D/missing.safetensors" 2>&1 || true; })" || fail "missing tensor not named"
grep -q "x.weight has another shape" <<<"$({ "$BIN" tensors diff "$D/a.safetensors" "$D/shape.safetensors" 2>&1 || true; })" || fail "shape change not named"
"$BIN" tensors diff "$D/shards" "$D/a.safetensors" >/dev/null || fail "shard directory not merged by name"
# the listing read whole before it is searched (grep -q leaving a pipe early would stop the writer with SIGPIPE)
grep -q "y.bias .*F32 *\[2\]" <<<"$("$BIN" tensors ls "$D/shards")" || fail "ls"
set +e; "$BIN" tensors diff "$D/a.safetensors" "$D/nope" 2>/dev/null; rc=$?; set -e
[ $rc -eq 1 ] || fail "missing path rc $rc"
# tolerances are finite numbers >= 0 (`--atol nan` once passed a difference of 99 as "0 differ")
/usr/bin/python3 - "$D" <<'PY'
import json, struct, sys
d = sys.argv[1]
h = json.dumps({"x.weight": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]},
                "y.bias": {"dtype": "F32", "shape": [2], "data_offsets": [24, 32]}}).encode()
h += b" " * ((8 - len(h) % 8) % 8)
open(f"{d}/far.safetensors", "wb").write(struct.pack("<Q", len(h)) + h + struct.pack("<8f", 1, 2, 3, 4, 104, 6, 0.5, -0.25))
PY
for bad in nan NaN inf -inf -1 1e-3x abc ""; do
  set +e; out=$("$BIN" tensors diff "$D/a.safetensors" "$D/far.safetensors" --atol "$bad" 2>&1); rc=$?; set -e
  [ $rc -eq 2 ] || fail "--atol '$bad' gave rc $rc (expected 2, a refusal): $out"
  grep -q "atol expects a finite number >= 0" <<<"$out" || fail "--atol '$bad' message: $out"
  set +e; "$BIN" tensors diff "$D/a.safetensors" "$D/far.safetensors" --rtol "$bad" >/dev/null 2>&1; rc=$?; set -e
  [ $rc -eq 2 ] || fail "--rtol '$bad' gave rc $rc (expected 2)"
done
set +e; out=$("$BIN" tensors diff "$D/a.safetensors" "$D/far.safetensors" --atol 98.9 2>&1); rc=$?; set -e
[ $rc -eq 1 ] && grep -q "x.weight: 1 of 6 elements differ beyond atol 98.9" <<<"$out" || fail "a difference of 99 passed atol 98.9 (rc $rc): $out"
"$BIN" tensors diff "$D/a.safetensors" "$D/far.safetensors" --atol 99 >/dev/null || fail "a difference of 99 failed atol 99"
# tensors larger than diff's chunk (2^20 elements): every dtype compared across chunk boundaries, the first
# difference found where it is (past the first chunk), and the process's memory far below the tensors' size
/usr/bin/python3 - "$D" <<'PY'
import json, struct, sys
import numpy as np
d = sys.argv[1]
n = 3 * (1 << 20) + 5
def write(path, tensors):
    hdr, off, blobs = {}, 0, []
    for name, (dt, arr) in tensors.items():
        b = arr.tobytes()
        hdr[name] = {"dtype": dt, "shape": [int(arr.size)], "data_offsets": [off, off + len(b)]}
        off += len(b); blobs.append(b)
    h = json.dumps(hdr).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    open(path, "wb").write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
rng = np.random.default_rng(3)
f = rng.standard_normal(n).astype("<f4")
b16 = (f.view("<u4") >> 16).astype("<u2")
i = rng.integers(-1000, 1000, n).astype("<i4")
u = rng.integers(0, 255, n).astype("u1")
base = {"big.f32": ("F32", f), "big.bf16": ("BF16", b16), "big.i32": ("I32", i), "big.u8": ("U8", u)}
write(f"{d}/big_a.safetensors", base)
f2, b2, i2, u2 = f.copy(), b16.copy(), i.copy(), u.copy()
f2[2500001] += 1.0; b2[(1 << 20) + 7] ^= 0x0100; i2[n - 1] += 1; u2[(2 << 20) + 64] ^= 1; u2[(2 << 20) + 65] ^= 1
write(f"{d}/big_b.safetensors", {"big.f32": ("F32", f2), "big.bf16": ("BF16", b2), "big.i32": ("I32", i2),
                                 "big.u8": ("U8", u2)})
PY
"$BIN" tensors diff "$D/big_a.safetensors" "$D/big_a.safetensors" >/dev/null || fail "a large file differs from itself"
# the peak resident set of a command: RUSAGE_CHILDREN of a Python parent that runs it and nothing else
peak() {
  /usr/bin/python3 -c 'import resource, subprocess, sys
rc = subprocess.run(sys.argv[1:]).returncode
print("maxrss %d" % resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, file=sys.stderr)
sys.exit(rc)' "$@"
}
set +e
out=$(peak "$BIN" tensors diff "$D/big_a.safetensors" "$D/big_b.safetensors" 2>&1)
rc=$?
small=$(peak "$BIN" tensors diff "$D/a.safetensors" "$D/same.safetensors" 2>&1 >/dev/null)
set -e
[ $rc -eq 1 ] || fail "large tensors: rc $rc: $out"
for want in "big.f32: 1 of 3145733 elements differ .*first at 2500001" "big.bf16: 1 of 3145733 elements differ .*first at 1048583" \
            "big.i32: 1 of 3145733 elements differ .*first at 3145732" "big.u8: 2 of 3145733 elements differ .*first at 2097216" \
            "4 tensors compared, 4 differ"; do
  grep -q "$want" <<<"$out" || fail "large tensors: no '$want' in: $out"
done
rss=$(sed -n 's/^maxrss \([0-9]*\)$/\1/p' <<<"$out")
base=$(sed -n 's/^maxrss \([0-9]*\)$/\1/p' <<<"$small")
# read by chunks, the diff holds two chunks (8 MiB) more than a diff of two tiny files; read whole, one f32 tensor
# of A and one of B (24 MiB). A sanitizer's allocator keeps freed blocks a while, so the bound is not checked there.
if grep -q 'libasan' <<<"$(ldd "$BIN" 2>/dev/null)"; then
  echo "tensors diff: the memory bound is not checked under ASan"
else
  [ -n "$rss" ] && [ -n "$base" ] && [ "$rss" -lt $((base + 14 * 1024)) ] ||
    fail "large tensors: peak memory ${rss:-?} KiB against ${base:-?} KiB for tiny files (read whole, not by chunks?)"
fi
echo "tensors diff: ok"
