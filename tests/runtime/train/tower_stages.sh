#!/usr/bin/env bash
# tower_stages.sh — the vision tower over live pipeline stages (docs/anyres.md "The tower over stages"):
# `mpirun -np P rrfp-mm train` with parallel.layers giving the first stages no LM layer and parallel.tower_layers
# giving them tower blocks, against the single-process run of the same recipe (recipes/test-synthetic.ini with a
# 3-block tower): per-step losses (hex) and grad norms equal, the final checkpoint (parameters and AdamW moments)
# bitwise equal (`rrfp-mm tensors diff --rtol 0 --atol 0`). Cases: pp 3 with tower blocks on stages 0 and 1 and the
# LM on 1 and 2 (fixed 1f1b; zb-h1's split backward under the readiness dispatcher), pp 2 (ready 1f1b), a frozen
# tower (train.freeze = vision: no gradient travels back to the tower stages), and a tiny LLaVA-1.5 (the CLIP tower,
# feature layer -2: block 3 never runs; pp 2, tower blocks 2 + 2). The split happened: the trainer's log names each
# stage's tower blocks, and each rank's checkpoint file holds its own tower blocks and no other. Then checkpoints
# resumed across tower splits (pp 3 -> pp 2, pp 2 -> one process) and data parallelism: pp x dp 2, plain and with
# parallel.zero (the tower-only stage's optimiser state sharded; resumed under the other split), bitwise dp 2 alone
# (the parallel.mode = ready runs: adaptive's reorder changes the order the microbatches' gradients add up in); tensor
# parallelism: pp x tp 2 (each TP rank's checkpoint holding its slices of its stage's tower blocks), CLIP's, and
# pp x tp 2 x dp 2 with parallel.zero, bitwise tp 2 (x dp 2) alone; interleaved virtual stages (parallel.chunks = 2,
# interleaved-1f1b and zbv's V) alone, with dp 2 and zero, with tp 2. A last stage holding the
# head alone (pp 3, parallel.layers = 1,1,0 fixed 1f1b; 0,2,0 with tower blocks 2,1,0 under zb-h1): the same checks,
# its file holds the final norm and the head and no LM block; with tp 2 (each TP rank's file its slice of the head) and
# with dp 2 and parallel.zero (pp 2, parallel.layers = 2,0), bitwise tp 2 and dp 2 alone; a middle stage with no LM
# layer is refused.
# Usage: tower_stages.sh RRFP_MM SOURCE_DIR WORKDIR
set -uo pipefail
BIN=$1 SRC=$2 W=$3
rm -rf "$W"; mkdir -p "$W"
R=$SRC/recipes/test-synthetic.ini
MPI="timeout 120 mpirun --allow-run-as-root --oversubscribe"
COMMON=(--set train.steps=3 --set optim.warmup=1 --set train.log_every=1 --set model.vision_layers=3)
CLIP=(--set model.vision_arch=clip --set model.vision_layers=4 --set model.vision_feature_layer=-2 --set model.vision_image_size=16
      --set model.projector_act=gelu)
fail() { echo "FAIL: $*"; exit 1; }
metrics() { grep -o '"loss_hex":"[^"]*","lr":[^,]*,"grad_norm":[^,]*' "$1/metrics.jsonl"; }
CK=checkpoints/step-00000003
same() { # same REF RUN: losses, grad norms, checkpoint bitwise
    [ "$(metrics "$W/$1" | wc -l)" = 3 ] || fail "$1: metrics"
    [ "$(metrics "$W/$1")" = "$(metrics "$W/$2")" ] || { metrics "$W/$1"; metrics "$W/$2"; fail "$2: losses or grad norms differ from $1"; }
    "$BIN" tensors diff "$W/$1/$CK" "$W/$2/$CK" --quiet --rtol 0 --atol 0 || fail "$2: checkpoint differs from $1"
    echo "$2: losses, grad norms and checkpoint bitwise those of $1"
}
blocks() { # blocks RUN RANK: the tower tensors of the rank's checkpoint file
    "$BIN" tensors ls "$W/$1/$CK/model.pp${2}c0.safetensors" 2>&1 | grep -o 'vision\.\(blocks\.[0-9]*\|[a-z_]*\)' | sort -u | tr '\n' ' '
}
single() { "$BIN" train "$R" "${COMMON[@]}" --set train.run_dir="$W/$1" "${@:2}" >"$W/$1.log" 2>&1 || { cat "$W/$1.log"; fail "$1"; }; }
pipe() { # pipe NAME NP LAYERS TOWER [--set ...]
    $MPI -np "$2" "$BIN" train "$R" "${COMMON[@]}" --set train.run_dir="$W/$1" --set parallel.pp="$2" --set parallel.layers="$3" \
        --set parallel.tower_layers="$4" "${@:5}" >"$W/$1.log" 2>&1 || { cat "$W/$1.log"; fail "$1"; }
}

