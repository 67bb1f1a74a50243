# gpu_stage_sets.sh — sourced by bench/gpu_stage.sh and bench/gpu_kprof.sh: each stage's shape as recipe overrides
# (lm_sets, vit_sets, stage0_sets; tiny_sets: the smoke test's), and `common`, the options of every run
# (GPU_STAGE_TOKENS: the microbatch, default 4096).
# the stage shapes as recipe overrides (the tiny other half)
lm_sets=(--set model.text_width=4096 --set model.text_layers=4 --set model.text_heads=32 --set model.ffn_hidden=11008
         --set model.vision_width=32 --set model.vision_layers=1 --set model.vision_heads=2)
vit_sets=(--set model.vision_width=1024 --set model.vision_layers=24 --set model.vision_heads=16
          --set model.text_width=64 --set model.text_layers=1 --set model.text_heads=2 --set model.ffn_hidden=172)
stage0_sets=(--set model.vision_width=1024 --set model.vision_layers=24 --set model.vision_heads=16
             --set model.text_width=4096 --set model.text_layers=4 --set model.text_heads=32 --set model.ffn_hidden=11008)
tiny_sets=(--set model.vision_width=32 --set model.vision_layers=1 --set model.vision_heads=2
           --set model.text_width=64 --set model.text_layers=1 --set model.text_heads=2 --set model.ffn_hidden=172)
TOKENS=${GPU_STAGE_TOKENS:-4096}
common=(--set data.source=synthetic --set data.fixed_batch=true --set data.microbatch_tokens=$TOKENS
        --set data.microbatches=1 --set data.min_patches=1 --set data.max_patches=576 --set model.patch=14
        --set model.vocab=64 --set train.log_every=1 --set train.checkpoint_every=-1 --set checkpoint.keep=0
        --set runtime.precision=bf16 --set optim.warmup=1 --set optim.lr=1e-5 --set optim.min_lr=0)

