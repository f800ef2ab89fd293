/* An independent reference for util/utf8: utf8proc decides what is well-formed,
 * and "incomplete" is decided by search — a tail is incomplete when some
 * continuation bytes turn it into a sequence utf8proc accepts. Slow and obviously
 * right; shared by the unit test and the fuzz target. */
#ifndef DI_TEST_UTF8_ORACLE_H
#define DI_TEST_UTF8_ORACLE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <utf8proc.h>

#include "util/utf8.h"

/* 1 when utf8proc decodes all of s[0, n) as exactly one code point. */
static inline int oracle_one_code_point(const uint8_t *s, size_t n)
{
    utf8proc_int32_t cp;
    return utf8proc_iterate(s, (utf8proc_ssize_t)n, &cp) == (utf8proc_ssize_t)n;
}

/* 1 when the 1–3 bytes p[0, n) can be extended into one well-formed code point. */
static inline int oracle_completable(const uint8_t *p, size_t n)
{
    uint8_t buf[4];
    if (n == 0 || n > 3) return 0;
    memcpy(buf, p, n);
    for (size_t total = n + 1; total <= 4; total++) {
        /* The byte right after the prefix may be any continuation byte; later
         * bytes are tried at both ends of the continuation range. */
        for (unsigned next = 0x80; next <= 0xBF; next++) {
            buf[n] = (uint8_t)next;
            for (unsigned fill = 0x80; fill <= 0xBF; fill += 0x3F) {
                for (size_t k = n + 1; k < total; k++) buf[k] = (uint8_t)fill;
                if (oracle_one_code_point(buf, total)) return 1;
            }
        }
    }
    return 0;
}

/* 1 when utf8proc decodes all of s[0, n) as well-formed UTF-8. */
static inline int oracle_all_valid(const uint8_t *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        utf8proc_int32_t cp;
        utf8proc_ssize_t r = utf8proc_iterate(s + i, (utf8proc_ssize_t)(n - i), &cp);
        if (r <= 0) return 0;
        i += (size_t)r;
    }
    return 1;
}

static inline di_utf8_scan oracle_scan(const uint8_t *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        utf8proc_int32_t cp;
        utf8proc_ssize_t r = utf8proc_iterate(s + i, (utf8proc_ssize_t)(n - i), &cp);
        if (r > 0) {
            i += (size_t)r;
            continue;
        }
        if (oracle_completable(s + i, n - i)) return (di_utf8_scan){i, DI_UTF8_INCOMPLETE};
        return (di_utf8_scan){i, DI_UTF8_INVALID};
    }
    return (di_utf8_scan){n, DI_UTF8_VALID};
}

#endif
