/* synth.h — synthetic microbatches with the shape of real multimodal data (samples of varied length,
 * images of varied grid sizes), for tests and benchmarks that must not depend on a dataset. The
 * same (seed, index) gives the same microbatch on every rank and every run. */
#ifndef RRFP_SYNTH_H
#define RRFP_SYNTH_H

#include <stdint.h>

#include "data/microbatch.h"

typedef struct {
    int patch;                    /* p */
    int V;                        /* token ids drawn from [0, V) */
    int max_samples;              /* 1 .. max_samples samples per microbatch */
    int min_text, max_text;       /* text tokens per sample */
    int min_grid, max_grid;       /* image grid sides (patches) */
    double image_prob;            /* chance that a sample has an image */
    double supervised_prob;       /* chance that a text target is supervised */
} SynthConfig;

/* Fill *mb (allocating its arrays) with microbatch `index` of stream `seed`. */
void synth_microbatch(Microbatch* mb, const SynthConfig* c, uint64_t seed, int index);
/* Free with microbatch_free (data/microbatch.h). The synthetic colour task of the trainer
 * (batch_source_synthetic) is in data/batch.h. */

#endif
