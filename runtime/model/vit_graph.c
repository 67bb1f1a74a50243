/* vit_graph.c — the tower's forward and backward as CUDA graphs (runtime.cuda_graphs; model.h, vit_forward_graphed,
 * vit_backward_graphed).
 *
 * A step of LLaVA-1.5's tower launches a few kernels per op and block (CLIP-L: about 1,900 a step) for little
 * work each: the step is launch-bound. Its shapes repeat (a fixed 24 x 24 grid: N = 576 I patches), so the
 * device work of a forward (vit_forward_run: everything after vit_forward_prepare, which reads the images' grids
 * back and uploads the token tables) is recorded once per shape and replayed as one launch.
 *
 * What a replay reuses is every host value the recording saw: the device pointers (the activations VitActs, the
 * patches, the image and token tables, the weights' compute copies), the sizes (N, I, T) and the scalars the ops
 * were called with (the tower's configuration, fixed). The key below is all of them but the weights and the
 * configuration, which are the stage's own and fixed for its life; the values in device memory (the patches,
 * the tables, the weights AdamW updates) are read at each replay, as the graph's kernels read them. Nothing in
 * vit_forward_run synchronises, allocates or copies to the host once its shape has run once (scratch is reserved
 * up front; lazily built state such as CLIP's channel-major index is made by vit_forward_prepare or by the first,
 * eager run): a shape is recorded the second time it comes, not the first.
 *
 * The tower's backward the same way (vit_backward_graphed: the fused backward, or the split one's B and W, each its
 * own graph): its host values are the forward's (the activations hold dvout and every saved tensor), the weights'
 * gradient pointers (the stage's, fixed) and the frozen floor (fixed); the gradients it adds into are read and
 * written at each replay as eagerly. Not recorded: a tower that recomputes activations (the count of recomputed
 * blocks is the host's, made as the blocks run) or is split over TP ranks (the partial sums go through the host's
 * communication). */
#include "runtime/model/model.h"

#include <stdlib.h>
#include <string.h>

#include "engine/util.h"

#define VIT_GRAPHS_MAX 64 /* shapes kept per stage (microbatch slots x image counts x forward / backward kinds); the
                            * least recently used goes */

typedef enum { VIT_GRAPH_FORWARD, VIT_GRAPH_BACKWARD, VIT_GRAPH_BACKWARD_INPUT, VIT_GRAPH_BACKWARD_WEIGHT } VitGraphKind;

typedef struct {
    int kind; /* VitGraphKind */
    const Backend* be;
    const VitActs* a;
    Buf patches;
    const int32_t *img_cu, *prow, *pcol;
    int N, I, T;
} VitGraphKey;

typedef struct {
    VitGraphKey key;
    int seen;    /* eager runs of this shape so far (recorded at the second) */
    void* graph; /* NULL until recorded */
    unsigned long last_use;
} VitGraphEntry;

struct VitGraphs {
    VitGraphEntry e[VIT_GRAPHS_MAX];
    int n;
    unsigned long clock;
    long replays;
};

static int key_eq(const VitGraphKey* x, const VitGraphKey* y) {
    return x->kind == y->kind && x->be == y->be && x->a == y->a && x->patches.p == y->patches.p && x->img_cu == y->img_cu && x->prow == y->prow &&
           x->pcol == y->pcol && x->N == y->N && x->I == y->I && x->T == y->T;
}

/* the device work the graph of kind `kind` holds */
static void vit_graph_run(Stage* st, const Backend* vbe, VitActs* a, int kind) {
    switch (kind) {
    case VIT_GRAPH_FORWARD: vit_forward_run(vbe, &st->vc, &st->vit_w, a); break;
    case VIT_GRAPH_BACKWARD: vit_backward(vbe, &st->vc, &st->vit_w, &st->vit_g, a); break;
    case VIT_GRAPH_BACKWARD_INPUT: vit_backward_input(vbe, &st->vc, &st->vit_w, a); break;
    default: vit_backward_weight(vbe, &st->vc, &st->vit_w, &st->vit_g, a); break;
    }
}

static void vit_graphed(Stage* st, const Backend* vbe, VitActs* a, int kind) {
    const BackendDevice* dev = vbe->dev;
    if (!st->cuda_graphs || !dev->graph_begin || a->N == 0 || a->lora_seed || /* LoRA's dropout key: each step's */
        (kind != VIT_GRAPH_FORWARD && (st->vc.recompute != RECOMPUTE_NONE || st->vc.tp > 1))) {
        vit_graph_run(st, vbe, a, kind);
        return;
    }
    if (!st->vit_graphs) {
        st->vit_graphs = mallocCheck(sizeof *st->vit_graphs);
        memset(st->vit_graphs, 0, sizeof *st->vit_graphs);
    }
    struct VitGraphs* gs = st->vit_graphs;
    VitGraphKey k;
    memset(&k, 0, sizeof k);
    k.kind = kind;
    k.be = vbe, k.a = a, k.patches = a->patches, k.img_cu = a->img_cu, k.prow = a->prow, k.pcol = a->pcol;
    k.N = a->N, k.I = a->I, k.T = a->T;
    VitGraphEntry* e = NULL;
    for (int i = 0; i < gs->n && !e; i++)
        if (key_eq(&gs->e[i].key, &k)) e = &gs->e[i];
    if (!e) {
        if (gs->n < VIT_GRAPHS_MAX) {
            e = &gs->e[gs->n++];
        } else { /* the least recently used shape goes */
            e = &gs->e[0];
            for (int i = 1; i < gs->n; i++)
                if (gs->e[i].last_use < e->last_use) e = &gs->e[i];
            if (e->graph) dev->graph_free(e->graph);
        }
        memset(e, 0, sizeof *e);
        e->key = k;
    }
    e->last_use = ++gs->clock;
    if (!e->graph && e->seen++ == 0) { /* first time: eager (lazy state is made, first-run checks run) */
        vit_graph_run(st, vbe, a, kind);
        return;
    }
    if (!e->graph) {
        dev->graph_begin(vbe);
        vit_graph_run(st, vbe, a, kind);
        e->graph = dev->graph_end(vbe);
        /* the recording did not run anything: the T it leaves must be the key's (prepare set it) */
        RR_ASSERT(a->T == k.T && a->N == k.N);
    }
    dev->graph_launch(vbe, e->graph);
    gs->replays++;
}

void vit_forward_graphed(Stage* st, const Backend* vbe, VitActs* a) { vit_graphed(st, vbe, a, VIT_GRAPH_FORWARD); }

void vit_backward_graphed(Stage* st, const Backend* vbe, VitActs* a, int input, int weight) {
    RR_ASSERT(input || weight);
    vit_graphed(st, vbe, a, input && weight ? VIT_GRAPH_BACKWARD : input ? VIT_GRAPH_BACKWARD_INPUT : VIT_GRAPH_BACKWARD_WEIGHT);
}

long vit_graphs_replays(const Stage* st) { return st->vit_graphs ? st->vit_graphs->replays : 0; }

void vit_graphs_forget(struct VitGraphs* gs) {
    if (!gs) return;
    for (int i = 0; i < gs->n; i++)
        if (gs->e[i].graph) gs->e[i].key.be->dev->graph_free(gs->e[i].graph);
    gs->n = 0;
}

void vit_graphs_free(Stage* st) {
    struct VitGraphs* gs = st->vit_graphs;
    if (!gs) return;
    for (int i = 0; i < gs->n; i++)
        if (gs->e[i].graph) gs->e[i].key.be->dev->graph_free(gs->e[i].graph);
    free(gs);
    st->vit_graphs = NULL;
}
