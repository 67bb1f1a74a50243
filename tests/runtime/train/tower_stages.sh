#!/usr/bin/env bash
# tower_stages.sh — the vision tower over live pipeline stages (docs/anyres.md "The tower over stages"):
# `mpirun -np P rrfp-mm train` with parallel.layers giving the first stages no LM layer and parallel.tower_layers
# giving them tower blocks, against the single-process run of the same recipe (recipes/test-synthetic.ini with a
# 3-block tower): per-step losses (hex) and grad norms equal, the final checkpoint (parameters and AdamW moments)
# bitwise equal (`rrfp-mm tensors diff --rtol 0 --atol 0`). Cases: pp 3 with tower blocks on stages 0 and 1 and the
# LM on 1 and 2 (fixed 1f1b; zb-h1's split backward under the readiness dispatcher), pp 2 (ready 1f1b), a frozen
# tower (train.freeze = vision: no gradient travels back to the tower stages), and a tiny LLaVA-1.5 (the CLIP tower,
# feature layer -2: block 3 never runs; pp 2, tower blocks 2 + 2). The split happened: the trainer's log names each
# stage's tower blocks, and each rank's checkpoint file holds its own tower blocks and no other. A last stage holding the
# head alone (pp 3, parallel.layers = 1,1,0 fixed 1f1b; 0,2,0 with tower blocks 2,1,0 under zb-h1): the same checks,
# its file holds the final norm and the head and no LM block; a middle stage with no LM layer is refused.
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
"$BIN" tensors ls "$W/pp3/dump-1/microbatch-0.pp0c0.safetensors" 2>&1 | grep -q "^patches" || fail "pp3: rank 0 dumped no inputs"
"$BIN" tensors ls "$W/pp3/dump-1/microbatch-0.pp2c0.safetensors" 2>&1 | grep -q "^logits" || fail "pp3: rank 2 dumped no logits"
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
"$BIN" train "$R" "${COMMON[@]}" --set parallel.pp=3 --set parallel.layers=1,0,1 --dry-run >"$W/mid.log" 2>&1 \
    && fail "a middle stage with no LM layer was accepted"
grep -q "parallel.layers = 1,0,1: stage 1 holds no LM layer" "$W/mid.log" || { cat "$W/mid.log"; fail "middle stage message"; }

# a split that does not exist is refused naming the key
"$BIN" train "$R" "${COMMON[@]}" --set parallel.pp=3 --set parallel.layers=0,1,1 --set parallel.tower_layers=1,1,1 --dry-run \
    >"$W/bad.log" 2>&1 && fail "tower blocks after the first LM stage were accepted"
grep -q "parallel.tower_layers = 1,1,1: stage 2 holds tower blocks after stage 1" "$W/bad.log" || { cat "$W/bad.log"; fail "bad split message"; }
echo "tower stages: ok"
