/* Files from the user: a path must name a regular file before it is opened, so a
 * FIFO, a device or a directory gives a clear error instead of blocking or
 * failing later with a misleading message. */
#ifndef DI_UTIL_FILE_H
#define DI_UTIL_FILE_H

#include <errno.h>
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

#endif
