/* threads.c — one thread count for the CPU backend's OpenMP loops and its BLAS.
 *
 * BLIS reads BLIS_NUM_THREADS or OMP_NUM_THREADS once and otherwise runs single-threaded (its
 * thread count reads -1, "unset"), and OpenBLAS-pthread keeps its own pool sized to the machine,
 * so a run that wants N threads must tell both. */
#include <omp.h>

#include "engine/engine.h"

#if defined(RRFP_BLAS_BLIS)
void bli_thread_set_num_threads(long n_threads); /* blis.h: dim_t is a 64-bit integer */
#elif defined(RRFP_BLAS_OPENBLAS)
void openblas_set_num_threads(int num_threads);
#endif

int cpu_set_num_threads(int n) {
    if (n <= 0) n = omp_get_num_procs();
    omp_set_num_threads(n);
#if defined(RRFP_BLAS_BLIS)
    bli_thread_set_num_threads(n);
#elif defined(RRFP_BLAS_OPENBLAS)
    openblas_set_num_threads(n);
#endif
    return n;
}
