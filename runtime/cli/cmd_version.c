/* cmd_version.c — `rrfp-mm version`: version, BLAS library and backend availability. */
#include <stdio.h>

#include "engine/engine.h"
#include "runtime/cli/cli.h"

int cmd_version(int argc, char** argv) {
    (void)argc;
    (void)argv;
    char why[256];
    const Backend* cuda = backend_cuda_get(why, sizeof why);
    printf("rrfp-mm %s\n", RRFP_VERSION);
    printf("blas: %s\n", cpu_blas_name());
    printf("backends: cpu%s\n", cuda ? ", cuda" : "");
    if (!cuda) printf("cuda: unavailable (%s)\n", why);
    return 0;
}
