/* ubsan_log_path.c — linked into every target of the sanitizer build (CMakeLists.txt, RRFP_SANITIZE).
 * With GCC, -fsanitize=address,undefined loads two runtimes, libasan and libubsan, each with its own
 * copy of the common sanitizer state; libubsan then ignores UBSAN_OPTIONS' log_path and prints its
 * reports to stderr only (GCC 12, measured), where a test that hides a program's stderr would lose
 * them. At start-up this sets libubsan's own report path from UBSAN_OPTIONS, so UndefinedBehaviorSanitizer
 * reports land in build-asan/sanitizer-reports/ like AddressSanitizer's (tests/asan/asan.cmake). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

__attribute__((constructor)) static void rrfp_ubsan_log_path(void) {
    const char* o = getenv("UBSAN_OPTIONS");
    const char* p = o ? strstr(o, "log_path=") : NULL;
    if (!p) return;
    char path[4096];
    p += 9;
    size_t n = strcspn(p, ":");
    if (n == 0 || n >= sizeof path) return;
    memcpy(path, p, n);
    path[n] = 0;
    void* h = dlopen("libubsan.so.1", RTLD_NOW | RTLD_NOLOAD); /* the runtime already loaded, not a new one */
    if (!h) return;
    void (*set_path)(const char*) = (void (*)(const char*))dlsym(h, "__sanitizer_set_report_path");
    if (set_path) set_path(path);
    dlclose(h);
}
