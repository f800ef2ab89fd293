/* di_error: see deepinfer.h and util/error.h. */
#include "util/error.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct di_error {
    di_status status;
    char message[]; /* NUL-terminated */
};

/* Handed out when an error cannot be allocated; never freed. */
static const struct {
    di_status status;
    char message[48];
} out_of_memory_error = {DI_ERR_OUT_OF_MEMORY, "out of memory (while reporting an error)"};

di_status di_error_set(di_error **err, di_status status, const char *message)
{
    if (!err) return status;
    size_t n = strlen(message);
    di_error *e = malloc(sizeof *e + n + 1);
    if (!e) {
        *err = (di_error *)&out_of_memory_error;
        return status;
    }
    e->status = status;
    memcpy(e->message, message, n + 1);
    *err = e;
    return status;
}

di_status di_error_setf(di_error **err, di_status status, const char *fmt, ...)
{
    if (!err) return status;
    va_list ap, ap2;
    va_start(ap, fmt);
    va_copy(ap2, ap);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    di_error *e = n < 0 ? NULL : malloc(sizeof *e + (size_t)n + 1);
    if (e) vsnprintf(e->message, (size_t)n + 1, fmt, ap2);
    va_end(ap2);
    if (!e) {
        *err = (di_error *)&out_of_memory_error;
        return status;
    }
    e->status = status;
    *err = e;
    return status;
}

DI_API di_status di_error_status(const di_error *err)
{
    return err ? err->status : DI_ERR_INVALID_ARGUMENT;
}

DI_API const char *di_error_message(const di_error *err)
{
    return err ? err->message : "no error";
}

DI_API void di_error_free(di_error *err)
{
    if (err && err != (const di_error *)&out_of_memory_error) free(err);
}