single one
pipe pp3 3 0,1,1 2,1,0 --set parallel.mode=fixed --set train.dump_step=1
# the step dump's microbatch inputs come from the stage of the patch embedding (rank 0), the logits from the last
grep -q "^patches" <<<"$("$BIN" tensors ls "$W/pp3/dump-1/microbatch-0.pp0c0.safetensors" 2>&1)" || fail "pp3: rank 0 dumped no inputs"
grep -q "^logits" <<<"$("$BIN" tensors ls "$W/pp3/dump-1/microbatch-0.pp2c0.safetensors" 2>&1)" || fail "pp3: rank 2 dumped no logits"
grep -q "layers 0,1,1 (parallel.layers), tower blocks \[0,2) \[2,3) - (parallel.tower_layers)" "$W/pp3.log" \
    || { grep pipeline "$W/pp3.log"; fail "pp3: the log does not name the stages' tower blocks"; }
[ "$(blocks pp3 0)" = "vision.blocks.0 vision.blocks.1 vision.patch_embed " ] || fail "pp3 rank 0 holds: $(blocks pp3 0)"
[ "$(blocks pp3 1)" = "vision.blocks.2 vision.ln_f " ] || fail "pp3 rank 1 holds: $(blocks pp3 1)"
[ -z "$(blocks pp3 2)" ] || fail "pp3 rank 2 holds: $(blocks pp3 2)"
same one pp3
pipe pp3zb 3 0,1,1 2,1,0 --set parallel.mode=ready --set parallel.hint=zb-h1
same one pp3zb
pipe pp2 2 0,2 1,2 --set parallel.mode=ready
grep -q "tower blocks \[0,1) \[1,3) (parallel.tower_layers)" "$W/pp2.log" || fail "pp2: the log does not name the stages' tower blocks"
same one pp2

# a frozen tower: the tower stages run forwards only
single frozen --set train.freeze=vision
pipe frozen3 3 0,1,1 2,1,0 --set train.freeze=vision --set parallel.mode=ready
same frozen frozen3

# LLaVA-1.5's tower: CLIP, hidden_states[-2]
single clip "${CLIP[@]}"
pipe clip2 2 0,2 2,2 "${CLIP[@]}" --set parallel.mode=ready
[ "$(blocks clip2 1)" = "vision.blocks.2 vision.blocks.3 vision.post_ln " ] || fail "clip2 rank 1 holds: $(blocks clip2 1)"
same clip clip2

# parallel.tower_split = auto on a model whose tower costs more than a stage's share: the dry run's split, run live
AUTO=(--set model.vision_width=64 --set model.text_width=32 --set model.ffn_hidden=86)
single auto "${AUTO[@]}"
"$BIN" train "$R" "${COMMON[@]}" "${AUTO[@]}" --set parallel.pp=2 --set parallel.tower_split=auto --dry-run >"$W/auto-dry.log" 2>&1 \
    || { cat "$W/auto-dry.log"; fail "auto: dry run"; }
