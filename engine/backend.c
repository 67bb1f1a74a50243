/* backend.c — choosing a backend by name ("cpu" or "cuda"), for the CLI and recipes. */
#include <stdio.h>
#include <string.h>

#include "engine/engine.h"

const Backend* backend_open(const char* name, char* why, size_t why_len) {
    int host = backend_name_host_addressable(name);
    if (host < 0) {
        snprintf(why, why_len, "unknown backend '%s' (choices: cpu, cuda)", name);
        return NULL;
    }
    const Backend* be = strcmp(name, "cpu") == 0 ? &backend_cpu : backend_cuda_get(why, why_len);
    RR_ASSERT((!be || be->dev->host_addressable == host) && "backend_names.c says what the table says");
    return be;
}

const Backend* backend_select(const char* name) {
    char why[256] = "";
    const Backend* be = backend_open(name, why, sizeof why);
    if (!be && backend_name_host_addressable(name) < 0) rr_die("%s", why);
    if (!be) rr_die("cannot use backend '%s': %s", name, why);
    return be;
}

const char* precision_name(Precision p) { return p == PRECISION_BF16 ? "bf16" : "fp32"; }

int precision_parse(const char* name, Precision* p) {
    if (strcmp(name, "fp32") == 0) *p = PRECISION_FP32;
    else if (strcmp(name, "bf16") == 0) *p = PRECISION_BF16;
    else return -1;
    return 0;
}

Backend backend_on_stream(const Backend* be, void* stream) {
    Backend b = *be;
    b.stream = stream;
    return b;
}

const Backend* backend_with_precision(const Backend* be, Precision p) {
    if (p == PRECISION_BF16) {
        RR_ASSERT(be->bf16_variant && "every backend table names its bf16 variant");
        return be->bf16_variant;
    }
    RR_ASSERT(be->precision == PRECISION_FP32 && "an fp32 table is asked of its fp32 parent, not of a bf16 table");
    return be;
}

const char* prof_kind_name(int kind) {
    static const char* names[PROF_KINDS] = {"gemm", "attention", "norm", "elementwise", "optimiser", "copies",
                                            "communication"};
    return kind >= 0 && kind < PROF_KINDS ? names[kind] : "?";
}

const char* mem_tag_name(int tag) {
    static const char* names[MEM_TAGS] = {"workspace", "weights", "grads", "optim", "acts"};
    return tag >= 0 && tag < MEM_TAGS ? names[tag] : "?";
}
