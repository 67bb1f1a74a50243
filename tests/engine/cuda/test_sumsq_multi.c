/* test_sumsq_multi.c — the multi-tensor sum of squares (BackendOps.sum_squares_multi, engine/cuda/optim.cu)
 * against the per-tensor loop `ss += sum_squares(x_i)` (what the gradient norm does under tensor parallelism and with
 * a tied embedding's copy) on the CUDA backend's own source in the CPU emulation.
 *
 * Tensors of lengths around the chunk boundaries of rr_sumsq_chunk_range (64 equal chunks up to 65536 values,
 * chunks of 65536 beyond: 1, 3, 63, 64, 65, 65535, 65536, 65537, 200000, and an empty one), values of mixed
 * magnitudes; the two results compared BITWISE, then on a sublist (another list: a new table) and on the CPU backend
 * (its op is NULL: the caller's loop) against the CUDA loop within double round-off only (the backends sum a chunk in
 * another order). Launches by the profiler: the loop makes 4 per non-empty tensor (chunk kernel, total kernel, the
 * total's copy back, the device error record's copy); the multi-tensor call 4 whatever the tensors (the chunk
 * kernel over every tensor's chunks, the total kernel, the two copies), plus 1 the first time a list comes (its
 * chunk table's copy to the device); none for an empty list.
 * Usage: test_sumsq_multi */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "tests/support/cuda_emu_entry.h"

static int failures;
static uint64_t rng_state = 0x2545F4914F6CDD1Dull;
static float rng_val(void) {
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    double u = 2.0 * (double)(z >> 11) * (1.0 / 9007199254740992.0) - 1.0;
    return (float)(u * pow(10.0, (double)(int)((z >> 3) % 7) - 3.0)); /* 1e-3 .. 1e3 */
}

#define NT 10
static const size_t LENS[NT] = {1, 3, 63, 64, 0, 65, 65535, 65536, 65537, 200000};

static long optimiser_launches(const Backend* be) {
    BackendProfile prof;
    be->dev->profile_take(&prof);
    return prof.launches[PROF_OPTIMISER];
}

static double loop_sum(const Backend* be, const float* const* xs, const size_t* ns, int n) {
    double ss = 0.0;
    for (int i = 0; i < n; i++) ss += be->ops->sum_squares(be, xs[i], ns[i]);
    return ss;
}

static void check(const Backend* be, const float* const* xs, const size_t* ns, int n, const char* what) {
    int nonempty = 0;
    for (int i = 0; i < n; i++) nonempty += ns[i] > 0;
    (void)optimiser_launches(be);
    double loop = loop_sum(be, xs, ns, n);
    long loop_launches = optimiser_launches(be);
    for (int rep = 0; rep < 2; rep++) {
        double multi = be->ops->sum_squares_multi(be, xs, ns, n);
        long launches = optimiser_launches(be);
        if (memcmp(&multi, &loop, sizeof loop) != 0) {
            fprintf(stderr, "FAIL %s (call %d): multi-tensor %.17g, per-tensor loop %.17g\n", what, rep + 1, multi, loop);
            failures++;
        }
        long want = nonempty ? 4 + (rep == 0 ? 1 : 0) : 0; /* nothing to add: no launch */
        if (launches != want) {
            fprintf(stderr, "FAIL %s (call %d): %ld launches, want %ld\n", what, rep + 1, launches, want);
            failures++;
        }
    }
    if (loop_launches != 4L * nonempty) {
        fprintf(stderr, "FAIL %s: the per-tensor loop made %ld launches for %d tensors\n", what, loop_launches, nonempty);
        failures++;
    }
    printf("%s: %d tensors, sum %.17g bitwise the loop's; launches %ld (loop) vs 4 (+1 the first call)\n", what, n, loop,
           loop_launches);
}

int main(void) {
    const Backend* be = cuda_emu_backend_or_exit("test_sumsq_multi");
    if (!be->ops->sum_squares_multi) {
        fprintf(stderr, "FAIL: the CUDA table has no sum_squares_multi\n");
        return 1;
    }
    size_t total = 0;
    for (int i = 0; i < NT; i++) total += LENS[i];
    float* host = malloc(total * sizeof(float));
    for (size_t k = 0; k < total; k++) host[k] = rng_val();
    float* dev = be->dev->alloc(total * sizeof(float));
    be->dev->copy_h2d(be, dev, host, total * sizeof(float));
    const float* xs[NT];
    const float* hxs[NT];
    size_t off = 0;
    for (int i = 0; i < NT; i++) xs[i] = dev + off, hxs[i] = host + off, off += LENS[i];
    be->dev->profile(1);
    check(be, xs, LENS, NT, "every tensor");
    check(be, xs + 2, LENS + 2, 5, "a sublist");
    check(be, xs, LENS, 0, "no tensor");
    be->dev->profile(0);
    /* the CPU backend: no multi op (the caller's loop); its sum within double round-off of the CUDA one */
    const Backend* cpu = &backend_cpu;
    double c = loop_sum(cpu, hxs, LENS, NT), g = be->ops->sum_squares_multi(be, xs, LENS, NT);
    if (cpu->ops->sum_squares_multi || fabs(c - g) > 1e-12 * fabs(c)) {
        fprintf(stderr, "FAIL: cpu loop %.17g, cuda multi %.17g (cpu op %p)\n", c, g, (void*)cpu->ops->sum_squares_multi);
        failures++;
    }
    be->dev->free(dev);
    free(host);
    if (failures) {
        fprintf(stderr, "sumsq_multi: %d failures\n", failures);
        return 1;
    }
    printf("sumsq_multi: ok\n");
    return 0;
}