grep -q "^tower blocks per virtual stage: 2,1 (parallel.tower_split = auto" "$W/auto-dry.log" || { cat "$W/auto-dry.log"; fail "auto: the dry run's split"; }
$MPI -np 2 "$BIN" train "$R" "${COMMON[@]}" "${AUTO[@]}" --set train.run_dir="$W/auto2" --set parallel.pp=2 --set parallel.tower_split=auto \
    --set parallel.mode=ready >"$W/auto2.log" 2>&1 || { cat "$W/auto2.log"; fail "auto2"; }
grep -q "layers 0,2 (cost model), tower blocks \[0,2) \[2,3) (parallel.tower_split = auto)" "$W/auto2.log" \
    || { grep pipeline "$W/auto2.log"; fail "auto2: the log does not name the stages' tower blocks"; }
same auto auto2

# resuming across tower layouts (the checkpoint is free of the layout): a pp 3 split stopped at step 2 and continued
# under pp 2's split, a pp 2 split continued in one process (the tower on one stage), each bitwise the uninterrupted run
leg() { # leg RUN LOG NP [--set ...]: a run (or its continuation) in run dir RUN, its log LOG.log, the split checked
    $MPI -np "$3" "$BIN" train "$R" "${COMMON[@]}" --set parallel.mode=ready --set train.run_dir="$W/$1" "${@:4}" >"$W/$2.log" 2>&1 \
        || { cat "$W/$2.log"; fail "$2"; }
}
P3=(--set parallel.pp=3 --set parallel.layers=0,1,1 --set parallel.tower_layers=2,1,0)
P2=(--set parallel.pp=2 --set parallel.layers=0,2 --set parallel.tower_layers=1,2)
split3() { grep -q "layers 0,1,1 (parallel.layers), tower blocks \[0,2) \[2,3) - (parallel.tower_layers)" "$W/$1.log" || fail "$1: no split"; }
split2() { grep -q "layers 0,2 (parallel.layers), tower blocks \[0,1) \[1,3) (parallel.tower_layers)" "$W/$1.log" || fail "$1: no split"; }
leg rs3 rs3-a 3 "${P3[@]}" --set train.stop_at=2 && split3 rs3-a
leg rs3 rs3-b 2 "${P2[@]}" --resume latest && split2 rs3-b
same one rs3
leg rs2 rs2-a 2 "${P2[@]}" --set train.stop_at=2 && split2 rs2-a
leg rs2 rs2-b 1 --resume latest
grep -q "tower blocks" "$W/rs2-b.log" && fail "rs2-b: the one process split the tower"
same one rs2

# with data parallelism: pp x dp 2 against dp 2 alone (the replicas' microbatches and the all-reduce's sums the same;
# dp against one process: dp_train.sh, whose reordered sums are not bitwise), and the distributed optimizer
# (parallel.zero: each stage's shard covers its tower tensors, the tower-only stage's too), resumed across the splits
DP=(--set parallel.dp=2 --set data.microbatches=2)
leg dp2 dp2 2 "${DP[@]}"
leg pd2 pd2 4 "${DP[@]}" "${P2[@]}" && split2 pd2
same dp2 pd2
ZERO=(--set parallel.zero=1 --set parallel.dp_bucket_mb=0.01)
leg pz3 pz3 6 "${DP[@]}" "${P3[@]}" "${ZERO[@]}" && split3 pz3
# rank 0 (the tower-only stage: patch embedding, blocks 0 and 1, every tensor trainable) holds half its moments
n=$("$BIN" tensors ls "$W/pz3/$CK/model.pp0c0.safetensors" 2>&1 | awk '/F32/ { gsub(/[][,]/, " "); k = 1; for (i = 3; i <= NF; i++) k *= $i; n += k } END { print n }')
grep -q "distributed optimizer: 2 replicas, rank 0 holds AdamW moments of $((n / 2)) of its stage's $n trainable" "$W/pz3.log" \
    || { grep "distributed optimizer" "$W/pz3.log"; fail "pz3: the tower-only stage's $n values are not sharded"; }
same dp2 pz3
leg zr zr-a 6 "${DP[@]}" "${P3[@]}" "${ZERO[@]}" --set train.stop_at=2 && split3 zr-a
leg zr zr-b 4 "${DP[@]}" "${P2[@]}" "${ZERO[@]}" --resume latest && split2 zr-b
same dp2 zr

