/* cli_read_input: see cli.h. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

char *cli_read_input(const char *command, const char *path, size_t *len)
{
    FILE *f = strcmp(path, "-") == 0 ? stdin : fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "deepinfer %s: cannot open %s: %s\n", command, path, strerror(errno));
        return NULL;
    }
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        n += fread(buf + n, 1, cap - n - 1, f);
        if (ferror(f)) {
            fprintf(stderr, "deepinfer %s: cannot read %s: %s\n", command, path, strerror(errno));
            free(buf);
            buf = NULL;
            break;
        }
        if (feof(f)) break;
        if (n + 1 == cap) {
            char *bigger = realloc(buf, cap * 2);
            if (!bigger) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = bigger;
            cap *= 2;
        }
    }
    if (f != stdin) fclose(f);
    if (!buf) {
        if (!ferror(stdin))
            fprintf(stderr, "deepinfer %s: out of memory reading %s\n", command, path);
        return NULL;
    }
    buf[n] = 0;
    *len = n;
    return buf;
}
