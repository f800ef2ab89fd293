/* A growable NUL-terminated text buffer for the converters that write GBNF
 * (grammar_regex.c, grammar_json_schema.c). An allocation failure sets oom
 * and makes every later append a no-op. */
#ifndef DI_SAMPLER_GRAMMAR_TEXT_H
#define DI_SAMPLER_GRAMMAR_TEXT_H

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct gtext {
    char *s;
    size_t n, cap;
    int oom;
} gtext;

static inline void gt_add(gtext *t, const char *s, size_t n)
{
    if (t->oom) return;
    if (t->n + n + 1 > t->cap) {
        size_t cap = t->cap ? t->cap : 256;
        while (cap < t->n + n + 1) cap *= 2;
        char *p = realloc(t->s, cap);
        if (!p) {
            t->oom = 1;
            return;
        }
        t->s = p;
        t->cap = cap;
    }
    memcpy(t->s + t->n, s, n);
    t->n += n;
    t->s[t->n] = 0;
}

static inline void gt_puts(gtext *t, const char *s)
{
    gt_add(t, s, strlen(s));
}

static inline void gt_printf(gtext *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static inline void gt_printf(gtext *t, const char *fmt, ...)
{
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if ((size_t)n < sizeof buf) {
        gt_add(t, buf, (size_t)n);
        return;
    }
    char *big = malloc((size_t)n + 1);
    if (!big) {
        t->oom = 1;
        return;
    }
    va_start(ap, fmt);
    vsnprintf(big, (size_t)n + 1, fmt, ap);
    va_end(ap);
    gt_add(t, big, (size_t)n);
    free(big);
}

/* One byte as a GBNF literal or class member: printable ASCII as itself
 * (escaping the GBNF metacharacters), everything else as \xHH (non-ASCII
 * bytes of a UTF-8 character are copied as they are). */
static inline void gt_char(gtext *t, unsigned char c)
{
    if (c >= 0x80 || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
        c == ' ' || c == '_' || c == ',' || c == ':' || c == '@' || c == '.') {
        gt_add(t, (const char *)&c, 1);
    } else {
        gt_printf(t, "\\x%02X", c);
    }
}

#endif