# with tensor parallelism: each TP rank of a stage holds its slices of the stage's tower blocks and passes the tower's
# hidden state (whole on every TP rank) to the same TP rank of the next stage, as the LM does; pp x tp 2 against tp 2
# alone (tp against one process reorders fp32 sums: tp_train.sh), LLaVA-1.5's CLIP too, and pp 2 x tp 2 x dp 2 with
# parallel.zero against tp 2 x dp 2
TP=(--set parallel.tp=2)
leg tp2 tp2 2 "${TP[@]}"
leg pt3 pt3 6 "${TP[@]}" "${P3[@]}" && split3 pt3
shape() { # shape RUN FILE TENSOR: its shape in the rank's checkpoint file (the listing of the checkpoint, file by file)
    "$BIN" tensors ls "$W/$1/$CK" 2>&1 | awk -v f="/model.$2.safetensors" -v t="$3" '/^#/ { on = index($0, f) > 0; next } on && $1 == t { print $3 $4 }'
}
[ "$(shape pt3 pp0tp1c0 vision.blocks.1.attn.qkv.weight)" = "[48,32]" ] \
    || fail "pt3: TP rank 1 of stage 0 holds vision.blocks.1.attn.qkv.weight $(shape pt3 pp0tp1c0 vision.blocks.1.attn.qkv.weight)"
[ "$(shape pt3 pp1tp1c0 vision.blocks.2.mlp.fc2.weight)" = "[32,64]" ] \
    || fail "pt3: TP rank 1 of stage 1 holds vision.blocks.2.mlp.fc2.weight $(shape pt3 pp1tp1c0 vision.blocks.2.mlp.fc2.weight)"
[ -z "$(shape pt3 pp1tp0c0 vision.blocks.1.attn.qkv.weight)" ] || fail "pt3: stage 1 holds tower block 1"
same tp2 pt3
leg tpc tpc 2 "${TP[@]}" "${CLIP[@]}"
leg ptc ptc 4 "${TP[@]}" "${CLIP[@]}" --set parallel.pp=2 --set parallel.layers=0,2 --set parallel.tower_layers=2,2
grep -q "tower blocks \[0,2) \[2,4) (parallel.tower_layers)" "$W/ptc.log" || fail "ptc: no split"
same tpc ptc
leg tpd tpd 4 "${TP[@]}" "${DP[@]}"
leg ptz ptz 8 "${TP[@]}" "${DP[@]}" "${P2[@]}" "${ZERO[@]}" && split2 ptz
grep -q "distributed optimizer: 2 replicas" "$W/ptz.log" || fail "ptz: no distributed optimizer"
same tpd ptz

# interleaved virtual stages (parallel.chunks = 2): tower blocks on virtual stages 0, 1 and 2 (rank 0 chunk 0, rank 1
# chunk 0, and with LM layer 0 rank 0 chunk 1; the V shape of zbv puts virtual stage 2 on rank 1 chunk 1), bitwise one
# process; with dp 2 and parallel.zero bitwise dp 2 alone, with tp 2 bitwise tp 2 alone
C2=(--set parallel.pp=2 --set parallel.chunks=2 --set parallel.layers=0,0,1,1 --set parallel.tower_layers=1,1,1,0)
splitc() { grep -q "2 ranks x 2 chunks.*layers 0,0,1,1 (parallel.layers), tower blocks \[0,1) \[1,2) \[2,3) - (parallel.tower_layers)" "$W/$1.log" \
    || { grep pipeline "$W/$1.log"; fail "$1: no split"; }; }
