/* A JSON reader with serde_json's semantics, building jansson values: what
 * deepseek-recipe's parser accepts and how it types numbers matters to the prompt
 * (docs/recipe-spec.md §2.1), and jansson alone differs in four ways this reader
 * settles: nesting is limited to 127 levels; integers are u64 when they fit, i64
 * when negative and they fit, and doubles otherwise (jansson rejects anything
 * beyond int64); "-0" is the double -0.0; strings may hold U+0000. An integer
 * above INT64_MAX (a u64 jansson cannot hold) becomes a string value marked with
 * a leading 0xFF byte (never valid UTF-8) that pyjson prints as the number. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "recipe/conversation.h"
#include "util/utf8.h"

typedef struct reader {
    const char *s;
    size_t n, i;
    int depth, max_depth;
    char *msg;
    size_t msg_size;
} reader;

static json_t *fail(reader *r, const char *what)
{
    if (r->msg[0] == 0) {
        size_t line = 1, col = 1;
        for (size_t k = 0; k < r->i && k < r->n; k++) {
            if (r->s[k] == '\n')
                line++, col = 1;
            else
                col++;
        }
        snprintf(r->msg, r->msg_size, "invalid JSON at line %zu column %zu (byte %zu): %s", line,
                 col, r->i, what);
    }
    return NULL;
}

static void skip_ws(reader *r)
{
    while (r->i < r->n &&
           (r->s[r->i] == ' ' || r->s[r->i] == '\t' || r->s[r->i] == '\n' || r->s[r->i] == '\r'))
        r->i++;
}

static int hex4(reader *r, unsigned *out)
{
    if (r->n - r->i < 4) return -1;
    unsigned v = 0;
    for (int k = 0; k < 4; k++) {
        char c = r->s[r->i + (size_t)k];
        v <<= 4;
        if (c >= '0' && c <= '9')
            v |= (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f')
            v |= (unsigned)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F')
            v |= (unsigned)(c - 'A' + 10);
        else
            return -1;
    }
    r->i += 4;
    *out = v;
    return 0;
}

static void put_utf8(rc_buf *b, unsigned cp)
{
    char u[4];
    size_t n;
    if (cp < 0x80)
        u[0] = (char)cp, n = 1;
    else if (cp < 0x800)
        u[0] = (char)(0xC0 | (cp >> 6)), u[1] = (char)(0x80 | (cp & 0x3F)), n = 2;
    else if (cp < 0x10000)
        u[0] = (char)(0xE0 | (cp >> 12)), u[1] = (char)(0x80 | ((cp >> 6) & 0x3F)),
        u[2] = (char)(0x80 | (cp & 0x3F)), n = 3;
    else
        u[0] = (char)(0xF0 | (cp >> 18)), u[1] = (char)(0x80 | ((cp >> 12) & 0x3F)),
        u[2] = (char)(0x80 | ((cp >> 6) & 0x3F)), u[3] = (char)(0x80 | (cp & 0x3F)), n = 4;
    rc_buf_add(b, u, n);
}

/* A string starting at the opening quote; the result (owned) is in *b. */
static int read_string(reader *r, rc_buf *b)
{
    r->i++; /* opening quote */
    for (;;) {
        if (r->i >= r->n) return fail(r, "EOF while parsing a string"), -1;
        unsigned char c = (unsigned char)r->s[r->i];
        if (c == '"') {
            r->i++;
            return b->oom ? -1 : 0;
        }
        if (c < 0x20) return fail(r, "control character in a string"), -1;
        if (c != '\\') {
            size_t start = r->i;
            while (r->i < r->n && r->s[r->i] != '"' && r->s[r->i] != '\\' &&
                   (unsigned char)r->s[r->i] >= 0x20)
                r->i++;
            rc_buf_add(b, r->s + start, r->i - start);
            continue;
        }
        r->i++;
        if (r->i >= r->n) return fail(r, "EOF in an escape"), -1;
        char e = r->s[r->i++];
        const char *simple = strchr("\"\\/bfnrt", e);
        if (e && simple) {
            static const char map[] = "\"\\/\b\f\n\r\t";
            rc_buf_add(b, &map[simple - "\"\\/bfnrt"], 1);
            continue;
        }
        if (e != 'u') return fail(r, "invalid escape"), -1;
        unsigned cp;
        if (hex4(r, &cp)) return fail(r, "invalid \\u escape"), -1;
        if (cp >= 0xDC00 && cp <= 0xDFFF) return fail(r, "lone trailing surrogate"), -1;
        if (cp >= 0xD800 && cp <= 0xDBFF) {
            unsigned lo;
            if (r->n - r->i < 2 || r->s[r->i] != '\\' || r->s[r->i + 1] != 'u')
                return fail(r, "lone leading surrogate"), -1;
            r->i += 2;
            if (hex4(r, &lo) || lo < 0xDC00 || lo > 0xDFFF)
                return fail(r, "invalid surrogate pair"), -1;
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
        }
        put_utf8(b, cp);
    }
}

