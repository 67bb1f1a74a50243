/* fuzz_import.c — libFuzzer target for `rrfp-mm import llama` (runtime/hf/import.c) on a crafted
 * Hugging Face folder: the input is config.json, then optionally (after "--8<--" lines)
 * model.safetensors.index.json and model.safetensors. Any bytes must import or be refused with a
 * message, never a crash, an allocation sized by config.json alone, or a read of freed memory; nothing
 * is left outside the output folder. Built by tests/fuzz/run_fuzz_files.sh. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/hf/import.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const uint8_t* part[3];
    size_t len[3];
    int np = fuzz_split(data, size, part, len, 3);
    char dir[512], hf[600], out[600], path[700], err[2048];
    snprintf(dir, sizeof dir, "%s/import", fuzz_scratch());
    fuzz_rm_rf(dir);
    mkdir(dir, 0700);
    snprintf(hf, sizeof hf, "%s/hf", dir);
    mkdir(hf, 0700);
    snprintf(path, sizeof path, "%s/config.json", hf);
    fuzz_write(path, part[0], len[0]);
    if (np > 1 && len[1] > 0) {
        snprintf(path, sizeof path, "%s/model.safetensors.index.json", hf);
        fuzz_write(path, part[1], len[1]);
    }
    if (np > 2) {
        snprintf(path, sizeof path, "%s/model.safetensors", hf);
        fuzz_write(path, part[2], len[2]);
    }
    snprintf(out, sizeof out, "%s/out", dir);
    LlamaImport info;
    if (import_llama(hf, out, &info, NULL, err, sizeof err) != 0 && !err[0]) {
        fprintf(stderr, "fuzz_import: a refusal without a message\n");
        abort();
    }
    return 0;
}
