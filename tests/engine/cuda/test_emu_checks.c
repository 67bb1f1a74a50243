/* test_emu_checks.c — the CPU emulation of the CUDA runtime (tests/support/cuda_emu) reports what a GPU would not
 * forgive. Every emulated CUDA test (bitwise against the CPU backend, strict thread orders, guard zones, memory
 * protection) relies on these checks, so each is made to fire here, on kernels written to break its rule
 * (tests/engine/cuda/emu_checks.cu):
 *   protect MODE ok|read|write   device memory is closed to host code outside device operations: copies reach it
 *                                ("ok"), a host read or write ends the process (exit 3) naming the byte and the
 *                                allocation. MODE: the mechanism the emulator must report using: pkey (protection
 *                                keys; skipped, 77, on a machine without them) or mprotect (RR_EMU_PKEY=0).
 *   chain                        block b reads block b - 1's output: with RR_EMU_ORDERS=2 (blocks and threads run
 *                                ascending, then descending) the launch fails "depends on the order"
 *   race                         a shared-memory read of another thread's write without __syncthreads: likewise
 *   overrun                      a write one element past the end: the launch fails "wrote past the end"
 * Prints "emu checks: <what> reported" (or "... ok") when the emulator caught it; the driver (ctest, through
 * tests/support/util/expect.sh) checks the exit status and the emulator's message. */
#include <stdio.h>
#include <string.h>

#include "engine/engine.h"
#include "tests/support/cuda_emu_entry.h"

const char* emu_protect_mode(void);
int emu_checks_launch(const char* what, float* x, int n);

enum { N = 1000 };

static int protect(const Backend* be, const char* want, const char* what) {
    const char* mode = emu_protect_mode();
    if (strcmp(mode, want)) {
        if (!strcmp(want, "pkey") && !strcmp(mode, "mprotect")) {
            printf("skipped: no memory protection keys on this machine (the emulator uses mprotect)\n");
            return 77;
        }
        printf("test_emu_checks: FAIL: the emulator protects device memory by %s, expected %s\n", mode, want);
        return 1;
    }
    static float host[N], back[N];
    for (int i = 0; i < N; i++) host[i] = (float)i;
    float* d = be->dev->alloc(N * sizeof(float));
    be->dev->copy_h2d(be, d, host, sizeof host);
    be->dev->copy_d2h(be, back, d, sizeof back);
    be->dev->synchronize(be);
    if (memcmp(host, back, sizeof host)) {
        printf("test_emu_checks: FAIL: a copy into and out of device memory changed the values\n");
        return 1;
    }
    if (!strcmp(what, "ok")) {
        printf("emu checks: protect (%s) ok\n", mode);
        return 0;
    }
    fflush(stdout);
    volatile float* v = d + 123;
    if (!strcmp(what, "read")) {
        float x = *v;
        printf("test_emu_checks: FAIL: the host read device memory (%g) and went on\n", (double)x);
    } else {
        *v = 1.0f;
        printf("test_emu_checks: FAIL: the host wrote device memory and went on\n");
    }
    return 1;
}

int main(int argc, char** argv) {
    if (argc < 2 || (!strcmp(argv[1], "protect") && argc != 4)) {
        fprintf(stderr, "usage: test_emu_checks protect pkey|mprotect ok|read|write | chain | race | overrun\n");
        return 2;
    }
    const Backend* be = cuda_emu_backend_or_exit("test_emu_checks");
    if (!strcmp(argv[1], "protect")) return protect(be, argv[2], argv[3]);
    static float host[N];
    for (int i = 0; i < N; i++) host[i] = 0.0f;
    float* d = be->dev->alloc(N * sizeof(float));
    be->dev->copy_h2d(be, d, host, sizeof host);
    int err = emu_checks_launch(argv[1], d, N);
    if (!err) {
        printf("test_emu_checks: FAIL: the %s kernel ran without an error from the emulator\n", argv[1]);
        return 1;
    }
    printf("emu checks: %s reported (error %d)\n", argv[1], err);
    return 0;
}
