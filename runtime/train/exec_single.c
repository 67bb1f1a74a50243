/* exec_single.c — the one-process step executor: the whole model in one Stage, microbatches run one
 * after the other through one StageActs (see exec.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/util.h"
#include "runtime/train/exec.h"

typedef struct {
    StepExec ex;
    Stage st;       /* the whole model: LM blocks [0, Lt) */
    Stage* stp;     /* &st, for ex.stages */
    StageActs acts; /* one microbatch in flight */
} SingleExec;

static int single_forward_backward(StepExec* ex, const StepPlan* plan, float scale, int step, const char* dump_dir,
                                   double* loss_sum, char* err, size_t err_len) {
    SingleExec* s = (SingleExec*)ex;
    /* the distributed optimizer's all-gather of the last step may still fill the grad block: it zeroes it then */
    if (!ex->zero || !step_exec_zero_pending(ex->zero, 0)) params_zero_grad(&s->st.params);
    s->st.lora_step = ex->quiet ? 0 : step; /* LoRA's dropout trains, never evaluates */
    double sum = 0.0;
    for (int m = 0; m < plan->M; m++) {
        if (stage_check_microbatch(&s->st, &s->acts, &plan->mbs[m], err, err_len) != 0) return -1;
        float ls = 0.0f;
        stage_forward(&s->st, &s->acts, &plan->mbs[m], NULL, NULL, &ls);
        if (stage_tp_error(&s->st)) { /* the distributed optimizer's weight gather failed (Stage.param_wait) */
            snprintf(err, err_len, "%s", stage_tp_error(&s->st));
            return -1;
        }
        sum += ls;
        if (dump_dir) {
            char path[4096];
            snprintf(path, sizeof path, "%s/microbatch-%d.safetensors", dump_dir, plan->mbs[m].index);
            if (stage_dump_microbatch(&s->st, &s->acts, &plan->mbs[m], path, err, err_len) != 0) return -1;
        }
        stage_backward(&s->st, &s->acts, NULL, scale, NULL);
    }
    (void)step;
    *loss_sum = sum;
    return 0;
}

static int single_dump_params(StepExec* ex, const char* dir, int grads, char* err, size_t err_len) {
    SingleExec* s = (SingleExec*)ex;
    char path[4096];
    snprintf(path, sizeof path, "%s/%s.safetensors", dir, grads ? "grads" : "weights");
    if (stage_dump_params(&s->st, grads, path, err, err_len) != 0) return -1;
    snprintf(path, sizeof path, "%s/compute.safetensors", dir);
    return grads || stage_dump_compute(&s->st, path, err, err_len) >= 0 ? 0 : -1;
}

static int single_save(StepExec* ex, const char* root, const CheckpointState* cs, char* out, size_t out_len, char* err,
                       size_t err_len) {
    SingleExec* s = (SingleExec*)ex;
    return checkpoint_save(root, &s->st.params, cs, NULL, out, out_len, err, err_len);
}

static int single_load(StepExec* ex, const char* dir, CheckpointState* cs, char* err, size_t err_len) {
    SingleExec* s = (SingleExec*)ex;
    return checkpoint_load(dir, &s->st.params, cs, NULL, err, err_len);
}

static void single_free(StepExec* ex) {
    SingleExec* s = (SingleExec*)ex;
    if (s->acts.block) stage_acts_free(&s->acts, &s->st);
    stage_free(&s->st);
    free(s);
}

StepExec* step_exec_single_create(const Recipe* r, const ModelConfig* mc, const Backend* be, int optimizer, char* err,
                                  size_t err_len) {
    (void)err;
    (void)err_len;
    SingleExec* s = callocCheck(1, sizeof *s);
    /* eval and generate: the model for the forward only (no gradient buffer, no moments; train.freeze, checked by
     * trainer_init, shapes only a backward) */
    if (optimizer) stage_init_frozen(&s->st, mc, 0, mc->Lt, r->freeze, be);
    else stage_init_forward(&s->st, mc, be);
    stage_set_recompute(&s->st, (Recompute)recipe_recompute(r, 0), (Recompute)recipe_recompute(r, 1));
    if (optimizer && !(r->zero && r->dp > 1)) params_alloc_optimizer(&s->st.params); /* the distributed optimizer: shards only */
    /* one microbatch in flight; every position may be an image patch */
    stage_acts_init(&s->acts, &s->st, r->microbatch_tokens, model_patch_budget(mc, r->microbatch_tokens), 0);
    s->stp = &s->st;
    StepExec* ex = &s->ex;
    ex->name = "one process";
    ex->stages = &s->stp;
    ex->n_stages = 1;
    ex->norm_group = NULL;
    ex->log_rank = 1;
    ex->decode_images = 1;
    ex->bubble = -1;
    ex->forward_backward = single_forward_backward;
    ex->dump_params = single_dump_params;
    ex->save = single_save;
    ex->load = single_load;
    ex->free = single_free;
    return ex;
}

StageActs* step_exec_single_acts(StepExec* ex) {
    RR_ASSERT(ex->forward_backward == single_forward_backward);
    return &((SingleExec*)ex)->acts;
}
