/* microbatch.h — one packed microbatch, as the loader produces it and the model consumes it.
 *
 * S samples are packed without padding into T LM positions. Each sample's `<image>` tokens have
 * already been expanded: an image with gh x gw patches occupies gh*gw consecutive LM positions
 * (in patch order, row-major over its grid), whose embeddings the model takes from the projector
 * instead of the token table. All arrays are host memory owned by the microbatch. */
#ifndef RRFP_MICROBATCH_H
#define RRFP_MICROBATCH_H

#include <stdint.h>

typedef struct {
    /* ---- LM side: T positions, S samples ---- */
    int S, T;
    int32_t* cu_seqlens; /* (S+1) sample boundaries in LM positions */
    int32_t* ids;        /* (T) token id, or -1 at image positions */
    int32_t* targets;    /* (T) next-token target, -100 where ignored (docs/model.md "Sequence assembly and the loss") */
    int32_t* pos;        /* (T) position inside its sample (restarts at 0 per sample) */
    int n_supervised;    /* targets != -100 in this microbatch */

    /* ---- vision side: I images, Np patches in all ---- */
    int I, Np;
    int patch;               /* patch size p; each patch row has 3*p*p floats */
    float* patches;          /* (Np, 3*p*p) normalised pixels, (row, col, channel) flattened */
    int32_t* img_cu_patches; /* (I+1) image boundaries in patches */
    int32_t* grid_h;         /* (I) patch rows of each image */
    int32_t* grid_w;         /* (I) patch columns of each image */
    int32_t* patch_row;      /* (Np) row index of each patch within its image */
    int32_t* patch_col;      /* (Np) column index */
    int32_t* img_lm_start;   /* (I) LM position of the image's first patch token */

    /* ---- any-resolution images (LLaVA-NeXT, docs/anyres.md; J = 0 and NULL otherwise) ----
     * J images, each one `<image>` of a sample: image j is the tower images [ar_tile0[j], ar_tile0[j+1]) (its
     * base image, then its rows x cols tiles row-major, each a g x g grid) and takes data/anyres.h's
     * n_positions LM positions from ar_lm_start[j] (the base image's features, the unpadded grid with an
     * image_newline after each row); img_lm_start of each of its tower images is ar_lm_start[j]. */
    int J;
    int32_t* ar_tile0;    /* (J+1) */
    int32_t* ar_size;     /* (2J) original height, width */
    int32_t* ar_grid;     /* (2J) tile rows, cols */
    int32_t* ar_lm_start; /* (J) */

    /* ---- provenance (for error messages, dumps and resumable loading) ---- */
    int64_t* sample_index;   /* (S) global sample index in the dataset */
    int index;               /* its index among the global step's microbatches (m x dp + d for replica d's
                              * m-th; set by the trainer, names the step dump's microbatch files) */
} Microbatch;

void microbatch_free(Microbatch* mb);

/* Remove the samples s with drop[s] != 0 (S flags) from mb in place: their positions, images and patch
 * rows go, the rest keep their order, with boundaries, image starts and n_supervised recomputed (a sample's
 * own positions and targets do not change: positions restart per sample and targets stay inside it).
 * A microbatch is never left empty (every rank of a pipeline runs the same M microbatches, and an empty
 * one cannot run): when every sample is dropped, the first stays as a placeholder with every target
 * ignored (-100, n_supervised 0) and zero pixels, so it adds nothing to the loss or the gradients.
 * Returns the number of samples removed. */
int microbatch_drop_samples(Microbatch* mb, const uint8_t* drop);

#endif