static json_t *read_number(reader *r)
{
    size_t start = r->i;
    int is_float = 0;
    if (r->s[r->i] == '-') r->i++;
    if (r->i >= r->n || r->s[r->i] < '0' || r->s[r->i] > '9') return fail(r, "invalid number");
    if (r->s[r->i] == '0') {
        r->i++;
    } else {
        while (r->i < r->n && r->s[r->i] >= '0' && r->s[r->i] <= '9') r->i++;
    }
    if (r->i < r->n && r->s[r->i] == '.') {
        is_float = 1;
        r->i++;
        if (r->i >= r->n || r->s[r->i] < '0' || r->s[r->i] > '9') return fail(r, "invalid number");
        while (r->i < r->n && r->s[r->i] >= '0' && r->s[r->i] <= '9') r->i++;
    }
    if (r->i < r->n && (r->s[r->i] == 'e' || r->s[r->i] == 'E')) {
        is_float = 1;
        r->i++;
        if (r->i < r->n && (r->s[r->i] == '+' || r->s[r->i] == '-')) r->i++;
        if (r->i >= r->n || r->s[r->i] < '0' || r->s[r->i] > '9') return fail(r, "invalid number");
        while (r->i < r->n && r->s[r->i] >= '0' && r->s[r->i] <= '9') r->i++;
    }
    char text[400];
    size_t len = r->i - start;
    if (len >= sizeof text) {
        /* very long literals: a double is all they can be */
        char *big = malloc(len + 1);
        if (!big) return fail(r, "out of memory");
        memcpy(big, r->s + start, len);
        big[len] = 0;
        double v = strtod(big, NULL);
        free(big);
        if (isinf(v)) return fail(r, "number out of range");
        return json_real(v);
    }
    memcpy(text, r->s + start, len);
    text[len] = 0;
    if (!is_float) {
        errno = 0;
        if (text[0] == '-') {
            long long v = strtoll(text, NULL, 10);
            if (errno == 0) return v == 0 ? json_real(-0.0) : json_integer(v);
        } else {
            unsigned long long v = strtoull(text, NULL, 10);
            if (errno == 0) {
                if (v <= (unsigned long long)INT64_MAX) return json_integer((json_int_t)v);
                char marked[32];
                int m = snprintf(marked, sizeof marked, "\xff%s", text);
                return json_stringn_nocheck(marked, (size_t)m);
            }
        }
    }
    double v = strtod(text, NULL);
    if (isinf(v)) return fail(r, "number out of range");
    return json_real(v);
}

static json_t *read_value(reader *r);

static json_t *read_container(reader *r, int object)
{
    if (++r->depth > r->max_depth) return fail(r, "recursion limit exceeded");
    r->i++;
    json_t *v = object ? json_object() : json_array();
    if (!v) return fail(r, "out of memory");
    skip_ws(r);
    if (r->i < r->n && r->s[r->i] == (object ? '}' : ']')) {
        r->i++;
        r->depth--;
        return v;
    }
    for (;;) {
        skip_ws(r);
        rc_buf key = {0};
        if (object) {
            if (r->i >= r->n || r->s[r->i] != '"') goto bad_key;
            if (read_string(r, &key)) goto fail_free;
            skip_ws(r);
            if (r->i >= r->n || r->s[r->i] != ':') {
                fail(r, "expected ':'");
                goto fail_free;
            }
            r->i++;
        }
        json_t *item = read_value(r);
        if (!item) goto fail_free;
        int rc = object ? json_object_setn_new_nocheck(v, key.s ? key.s : "", key.len, item)
                        : json_array_append_new(v, item);
        free(key.s);
        if (rc) {
            fail(r, "out of memory");
            json_decref(v);
            return NULL;
        }
        skip_ws(r);
        if (r->i < r->n && r->s[r->i] == ',') {
            r->i++;
            continue;
        }
        if (r->i < r->n && r->s[r->i] == (object ? '}' : ']')) {
            r->i++;
            r->depth--;
            return v;
        }
        fail(r, object ? "expected ',' or '}'" : "expected ',' or ']'");
        json_decref(v);
        return NULL;
    bad_key:
        fail(r, "expected a string key");
    fail_free:
        free(key.s);
        json_decref(v);
        return NULL;
    }
}

static json_t *read_value(reader *r)
{
    skip_ws(r);
    if (r->i >= r->n) return fail(r, "EOF while parsing a value");
    char c = r->s[r->i];
    if (c == '{' || c == '[') return read_container(r, c == '{');
    if (c == '"') {
        rc_buf b = {0};
        if (read_string(r, &b)) {
            free(b.s);
            return NULL;
        }
        json_t *v = json_stringn_nocheck(b.s ? b.s : "", b.len);
        free(b.s);
        return v ? v : fail(r, "out of memory");
    }
    if (c == '-' || (c >= '0' && c <= '9')) return read_number(r);
    static const struct {
        const char *word;
        size_t len;
    } words[] = {{"true", 4}, {"false", 5}, {"null", 4}};
    for (int k = 0; k < 3; k++)
        if (r->n - r->i >= words[k].len && memcmp(r->s + r->i, words[k].word, words[k].len) == 0) {
            r->i += words[k].len;
            return k == 0 ? json_true() : k == 1 ? json_false() : json_null();
        }
    return fail(r, "expected a value");
}

json_t *rc_json_parse(const char *s, size_t n, int max_depth, char *msg, size_t msg_size)
{
    reader r = {s, n, 0, 0, max_depth, msg, msg_size};
    msg[0] = 0;
    di_utf8_scan scan = di_utf8_scan_bytes((const uint8_t *)s, n);
    if (scan.state != DI_UTF8_VALID) {
        r.i = scan.valid;
        return fail(&r, "invalid UTF-8");
    }
    json_t *v = read_value(&r);
    if (!v) return NULL;
    skip_ws(&r);
    if (r.i != n) {
        json_decref(v);
        return fail(&r, "trailing characters");
    }
    return v;
}

int rc_json_is_bignum(const json_t *v)
{
    return json_is_string(v) && json_string_length(v) > 1 &&
           (unsigned char)json_string_value(v)[0] == 0xFF;
}
