/* pyjson: the JSON text deepseek-recipe writes into prompts (tool schemas,
 * non-string tool-call arguments, response schemas): docs/recipe-spec.md §5.
 * Like Python's json.dumps(obj, ensure_ascii=False) with its default separators;
 * floats use the shortest round-trip digits, laid out as Rust's ryu does (V4,
 * with a '+' on positive exponents) or as Python's repr does (V4.1). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "recipe/conversation.h"

void rc_json_string(rc_buf *b, const char *s, size_t n)
{
    rc_buf_add(b, "\"", 1);
    size_t run = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        const char *esc = NULL;
        char u[8];
        if (c == '"')
            esc = "\\\"";
        else if (c == '\\')
            esc = "\\\\";
        else if (c == '\n')
            esc = "\\n";
        else if (c == '\r')
            esc = "\\r";
        else if (c == '\t')
            esc = "\\t";
        else if (c == '\b')
            esc = "\\b";
        else if (c == '\f')
            esc = "\\f";
        else if (c < 0x20) {
            snprintf(u, sizeof u, "\\u%04x", c);
            esc = u;
        }
        if (!esc) continue;
        rc_buf_add(b, s + run, i - run);
        rc_buf_adds(b, esc);
        run = i + 1;
    }
    rc_buf_add(b, s + run, n - run);
    rc_buf_add(b, "\"", 1);
}

/* The shortest digits d1..dn (no trailing zeros) and decimal exponent k such that
 * x = 0.d1..dn * 10^k round-trips; x finite and non-zero. */
static void shortest_digits(double x, char *digits, int *n, int *k)
{
    char buf[40];
    for (int p = 1; p <= 17; p++) {
        snprintf(buf, sizeof buf, "%.*e", p - 1, x);
        if (strtod(buf, NULL) == x) break;
    }
    /* buf is d[.ddd]e±XX */
    int len = 0;
    const char *q = buf;
    for (; *q && *q != 'e'; q++)
        if (*q >= '0' && *q <= '9') digits[len++] = *q;
    while (len > 1 && digits[len - 1] == '0') len--;
    digits[len] = 0;
    *n = len;
    *k = (int)strtol(q + 1, NULL, 10) + 1;
}

static void add_float(rc_buf *b, double x, rc_float_style style)
{
    char out[64], digits[24];
    size_t o = 0;
    if (signbit(x)) out[o++] = '-';
    if (x == 0) {
        rc_buf_add(b, out, o);
        rc_buf_adds(b, "0.0");
        return;
    }
    int n, k;
    shortest_digits(fabs(x), digits, &n, &k);
    int fixed = style == RC_FLOAT_V4 ? (k > -5 && k <= 16) : (k > -4 && k <= 16);
    if (fixed && k > 0) {
        for (int i = 0; i < k; i++) out[o++] = (char)(i < n ? digits[i] : '0');
        out[o++] = '.';
        if (n > k)
            for (int i = k; i < n; i++) out[o++] = digits[i];
        else
            out[o++] = '0';
    } else if (fixed) {
        out[o++] = '0';
        out[o++] = '.';
        for (int i = 0; i < -k; i++) out[o++] = '0';
        for (int i = 0; i < n; i++) out[o++] = digits[i];
    } else {
        out[o++] = digits[0];
        if (n > 1) {
            out[o++] = '.';
            for (int i = 1; i < n; i++) out[o++] = digits[i];
        }
        int e = k - 1;
        o += (size_t)snprintf(out + o, sizeof out - o, style == RC_FLOAT_V4 ? "e%+d" : "e%+03d", e);
    }
    rc_buf_add(b, out, o);
}

static void write_json(rc_buf *b, const json_t *v, rc_float_style style, const char *comma,
                       const char *colon);

