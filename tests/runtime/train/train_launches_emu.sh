#!/usr/bin/env bash
# train_launches_emu.sh — the launches of a training step, held: recipes/test-synthetic.ini (one stage, bf16,
# one fixed batch, no clipping) on the emulated CUDA backend for 3 steps with runtime.profile = true, and the
# emulation's own count of what each step launched (RR_EMU_STEP_LAUNCHES=1: kernels, cuBLAS(Lt) products,
# memsets, copies, graph launches; tests/support/cuda_emu/wrap.c). Checks:
#   1. steps 2 and 3 launch the same (the same batch runs the same ops) and the emulation's total of a step is
#      the profiler's (metrics.jsonl "profile", every kind): no launch of a step escapes the op tables;
#   2. the optimiser's launches per step are OPTIM: the gradient sum of squares (its chunk and total kernels,
#      the copy of the total to the host and the device error record's copy: 4) and the multi-tensor AdamW's
#      one launch for every tensor (BackendOps.adamw_multi) = 5, whatever the number of tensors (a loop over
#      tensors would make it 4 + 31 here); a TP rank past 0 and a last stage with the tied embedding's copy, whose
#      tensors count apart in the norm, make the same 5: their sum of squares is BackendOps.sum_squares_multi's
#      chunk kernel over every tensor, its total kernel and the two copies (4, not 4 per tensor; the op's launches
#      and bits against the loop: tests/engine/cuda/test_sumsq_multi.c);
#   3. the step's total is TOTAL (the per-kind split in KINDS). What changes it: the model's shapes and block
#      counts in the recipe, the ops' launch structure (a fused or split kernel), the batch (the fixed batch
#      of data.seed), the attention path. A change that moves it must say why in its commit; an accidental
#      per-tensor or per-sample loop shows up here.
# Then CUDA graphs (runtime.cuda_graphs, runtime/model/vit_graph.c; off under runtime.profile): the same run without
# the profiler, with graphs (auto) and without (off):
#   4. every step's loss is the same bits in the three runs, and the last checkpoint's weights and AdamW moments
#      with graphs are eager's bit for bit (graph replay = eager, the tower's gradients included);
#   5. without graphs the launches are the profiled run's; with them, from step 3 on (step 1 runs each shape
#      eagerly, step 2 records it) each tower forward and each tower backward is one graph launch (GRAPHS a step:
#      both for each microbatch with images) in place of its launches: eager total - graph total =
#      GRAPHS / 2 x (TOWER - 1 + TOWER_B - 1), TOWER the launches of one tower forward (vit_forward_run at this
#      recipe's shapes: embedding, 1 block, final norm), TOWER_B those of its backward (vit_backward).
# Usage: train_launches_emu.sh RRFP_MM_EMU RECIPE WORKDIR
set -euo pipefail
EMU=$1 RECIPE=$2 WORK=$3
rm -rf "$WORK"
mkdir -p "$WORK"
run() { # NAME SETTINGS...
  local name=$1
  shift
  RR_EMU_STEP_LAUNCHES=1 "$EMU" train "$RECIPE" --set train.steps=4 --set optim.warmup=1 --set train.log_every=1 \
    --set checkpoint.keep=0 --set train.checkpoint_every=0 --set data.fixed_batch=true --set data.source=synthetic \
    --set optim.grad_clip=0 --set runtime.backend=cuda --set runtime.precision=bf16 --set train.run_dir="$WORK/$name" \
    "$@" > "$WORK/$name.log" 2>&1 || { cat "$WORK/$name.log"; exit 1; }
}
run run --set runtime.profile=true
run graphs --set runtime.cuda_graphs=auto
run eager --set runtime.cuda_graphs=off
/usr/bin/python3 - "$WORK" <<'PY'
import json, re, sys
OPTIM = 5
TOTAL = 501 # 223 kernels, 130 cuBLAS(Lt) products, 19 memsets, 129 copies
KINDS = {"gemm": 158, "attention": 24, "norm": 64, "elementwise": 104, "optimiser": 5, "copies": 146, "communication": 0}
GRAPHS = 4  # data.microbatches = 2, each with images: its tower forward and its tower backward
TOWER = 12  # 5 GEMMs (patch embedding, qkv, out, fc1 + GELU, fc2) and 7 kernels (norms, RoPE, attention, adds)
TOWER_B = 38  # 9 cuBLAS products (qkv, out, fc1, fc2: input and weight gradients; the patch embedding's weight
              # gradient), 24 kernels (the norms', attention's, RoPE's, GELU's and the residual adds' backward, bias
              # gradients), 3 memsets and 2 copies
