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
 * (no time stamps, one deterministic zstd level, records in manifest order), with any number of workers:
 * `workers` threads check, tokenize, read, decode and compress records ahead, at most 4 * workers records
 * at a time, and the calling thread takes them in manifest order and writes them, so the shards, the
 * rejection lines, the summary, --strict's failure and the reject-fraction stop are those of one thread
 * (docs/data.md "Pack"). */
#ifndef RRFP_DATA_PACK_H
#define RRFP_DATA_PACK_H

#include <signal.h>
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
    int workers; /* threads doing the records' work (0: pack_default_workers(); 1: the calling thread alone) */
    volatile sig_atomic_t* stop; /* set (to a signal number) by the caller's SIGINT / SIGTERM handler: the pack
                                    stops before the next record and removes what it wrote (NULL: none) */
} PackConfig;

typedef struct {
    int64_t read, packed, rejected;
    int64_t by_reason[REJECT_N];
    int shards;
    uint64_t bytes;     /* shard bytes written */
    uint64_t tokens;    /* text tokens packed */
    uint64_t images;
} PackSummary;

#define PACK_DEFAULT_MAX_WORKERS 32 /* the default's cap (the one writing thread, the disk and memory bound it) */
#define PACK_MAX_WORKERS 256

/* The CPUs this process may run on (sched_getaffinity), at most PACK_DEFAULT_MAX_WORKERS. */
int pack_default_workers(void);

/* Returns 0, or -1 with err (nothing renamed into place then). The workers start with SIGINT and SIGTERM
 * blocked, so the handler behind cfg->stop runs in the calling thread, the one that reads the flag. */
int pack_run(const PackConfig* cfg, PackSummary* sum, char* err, size_t err_len);
void pack_summary_print(const PackSummary* s, FILE* f);

#endif
