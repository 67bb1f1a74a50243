# tiny_data.sh — sourced by the command tests (bash) that train a small model on real packed data. `tiny_data`
# writes into the current folder: demo-data's 80 training and 24 held-out records (d/), a 300-id tokenizer trained
# on them (tok.json) and both packed (shards/, eval-shards/); a step that fails calls the caller's `fail`.
# TINY: the --set arguments of the small model those tests train on them (ViT 32 x 1, LM 64 x 2, 2 microbatches).
tiny_data() {
  "$BIN" demo-data --out d --samples 80 --heldout 24 >/dev/null || fail "demo-data"
  "$BIN" tokenizer train --vocab 300 --manifest d/train.json --out tok.json --quiet || fail "tokenizer"
  "$BIN" pack --manifest d/train.json --images d/images --tokenizer tok.json --out shards >/dev/null 2>&1 || fail "pack"
  "$BIN" pack --manifest d/heldout.json --images d/images --tokenizer tok.json --out eval-shards >/dev/null 2>&1 || fail "pack eval"
}
TINY=(--set data.shards=shards --set data.tokenizer=tok.json --set model.vision_width=32 --set model.vision_layers=1
      --set model.vision_heads=2 --set model.text_width=64 --set model.text_layers=2 --set model.text_heads=2
      --set model.ffn_hidden=172 --set data.microbatches=2 --set optim.warmup=1 --set runtime.threads=1)
