/* backend.c — choosing a backend by name ("cpu" or "cuda"), for the CLI and recipes. */
#include <string.h>

#include "engine/engine.h"

const Backend* backend_select(const char* name) {
    if (strcmp(name, "cpu") == 0) return &backend_cpu;
    if (strcmp(name, "cuda") == 0) {
        char why[256] = "";
        const Backend* be = backend_cuda_get(why, sizeof why);
        if (!be) rr_die("cannot use backend 'cuda': %s", why);
        return be;
    }
    rr_die("unknown backend '%s' (choices: cpu, cuda)", name);
}
