/* optim.h — the optimiser step of one stage: gradient sum of squares, PyTorch's clipping factor and
 * AdamW, all on the stage's backend (parameters, gradients and moments stay in its memory). */
#ifndef RRFP_TRAIN_OPTIM_H
#define RRFP_TRAIN_OPTIM_H

#include "runtime/model/model.h"
#include "runtime/train/recipe.h"

/* Sum of squares of a stage's gradients (BackendOps.sum_squares: the same bits for any thread count, which
 * a bit-exact resume needs of the clipping factor). */
double optim_grad_sum_squares(const Stage* st);
/* PyTorch's clip_grad_norm_ factor: min(1, max_norm / (norm + 1e-6)); 1 when max_norm <= 0. */
float optim_clip_coef(double norm, double max_norm);
/* Scale the gradients by `clip` (when < 1), then AdamW on every trainable tensor (decay per ParamSpec; frozen ones are left bitwise as they are) at
 * optimiser step t (1-based) with learning rate lr and the recipe's betas, eps and weight decay. */
void optim_step(Stage* st, const Recipe* r, float lr, int t, float clip);

#endif
