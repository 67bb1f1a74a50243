/* cuda_bf16.h — stand-in used only by the CPU emulation of the CUDA backend (see cuda_emu.h): the bf16
 * storage type, as bits (device code converts with kernel_math.h's rr_f32_to_bf16 / rr_bf16_to_f32). */
#pragma once
#include <stdint.h>
struct __nv_bfloat16 {
    uint16_t __x;
};
