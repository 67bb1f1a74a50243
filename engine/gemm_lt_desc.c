/* gemm_lt_desc.c — the cuBLASLt descriptions of the bf16 linear layer (see gemm_lt_desc.h). Plain data
 * only: the CUDA backend (librrfp-cuda.so) links this file; the CPU reference runner is gemm_lt_ref.c. */
#include <stdio.h>
#include <stdlib.h>

#include "engine/engine.h"
#include "engine/gemm_lt_desc.h"

GemmLtDesc gemm_lt_desc_linear_forward(int N, int C, int OC, int has_bias) {
    GemmLtDesc d = {gemm_desc_linear_forward(N, C, OC), has_bias ? GEMM_LT_EPI_BIAS : GEMM_LT_EPI_NONE, 0};
    return d;
}
GemmLtDesc gemm_lt_desc_linear_gelu_forward(int N, int C, int OC) {
    GemmLtDesc d = {gemm_desc_linear_forward(N, C, OC), GEMM_LT_EPI_GELU_AUX_BIAS, OC};
    return d;
}
GemmLtDesc gemm_lt_desc_linear_backward_input(int N, int C, int OC) {
    GemmLtDesc d = {gemm_desc_linear_backward_input(N, C, OC), GEMM_LT_EPI_NONE, 0};
    return d;
}
GemmLtDesc gemm_lt_desc_linear_backward_weight(int N, int C, int OC) {
    GemmLtDesc d = {gemm_desc_linear_backward_weight(N, C, OC), GEMM_LT_EPI_NONE, 0};
    return d;
}

const char* gemm_lt_desc_format(const GemmLtDesc* d, char* buf, int len) {
    char g[256];
    snprintf(buf, (size_t)len, "cublasLt A=bf16 B=bf16 C=D=f32 compute=32F %s epilogue=%s",
             gemm_desc_format(&d->g, g, sizeof g), d->epilogue == GEMM_LT_EPI_BIAS ? "BIAS" : d->epilogue == GEMM_LT_EPI_GELU_AUX_BIAS ? "GELU_AUX_BIAS" : "DEFAULT");
    return buf;
}
