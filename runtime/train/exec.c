/* exec.c — the parts of a step that are the same for every executor (see exec.h). */
#include <math.h>
#include <stdio.h>

#include "engine/util.h"
#include "runtime/train/exec.h"
#include "runtime/train/optim.h"

int step_exec_run_hooks(StepExec* ex, char* err, size_t err_len) {
    for (int i = 0; i < ex->n_hooks; i++)
        if (ex->hooks[i].fn(ex, ex->hooks[i].ctx, err, err_len) != 0) return -1;
    return 0;
}

int step_exec_check_compute(const StepExec* ex, char* err, size_t err_len) {
    for (int c = 0; c < ex->n_stages; c++) {
        const ParamTable* pt = &ex->stages[c]->params;
        int i = params_compute_stale(pt);
        if (i >= 0) {
            snprintf(err, err_len, "internal error: the bf16 compute copy of %s is stale (its f32 master was written "
                     "after the copy was built, by a writer that did not rebuild it): refusing to compute with it",
                     pt->specs[i].name);
            return -1;
        }
    }
    return 0;
}

void step_exec_free_hooks(StepExec* ex) {
    for (int i = 0; i < ex->n_hooks; i++)
        if (ex->hooks[i].free) ex->hooks[i].free(ex->hooks[i].ctx);
    ex->n_hooks = 0;
}

int step_exec_grad_norm(StepExec* ex, double* norm, char* err, size_t err_len) {
    if (ex->zero) return step_exec_zero_grad_norm(ex->zero, norm, err, err_len);
    double ss = 0.0;
    for (int c = 0; c < ex->n_stages; c++) ss += optim_grad_sum_squares(ex->stages[c]); /* a double to the host */
    if (ex->norm_group && comm_allreduce(ex->norm_group, &ss, 1, COMM_F64, COMM_SUM, err, err_len) != 0) return -1;
    *norm = sqrt(ss);
    return 0;
}

int step_exec_optimizer(StepExec* ex, const Recipe* r, float lr, int t, float clip, char* err, size_t err_len) {
    if (ex->zero) return step_exec_zero_step(ex->zero, r, lr, t, clip, err, err_len);
    for (int c = 0; c < ex->n_stages; c++) optim_step(ex->stages[c], r, lr, t, clip);
    return 0;
}
