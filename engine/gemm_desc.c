/* gemm_desc.c — the column-major GEMM descriptions of the linear layer (see gemm_desc.h).
 *
 * Row-major X (R, C) with leading dimension C is column-major X^T (C, R) with the same leading
 * dimension. Each function writes the row-major product it implements, then its column-major form. */
#include <stdio.h>

#include "engine/engine.h"
#include "engine/gemm_desc.h"

/* out (N, OC) = inp (N, C) @ W^T.
 * Column-major: out^T (OC, N) = W (OC, C) @ inp^T (C, N). W's bytes are column-major W^T (C, OC),
 * ld C, so op(A) = T; inp's bytes are column-major inp^T (C, N), ld C, op(B) = N. */
GemmDesc gemm_desc_linear_forward(int N, int C, int OC) {
    GemmDesc g = {1, 0, OC, N, C, C, C, OC, 1.0f, 0.0f, GEMM_PTR_WEIGHT, GEMM_PTR_INP, GEMM_PTR_OUT};
    return g;
}

/* dinp (N, C) += dout (N, OC) @ W (OC, C).
 * Column-major: dinp^T (C, N) += W^T (C, OC) @ dout^T (OC, N). W's bytes are W^T (C, OC), ld C,
 * op N; dout's bytes are dout^T (OC, N), ld OC, op N. */
GemmDesc gemm_desc_linear_backward_input(int N, int C, int OC) {
    GemmDesc g = {0, 0, C, N, OC, C, OC, C, 1.0f, 1.0f, GEMM_PTR_WEIGHT, GEMM_PTR_DOUT, GEMM_PTR_DINP};
    return g;
}

/* dW (OC, C) += dout^T (OC, N) @ inp (N, C).
 * Column-major: dW^T (C, OC) += inp^T (C, N) @ dout (N, OC). inp's bytes are inp^T (C, N), ld C,
 * op N; dout's bytes are dout^T (OC, N), ld OC, so op(B) = T gives dout (N, OC). */
GemmDesc gemm_desc_linear_backward_weight(int N, int C, int OC) {
    GemmDesc g = {0, 1, C, OC, N, C, OC, C, 1.0f, 1.0f, GEMM_PTR_INP, GEMM_PTR_DOUT, GEMM_PTR_DWEIGHT};
    return g;
}

static int imax(int a, int b) { return a > b ? a : b; }

int gemm_desc_valid(const GemmDesc* g) {
    if (g->m < 0 || g->n < 0 || g->k < 0) return 0;
    /* column-major: op(A) is (m, k), so A is stored (m, k) when not transposed and (k, m) when it is */
    int a_rows = g->opA ? g->k : g->m;
    int b_rows = g->opB ? g->n : g->k;
    return g->lda >= imax(1, a_rows) && g->ldb >= imax(1, b_rows) && g->ldc >= imax(1, g->m);
}

void gemm_desc_operands(const GemmDesc* g, const GemmOperands* ops, Buf* A, Buf* B, Buf* C) {
    RR_ASSERT(g->a >= 0 && g->a < GEMM_PTR_COUNT && g->b >= 0 && g->b < GEMM_PTR_COUNT && g->c >= 0 &&
              g->c < GEMM_PTR_COUNT);
    *A = ops->ptr[g->a];
    *B = ops->ptr[g->b];
    *C = ops->ptr[g->c];
    RR_ASSERT(A->p && B->p && C->p);
}

const char* gemm_ptr_name(GemmPtr p) {
    static const char* names[GEMM_PTR_COUNT] = {"inp", "weight", "out", "dout", "dinp", "dweight"};
    return (p >= 0 && p < GEMM_PTR_COUNT) ? names[p] : "?";
}

const char* gemm_desc_format(const GemmDesc* g, char* buf, int len) {
    snprintf(buf, (size_t)len, "opA=%c opB=%c m=%d n=%d k=%d lda=%d ldb=%d ldc=%d alpha=%g beta=%g A=%s B=%s C=%s",
             g->opA ? 'T' : 'N', g->opB ? 'T' : 'N', g->m, g->n, g->k, g->lda, g->ldb, g->ldc, (double)g->alpha,
             (double)g->beta, gemm_ptr_name(g->a), gemm_ptr_name(g->b), gemm_ptr_name(g->c));
    return buf;
}