chunk() { "$BIN" tensors ls "$W/$1/$CK/model.$2.safetensors" 2>&1 | grep -o 'vision\.\(blocks\.[0-9]*\|[a-z_]*\)' | sort -u | tr '\n' ' '; }
leg ci ci 2 "${C2[@]}" --set parallel.hint=interleaved-1f1b && splitc ci
[ "$(chunk ci pp0c0)" = "vision.blocks.0 vision.patch_embed " ] || fail "ci rank 0 chunk 0 holds: $(chunk ci pp0c0)"
[ "$(chunk ci pp1c0)" = "vision.blocks.1 " ] || fail "ci rank 1 chunk 0 holds: $(chunk ci pp1c0)"
[ "$(chunk ci pp0c1)" = "vision.blocks.2 vision.ln_f " ] || fail "ci rank 0 chunk 1 holds: $(chunk ci pp0c1)"
same one ci
leg cv cv 2 "${C2[@]}" --set parallel.hint=zbv && splitc cv
[ "$(chunk cv pp1c1)" = "vision.blocks.2 vision.ln_f " ] || fail "cv rank 1 chunk 1 holds: $(chunk cv pp1c1)"
same one cv
leg cz cz 4 "${C2[@]}" "${DP[@]}" "${ZERO[@]}" --set parallel.hint=interleaved-1f1b && splitc cz
same dp2 cz
leg ct ct 4 "${C2[@]}" "${TP[@]}" --set parallel.hint=interleaved-1f1b && splitc ct
same tp2 ct

# the memory budget (runtime.memory_budget) counts each rank with its tower blocks: parallel.tower_layers' split (whose
# parallel.layers are given by hand: never refitted) is refused naming its largest rank, rank 1 at 9.1 MiB (the
# dry run's table: 0+ViT 5.1, 1+ViT 9.1, 1 3.5 MiB), and runs under a budget it fits; parallel.tower_split = auto takes
# the cost model's split where the LM split with the tower on stage 0 (rank 0: 14.3 MiB) does not fit and it (9.1 MiB) does
dry() { "$BIN" train "$R" "${COMMON[@]}" "$@" --dry-run >"$W/dry.log" 2>&1; }
dry "${P3[@]}" --set runtime.memory_budget=0.006 && fail "tower_layers over the memory budget: accepted"
grep -q "runtime.memory_budget = 0.006 GiB: rank 1 needs 9.1 MiB (activations 7.7 MiB) with parallel.layers and parallel.tower_layers as given" \
    "$W/dry.log" || { cat "$W/dry.log"; fail "tower_layers over the memory budget: the message"; }
dry "${P3[@]}" --set runtime.memory_budget=0.01 || { cat "$W/dry.log"; fail "tower_layers within the memory budget: refused"; }
dry "${AUTO[@]}" --set parallel.pp=2 --set parallel.tower_split=auto --set runtime.memory_budget=0.01 || { cat "$W/dry.log"; fail "auto within the memory budget"; }
grep -q "^tower blocks per virtual stage: 2,1 (parallel.tower_split = auto" "$W/dry.log" || { cat "$W/dry.log"; fail "auto: not the chain's split"; }
dry "${AUTO[@]}" --set parallel.pp=2 --set runtime.memory_budget=0.01 --set parallel.tower_split=off \
    && fail "the LM split with the tower on stage 0 fitted: the auto case above tests nothing"
# the memory refit searches the chain too (parallel.tower_split = auto): at 0.008 GiB (8.2 MiB) neither an LM split with the
# tower on stage 0 (1,1: 14.3 MiB on rank 0; 2,0 more) nor the cost model's split of the chain (tower 2,1: 9.1 MiB on rank
# 0) fits, the chain's split with one tower block on rank 0 (tower 1,2: 7.6 MiB on rank 1) does. The dry run names it and
# what the cost model's split needed, parallel.tower_split = off is refused suggesting auto, and the trainer runs it
# bitwise one process
FIT="memory-fitted: the cost model's tower split: LM 0,2, tower 2,1 needs 9.1 MiB on rank 0, over runtime.memory_budget = 0.008 GiB"
dry "${AUTO[@]}" --set parallel.pp=2 --set parallel.tower_split=auto --set runtime.memory_budget=0.008 || { cat "$W/dry.log"; fail "refit: refused"; }
grep -qF "tower blocks per virtual stage: 1,2 ($FIT;" "$W/dry.log" || { cat "$W/dry.log"; fail "refit: not the fitted chain's split"; }
dry "${AUTO[@]}" --set parallel.pp=2 --set runtime.memory_budget=0.008 && fail "refit: an LM split fitted: the case above tests nothing"
grep -q "no split of the LM layers fits; changes that fit: --set parallel.tower_split=auto;" "$W/dry.log" \
    || { cat "$W/dry.log"; fail "refit: tower_split = off does not suggest auto"; }
