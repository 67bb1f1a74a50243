/* fuzz_shard.c — libFuzzer target for the .rrs shard reader (data/shard.c): any bytes given as a
 * shard must give an error message or samples that pass every check, never a crash, a hang or an
 * out-of-bounds access (built with AddressSanitizer by tests/fuzz/run_fuzz.sh). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <zstd.h>

#include "data/shard.h"
#include "engine/util.h"

static void read_all(const uint8_t* data, size_t size);

/* Header and index carry FNV-1a checksums, so nearly every mutation stops at the first check. Each
 * input is therefore also tried with both checksums recomputed, which lets mutations reach the index
 * parser, the frame bounds and zstd. */
int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    read_all(data, size);
    if (size >= SHARD_HEADER_SIZE && !memcmp(data, SHARD_MAGIC, 8)) {
        uint8_t* c = malloc(size);
        memcpy(c, data, size);
        uint64_t ioff, isz, h;
        memcpy(&ioff, c + 32, 8);
        memcpy(&isz, c + 40, 8);
        if (ioff <= size && isz <= size - ioff) {
            h = rr_fnv1a64(c + ioff, isz);
            memcpy(c + 64, &h, 8);
        }
        h = rr_fnv1a64(c, 72);
        memcpy(c + 72, &h, 8);
        read_all(c, size);
        free(c);
    }
    return 0;
}

static void read_all(const uint8_t* data, size_t size) {
    static ZSTD_DCtx* dctx;
    if (!dctx) dctx = ZSTD_createDCtx();
    Shard s;
    char err[512];
    if (shard_open_mem(data, size, "fuzz.rrs", &s, err, sizeof err) != 0) return;
    for (uint64_t i = 0; i < s.n && i < 64; i++) {
        ShardSample ss;
        if (shard_read_sample(&s, i, dctx, &ss, err, sizeof err) == 0) {
            /* touch everything the reader handed out */
            volatile uint32_t acc = 0;
            for (int t = 0; t < ss.n_tokens; t++) acc += (uint32_t)ss.ids[t] + ss.mask[t];
            for (int k = 0; k < ss.n_images; k++)
                if (ss.jpeg_len[k]) acc += ss.jpeg[k][0] + ss.jpeg[k][ss.jpeg_len[k] - 1];
            (void)acc;
            shard_sample_free(&ss);
        }
    }
    shard_close(&s);
}
