/* pack.h — the pack tool: LLaVA manifest + JPEGs -> .rrs shards (data/shard.h).
 *
 * Each record is checked (manifest.h), tokenized with the prompt template, and each image read and
 * fully decoded once (the same DCT-scaled decode the loader will do), so a shard holds only samples
 * the loader can use. A rejected record is reported as "MANIFEST:LINE: record 'ID' rejected
 * (REASON): WHY" and counted; with `strict` the first rejection stops the pack, and without it so does
 * the first rejection beyond max_reject_fraction of the records (a systematic failure is an error, not
 * a small data set). Shards are written to
 * temporary names ("shard-00000.rrs.tmp") and all renamed only when every one is complete, so an
 * interrupted pack leaves nothing that looks finished; older shard-*.rrs files in the folder that
 * the new set does not overwrite are removed at the end. The same inputs give byte-identical shards
 * (no time stamps, one deterministic zstd level, records in manifest order). */
#ifndef RRFP_DATA_PACK_H
#define RRFP_DATA_PACK_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "data/image.h"

#include "data/manifest.h"

typedef struct {
    const char* manifest;
    const char* images_dir; /* image names in the manifest are relative to it */
    int allow_outside_images; /* 0: an image path that is absolute, or that leads outside images_dir (by
                                 "..", or a symbolic link resolved with realpath), rejects its record
                                 (outside_images); 1: any path is read (absolute ones as they are) */
    const char* tokenizer;
    const char* out_dir;
    double shard_mb;        /* start a new shard after this many MiB (default 256) */
    int strict;
    double max_reject_fraction; /* more rejected records than this fraction of the manifest's records is an
                                   error and nothing is written (the CLI's default 0.5; 1 = only "none
                                   packable" is an error); the pack stops as soon as the limit is passed */
    int patch, min_patches, max_patches; /* grid stored in the index (the loader recomputes if it differs) */
    ImagePrep prep;         /* how the loader will preprocess the images (--image-preprocess; recorded in the
                               shards: IMAGE_PREP_LLAVA writes version 2 shards, every grid (size / p)^2) */
    FILE* progress;         /* progress and rejections (stderr), NULL = quiet */
    const char* chat_template; /* data/template.h: rrfp (NULL: the same), vicuna_v1, llama_3, chatml, plain */
} PackConfig;

typedef struct {
    int64_t read, packed, rejected;
    int64_t by_reason[REJECT_N];
    int shards;
    uint64_t bytes;     /* shard bytes written */
    uint64_t tokens;    /* text tokens packed */
    uint64_t images;
} PackSummary;

/* Returns 0, or -1 with err (nothing renamed into place then). */
int pack_run(const PackConfig* cfg, PackSummary* sum, char* err, size_t err_len);
void pack_summary_print(const PackSummary* s, FILE* f);

#endif
