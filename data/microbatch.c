/* microbatch.c — freeing a Microbatch (the loader fills them, see data/loader.h). */
#include "data/microbatch.h"

#include <stdlib.h>
#include <string.h>

void microbatch_free(Microbatch* mb) {
    if (!mb) return;
    free(mb->cu_seqlens), free(mb->ids), free(mb->targets), free(mb->pos);
    free(mb->patches), free(mb->img_cu_patches), free(mb->grid_h), free(mb->grid_w);
    free(mb->patch_row), free(mb->patch_col), free(mb->img_lm_start), free(mb->sample_index);
    memset(mb, 0, sizeof *mb);
}
