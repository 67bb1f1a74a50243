/* memory.c — free memory of the host and of a backend's device (memory.h). */
#include "engine/memory.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int mem_host_available(size_t* bytes, char* err, size_t err_len) {
    /* RRFP_MEM_AVAILABLE_MB: what a container's /proc/meminfo does not show (its cgroup limit), and tests */
    const char* env = getenv("RRFP_MEM_AVAILABLE_MB");
    if (env && *env) {
        char* end;
        double mb = strtod(env, &end);
        if (*end || !(mb >= 0)) {
            snprintf(err, err_len, "RRFP_MEM_AVAILABLE_MB = '%s' is not a number of MiB", env);
            return -1;
        }
        *bytes = (size_t)(mb * 1048576.0);
        return 0;
    }
    FILE* f = fopen("/proc/meminfo", "r");
    if (!f) {
        snprintf(err, err_len, "cannot read /proc/meminfo: %s", strerror(errno));
        return -1;
    }
    char line[256];
    int found = 0;
    unsigned long long kb = 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) {
            found = 1;
            break;
        }
    fclose(f);
    if (!found) {
        snprintf(err, err_len, "/proc/meminfo has no MemAvailable line (kernel older than 3.14?)");
        return -1;
    }
    *bytes = (size_t)(kb * 1024ull);
    return 0;
}

int mem_backend_available(const Backend* be, size_t* bytes, char* err, size_t err_len) {
    if (!be || be->dev->host_addressable) return mem_host_available(bytes, err, err_len);
    if (be->dev->memory) { /* the device's own report (the backend this process opened) */
        BackendMemory m;
        be->dev->memory(&m);
        *bytes = m.device_free;
        return 0;
    }
    return backend_cuda_mem_free(bytes, err, err_len);
}
