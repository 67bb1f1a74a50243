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
{ "$BIN" tensors diff "$D/a.safetensors" "$D/missing.safetensors" 2>&1 || true; } | grep -q "y.bias is in .* but not in" || fail "missing tensor not named"
{ "$BIN" tensors diff "$D/a.safetensors" "$D/shape.safetensors" 2>&1 || true; } | grep -q "x.weight has another shape" || fail "shape change not named"
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
  echo "$out" | grep -q "atol expects a finite number >= 0" || fail "--atol '$bad' message: $out"
  set +e; "$BIN" tensors diff "$D/a.safetensors" "$D/far.safetensors" --rtol "$bad" >/dev/null 2>&1; rc=$?; set -e
  [ $rc -eq 2 ] || fail "--rtol '$bad' gave rc $rc (expected 2)"
done
set +e; out=$("$BIN" tensors diff "$D/a.safetensors" "$D/far.safetensors" --atol 98.9 2>&1); rc=$?; set -e
[ $rc -eq 1 ] && echo "$out" | grep -q "x.weight: 1 of 6 elements differ beyond atol 98.9" || fail "a difference of 99 passed atol 98.9 (rc $rc): $out"
"$BIN" tensors diff "$D/a.safetensors" "$D/far.safetensors" --atol 99 >/dev/null || fail "a difference of 99 failed atol 99"
echo "tensors diff: ok"
