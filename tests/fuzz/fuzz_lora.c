/* fuzz_lora.c — libFuzzer target for `rrfp-mm import lora` (runtime/hf/import_lora.c, the PEFT key parser of
 * runtime/hf/export_lora.c): the input is adapter_config.json, then (after a "--8<--" line) adapter_model.safetensors,
 * imported onto the base checkpoint FUZZ_LORA_BASE (run_fuzz_files.sh makes one: a tiny LLaVA run exported and
 * imported, and the adapter of a LoRA run on it, exported by `export hf --adapter`, as the seed). Any bytes must
 * import (the output folder then whole) or be refused with a message, the output folder and its temporary gone;
 * never a crash or an allocation sized by adapter_config.json's r alone. */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "runtime/hf/lora_hf.h"
#include "fuzz_util.h"

static const char* base;
static FILE* log_sink;

int LLVMFuzzerInitialize(int* argc, char*** argv) {
    base = getenv("FUZZ_LORA_BASE");
    if (!base) {
        fprintf(stderr, "fuzz_lora: set FUZZ_LORA_BASE to a base checkpoint (run_fuzz_files.sh makes one)\n");
        exit(1);
    }
    log_sink = getenv("FUZZ_VERBOSE") ? stderr : fopen("/dev/null", "w");
    return 0;
}

/* Entries of dir whose name starts with "out" (the output and its OUT.tmp.PID). */
static int outputs_left(const char* dir) {
    DIR* d = opendir(dir);
    int n = 0;
    for (struct dirent* e; d && (e = readdir(d));) n += !strncmp(e->d_name, "out", 3);
    if (d) closedir(d);
    return n;
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const uint8_t* part[2];
    size_t len[2];
    int np = fuzz_split(data, size, part, len, 2);
    char dir[512], ad[600], out[600], path[700], err[4096];
    snprintf(dir, sizeof dir, "%s/lora", fuzz_scratch());
    fuzz_rm_rf(dir);
    mkdir(dir, 0700);
    snprintf(ad, sizeof ad, "%s/adapter", dir);
    mkdir(ad, 0700);
    snprintf(path, sizeof path, "%s/adapter_config.json", ad);
    fuzz_write(path, part[0], len[0]);
    if (np > 1) {
        snprintf(path, sizeof path, "%s/adapter_model.safetensors", ad);
        fuzz_write(path, part[1], len[1]);
    }
    snprintf(out, sizeof out, "%s/out", dir);
    LoraImport info;
    err[0] = 0;
    struct stat st;
    if (import_lora(ad, base, NULL, out, &info, log_sink, err, sizeof err) == 0) {
        snprintf(path, sizeof path, "%s/state.json", out);
        if (stat(path, &st) != 0 || outputs_left(dir) != 1) {
            fprintf(stderr, "fuzz_lora: imported, but %s is not one whole checkpoint folder\n", out);
            abort();
        }
    } else {
        if (!err[0]) {
            fprintf(stderr, "fuzz_lora: a refusal without a message\n");
            abort();
        }
        if (outputs_left(dir) != 0) {
            fprintf(stderr, "fuzz_lora: refused (%s), yet an output or its temporary is left in %s\n", err, dir);
            abort();
        }
    }
    return 0;
}
