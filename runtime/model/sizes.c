/* sizes.c — parameter counts of a model by component, from the shapes alone (the dry run, the log
 * line and the memory check use it; tests/runtime/train/test_recipe.c checks it against the real ParamTable). */
#include <string.h>

#include "runtime/model/model.h"

void model_param_counts(const ModelConfig* mc, ModelParamCounts* c) {
    double Dv = mc->Dv, Dt = mc->Dt, F = mc->F, V = mc->V, p = mc->patch;
    memset(c, 0, sizeof *c);
    c->vision_embed = 3 * p * p * Dv + Dv;
    /* ln1 (w, b), qkv (W, b), out (W, b), ln2 (w, b), fc1 (W, b), fc2 (W, b) */
    c->vision_block = 2 * Dv + (3 * Dv * Dv + 3 * Dv) + (Dv * Dv + Dv) + 2 * Dv + (4 * Dv * Dv + 4 * Dv) + (4 * Dv * Dv + Dv);
    c->vision_final = 2 * Dv;
    c->projector = (Dv * Dt + Dt) + (Dt * Dt + Dt);
    c->text_embed = V * Dt;
    /* norm1, q k v o (k, v: the key/value heads' rows), their biases, norm2, gate up down */
    double Dkv = (mc->Hkv > 0 ? mc->Hkv : mc->Ht) * (Dt / mc->Ht);
    c->text_block = Dt + 2 * Dt * Dt + 2 * Dkv * Dt + (mc->qkv_bias ? Dt + 2 * Dkv : 0) + (mc->o_bias ? Dt : 0) + Dt +
                    3 * Dt * F;
    c->text_final = Dt;
    c->head = mc->tie_embeddings ? 0 : V * Dt; /* tied: the embedding (a pipeline's last stage holds a copy) */
    if (mc->vision_arch == 1) { /* CLIP: no patch bias; class token, position embeddings, pre_ln; post_ln */
        double G = mc->patch > 0 ? (double)(mc->vision_image_size / mc->patch) : 0;
        c->vision_embed = 3 * p * p * Dv + Dv + (1 + G * G) * Dv + 2 * Dv;
    }
    c->vision = c->vision_embed + mc->Lv * c->vision_block + c->vision_final;
    c->text = c->text_embed + mc->Lt * c->text_block + c->text_final + c->head;
    c->total = c->vision + c->projector + c->text;
}

