/* partition.h — which LM layers each pipeline rank holds.
 *
 * The first virtual stage also holds the ViT, the projector and the token embedding; the last holds
 * the final norm, the LM head and the loss. `parallel.layers = 2,3,3` gives the split by hand;
 * otherwise partition_auto balances a per-token FLOP cost model over contiguous layer ranges, or (partition_auto_path,
 * parallel.partition = path) minimises the longest stage path: fill + the stage's work + drain. */
#ifndef RRFP_PARTITION_H
#define RRFP_PARTITION_H

/* Costs in FLOPs per step (forward + backward), from the model shape and the expected tokens. */
typedef struct {
    double first_extra; /* ViT + projector + embedding, on the first virtual stage */
    double last_extra;  /* final norm + LM head + cross-entropy, on the last virtual stage */
    double per_layer;   /* one LM block */
} PartitionCost;

/* Cost model for one step of `tokens` LM tokens of which `patches` come from images, each image
 * having on average `patches_per_image` patches (attention cost is quadratic in it). */
PartitionCost partition_cost_model(int Dv, int Lv, int Dt, int F, int V, double tokens, double patches,
                                   double patches_per_image, double tokens_per_sample, int patch);

/* The cost under full activation recompute (train.recompute, docs/training.md "Activation recompute"): a block whose
 * forward re-runs in its backward costs 4 forward passes instead of 3. lm_full: the LM blocks (per_layer); tower_full:
 * the first stage's extra (the ViT dominates it; the projector and the embedding are not recomputed, left in). Selective
 * recompute re-runs an elementwise op the FLOP model does not count. */
PartitionCost partition_cost_recompute(PartitionCost c, int lm_full, int tower_full);

/* Split L layers over S = pp * chunks virtual stages (contiguous, each >= 1 layer when L >= S,
 * otherwise some stages may be empty) minimising the most expensive stage, and of those splits the one with the
 * least sum of squared stage costs (the other stages as even as the layers allow). out_layers[S]. Returns 0,
 * or -1 when L < 1. */
int partition_auto(int L, int S, PartitionCost cost, int* out_layers);
/* partition_auto over the splits whose every stage fits: fits(ctx, s, l0, k) is 1 when virtual stage s may hold
 * the k layers from l0 (its memory within a budget, say). The cheapest such split by the same measure and ties;
 * -1 when none exists (or L < 1). */
typedef int (*PartitionFits)(void* ctx, int s, int l0, int k);
int partition_auto_fit(int L, int S, PartitionCost cost, PartitionFits fits, void* ctx, int* out_layers);

/* The split's objective (parallel.partition). Balance (M = 0): the least max stage cost, as partition_auto. Path
 * (M > 0, a step of M microbatches): a stage's path is its cost plus 1/M of every earlier stage's (the first
 * microbatch's forward through the stages before it, before it can start, and the last microbatch's backward back
 * through them, after it ends: one microbatch's forward + backward there); the split has the least max path. Every
 * schedule with a whole backward takes at least the longest path (docs/scheduler.md "The simulator's semantics":
 * h_s + sum (F + B) + t_s), which balance leaves longest on the last stages (docs/anyres.md "Path-aware split").
 * partition_auto_path: partition_auto_fit (fits may be NULL) with that objective, of the optimal splits the least sum
 * of squared stage costs; M = 0 is partition_auto_fit. With M > 0 and S >= 2 the last stage may hold no LM layer (the
 * final norm, the LM head and the loss alone: out_layers[S - 1] = 0), where that shortens the longest path (the head's
 * V x D GEMM is a stage's worth when every other stage holds one or two layers: a 7B's 32 layers over 32 stages).
 * M | PARTITION_SPLIT_BACKWARD: the same path objective for a schedule with a split backward (zb-h1, bfw), whose last
 * stage keeps an LM block: there its weight passes fill the drain, and a head-only last stage only makes another stage
 * hold two blocks (docs/anyres.md "Path-aware split": at 32 stages it lengthened ready bfw's step 5.2%). Every function
 * here that takes M accepts the flag. */
#define PARTITION_SPLIT_BACKWARD 0x40000000
int partition_auto_path(int L, int S, PartitionCost cost, int M, PartitionFits fits, void* ctx, int* out_layers);

/* Parse "2,3,3" into out_layers[S]; checks there are exactly S non-negative numbers summing to L.
 * On error returns -1 and writes a message into err. */
int partition_parse(const char* spec, int L, int S, int* out_layers, char* err, int err_len);

/* Cost of each virtual stage under a split (for the dry-run report). */
void partition_stage_costs(int S, const int* layers, PartitionCost cost, double* out_cost);
/* Each stage's path from the stages' costs (partition_stage_costs' or _tower's) for a step of M microbatches
 * (partition_auto_path): cost[s] + (cost[0] + ... + cost[s - 1]) / M (M = 0: cost[s]). Returns the longest. */
double partition_stage_paths(int S, const double* cost, int M, double* out_path);

/* The tower's part of the first stage's cost, block by block (partition_auto_tower). */
typedef struct {
    double in;    /* the patch embedding */
    double layer; /* one tower block */
    int layers;   /* the tower's blocks (Lv) */
} PartitionTower;
/* The tower's part of partition_cost_model's first_extra (the same arguments, the same formulas): the rest of
 * first_extra (projector, the features' placement, token embedding) goes with LM block 0. */
PartitionTower partition_tower_model(int Dv, int Lv, double patches, double patches_per_image, int patch);
/* The same under full recompute of the tower (partition_cost_recompute's tower_full). */
PartitionTower partition_tower_recompute(PartitionTower t, int tower_full);
/* The tower's blocks over stages. The first stage holding the whole tower bounds the pipeline when the tower costs
 * more than a stage's share of the step (LLaVA-NeXT's any-resolution images: the tower over every tile, 2.7x a middle
 * stage of a 32-stage 7B); then the split is of the chain [tower blocks 0..Lv)[LM blocks 0..L) into S contiguous
 * ranges (docs/anyres.md "The tower over stages"): a stage holds tower blocks, LM blocks or both (the tower's last
 * ones and the first LM ones), stages before the one holding LM block 0 pass the tower's activations on. A stage
 * costs its tower blocks (tower.layer each; the patch embedding tower.in with block 0), the rest of first_extra with
 * LM block 0, its LM blocks, last_extra on the last stage. out_tower[S] gets each stage's tower blocks, out_layers[S]
 * its LM blocks. Returns 1 with the chain's split (the least max stage cost, of those the least sum of squares) when
 * the tower's cost (tower.in + Lv tower.layer) exceeds total / S and the chain's max is below partition_auto's; else
 * 0 with partition_auto's split and the whole tower on stage 0 (out_tower = Lv, 0, ..., 0); -1 when L < 1. */
int partition_auto_tower(int L, int S, PartitionCost cost, PartitionTower tower, int* out_tower, int* out_layers);
/* partition_auto_tower with partition_auto_path's objective for a step of M microbatches (M = 0: balance): the chain's
 * split when the tower costs more than a stage's share and its longest path is below partition_auto_path's, else that
 * split with the whole tower on stage 0. With M > 0 the last stage may hold the head alone (no unit of the chain). */
int partition_auto_tower_path(int L, int S, PartitionCost cost, PartitionTower tower, int M, int* out_tower,
                              int* out_layers);
/* Each stage's cost under a split with the tower over stages (out_tower / out_layers as partition_auto_tower's). */
void partition_stage_costs_tower(int S, const int* tower, const int* layers, PartitionCost cost, PartitionTower tw,
                                 double* out_cost);

#endif
