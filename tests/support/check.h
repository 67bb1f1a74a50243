/* check.h — the one CHECK of the C tests: a failed condition prints file:line, the condition and a
 * message, and is counted; a test's main returns check_failures ? 1 : 0 (its verdict is its exit code).
 * Header-only, one copy per test executable. */
#ifndef RRFP_TESTS_CHECK_H
#define RRFP_TESTS_CHECK_H

#include <stdio.h>

static int check_failures = 0; /* failed CHECKs */
static int check_count = 0;    /* CHECKs evaluated */

#define CHECK(cond, ...)                                                                                     \
    do {                                                                                                     \
        check_count++;                                                                                       \
        if (!(cond)) {                                                                                       \
            check_failures++;                                                                                \
            fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);                                  \
            fprintf(stderr, __VA_ARGS__);                                                                    \
            fputc('\n', stderr);                                                                             \
        }                                                                                                    \
    } while (0)

#endif