W = sys.argv[1]
def launches(name):
    return [tuple(int(x) for x in m.groups()) for m in re.finditer(
        r"cuda-emu: rank 0 step \d+ launches: (\d+) kernels, (\d+) cublas, (\d+) memsets, (\d+) copies, (\d+) graphs",
        open("%s/%s.log" % (W, name)).read())][:4] # a last line at the run's end (after the final step)
def metrics(name):
    return [json.loads(l) for l in open("%s/%s/metrics.jsonl" % (W, name))]
emu = launches("run")
rows = metrics("run")
assert len(emu) == 4 and len(rows) == 4, (len(emu), len(rows))
kinds = ["gemm", "attention", "norm", "elementwise", "optimiser", "copies", "communication"]
prof = [{k: r["profile"][k]["launches"] for k in kinds} for r in rows]
for s in (1, 2):
    print("step %d: emulation %s (kernels, cublas, memsets, copies, graphs), profile %s" % (s + 1, emu[s], prof[s]))
assert emu[1] == emu[2] and prof[1] == prof[2], ("steps 2 and 3 differ", emu, prof)
for s in (1, 2):
    assert sum(emu[s]) == sum(prof[s].values()), ("the emulation's launches are not the profiler's", s + 1, emu[s], prof[s])
assert prof[1]["optimiser"] == OPTIM, ("optimiser launches per step", prof[1]["optimiser"], "want", OPTIM)
if TOTAL is not None:
    assert sum(emu[1]) == TOTAL, ("launches per step", sum(emu[1]), "want", TOTAL)
    assert prof[1] == KINDS, ("launches per kind", prof[1], "want", KINDS)
print("launches per step:", sum(emu[1]))
# 4, 5: graphs
eg, ee = launches("graphs"), launches("eager")
mg, me = metrics("graphs"), metrics("eager")
assert [r["loss_hex"] for r in mg] == [r["loss_hex"] for r in me] == [r["loss_hex"] for r in rows], \
    ("the losses differ with graphs", [r["loss_hex"] for r in mg], [r["loss_hex"] for r in me])
assert ee == emu, ("runtime.profile changed the launches", ee, emu)
assert all(e[4] == 0 for e in ee) and eg[0][4] == 0, ("graph launches where none was due", ee, eg)
assert eg[2] == eg[3], eg
g = eg[2][4]
saved = sum(ee[2]) - sum(eg[2])
print("with graphs, step 3: %s (kernels, cublas, memsets, copies, graphs): %d launches for %d eager" % (eg[2], sum(eg[2]), sum(ee[2])))
print("graph launches a step %d, launches they replaced %d" % (g, saved))
if GRAPHS is not None:
    want = GRAPHS // 2 * (TOWER - 1 + TOWER_B - 1)
    assert g == GRAPHS and saved == want, ((g, saved), "want", (GRAPHS, want))
PY
"$EMU" tensors diff "$WORK/graphs/checkpoints/step-00000004" "$WORK/eager/checkpoints/step-00000004" > "$WORK/diff.log" 2>&1 ||
  { cat "$WORK/diff.log"; exit 1; }
echo "with graphs and without: $(tail -1 "$WORK/diff.log")"
echo "train launches emu: ok"
