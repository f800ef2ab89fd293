/* GBNF to a pushdown automaton over bytes: the compiler (grammar.h; the
 * matcher is grammar_matcher.c). The GBNF syntax is llama.cpp's
 * (grammars/README.md): `name ::= alternatives`, "literals", [classes] with
 * ranges and ^, `.`, ( groups ), * + ? {m} {m,} {m,n}, # comments. */
#include "sampler/grammar.h"
#include "sampler/grammar_impl.h"

#include "util/hashmap.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- builder */

typedef struct gvec {
    gelem *e;
    int32_t n, cap;
} gvec;

typedef struct gbuild {
    char **names;
    di_bytes_map ids; /* name -> rule id (a schema's grammar has 10^5 helper rules) */
    gvec *rules;
    uint8_t *defined;
    /* where the errors point: a rule's definition, an undefined rule's first
     * reference, a helper rule's place in the rule it was made for */
    size_t *at;
    int32_t n_rules, cap_rules;
    byteset *sets;
    int32_t n_sets, cap_sets;
    const char *s;
    size_t len, pos;
    char *msg;
    size_t msg_size;
    di_status err;
    /* repetitions of a rule into many copies ({m,n} with n > 64, {m,} with
     * m > 64): refused in finish when the rule can match nothing */
    struct repetition {
        int32_t rule;
        int64_t min, max;
        size_t pos; /* the quantifier, for the error */
    } * reps;
    size_t n_reps, cap_reps;
} gbuild;

