/* Files from the user: a path must name a regular file before it is opened, so a
 * FIFO, a device or a directory gives a clear error instead of blocking or
 * failing later with a misleading message. */
#ifndef DI_UTIL_FILE_H
#define DI_UTIL_FILE_H

#include <errno.h>
#include <stddef.h>
#include <sys/stat.h>

/* 0 when `path` is a regular file (symlinks followed); else -1 with errno set
 * (ENOENT, ELOOP, …; EINVAL for something that exists but is not a regular file). */
static inline int di_regular_file(const char *path)
{
    struct stat sb;
    if (stat(path, &sb) != 0) return -1;
    if (!S_ISREG(sb.st_mode)) {
        errno = EINVAL;
        return -1;
    }
    return 0;
}

/* The last component of `path` (trailing slashes ignored), without a
 * ".gguf" suffix: *start and the returned length (util/path.c). */
size_t di_path_stem(const char *path, const char **start);
/* A model's name from its file or folder: di_path_stem, with "dir/." and
 * "dir/.." resolved to the folder they name (realpath). Raw bytes (not
 * checked as UTF-8); malloc'd, NULL when out of memory. */
char *di_path_name(const char *path);

#endif
