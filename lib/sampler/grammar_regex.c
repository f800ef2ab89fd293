/* Regular expressions to GBNF text (grammar.h, grammar_regex_to_gbnf).
 * The subset (docs/grammar.md): literals and escapes (\n \t \r \f \v \0
 * \xHH \uHHHH, an escaped metacharacter), `.` (any character but \n),
 * classes [...] with ranges and ^, \d \w \s \D \W \S (in and out of
 * classes), groups ( ) and (?: ), alternation |, quantifiers * + ? {m}
 * {m,} {m,n} (a lazy ? after one is accepted and changes nothing: a mask is
 * the same for both). ^ at the start and $ at the end are implied (the whole
 * output matches); elsewhere, lookarounds and backreferences are errors.
 *
 * In json mode (a JSON Schema `pattern`, the text between a string's quotes)
 * the pattern is matched by the decoded string, so what is generated must be
 * its JSON form: a literal '"', '\' or control character is written as its
 * escape (\" \\ \n \u001F …); classes, shorthands and `.` keep those
 * characters out (they would need the escapes too: a subset of the
 * pattern's strings, all of them valid JSON). */
#include "sampler/grammar.h"
#include "sampler/grammar_text.h"

typedef struct rx {
    const char *s;
    size_t len, pos;
    int json;
    gtext out;
    char *msg;
    size_t msg_size;
    int err;
} rx;

static void rx_fail(rx *r, const char *what)
{
    if (r->err) return;
    r->err = 1;
    if (r->msg && r->msg_size)
        snprintf(r->msg, r->msg_size, "regex at offset %zu: %s", r->pos, what);
}

static int rpeek(rx *r)
{
    return r->pos < r->len ? (unsigned char)r->s[r->pos] : -1;
}