$MPI -np 2 "$BIN" train "$R" "${COMMON[@]}" "${AUTO[@]}" --set train.run_dir="$W/autofit" --set parallel.pp=2 --set parallel.tower_split=auto \
    --set runtime.memory_budget=0.008 --set parallel.mode=ready >"$W/autofit.log" 2>&1 || { cat "$W/autofit.log"; fail "autofit"; }
grep -qF "layers 0,2 (cost model), tower blocks [0,1) [1,3) ($FIT)" "$W/autofit.log" \
    || { grep pipeline "$W/autofit.log"; fail "autofit: the log does not name the fitted split"; }
same auto autofit
# and keeps the tower on stage 0 where the chain's split is over the budget and the LM split fits: a 4096-word vocabulary
# (the embedding and the head: large, but nearly free on the cost model) with 4 tower blocks of width 96 and one microbatch
# in flight. The chain's split (LM 0,3, tower 3,1) puts every LM layer, the embedding and the head on rank 1: 20.8 MiB,
# over 0.019 GiB (19.5 MiB); the LM split 1,2 with the tower on rank 0 needs 18.8 MiB. The dry run and the trainer's log
# say why, and the trainer runs the LM split
SG=(--set model.vision_layers=4 --set model.vision_width=96 --set model.text_width=32 --set model.text_layers=3 --set model.ffn_hidden=86
    --set model.vocab=4096 --set data.microbatches=1 --set data.max_patches=16 --set parallel.partition=balance --set parallel.pp=2
    --set parallel.tower_split=auto)
dry "${SG[@]}" || { cat "$W/dry.log"; fail "safeguard: no budget"; }
grep -q "^tower blocks per virtual stage: 3,1 (parallel.tower_split = auto" "$W/dry.log" || { cat "$W/dry.log"; fail "safeguard: the chain's split is not 3,1"; }
NOTE="the cost model's tower split is not run: with it rank 1 needs 20.8 MiB, over runtime.memory_budget = 0.019 GiB (the LM split with the tower on stage 0 fits)"
dry "${SG[@]}" --set runtime.memory_budget=0.019 || { cat "$W/dry.log"; fail "safeguard: refused"; }
grep -q "^LM layers per virtual stage: 1,2 (cost-balanced)" "$W/dry.log" && grep -qxF "$NOTE" "$W/dry.log" \
    && ! grep -q "^tower blocks per virtual stage" "$W/dry.log" || { cat "$W/dry.log"; fail "safeguard: the dry run"; }
$MPI -np 2 "$BIN" train "$R" "${COMMON[@]}" "${SG[@]}" --set runtime.memory_budget=0.019 --set train.steps=1 --set parallel.mode=ready \
    --set train.run_dir="$W/sg" >"$W/sg.log" 2>&1 || { cat "$W/sg.log"; fail "safeguard: the run"; }
grep -qF "layers 1,2 (cost model); $NOTE" "$W/sg.log" || { grep pipeline "$W/sg.log"; fail "safeguard: the log"; }

# a head-only last stage (the final norm, the LM head and the loss alone: parallel.layers ending in 0), without and with
# the tower over stages; its checkpoint file holds the head and no LM block, the stage before it no head
texts() { "$BIN" tensors ls "$W/$1/$CK/model.pp${2}c0.safetensors" 2>&1 | grep -o 'text\.\(blocks\.[0-9]*\|[a-z_]*\)' | sort -u | tr '\n' ' '; }
$MPI -np 3 "$BIN" train "$R" "${COMMON[@]}" --set train.run_dir="$W/head3" --set parallel.pp=3 --set parallel.layers=1,1,0 \
    --set parallel.mode=fixed >"$W/head3.log" 2>&1 || { cat "$W/head3.log"; fail "head3"; }
