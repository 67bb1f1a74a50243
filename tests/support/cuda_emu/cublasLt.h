/* cublasLt.h — stand-in used only by the CPU emulation of the CUDA backend (see cuda_emu.h). */
#pragma once
#include "cuda_emu.h"
