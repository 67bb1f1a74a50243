/* tensor.c — element types: their sizes and safetensors names. */
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"

size_t dtype_size(DType t) {
    switch (t) {
    case DTYPE_F32: return 4;
    case DTYPE_BF16: return 2;
    case DTYPE_I32: return 4;
    }
    RR_ASSERT(0 && "unknown dtype");
    return 0;
}

const char* dtype_name(DType t) {
    switch (t) {
    case DTYPE_F32: return "F32";
    case DTYPE_BF16: return "BF16";
    case DTYPE_I32: return "I32";
    }
    return "?";
}
