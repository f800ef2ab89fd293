/* di_error: see deepinfer.h and util/error.h. */
#include "util/error.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/utf8.h"

struct di_error {
    di_status status;
    char message[]; /* NUL-terminated */
};

/* Handed out when an error cannot be allocated; never freed. */
static const struct {
    di_status status;
    char message[48];
} out_of_memory_error = {DI_ERR_OUT_OF_MEMORY, "out of memory (while reporting an error)"};

/* The bytes of s[0, n) a message writes as \xNN: C0 controls and DEL, C1
 * controls (U+0080..U+009F, C2 80..C2 9F) and ill-formed UTF-8 (a byte at a
 * time) — what could break a log line, drive a terminal or make the message
 * invalid UTF-8 (a name read from a file, a request's bytes). Writes the
 * escaped text and a NUL to out where out is not NULL; returns its length. */
static size_t escaped(const char *s, size_t n, char *out)
{
    const uint8_t *b = (const uint8_t *)s;
    size_t len = 0;
    for (size_t i = 0; i < n;) {
        size_t k = b[i] < 0x80 ? 1 : di_utf8_sequence_length(b + i, n - i);
        int esc = k == 0 || b[i] < 0x20 || b[i] == 0x7f || (b[i] == 0xc2 && b[i + 1] < 0xa0);
        if (k == 0) k = 1;
        for (size_t j = 0; j < k; j++) {
            if (esc) {
                if (out) snprintf(out + len, 5, "\\x%02X", b[i + j]);
                len += 4;
            } else {
                if (out) out[len] = (char)b[i + j];
                len++;
            }
        }
        i += k;
    }
    if (out) out[len] = '\0';
    return len;
}

/* A new error holding message[0, n) escaped (escaped()), or NULL. */
static di_error *error_new(di_status status, const char *message, size_t n)
{
    size_t len = escaped(message, n, NULL);
    di_error *e = malloc(sizeof *e + len + 1);
    if (!e) return NULL;
    e->status = status;
    escaped(message, n, e->message);
    return e;
}

char *di_escape_dup(const char *message)
{
    if (!message) return NULL;
    size_t n = strlen(message), len = escaped(message, n, NULL);
    char *d = malloc(len + 1);
    if (d) escaped(message, n, d);
    return d;
}

di_status di_error_set(di_error **err, di_status status, const char *message)
{
    if (!err) return status;
    di_error *e = error_new(status, message, strlen(message));
    *err = e ? e : (di_error *)&out_of_memory_error;
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
    char *m = n < 0 ? NULL : malloc((size_t)n + 1);
    if (m) vsnprintf(m, (size_t)n + 1, fmt, ap2);
    va_end(ap2);
    di_error *e = m ? error_new(status, m, (size_t)n) : NULL;
    free(m);
    *err = e ? e : (di_error *)&out_of_memory_error;
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
