/* vit_lora_targets.c — the CLIP tower's LoRA targets by name (vision/vit_lora.h): their recipe names (lora.targets'
 * vision.q .. vision.fc2), parameter-table modules and PEFT module names, and the parser of lora.targets' tower part.
 * Apart from vision/vit_lora.c so that the recipe's validation links without the tower. */
#include <stdio.h>
#include <string.h>

#include "vision/vit_lora.h"

static const char* const VL_NAME[VIT_LORA_N] = {"q", "k", "v", "out", "fc1", "fc2"};
static const char* const VL_MODULE[VIT_LORA_N] = {"attn.q", "attn.k", "attn.v", "attn.out", "mlp.fc1", "mlp.fc2"};
static const char* const VL_PEFT[VIT_LORA_N] = {"q_proj", "k_proj", "v_proj", "out_proj", "fc1", "fc2"};
static const char* const VL_PEFT_PATH[VIT_LORA_N] = {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
                                                     "self_attn.out_proj", "mlp.fc1", "mlp.fc2"};

const char* vit_lora_target_name(VitLoraTarget t) { return VL_NAME[t]; }
const char* vit_lora_target_module(VitLoraTarget t) { return VL_MODULE[t]; }
const char* vit_lora_target_peft(VitLoraTarget t) { return VL_PEFT[t]; }
const char* vit_lora_target_peft_path(VitLoraTarget t) { return VL_PEFT_PATH[t]; }

int vit_lora_targets_parse(const char* list, unsigned* bits, char* err, size_t err_len) {
    *bits = 0;
    const char* p = list;
    while (*p) {
        while (*p == ' ' || *p == ',') p++;
        if (!*p) break;
        size_t n = strcspn(p, ", ");
        if (n > 7 && !strncmp(p, "vision.", 7)) {
            const char* q = p + 7;
            size_t m = n - 7;
            int found = 0;
            if (m == 3 && !strncmp(q, "all", 3)) *bits |= (1u << VIT_LORA_N) - 1, found = 1;
            for (int t = 0; t < VIT_LORA_N && !found; t++)
                if (strlen(VL_NAME[t]) == m && !strncmp(q, VL_NAME[t], m)) *bits |= 1u << t, found = 1;
            if (!found) {
                snprintf(err, err_len, "'%.*s' is not a tower linear; allowed: vision.q, vision.k, vision.v, vision.out, "
                         "vision.fc1, vision.fc2 or vision.all (the CLIP tower's q_proj .. fc2)", (int)n, p);
                return -1;
            }
        }
        p += n;
    }
    return 0;
}