static int rhex(int c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* A class shorthand's members (without brackets), or NULL; \s is the space
 * alone in json mode. */
static const char *shorthand(int c, int json, int *negated)
{
    *negated = c == 'D' || c == 'W' || c == 'S';
    if (json && c == 's') return " ";
    switch (c) {
    case 'd':
    case 'D': return "0-9";
    case 'w':
    case 'W': return "a-zA-Z0-9_";
    case 's':
    case 'S': return " \\t\\n\\r\\x0C\\x0B";
    default: return NULL;
    }
}

/* A character a JSON string holds only escaped: '"', '\\', controls. */
static int json_excluded(long code)
{
    return code >= 0 && (code < 0x20 || code == '"' || code == '\\');
}

/* The GBNF literal of a json_excluded character's JSON escape: a backslash
 * (itself escaped in GBNF), then the escape's letters. */
static void json_escape_literal(gtext *t, long code)
{
    const char *e = code == '"'    ? "\\\""
                    : code == '\\' ? "\\\\"
                    : code == '\n' ? "n"
                    : code == '\t' ? "t"
                    : code == '\r' ? "r"
                    : code == '\b' ? "b"
                    : code == '\f' ? "f"
                                   : NULL;
    if (e)
        gt_printf(t, "\"\\\\%s\"", e);
    else
        gt_printf(t, "\"\\\\u%04lX\"", (unsigned long)code);
}

/* What json mode keeps out of negated classes and `.`. */
#define JSON_EXCLUDED "\\x22\\x5C\\x00-\\x1F"

/* One code point (escapes decoded) written as a GBNF char; returns 0, or -1.
 * Sets *code to the code point for range checks. */
static int rx_char(rx *r, long *code)
{
    int c = rpeek(r);
    if (c == '\\') {
        r->pos++;
        int e = rpeek(r);
        r->pos++;
        long v;
        switch (e) {
        case 'n': v = '\n'; break;
        case 't': v = '\t'; break;
        case 'r': v = '\r'; break;
        case 'f': v = '\f'; break;
        case 'v': v = '\v'; break;
        case '0': v = 0; break;
        case 'x':
        case 'u': {
            int n = e == 'x' ? 2 : 4;
            v = 0;
            for (int i = 0; i < n; i++) {
                int h = rhex(rpeek(r));
                if (h < 0) return rx_fail(r, "expected hex digits"), -1;
                v = v * 16 + h;
                r->pos++;
            }
            break;
        }
        default:
            if (e < 0 || (e >= 'a' && e <= 'z') || (e >= 'A' && e <= 'Z') ||
                (e >= '0' && e <= '9')) {
                r->pos--;
                return rx_fail(r, "unsupported escape"), -1;
            }
            v = e;
        }
        *code = v;
        if (v < 0x80)
            gt_char(&r->out, (unsigned char)v);
        else
            gt_printf(&r->out, "\\u%04lX", (unsigned long)v);
        return 0;
    }
    if (c < 0) return rx_fail(r, "unexpected end"), -1;
    unsigned char u = (unsigned char)c;
    int n = u < 0x80 ? 1 : u >= 0xF0 ? 4 : u >= 0xE0 ? 3 : u >= 0xC0 ? 2 : 1;
    if (r->pos + (size_t)n > r->len) return rx_fail(r, "invalid UTF-8"), -1;
    long cp = n == 1 ? u : n == 2 ? (u & 0x1F) : n == 3 ? (u & 0x0F) : (u & 0x07);
    for (int k = 1; k < n; k++) cp = cp << 6 | ((unsigned char)r->s[r->pos + (size_t)k] & 0x3F);
    *code = cp;
    if (n == 1)
        gt_char(&r->out, u);
    else
        gt_add(&r->out, r->s + r->pos, (size_t)n);
    r->pos += (size_t)n;
    return 0;
}

static int rx_alt(rx *r, int depth);

static int rx_class(rx *r)
{
    r->pos++; /* [ */
    int neg = 0;
    if (rpeek(r) == '^') neg = 1, r->pos++;
    gt_puts(&r->out, neg ? "[^" : "[");
    if (neg && r->json) gt_puts(&r->out, JSON_EXCLUDED);
    int first = 1;
    while (rpeek(r) != ']' || first) {
        first = 0;
        if (rpeek(r) < 0) return rx_fail(r, "unterminated class"), -1;
        if (rpeek(r) == '\\' && r->pos + 1 < r->len) {
            int sneg;
            const char *sh = shorthand((unsigned char)r->s[r->pos + 1], r->json, &sneg);
            if (sh) {
                if (sneg) return rx_fail(r, "\\D, \\W or \\S inside a class"), -1;
                gt_puts(&r->out, sh);
                r->pos += 2;
                continue;
            }
        }
        long lo, hi;
        size_t item = r->out.n, at_lo = r->pos, hi_text = 0;
        if (rx_char(r, &lo)) return -1;
        hi = lo;
        if (rpeek(r) == '-' && r->pos + 1 < r->len && r->s[r->pos + 1] != ']') {
            r->pos++;
            gt_puts(&r->out, "-");
            hi_text = r->out.n;
            if (rx_char(r, &hi)) return -1;
            if (hi < lo) {
                r->pos = at_lo;
                return rx_fail(r, "class range out of order"), -1;
            }
        }
        if (r->json && !neg && lo < 0x80 &&
            (lo < 0x20 || (lo <= '"' && hi >= '"') || (lo <= '\\' && hi >= '\\'))) {
            /* keep json_excluded characters out: the range's other pieces */
            char hi_s[16] = "";
            if (hi >= 0x80 && r->out.n - hi_text < sizeof hi_s)
                memcpy(hi_s, r->out.s + hi_text, r->out.n - hi_text);
            r->out.n = item;
            static const long cut[][2] = {{0x20, 0x21}, {0x23, 0x5B}, {0x5D, 0x7F}};
            for (size_t k = 0; k < 3; k++) {
                long a = lo > cut[k][0] ? lo : cut[k][0], z = hi < cut[k][1] ? hi : cut[k][1];
                if (a <= z) gt_printf(&r->out, "\\x%02lX-\\x%02lX", a, z);
            }
            if (hi >= 0x80) gt_printf(&r->out, "\\u0080-%s", hi_s);
        }
    }
    r->pos++;
    if (r->out.s && r->out.s[r->out.n - 1] == '[') /* json mode left nothing */
        return rx_fail(r, "a class of only characters a JSON string must escape ('\"', '\\', "
                          "controls; json mode keeps them out of classes)"),
               -1;
    gt_puts(&r->out, "]");
    return 0;
}

static int rx_atom(rx *r, int depth)
{
    int c = rpeek(r);
    if (c == '(') {
        r->pos++;
        if (r->pos + 1 < r->len && r->s[r->pos] == '?') {
            if (r->s[r->pos + 1] != ':')
                return rx_fail(r, "lookarounds and named groups are not supported"), -1;
            r->pos += 2;
        }
        if (depth > 100) return rx_fail(r, "groups nested too deep"), -1;
        gt_puts(&r->out, "(");
        if (rx_alt(r, depth + 1)) return -1;
        if (rpeek(r) != ')') return rx_fail(r, "expected ')'"), -1;
        r->pos++;
        gt_puts(&r->out, ")");
        return 0;
    }
    if (c == '[') return rx_class(r);
    if (c == '.') {
        r->pos++;
        gt_puts(&r->out, r->json ? "[^\\n" JSON_EXCLUDED "]" : "[^\\n]");
        return 0;
    }
    if (c == '\\' && r->pos + 1 < r->len) {
        int neg;
        const char *sh = shorthand((unsigned char)r->s[r->pos + 1], r->json, &neg);
        if (sh) {
            r->pos += 2;
            gt_printf(&r->out, "[%s%s%s]", neg ? "^" : "", neg && r->json ? JSON_EXCLUDED : "", sh);
            return 0;
        }
        int e = (unsigned char)r->s[r->pos + 1];
        if (e == 'b' || e == 'B' || (e >= '1' && e <= '9'))
            return rx_fail(r, "word boundaries and backreferences are not supported"), -1;
    }
    if (c == '^' || c == '$') return rx_fail(r, "an anchor inside the pattern"), -1;
    if (c == '*' || c == '+' || c == '?' || c == '{')
        return rx_fail(r, "a quantifier with nothing to repeat"), -1;
    long code;
    size_t at = r->out.n;
    gt_puts(&r->out, "\"");
    if (rx_char(r, &code)) return -1;
    gt_puts(&r->out, "\"");
    if (r->json && json_excluded(code)) { /* its JSON escape instead */
        r->out.n = at;
        json_escape_literal(&r->out, code);
    }
    return 0;
}

static int rx_seq(rx *r, int depth)
{
    gt_puts(&r->out, "\"\"");
    while (rpeek(r) >= 0 && rpeek(r) != '|' && rpeek(r) != ')') {
        if (rpeek(r) == '$' && r->pos + 1 == r->len && depth == 0) {
            r->pos++;
            break;
        }
        gt_puts(&r->out, " ");
        if (rx_atom(r, depth)) return -1;
        for (;;) {
            int q = rpeek(r);
            if (q == '*' || q == '+' || q == '?') {
                r->pos++;
                gt_add(&r->out, (const char *)&(char){(char)q}, 1);
            } else if (q == '{') {
                size_t s = r->pos++;
                long m = 0, x = -1;
                while (rpeek(r) >= '0' && rpeek(r) <= '9')
                    m = m > 100000 ? m : m * 10 + (rpeek(r) - '0'), r->pos++;
                if (r->pos == s + 1) return rx_fail(r, "expected a number after '{'"), -1;
                x = m;
                if (rpeek(r) == ',') {
                    r->pos++;
                    x = rpeek(r) == '}' ? -1 : 0;
                    while (rpeek(r) >= '0' && rpeek(r) <= '9')
                        x = x > 100000 ? x : x * 10 + (rpeek(r) - '0'), r->pos++;
                }
                if (rpeek(r) != '}') return rx_fail(r, "expected '}'"), -1;
                if (m > 10000 || x > 10000) {
                    r->pos = s;
                    return rx_fail(r, "repetition count above 10000"), -1;
                }
                if (x >= 0 && x < m) {
                    r->pos = s;
                    return rx_fail(r, "repetition {m,n}: n below m"), -1;
                }
                r->pos++;
                gt_add(&r->out, r->s + s, r->pos - s);
            } else
                break;
            if (rpeek(r) == '?') r->pos++; /* lazy: the same language */
        }
    }
    return 0;
}

static int rx_alt(rx *r, int depth)
{
    if (rx_seq(r, depth)) return -1;
    while (rpeek(r) == '|') {
        r->pos++;
        gt_puts(&r->out, " | ");
        if (rx_seq(r, depth)) return -1;
    }
    return 0;
}

char *grammar_regex_to_gbnf(const char *pattern, size_t len, const char *prefix, int json_string,
                            char *msg, size_t msg_size)
{
    rx r = {.s = pattern, .len = len, .json = json_string, .msg = msg, .msg_size = msg_size};
    if (!pattern) {
        rx_fail(&r, "NULL pattern");
        return NULL;
    }
    if (r.len && r.s[0] == '^') r.pos++;
    gt_printf(&r.out, "%s ::= ", prefix);
    if (rx_alt(&r, 0) == 0 && r.pos < r.len) rx_fail(&r, "unbalanced ')'");
    gt_puts(&r.out, "\n");
    if (r.out.oom && !r.err) {
        r.err = 1;
        if (msg && msg_size) snprintf(msg, msg_size, "out of memory for the regex");
    }
    if (r.err) {
        free(r.out.s);
        return NULL;
    }
    return r.out.s;
}
