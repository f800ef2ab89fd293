/* Model names from paths (util/file.h). realpath is X/Open: glibc declares it
 * with _XOPEN_SOURCE (or _DEFAULT_SOURCE), not with _POSIX_C_SOURCE alone. */
#define _XOPEN_SOURCE 700
#include <stdlib.h>
#include <string.h>

#include "util/file.h"

size_t di_path_stem(const char *path, const char **start)
{
    size_t n = strlen(path);
    while (n > 1 && path[n - 1] == '/') n--;
    size_t b = n;
    while (b > 0 && path[b - 1] != '/') b--;
    size_t len = n - b;
    if (len > 5 && memcmp(path + n - 5, ".gguf", 5) == 0) len -= 5;
    *start = path + b;
    return len;
}

char *di_path_name(const char *path)
{
    const char *start;
    size_t len = di_path_stem(path, &start);
    char *real = NULL;
    /* "dir/." or "dir/..": the folder it names ("/" has no name to give) */
    if (len == 0 || (len == 1 && start[0] == '.') ||
        (len == 2 && start[0] == '.' && start[1] == '.')) {
        if ((real = realpath(path, NULL)) != NULL && strcmp(real, "/") != 0)
            len = di_path_stem(real, &start);
    }
    char *out = malloc(len + 1);
    if (out) {
        memcpy(out, start, len);
        out[len] = 0;
    }
    free(real);
    return out;
}
