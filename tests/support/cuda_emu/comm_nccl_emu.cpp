/* comm_nccl_emu.cpp — runtime/comm/comm_nccl.c compiled against the emulated CUDA runtime and NCCL
 * (tests/support/cuda_emu/cuda_runtime.h, nccl.h), as C++, with its entry renamed so that it can sit beside
 * the real one: rrfp-mm-emu's comm_nccl_create reaches it through wrap.c. */
extern "C" {
#include "engine/util.h"
#include "runtime/comm/comm.h"
}
#define rrfp_nccl_comm_create rrfp_nccl_emu_comm_create
#define rrfp_nccl_profile rrfp_nccl_emu_profile
#define rrfp_nccl_profile_take rrfp_nccl_emu_profile_take
#include "runtime/comm/comm_nccl.c"
