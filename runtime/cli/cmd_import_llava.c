/* cmd_import_llava.c — `rrfp-mm import llava|clip --hf DIR --out CKPT` (runtime/hf/import_llava.h): the
 * import, then the recipe keys the checkpoint implies. */
#include <stdio.h>
#include <string.h>

#include "engine/engine.h"
#include "runtime/cli/cli.h"
#include "runtime/hf/hf_files.h"
#include "runtime/hf/import_llava.h"
#include "text/tokenizer.h"

/* What the import kept of the folder (OUT/hf/), and whether its tokenizer.json is one the run can use:
 * loaded as pack loads it, its <image> the config's image_token_index. tok: its path when kept. */
static void tokenizer_note(const char* hf, const char* out, const LlavaImport* info, char* tok, size_t tok_len) {
    if (info->kept[0]) printf("kept the Hugging Face folder's files in %s/%s/: %s\n", out, HF_KEPT_DIR, info->kept);
    if (!strstr(info->kept, "preprocessor_config.json"))
        printf("%s has no preprocessor_config.json (export hf writes one from the run's shards)\n", hf);
    if (!strstr(info->kept, "tokenizer.json")) {
        printf("%s has no tokenizer.json: pack, train and export need the LM's tokenizer.json holding <image> and the "
               "template's tokens (rrfp-mm tokenizer add-special adds them)\n", hf);
        return;
    }
    snprintf(tok, tok_len, "%s/%s/tokenizer.json", out, HF_KEPT_DIR);
    char err[1024];
    Tokenizer* t = tokenizer_load(tok, err, sizeof err);
    if (!t) {
        fprintf(stderr, "rrfp-mm: warning: import llava: the folder's tokenizer does not load: %s\n", err);
        return;
    }
    int img = tokenizer_token_id(t, "<image>");
    if (img < 0)
        fprintf(stderr, "rrfp-mm: warning: import llava: %s has no <image> token (rrfp-mm tokenizer add-special "
                "--tokenizer %s --add \"<image>\" --out NEW.json adds it)\n", tok, tok);
    else if (info->image_token_index >= 0 && img != info->image_token_index)
        fprintf(stderr, "rrfp-mm: warning: import llava: %s gives <image> id %d, config.json's image_token_index is %d: "
                "the model's <image> embedding is row %d\n", tok, img, info->image_token_index, info->image_token_index);
    tokenizer_free(t);
}

int cmd_import_llava(const char* kind, const char* hf, const char* out) {
    int llava = !strcmp(kind, "llava_next") ? 2 : !strcmp(kind, "llava");
    LlavaImport info;
    char err[2048];
    if (import_llava(hf, out, llava, &info, stderr, err, sizeof err) != 0) {
        fprintf(stderr, "rrfp-mm: error: import %s: %s\n", kind, err);
        return 1;
    }
    int G = info.image_size / info.patch;
    printf("imported %d tensors of a %s (CLIP tower D %d, %d layers, %d heads, patch %d, image %d", info.tensors,
           llava == 2 ? "LLaVA-NeXT" : llava ? "LLaVA" : "CLIP vision model", info.D, info.L, info.H, info.patch, info.image_size);
    if (llava)
        printf("; LM D %d, %d layers, %d heads, F %d, V %d", info.text.D, info.text.L, info.text.H, info.text.F,
               info.text.V);
    printf(") into %s\n", out);
    if (info.skipped) printf("skipped %d tensors the model has no use for (buffers, CLIPModel's text side)\n", info.skipped);
    if (info.absent)
        printf("%d never-used tensors (post_layernorm, blocks past the feature layer) were absent: they keep their "
               "initialisation\n", info.absent);
    if (info.defaults[0]) printf("absent from config.json, so Hugging Face's class defaults: %s\n", info.defaults);
    char tok[4400] = "";
    if (llava) tokenizer_note(hf, out, &info, tok, sizeof tok);
    printf("; recipe keys for this model (and [train] init_from = %s)%s:\n", out,
           llava ? "" : "; the projector and LM keep their own keys and initialisation");
    printf("[model]\nvision_arch = clip\nvision_width = %d\nvision_layers = %d\nvision_heads = %d\npatch = %d\n"
           "vision_image_size = %d\nvision_feature_layer = %d\n", info.D, info.L, info.H, info.patch, info.image_size,
           info.feature_layer);
    if (llava) {
        printf("projector_act = %s\n", act_name((Act)info.proj_act));
        printf("text_width = %d\ntext_layers = %d\ntext_heads = %d\nffn_hidden = %d\nvocab = %d\n", info.text.D,
               info.text.L, info.text.H, info.text.F, info.text.V);
        import_print_lm_keys(stdout, &info.text);
    }
    if (llava == 2) {
        char pins[ANYRES_MAX_PINPOINTS * 24];
        anyres_pinpoints_format(&info.pins, pins, sizeof pins);
        printf("anyres = %d\n[data]\n; LLaVA-NeXT tiles every image (docs/anyres.md): pack with --image-preprocess anyres "
               "--image-size %d --grid-pinpoints \"%s\"\nmin_patches = %d\nmax_patches = %d\n", info.anyres_tiles, info.image_size,
               pins, G * G, G * G);
    } else
    printf("[data]\n; LLaVA-1.5 feeds every image at the checkpoint's grid (%d x %d patches): pack with "
           "--image-preprocess llava\nmin_patches = %d\nmax_patches = %d\n", G, G, G * G, G * G);
    if (tok[0]) printf("tokenizer = %s\n", tok);
    if (llava && info.image_token_index >= 0)
        printf("; the checkpoint's <image> token id is %d (image_token_index)\n", info.image_token_index);
    printf("[train]\ninit_from = %s\n", out);
    return 0;
}