void rc_json_f32(rc_buf *b, float x)
{
    if (!isfinite(x)) {
        rc_buf_adds(b, "null");
        return;
    }
    if (x == 0) {
        rc_buf_adds(b, signbit(x) ? "-0.0" : "0.0");
        return;
    }
    /* the shortest digits that read back as the same float32 */
    char sci[32];
    for (int p = 1; p <= 9; p++) {
        snprintf(sci, sizeof sci, "%.*e", p - 1, (double)x);
        if (strtof(sci, NULL) == x) break;
    }
    char digits[16] = {'0'}, out[64];
    int n = 0, o = 0;
    const char *q = sci;
    if (*q == '-') out[o++] = *q++;
    for (; *q && *q != 'e'; q++)
        if (*q >= '0' && *q <= '9' && n < (int)sizeof digits) digits[n++] = *q;
    if (n == 0) n = 1; /* (never: %e writes at least one digit) */
    while (n > 1 && digits[n - 1] == '0') n--;
    int k = (int)strtol(q + 1, NULL, 10) + 1; /* x = 0.d1..dn * 10^k */
    if (k > 0 && k <= 16) {
        for (int i = 0; i < k; i++) out[o++] = (char)(i < n ? digits[i] : '0');
        out[o++] = '.';
        if (n > k)
            for (int i = k; i < n; i++) out[o++] = digits[i];
        else
            out[o++] = '0';
    } else if (k <= 0 && k > -5) {
        out[o++] = '0';
        out[o++] = '.';
        for (int i = 0; i < -k; i++) out[o++] = '0';
        for (int i = 0; i < n; i++) out[o++] = digits[i];
    } else {
        out[o++] = digits[0];
        if (n > 1) {
            out[o++] = '.';
            for (int i = 1; i < n; i++) out[o++] = digits[i];
        }
        o += snprintf(out + o, sizeof out - (size_t)o, "e%d", k - 1);
    }
    rc_buf_add(b, out, (size_t)o);
}

void rc_pyjson(rc_buf *b, const json_t *v, rc_float_style style)
{
    if (!v) { /* a failed json_* allocation upstream */
        b->oom = 1;
        return;
    }
    write_json(b, v, style, ", ", ": ");
}

void rc_compact_json(rc_buf *b, const json_t *v)
{
    write_json(b, v, RC_FLOAT_V4, ",", ":");
}

static void write_json(rc_buf *b, const json_t *v, rc_float_style style, const char *comma,
                       const char *colon)
{
    char num[32];
    switch (json_typeof(v)) {
    case JSON_OBJECT: {
        rc_buf_add(b, "{", 1);
        const char *key;
        json_t *value;
        int first = 1;
        json_object_foreach((json_t *)v, key, value)
        {
            if (!first) rc_buf_adds(b, comma);
            first = 0;
            rc_json_string(b, key, strlen(key));
            rc_buf_adds(b, colon);
            write_json(b, value, style, comma, colon);
        }
        rc_buf_add(b, "}", 1);
        break;
    }
    case JSON_ARRAY:
        rc_buf_add(b, "[", 1);
        for (size_t i = 0; i < json_array_size(v); i++) {
            if (i) rc_buf_adds(b, comma);
            write_json(b, json_array_get(v, i), style, comma, colon);
        }
        rc_buf_add(b, "]", 1);
        break;
    case JSON_STRING:
        if (rc_json_is_bignum(v))
            rc_buf_add(b, json_string_value(v) + 1, json_string_length(v) - 1);
        else
            rc_json_string(b, json_string_value(v), json_string_length(v));
        break;
    case JSON_INTEGER:
        snprintf(num, sizeof num, "%lld", (long long)json_integer_value(v));
        rc_buf_adds(b, num);
        break;
    case JSON_REAL: add_float(b, json_real_value(v), style); break;
    case JSON_TRUE: rc_buf_adds(b, "true"); break;
    case JSON_FALSE: rc_buf_adds(b, "false"); break;
    case JSON_NULL: rc_buf_adds(b, "null"); break;
    }
}
