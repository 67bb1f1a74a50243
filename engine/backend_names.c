/* backend_names.c — the backend names a recipe or the CLI may give, with what their device tables say of their memory
 * (BackendDevice.host_addressable, checked against the table when backend_open opens it): the one place a backend is
 * known by its name. Nothing here opens a table, so a plan, a memory estimate or a recipe check needs no device (and
 * links without the backends). */
#include <string.h>

#include "engine/engine.h"

static const struct {
    const char* name;
    int host_addressable;
} backend_names[] = {{"cpu", 1}, {"cuda", 0}};

int backend_name_host_addressable(const char* name) {
    for (int i = 0; i < (int)(sizeof backend_names / sizeof backend_names[0]); i++)
        if (strcmp(name, backend_names[i].name) == 0) return backend_names[i].host_addressable;
    return -1;
}