grep -q "layers 1,1,0 (parallel.layers)$" "$W/head3.log" || { grep pipeline "$W/head3.log"; fail "head3: the log does not name the split"; }
[ "$(texts head3 1)" = "text.blocks.1 " ] || fail "head3 rank 1 holds: $(texts head3 1)"
[ "$(texts head3 2)" = "text.lm_head text.norm " ] || fail "head3 rank 2 holds: $(texts head3 2)"
same one head3
pipe headtw3 3 0,2,0 2,1,0 --set parallel.mode=ready --set parallel.hint=zb-h1
grep -q "layers 0,2,0 (parallel.layers), tower blocks \[0,2) \[2,3) - (parallel.tower_layers)" "$W/headtw3.log" \
    || { grep pipeline "$W/headtw3.log"; fail "headtw3: the log does not name the split"; }
[ "$(texts headtw3 2)" = "text.lm_head text.norm " ] || fail "headtw3 rank 2 holds: $(texts headtw3 2)"
same one headtw3
# with tensor and data parallelism (pp 2, parallel.layers = 2,0): each TP rank of the head-only stage holds its slice of
# the head (the final norm replicated: TP rank 0's file holds it), bitwise tp 2 alone; with dp 2 and parallel.zero (the
# head-only stage's optimiser state sharded too) bitwise dp 2 alone
held() { # held RUN FILE: the tensors of the rank's checkpoint file, with their shapes
    "$BIN" tensors ls "$W/$1/$CK" 2>&1 | awk -v f="/model.$2.safetensors" '/^#/ { on = index($0, f) > 0; next } on { printf "%s%s ", $1, $3 $4 }'
}
H2=(--set parallel.pp=2 --set parallel.layers=2,0)
split0() { grep -q "layers 2,0 (parallel.layers)$" "$W/$1.log" || { grep pipeline "$W/$1.log"; fail "$1: no split"; }; }
leg ht2 ht2 4 "${TP[@]}" "${H2[@]}" && split0 ht2
[ "$(held ht2 pp1tp0c0)" = "text.norm.weight[64] text.lm_head.weight[32,64] " ] || fail "ht2 TP rank 0 of stage 1 holds: $(held ht2 pp1tp0c0)"
[ "$(held ht2 pp1tp1c0)" = "text.lm_head.weight[32,64] " ] || fail "ht2 TP rank 1 of stage 1 holds: $(held ht2 pp1tp1c0)"
same tp2 ht2
leg hz2 hz2 4 "${DP[@]}" "${H2[@]}" "${ZERO[@]}" && split0 hz2
grep -q "distributed optimizer: 2 replicas" "$W/hz2.log" || fail "hz2: no distributed optimizer"
[ "$(held hz2 pp1c0)" = "text.norm.weight[64] text.lm_head.weight[64,64] " ] || fail "hz2 stage 1 holds: $(held hz2 pp1c0)"
same dp2 hz2
"$BIN" train "$R" "${COMMON[@]}" --set parallel.pp=3 --set parallel.layers=1,0,1 --dry-run >"$W/mid.log" 2>&1 \
    && fail "a middle stage with no LM layer was accepted"
grep -q "parallel.layers = 1,0,1: stage 1 holds no LM layer" "$W/mid.log" || { cat "$W/mid.log"; fail "middle stage message"; }

# a split that does not exist is refused naming the key
"$BIN" train "$R" "${COMMON[@]}" --set parallel.pp=3 --set parallel.layers=0,1,1 --set parallel.tower_layers=1,1,1 --dry-run \
    >"$W/bad.log" 2>&1 && fail "tower blocks after the first LM stage were accepted"
grep -q "parallel.tower_layers = 1,1,1: stage 2 holds tower blocks after stage 1" "$W/bad.log" || { cat "$W/bad.log"; fail "bad split message"; }
echo "tower stages: ok"
