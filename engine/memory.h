/* memory.h — how much memory a backend can still give this process, for the start-up check that
 * refuses a job which cannot fit (docs/reliability.md "A job refuses what it can know will fail"). */
#ifndef RRFP_MEMORY_H
#define RRFP_MEMORY_H

#include <stddef.h>

#include "engine/engine.h"

/* Host memory the kernel says can be allocated without swapping: MemAvailable of /proc/meminfo, or
 * the environment's RRFP_MEM_AVAILABLE_MB when set (a container's limit, tests). Returns 0 with
 * *bytes, or -1 with a message. */
int mem_host_available(size_t* bytes, char* err, size_t err_len);
/* Free memory of the backend's device: the host's MemAvailable for cpu, the device's free bytes for cuda (its
 * table's BackendDevice.memory: cudaMemGetInfo). Returns 0 with *bytes, or -1 with a message. */
int mem_backend_available(const Backend* be, size_t* bytes, char* err, size_t err_len);
/* The cuda backend's free device bytes (cuda_backend.cu; nocuda.c returns -1). */
int backend_cuda_mem_free(size_t* bytes, char* err, size_t err_len);

#endif