static void fail(gbuild *b, di_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void fail(gbuild *b, di_status st, const char *fmt, ...)
{
    if (b->err) return;
    b->err = st;
    if (!b->msg || !b->msg_size) return;
    size_t line = 1, col = 1;
    for (size_t i = 0; i < b->pos && i < b->len; i++) {
        if (b->s[i] == '\n') {
            line++;
            col = 1;
        } else
            col++;
    }
    char what[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    if (st == DI_ERR_INVALID_REQUEST && b->s)
        snprintf(b->msg, b->msg_size, "grammar %zu:%zu: %s", line, col, what);
    else
        snprintf(b->msg, b->msg_size, "%s", what);
}

static int vpush(gbuild *b, gvec *v, int32_t type, int32_t value)
{
    if (v->n == v->cap) {
        int32_t cap = v->cap ? 2 * v->cap : 8;
        gelem *e = realloc(v->e, (size_t)cap * sizeof *e);
        if (!e) return fail(b, DI_ERR_OUT_OF_MEMORY, "out of memory for the grammar"), -1;
        v->e = e;
        v->cap = cap;
    }
    v->e[v->n++] = (gelem){type, value};
    return 0;
}

/* The id of rule `name` (created undefined when new), or -1. */
static int32_t rule_id(gbuild *b, const char *name, size_t n)
{
    if (b->ids.capacity == 0 && di_bytes_map_init(&b->ids, 64) != 0)
        return fail(b, DI_ERR_OUT_OF_MEMORY, "out of memory for the grammar"), -1;
    int32_t known = di_bytes_map_get(&b->ids, name, n);
    if (known >= 0) return known;
    enum { MAX_RULES = 1 << 20 }; /* ~0.7 GB of grammar: a work limit, not a size anyone needs */
    if (b->n_rules >= MAX_RULES)
        return fail(b, DI_ERR_INVALID_REQUEST,
                    "more than %d rules (bounded repetitions, up to 10000 each, nested into "
                    "too many: lower maxItems, maxLength or the {m,n} counts)",
                    (int)MAX_RULES),
               -1;
    if (di_bytes_map_put(&b->ids, name, n, b->n_rules) < 0)
        return fail(b, DI_ERR_OUT_OF_MEMORY, "out of memory for the grammar"), -1;
    if (b->n_rules == b->cap_rules) {
        int32_t cap = b->cap_rules ? 2 * b->cap_rules : 32;
        char **names = realloc(b->names, (size_t)cap * sizeof *names);
        if (names) b->names = names;
        gvec *rules = realloc(b->rules, (size_t)cap * sizeof *rules);
        if (rules) b->rules = rules;
        uint8_t *def = realloc(b->defined, (size_t)cap);
        if (def) b->defined = def;
        size_t *at = realloc(b->at, (size_t)cap * sizeof *at);
        if (at) b->at = at;
        if (!names || !rules || !def || !at)
            return fail(b, DI_ERR_OUT_OF_MEMORY, "out of memory for the grammar"), -1;
        b->cap_rules = cap;
    }
    char *copy = malloc(n + 1);
    if (!copy) return fail(b, DI_ERR_OUT_OF_MEMORY, "out of memory for the grammar"), -1;
    memcpy(copy, name, n);
    copy[n] = 0;
    b->names[b->n_rules] = copy;
    b->rules[b->n_rules] = (gvec){0};
    b->defined[b->n_rules] = 0;
    b->at[b->n_rules] = b->pos;
    return b->n_rules++;
}

/* A new helper rule named after its parent (parent_N), defined. */
static int32_t helper_rule(gbuild *b, int32_t parent)
{
    char name[160];
    snprintf(name, sizeof name, "%.120s_%d", b->names[parent], (int)b->n_rules);
    int32_t r = rule_id(b, name, strlen(name));
    if (r >= 0) b->defined[r] = 1;
    return r;
}

static int32_t set_id(gbuild *b, const byteset *set)
{
    for (int32_t i = 0; i < b->n_sets; i++)
        if (memcmp(&b->sets[i], set, sizeof *set) == 0) return i;
    if (b->n_sets == b->cap_sets) {
        int32_t cap = b->cap_sets ? 2 * b->cap_sets : 64;
        byteset *s = realloc(b->sets, (size_t)cap * sizeof *s);
        if (!s) return fail(b, DI_ERR_OUT_OF_MEMORY, "out of memory for the grammar"), -1;
        b->sets = s;
        b->cap_sets = cap;
    }
    b->sets[b->n_sets] = *set;
    return b->n_sets++;
}

static void set_range(byteset *s, unsigned lo, unsigned hi)
{
    for (unsigned c = lo; c <= hi; c++) s->w[c >> 5] |= 1u << (c & 31);
}

static int push_byte_range(gbuild *b, gvec *v, unsigned lo, unsigned hi)
{
    byteset s = {{0}};
    set_range(&s, lo, hi);
    int32_t id = set_id(b, &s);
    return id < 0 ? -1 : vpush(b, v, GE_BYTES, id);
}

/* Code point ranges [lo, hi], sorted and merged. */
typedef struct cpranges {
    uint32_t lo[128], hi[128];
    int n;
} cpranges;

static int cmp_u32pair(const void *a, const void *b)
{
    const uint32_t *x = a, *y = b;
    return x[0] < y[0] ? -1 : x[0] > y[0];
}

static void cp_normalise(cpranges *r, int negate)
{
    uint32_t pairs[128][2];
    for (int i = 0; i < r->n; i++) pairs[i][0] = r->lo[i], pairs[i][1] = r->hi[i];
    qsort(pairs, (size_t)r->n, sizeof pairs[0], cmp_u32pair);
    int m = 0;
    for (int i = 0; i < r->n; i++) {
        if (m && pairs[i][0] <= r->hi[m - 1] + 1) {
            if (pairs[i][1] > r->hi[m - 1]) r->hi[m - 1] = pairs[i][1];
        } else
            r->lo[m] = pairs[i][0], r->hi[m] = pairs[i][1], m++;
    }
    r->n = m;
    if (!negate) return;
    cpranges n = {.n = 0};
    uint32_t next = 0;
    for (int i = 0; i < r->n; i++) {
        if (r->lo[i] > next) n.lo[n.n] = next, n.hi[n.n++] = r->lo[i] - 1;
        next = r->hi[i] + 1;
    }
    if (next <= 0x10FFFF) n.lo[n.n] = next, n.hi[n.n++] = 0x10FFFF;
    *r = n;
}

static int utf8_encode(uint32_t c, uint8_t *o)
{
    if (c < 0x80) return o[0] = (uint8_t)c, 1;
    if (c < 0x800) return o[0] = (uint8_t)(0xC0 | c >> 6), o[1] = (uint8_t)(0x80 | (c & 63)), 2;
    if (c < 0x10000)
        return o[0] = (uint8_t)(0xE0 | c >> 12), o[1] = (uint8_t)(0x80 | ((c >> 6) & 63)),
               o[2] = (uint8_t)(0x80 | (c & 63)), 3;
    o[0] = (uint8_t)(0xF0 | c >> 18);
    o[1] = (uint8_t)(0x80 | ((c >> 12) & 63));
    o[2] = (uint8_t)(0x80 | ((c >> 6) & 63));
    o[3] = (uint8_t)(0x80 | (c & 63));
    return 4;
}

/* Add to rule `into` one alternative per UTF-8 byte-sequence range of
 * [lo, hi] (the split of Rust regex-syntax's Utf8Sequences). */
static int utf8_alts(gbuild *b, int32_t into, uint32_t lo, uint32_t hi)
{
    static const uint32_t bounds[] = {0x7F, 0x7FF, 0xFFFF};
    for (int i = 0; i < 3; i++)
        if (lo <= bounds[i] && hi > bounds[i])
            return utf8_alts(b, into, lo, bounds[i]) || utf8_alts(b, into, bounds[i] + 1, hi) ? -1
                                                                                              : 0;
    if (hi < 0x80) {
        gvec *v = &b->rules[into];
        if (v->n && vpush(b, v, GE_ALT, 0)) return -1;
        return push_byte_range(b, &b->rules[into], lo, hi);
    }
    for (int i = 1; i < 4; i++) {
        uint32_t m = (1u << (6 * i)) - 1;
        if ((lo & ~m) != (hi & ~m)) {
            if ((lo & m) != 0)
                return utf8_alts(b, into, lo, lo | m) || utf8_alts(b, into, (lo | m) + 1, hi) ? -1
                                                                                              : 0;
            if ((hi & m) != m)
                return utf8_alts(b, into, lo, (hi & ~m) - 1) || utf8_alts(b, into, hi & ~m, hi) ? -1
                                                                                                : 0;
        }
    }
    uint8_t a[4] = {0}, z[4] = {0};
    int n = utf8_encode(lo, a);
    utf8_encode(hi, z);
    if (b->rules[into].n && vpush(b, &b->rules[into], GE_ALT, 0)) return -1;
    for (int i = 0; i < n; i++)
        if (push_byte_range(b, &b->rules[into], a[i], z[i])) return -1;
    return 0;
}

/* Emit the code point set r into rule parent: one byte set when it is ASCII only, else
 * a reference to a helper rule of its UTF-8 sequences. */
static int emit_cpranges(gbuild *b, const cpranges *r, int32_t parent)
{
    if (r->n == 0) return fail(b, DI_ERR_INVALID_REQUEST, "empty character class"), -1;
    if (r->hi[r->n - 1] < 0x80) {
        byteset s = {{0}};
        for (int i = 0; i < r->n; i++) set_range(&s, r->lo[i], r->hi[i]);
        int32_t id = set_id(b, &s);
        return id < 0 ? -1 : vpush(b, &b->rules[parent], GE_BYTES, id);
    }
    int32_t h = helper_rule(b, parent); /* (may move b->rules) */
    if (h < 0) return -1;
    for (int i = 0; i < r->n; i++)
        if (utf8_alts(b, h, r->lo[i], r->hi[i])) return -1;
    return vpush(b, &b->rules[parent], GE_REF, h);
}

/* ----------------------------------------------------------------- parser */

static int at_end(gbuild *b)
{
    return b->pos >= b->len;
}

static int peek(gbuild *b)
{
    return b->pos < b->len ? (unsigned char)b->s[b->pos] : -1;
}

static void skip_space(gbuild *b, int newline_ok)
{
    while (!at_end(b)) {
        int c = peek(b);
        if (c == '#') {
            while (!at_end(b) && peek(b) != '\n') b->pos++;
        } else if (c == ' ' || c == '\t' || (newline_ok && (c == '\n' || c == '\r')))
            b->pos++;
        else
            break;
    }
}

static int is_name_char(int c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
           c == '_';
}

static int hexval(int c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* One code point of a literal or class (escapes decoded), or -1. */
static int64_t parse_char(gbuild *b)
{
    if (at_end(b)) return fail(b, DI_ERR_INVALID_REQUEST, "unexpected end of input"), -1;
    unsigned char c = (unsigned char)b->s[b->pos];
    if (c == '\\') {
        b->pos++;
        int e = peek(b);
        b->pos++;
        int nhex = 0;
        switch (e) {
        case 'n': return '\n';
        case 'r': return '\r';
        case 't': return '\t';
        case '0': return 0;
        case '\\':
        case '"':
        case '[':
        case ']':
        case '-':
        case '^':
        case '/':
        case '\'':
        case '.':
        case '(':
        case ')':
        case '*':
        case '+':
        case '?':
        case '{':
        case '}':
        case '|':
        case '$': return e;
        case 'x': nhex = 2; break;
        case 'u': nhex = 4; break;
        case 'U': nhex = 8; break;
        default:
            b->pos--;
            return fail(b, DI_ERR_INVALID_REQUEST, "unknown escape '\\%c'", e > 31 ? e : '?'), -1;
        }
        uint32_t v = 0;
        for (int i = 0; i < nhex; i++) {
            int h = hexval(peek(b));
            if (h < 0) return fail(b, DI_ERR_INVALID_REQUEST, "expected %d hex digits", nhex), -1;
            v = v * 16 + (uint32_t)h;
            b->pos++;
        }
        if (v > 0x10FFFF) return fail(b, DI_ERR_INVALID_REQUEST, "code point out of range"), -1;
        return v;
    }
    /* one UTF-8 character */
    int n = c < 0x80 ? 1 : c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 0;
    if (n == 0 || b->pos + (size_t)n > b->len)
        return fail(b, DI_ERR_INVALID_REQUEST, "invalid UTF-8"), -1;
    uint32_t v = n == 1 ? c : (uint32_t)(c & (0x7F >> n));
    for (int i = 1; i < n; i++) {
        unsigned char d = (unsigned char)b->s[b->pos + (size_t)i];
        if ((d & 0xC0) != 0x80) return fail(b, DI_ERR_INVALID_REQUEST, "invalid UTF-8"), -1;
        v = (v << 6) | (d & 63);
    }
    b->pos += (size_t)n;
    return v;
}

static int parse_alternates(gbuild *b, int32_t rule, int nested, int depth);

/* Keep a repetition of rule x into more than REPEAT_NULLABLE_MAX copies for
 * finish's check. */
enum { REPEAT_NULLABLE_MAX = 64 };
static int note_repetition(gbuild *b, gelem x, int64_t min, int64_t max, size_t at)
{
    if (x.type != GE_REF || (max < 0 ? min : max) <= REPEAT_NULLABLE_MAX) return 0;
    if (b->n_reps == b->cap_reps) {
        size_t cap = b->cap_reps ? 2 * b->cap_reps : 16;
        struct repetition *r = realloc(b->reps, cap * sizeof *r);
        if (!r) return fail(b, DI_ERR_OUT_OF_MEMORY, "out of memory for the grammar"), -1;
        b->reps = r;
        b->cap_reps = cap;
    }
    b->reps[b->n_reps++] = (struct repetition){x.value, min, max, at};
    return 0;
}

/* Move v->e[start, n) into a rule of its own unless it is one element: the
 * element that stands for it is returned in *x. */
static int subsequence(gbuild *b, gvec *v, int32_t start, int32_t parent, gelem *x)
{
    if (v->n - start == 1) {
        *x = v->e[start];
    } else {
        int32_t h = helper_rule(b, parent);
        if (h < 0) return -1;
        v = &b->rules[parent]; /* (helper_rule may move the rules) */
        for (int32_t i = start; i < v->n; i++)
            if (vpush(b, &b->rules[h], v->e[i].type, v->e[i].value)) return -1;
        *x = (gelem){GE_REF, h};
    }
    b->rules[parent].n = start;
    return 0;
}

/* Append to rule `parent` the repetition of x, min to max times (max -1:
 * unbounded), as right-recursive helper rules. */
static int repeat(gbuild *b, int32_t parent, gelem x, int64_t min, int64_t max)
{
    for (int64_t i = 0; i < min; i++)
        if (vpush(b, &b->rules[parent], x.type, x.value)) return -1;
    if (max == min) return 0;
    if (max < 0) { /* star ::= x star | "" */
        int32_t s = helper_rule(b, parent);
        if (s < 0 || vpush(b, &b->rules[s], x.type, x.value) || vpush(b, &b->rules[s], GE_REF, s) ||
            vpush(b, &b->rules[s], GE_ALT, 0))
            return -1;
        return vpush(b, &b->rules[parent], GE_REF, s);
    }
    int32_t t = -1; /* opt_k ::= x opt_(k-1) | "" */
    for (int64_t i = min; i < max; i++) {
        int32_t o = helper_rule(b, parent);
        if (o < 0 || vpush(b, &b->rules[o], x.type, x.value)) return -1;
        if (t >= 0 && vpush(b, &b->rules[o], GE_REF, t)) return -1;
        if (vpush(b, &b->rules[o], GE_ALT, 0)) return -1;
        t = o;
    }
    return vpush(b, &b->rules[parent], GE_REF, t);
}

static int parse_uint(gbuild *b, int64_t *v)
{
    if (peek(b) < '0' || peek(b) > '9')
        return fail(b, DI_ERR_INVALID_REQUEST, "expected a number in {m,n}"), -1;
    *v = 0;
    while (peek(b) >= '0' && peek(b) <= '9') {
        *v = *v * 10 + (peek(b) - '0');
        if (*v > 10000) return fail(b, DI_ERR_INVALID_REQUEST, "repetition count above 10000"), -1;
        b->pos++;
    }
    return 0;
}

static int parse_sequence(gbuild *b, int32_t rule, int nested, int depth)
{
    for (;;) {
        skip_space(b, nested);
        int c = peek(b);
        int32_t start = b->rules[rule].n;
        if (c == '"') {
            b->pos++;
            while (peek(b) != '"') {
                if (at_end(b)) return fail(b, DI_ERR_INVALID_REQUEST, "unterminated string"), -1;
                int64_t cp = parse_char(b);
                if (cp < 0) return -1;
                uint8_t u[4];
                int n = utf8_encode((uint32_t)cp, u);
                for (int i = 0; i < n; i++)
                    if (push_byte_range(b, &b->rules[rule], u[i], u[i])) return -1;
            }
            b->pos++;
            if (b->rules[rule].n == start) continue; /* "" matches nothing */
        } else if (c == '[') {
            b->pos++;
            int negate = 0;
            if (peek(b) == '^') negate = 1, b->pos++;
            cpranges r = {.n = 0};
            while (peek(b) != ']') {
                if (at_end(b)) return fail(b, DI_ERR_INVALID_REQUEST, "unterminated class"), -1;
                int64_t lo = parse_char(b), hi = lo;
                if (lo < 0) return -1;
                if (peek(b) == '-' && b->pos + 1 < b->len && b->s[b->pos + 1] != ']') {
                    b->pos++;
                    if ((hi = parse_char(b)) < 0) return -1;
                    if (hi < lo)
                        return fail(b, DI_ERR_INVALID_REQUEST, "class range out of order"), -1;
                }
                if (r.n == 128)
                    return fail(b, DI_ERR_INVALID_REQUEST, "more than 128 class ranges"), -1;
                r.lo[r.n] = (uint32_t)lo, r.hi[r.n++] = (uint32_t)hi;
            }
            b->pos++;
            cp_normalise(&r, negate);
            if (emit_cpranges(b, &r, rule)) return -1;
        } else if (c == '.') {
            b->pos++;
            cpranges r = {.lo = {0}, .hi = {0x10FFFF}, .n = 1};
            if (emit_cpranges(b, &r, rule)) return -1;
        } else if (c == '(') {
            b->pos++;
            if (depth > 200) return fail(b, DI_ERR_INVALID_REQUEST, "groups nested too deep"), -1;
            int32_t h = helper_rule(b, rule);
            if (h < 0) return -1;
            skip_space(b, 1);
            if (parse_alternates(b, h, 1, depth + 1)) return -1;
            skip_space(b, 1);
            if (peek(b) != ')') return fail(b, DI_ERR_INVALID_REQUEST, "expected ')'"), -1;
            b->pos++;
            if (vpush(b, &b->rules[rule], GE_REF, h)) return -1;
        } else if (c >= 0 && is_name_char(c)) {
            size_t s = b->pos;
            while (is_name_char(peek(b))) b->pos++;
            size_t e = b->pos;
            skip_space(b, nested);
            if (b->pos + 3 <= b->len && memcmp(b->s + b->pos, "::=", 3) == 0) {
                b->pos = s; /* the next rule's name: this rule ended at a newline */
                return 0;
            }
            b->pos = s; /* (a new rule is placed at its first reference) */
            int32_t r = rule_id(b, b->s + s, e - s);
            b->pos = e;
            if (r < 0 || vpush(b, &b->rules[rule], GE_REF, r)) return -1;
        } else {
            return 0;
        }
        /* postfix operators */
        for (;;) {
            skip_space(b, nested);
            c = peek(b);
            int64_t min, max;
            size_t at = b->pos;
            if (c == '*')
                min = 0, max = -1, b->pos++;
            else if (c == '+')
                min = 1, max = -1, b->pos++;
            else if (c == '?')
                min = 0, max = 1, b->pos++;
            else if (c == '{') {
                b->pos++;
                skip_space(b, 0);
                if (parse_uint(b, &min)) return -1;
                skip_space(b, 0);
                max = min;
                if (peek(b) == ',') {
                    b->pos++;
                    skip_space(b, 0);
                    max = -1;
                    if (peek(b) != '}' && parse_uint(b, &max)) return -1;
                    skip_space(b, 0);
                }
                if (peek(b) != '}') return fail(b, DI_ERR_INVALID_REQUEST, "expected '}'"), -1;
                b->pos++;
                if (max >= 0 && max < min)
                    return fail(b, DI_ERR_INVALID_REQUEST, "repetition {%lld,%lld}: max below min",
                                (long long)min, (long long)max),
                           -1;
            } else
                break;
            gelem x;
            if (subsequence(b, &b->rules[rule], start, rule, &x) || repeat(b, rule, x, min, max) ||
                note_repetition(b, x, min, max, at))
                return -1;
        }
    }
}

static int parse_alternates(gbuild *b, int32_t rule, int nested, int depth)
{
    if (parse_sequence(b, rule, nested, depth)) return -1;
    for (;;) {
        skip_space(b, nested);
        if (peek(b) != '|') return 0;
        b->pos++;
        if (vpush(b, &b->rules[rule], GE_ALT, 0)) return -1;
        skip_space(b, 1);
        if (parse_sequence(b, rule, nested, depth)) return -1;
    }
}

static void build_free(gbuild *b)
{
    for (int32_t i = 0; i < b->n_rules; i++) {
        free(b->names[i]);
        free(b->rules[i].e);
    }
    free(b->names);
    free(b->rules);
    free(b->defined);
    free(b->at);
    free(b->sets);
    free(b->reps);
    di_bytes_map_free(&b->ids);
}

/* Left recursion makes the stack expansion loop: a rule reaches itself
 * through the first elements of its alternatives (past nullable rules).
 * Returns a rule on such a cycle reachable from r (the one the search came
 * back to), or -1. */
static int32_t left_recursive(const grammar *g, const uint8_t *nullable, int32_t r, uint8_t *mark)
{
    if (mark[r] == 1) return r;
    if (mark[r] == 2) return -1;
    mark[r] = 1;
    for (int32_t a = g->alt_off[r]; a < g->alt_off[r + 1]; a++)
        for (int32_t p = g->rule_alts[a]; g->elems[p].type >= GE_REF; p++) {
            if (g->elems[p].type == GE_BYTES) break;
            int32_t cycle = left_recursive(g, nullable, g->elems[p].value, mark);
            if (cycle >= 0) return cycle;
            if (!nullable[g->elems[p].value]) break;
        }
    mark[r] = 2;
    return -1;
}

static di_status finish(gbuild *b, grammar **out)
{
    grammar *g = NULL;
    uint8_t *nullable = NULL, *mark = NULL;
    int32_t root = -1;
    for (int32_t i = 0; i < b->n_rules; i++) {
        if (!b->defined[i]) { /* named first by a reference: the error points at it */
            b->pos = b->at[i];
            fail(b, DI_ERR_INVALID_REQUEST, "undefined rule '%s'", b->names[i]);
            goto done;
        }
        if (strcmp(b->names[i], "root") == 0) root = i;
    }
    if (root < 0) {
        b->pos = 0;
        fail(b, DI_ERR_INVALID_REQUEST, "no rule named 'root' (the start rule)");
        goto done;
    }
    g = calloc(1, sizeof *g);
    if (!g) goto oom;
    int32_t n_elems = 0, n_alts = 0;
    for (int32_t i = 0; i < b->n_rules; i++) {
        n_elems += b->rules[i].n + 1;
        n_alts += 1;
        for (int32_t j = 0; j < b->rules[i].n; j++) n_alts += b->rules[i].e[j].type == GE_ALT;
    }
    g->elems = calloc((size_t)n_elems, sizeof *g->elems); /* zero: GE_END */
    g->rule_alts = malloc((size_t)n_alts * sizeof *g->rule_alts);
    g->alt_off = malloc((size_t)(b->n_rules + 1) * sizeof *g->alt_off);
    g->sets = malloc((size_t)(b->n_sets ? b->n_sets : 1) * sizeof *g->sets);
    nullable = calloc((size_t)b->n_rules, 1);
    mark = calloc((size_t)b->n_rules, 1);
    if (!g->elems || !g->rule_alts || !g->alt_off || !g->sets || !nullable || !mark) goto oom;
    if (b->n_sets) /* (a grammar of empty strings has no sets: b->sets is NULL) */
        memcpy(g->sets, b->sets, (size_t)b->n_sets * sizeof *g->sets);
    g->n_sets = b->n_sets;
    g->n_rules = b->n_rules;
    g->root = root;
    int32_t p = 0, a = 0;
    for (int32_t i = 0; i < b->n_rules; i++) {
        g->alt_off[i] = a;
        g->rule_alts[a++] = p;
        for (int32_t j = 0; j < b->rules[i].n; j++) {
            g->elems[p++] = b->rules[i].e[j];
            if (b->rules[i].e[j].type == GE_ALT) g->rule_alts[a++] = p;
        }
        g->elems[p++] = (gelem){GE_END, 0};
    }
    g->alt_off[b->n_rules] = a;
    g->n_elems = p;
    for (int changed = 1; changed;) { /* nullable rules: a fixpoint */
        changed = 0;
        for (int32_t r = 0; r < g->n_rules; r++) {
            if (nullable[r]) continue;
            for (int32_t k = g->alt_off[r]; k < g->alt_off[r + 1] && !nullable[r]; k++) {
                int32_t q = g->rule_alts[k];
                while (g->elems[q].type == GE_REF && nullable[g->elems[q].value]) q++;
                if (g->elems[q].type <= GE_ALT) nullable[r] = 1, changed = 1;
            }
        }
    }
    /* Many copies of something that can match nothing: every split of the
     * output between the copies is a parse of its own, so the matcher's
     * stacks multiply ((a{0,1000}){0,1000} has about a million after a
     * thousand a's) — refused, as left recursion is; a few copies ("a"?){3}
     * are harmless. */
    for (size_t i = 0; i < b->n_reps; i++)
        if (nullable[b->reps[i].rule]) {
            const struct repetition *q = &b->reps[i];
            b->pos = q->pos;
            char bound[64];
            if (q->max < 0)
                snprintf(bound, sizeof bound, "{%lld,}", (long long)q->min);
            else
                snprintf(bound, sizeof bound, "{%lld,%lld}", (long long)q->min, (long long)q->max);
            fail(b, DI_ERR_INVALID_REQUEST,
                 "repetition %s of something that can match nothing: each way of sharing the "
                 "text between the copies is a separate parse (repeat something that cannot "
                 "match nothing, e.g. (x{0,9}){0,9} as x{0,81})",
                 bound);
            grammar_free(g);
            g = NULL;
            goto done;
        }
    for (int32_t r = 0; r < g->n_rules; r++) {
        int32_t cycle = left_recursive(g, nullable, r, mark);
        if (cycle >= 0) {
            b->pos = b->at[cycle];
            fail(b, DI_ERR_INVALID_REQUEST,
                 "rule '%s' is left-recursive (it can reach itself before any character; "
                 "rewrite it right-recursively)",
                 b->names[cycle]);
            grammar_free(g);
            g = NULL;
            goto done;
        }
    }
    *out = g;
    g = NULL;
    goto done;
oom:
    fail(b, DI_ERR_OUT_OF_MEMORY, "out of memory for the grammar");
    grammar_free(g);
done:
    free(nullable);
    free(mark);
    build_free(b);
    return b->err;
}

di_status grammar_compile_gbnf(const char *text, size_t len, grammar **out, char *msg,
                               size_t msg_size)
{
    gbuild b = {.s = text, .len = len, .msg = msg, .msg_size = msg_size};
    *out = NULL;
    if (msg && msg_size) msg[0] = 0;
    if (!text) {
        fail(&b, DI_ERR_INVALID_REQUEST, "grammar: NULL");
        return b.err;
    }
    skip_space(&b, 1);
    while (!at_end(&b) && !b.err) {
        size_t s = b.pos;
        while (is_name_char(peek(&b))) b.pos++;
        if (b.pos == s) {
            fail(&b, DI_ERR_INVALID_REQUEST, "expected a rule name");
            break;
        }
        int32_t r = rule_id(&b, text + s, b.pos - s);
        if (r < 0) break;
        if (b.defined[r]) {
            b.pos = s;
            fail(&b, DI_ERR_INVALID_REQUEST, "rule '%s' defined twice", b.names[r]);
            break;
        }
        b.defined[r] = 1;
        b.at[r] = s;
        skip_space(&b, 0);
        if (b.pos + 3 > len || memcmp(text + b.pos, "::=", 3) != 0) {
            fail(&b, DI_ERR_INVALID_REQUEST, "rule '%s': expected '::='", b.names[r]);
            break;
        }
        b.pos += 3;
        skip_space(&b, 1);
        if (parse_alternates(&b, r, 0, 0)) break;
        skip_space(&b, 0);
        int c = peek(&b);
        if (c != -1 && c != '\n' && c != '\r' && !is_name_char(c)) {
            fail(&b, DI_ERR_INVALID_REQUEST, "rule '%s': unexpected '%c'", b.names[r],
                 c > 31 && c < 127 ? c : '?');
            break;
        }
        skip_space(&b, 1);
    }
    if (b.err) {
        build_free(&b);
        return b.err;
    }
    return finish(&b, out);
}

di_status grammar_compile_regex(const char *pattern, size_t len, grammar **out, char *msg,
                                size_t msg_size)
{
    *out = NULL;
    char *text = grammar_regex_to_gbnf(pattern, len, "root", 0, msg, msg_size);
    if (!text)
        return msg && strstr(msg, "out of memory") ? DI_ERR_OUT_OF_MEMORY : DI_ERR_INVALID_REQUEST;
    di_status st = grammar_compile_gbnf(text, strlen(text), out, msg, msg_size);
    free(text);
    return st;
}

di_status grammar_compile_json_schema(const char *json, size_t len, grammar **out, char *msg,
                                      size_t msg_size)
{
    *out = NULL;
    char *text = grammar_json_schema_to_gbnf(json, len, msg, msg_size);
    if (!text)
        return msg && strstr(msg, "out of memory") ? DI_ERR_OUT_OF_MEMORY : DI_ERR_INVALID_REQUEST;
    di_status st = grammar_compile_gbnf(text, strlen(text), out, msg, msg_size);
    free(text);
    return st;
}

void grammar_free(grammar *g)
{
    if (!g) return;
    free(g->elems);
    free(g->rule_alts);
    free(g->alt_off);
    free(g->sets);
    free(g);
}
