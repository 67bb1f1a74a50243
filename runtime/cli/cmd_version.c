/* cmd_version.c — `rrfp-mm version`: version, BLAS library and backend availability. */
#include <stdio.h>
#include <string.h>

#include "engine/engine.h"
#include "runtime/cli/cli.h"

int cmd_version(int argc, char** argv) {
    for (int i = 1; i < argc; i++) {
        int help = !strcmp(argv[i], "--help") || !strcmp(argv[i], "-h");
        if (!help) fprintf(stderr, "rrfp-mm version: unknown option '%s'\n\n", argv[i]);
        fprintf(help ? stdout : stderr,
                "usage: rrfp-mm version\n\nPrints the version, the BLAS library and which backends this build and "
                "machine can run.\n");
        return help ? 0 : 2;
    }
    char why[256];
    const Backend* cuda = backend_cuda_get(why, sizeof why);
    printf("rrfp-mm %s\n", RRFP_VERSION);
    printf("blas: %s\n", cpu_blas_name());
    printf("backends: cpu%s\n", cuda ? ", cuda" : "");
    if (!cuda) printf("cuda: unavailable (%s)\n", why);
    return 0;
}
