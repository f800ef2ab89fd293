/* JSON Schema to GBNF text (grammar.h, grammar_json_schema_to_gbnf).
 * The language of each construct is xgrammar's default (any_whitespace, strict
 * mode): [ \n\r\t]* between tokens, properties in schema order, all of
 * `required` present, no additional properties, strings without length bounds
 * as JSON strings with escapes, strings with bounds as characters other than
 * `"` `\` CR LF. docs/grammar.md lists the keywords. */
#include "sampler/grammar.h"
#include "sampler/grammar_text.h"

#include <jansson.h>
#include <stdint.h>

typedef struct jctx {
    gtext out;
    json_t *root;
    int n_rules;
    char *msg;
    size_t msg_size;
    int err;
    const char *refs[64];
    int ref_rule[64];
    int n_refs;
    const char *basic; /* the prefix of the string, array, object and any rules */
} jctx;

static int jfail(jctx *c, const char *path, const char *fmt, const char *arg)
{
    if (c->err) return 1;
    c->err = 1;
    char what[256];
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-nonliteral" /* every format has one %s */
    snprintf(what, sizeof what, fmt, arg);
#pragma GCC diagnostic pop
    if (c->msg && c->msg_size)
        snprintf(c->msg, c->msg_size, "json_schema%.300s: %s", path[0] ? path : "", what);
    return 1;
}

static const char *const BASE =
    "ws ::= [ \\n\\r\\t]*\n"
    "basic-string ::= \"\\\"\" basic-string-sub\n"
    "basic-string-sub ::= \"\\\"\" | [^\\x00-\\x1F\\x22\\x5C] basic-string-sub | \"\\\\\" "
    "basic-escape basic-string-sub\n"
    "basic-escape ::= [\\x22\\x5C/bfnrt] | \"u\" [A-Fa-f0-9] [A-Fa-f0-9] [A-Fa-f0-9] [A-Fa-f0-9]\n"
    "basic-integer ::= \"0\" | \"-\"? [1-9] [0-9]*\n"
    "basic-number ::= \"-\"? (\"0\" | [1-9] [0-9]*) (\".\" [0-9]+)? ([eE] [+\\-]? [0-9]+)?\n"
    "basic-boolean ::= \"true\" | \"false\"\n"
    "basic-null ::= \"null\"\n";

/* The JSON values over the strings of rule P-string: P-array, P-object,
 * P-any (P: the prefix, "basic" in BASE); 1 when memory ran out. */
static int value_rules(gtext *t, const char *p)
{
    gt_printf(t, "%s-array ::= \"[\" ws %s-any (ws \",\" ws %s-any)* ws \"]\" | \"[\" ws \"]\"\n",
              p, p, p);
    gt_printf(t,
              "%s-object ::= \"{\" ws %s-string ws \":\" ws %s-any (ws \",\" ws %s-string ws "
              "\":\" ws %s-any)* ws \"}\" | \"{\" ws \"}\"\n",
              p, p, p, p, p);
    gt_printf(t,
              "%s-any ::= basic-number | %s-string | basic-boolean | basic-null | %s-array | "
              "%s-object\n",
              p, p, p, p);
    return t->oom;
}

static const char *const BASE_FORMATS =
    "fmt-date ::= [0-9]{4} \"-\" (\"0\" [1-9] | \"1\" [0-2]) \"-\" (\"0\" [1-9] | [12] [0-9] | "
    "\"3\" [01])\n"
    "fmt-time ::= ([01] [0-9] | \"2\" [0-3]) \":\" [0-5] [0-9] \":\" ([0-5] [0-9] | \"60\") "
    "(\".\" [0-9]+)? (\"Z\" | [+\\-] ([01] [0-9] | \"2\" [0-3]) \":\" [0-5] [0-9])\n"
    "fmt-date-time ::= fmt-date \"T\" fmt-time\n"
    "fmt-uuid ::= [0-9A-Fa-f]{8} \"-\" [0-9A-Fa-f]{4} \"-\" [0-9A-Fa-f]{4} \"-\" [0-9A-Fa-f]{4} "
    "\"-\" [0-9A-Fa-f]{12}\n"
    "fmt-email-atext ::= [a-zA-Z0-9_!#$%&'*+/=?^`{|}~\\-]\n"
    "fmt-email-qchar ::= \"\\\\\\\\\" ([ -!#-\\x5B\\x5D-~] | \"\\\\\\\"\" | \"\\\\\\\\\") | [ "
    "!#-\\x5B\\x5D-~]\n"
    "fmt-email ::= (fmt-email-atext+ (\".\" fmt-email-atext+)* | \"\\\\\\\"\" fmt-email-qchar* "
    "\"\\\\\\\"\") \"@\" [A-Za-z0-9] ([\\-A-Za-z0-9]* [A-Za-z0-9])? (\".\" [A-Za-z0-9] "
    "[\\-A-Za-z0-9]* [A-Za-z0-9])*\n";

/* A JSON value as a GBNF literal of its compact serialisation. */
static void literal(jctx *c, json_t *v)
{
    char *s = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
    if (!s) {
        c->out.oom = 1;
        return;
    }
    gt_puts(&c->out, "\"");
    for (const char *p = s; *p; p++) gt_char(&c->out, (unsigned char)*p);
    gt_puts(&c->out, "\"");
    free(s);
}

/* Digit strings x <= y of the same length, as a GBNF expression (leading
 * zeros allowed: the caller fixes the first digit). */
static void same_len(gtext *t, const char *x, const char *y, int n)
{
    if (n == 0) {
        gt_puts(t, "\"\"");
        return;
    }
    if (x[0] == y[0]) {
        gt_printf(t, "\"%c\" (", x[0]);
        same_len(t, x + 1, y + 1, n - 1);
        gt_puts(t, ")");
        return;
    }
    char nines[24], zeros[24];
    memset(nines, '9', (size_t)n);
    memset(zeros, '0', (size_t)n);
    int lo_full = memcmp(x + 1, zeros, (size_t)n - 1) == 0,
        hi_full = memcmp(y + 1, nines, (size_t)n - 1) == 0;
    /* decimal digits: x[0] + 1 and y[0] - 1 stay within '0'..'9' */
    char a = (char)(lo_full ? x[0] : x[0] + 1), b = (char)(hi_full ? y[0] : y[0] - 1);
    gt_puts(t, "(");
    int any = 0;
    if (!lo_full) {
        gt_printf(t, "\"%c\" (", x[0]);
        same_len(t, x + 1, nines, n - 1);
        gt_puts(t, ")");
        any = 1;
    }
    if (a <= b) {
        gt_printf(t, "%s[%c-%c]", any ? " | " : "", a, b);
        for (int i = 1; i < n; i++) gt_puts(t, " [0-9]");
        any = 1;
    }
    if (!hi_full) {
        gt_printf(t, "%s\"%c\" (", any ? " | " : "", y[0]);
        same_len(t, zeros, y + 1, n - 1);
        gt_puts(t, ")");
    }
    gt_puts(t, ")");
}

/* The decimal integers in [a, b] (0 <= a <= b), no leading zeros. */
static void nonneg_range(gtext *t, int64_t a, int64_t b)
{
    gt_puts(t, "(");
    int first = 1;
    int64_t lo_l = 1; /* 10^(len - 1) */
    for (int len = 1; len <= 19; len++, lo_l = len <= 19 ? lo_l * 10 : lo_l) {
        int64_t lmin = len == 1 ? 0 : lo_l, lmax = len == 19 ? INT64_MAX : lo_l * 10 - 1;
        if (lmin > b) break;
        int64_t x = a > lmin ? a : lmin, y = b < lmax ? b : lmax;
        if (x > y) continue;
        char xs[24], ys[24];
        snprintf(xs, sizeof xs, "%lld", (long long)x);
        snprintf(ys, sizeof ys, "%lld", (long long)y);
        if (!first) gt_puts(t, " | ");
        first = 0;
        same_len(t, xs, ys, len);
    }
    gt_puts(t, ")");
}

/* The decimal integers >= a (a >= 0). */
static void nonneg_ge(gtext *t, int64_t a)
{
    char s[24];
    int d = snprintf(s, sizeof s, "%lld", (long long)a);
    int64_t p = 1; /* 10^d, or INT64_MAX when that overflows */
    for (int i = 0; i < d; i++) p = p <= INT64_MAX / 10 ? p * 10 : INT64_MAX;
    gt_puts(t, "(");
    nonneg_range(t, a, p == INT64_MAX ? p : p - 1);
    gt_printf(t, " | [1-9] [0-9]{%d,})", d);
}

static int integer_range(jctx *c, json_t *s, const char *path)
{
    json_t *mn = json_object_get(s, "minimum"), *mx = json_object_get(s, "maximum");
    if ((mn && !json_is_integer(mn)) || (mx && !json_is_integer(mx))) {
        jfail(c, path, "%s: only integer bounds are supported on an integer", "minimum/maximum");
        return 0;
    }
    int has_lo = mn != NULL, has_hi = mx != NULL;
    int64_t lo = has_lo ? json_integer_value(mn) : 0, hi = has_hi ? json_integer_value(mx) : 0;
    if (has_lo && has_hi && lo > hi) {
        return jfail(c, path, "%s: minimum above maximum", "minimum");
    }
    if (lo < -INT64_MAX || hi < -INT64_MAX) {
        jfail(c, path, "%s: out of range", "minimum");
        return 0;
    }
    gtext *t = &c->out;
    gt_puts(t, "(");
    if (has_lo && has_hi) {
        if (lo >= 0)
            nonneg_range(t, lo, hi);
        else if (hi < 0)
            gt_puts(t, "\"-\" "), nonneg_range(t, -hi, -lo);
        else
            gt_puts(t, "\"-\" "), nonneg_range(t, 1, -lo), gt_puts(t, " | "),
                nonneg_range(t, 0, hi);
    } else if (has_lo) {
        if (lo >= 0)
            nonneg_ge(t, lo);
        else
            gt_puts(t, "\"-\" "), nonneg_range(t, 1, -lo), gt_puts(t, " | "), nonneg_ge(t, 0);
    } else {
        if (hi >= 0)
            gt_puts(t, "\"-\" [1-9] [0-9]* | "), nonneg_range(t, 0, hi);
        else
            gt_puts(t, "\"-\" "), nonneg_ge(t, -hi);
    }
    gt_puts(t, ")");
    return 0;
}

static const char *const KNOWN[] = {"type",    "properties",  "required",  "additionalProperties",
                                    "items",   "minItems",    "maxItems",  "enum",
                                    "const",   "anyOf",       "oneOf",     "$ref",
                                    "$defs",   "definitions", "minLength", "maxLength",
                                    "pattern", "format",      "minimum",   "maximum",
                                    "title",   "description", "$schema",   "$id",
                                    "default", "examples",    "$comment",  "strict",
                                    NULL};

/* Write the GBNF expression of schema s at path into c->out. An expression
 * that needs rules of its own ends its line, writes them, and opens a
 * `dummyN ::= ""` line for the rest of the caller's line: so every caller
 * puts conv last on its line (the dummy rules are never referenced). */
static int conv(jctx *c, json_t *s, const char *path, int depth);

static int new_rule(jctx *c)
{
    return ++c->n_rules;
}

static int conv_type(jctx *c, json_t *s, const char *type, const char *path, int depth)
{
    gtext *t = &c->out;
    char sub[512];
    if (strcmp(type, "string") == 0) {
        json_t *fmt = json_object_get(s, "format"), *pat = json_object_get(s, "pattern");
        json_t *mnl = json_object_get(s, "minLength"), *mxl = json_object_get(s, "maxLength");
        if (fmt) {
            const char *f = json_string_value(fmt);
            if (!f ||
                (strcmp(f, "date") != 0 && strcmp(f, "time") != 0 && strcmp(f, "date-time") != 0 &&
                 strcmp(f, "email") != 0 && strcmp(f, "uuid") != 0)) {
                jfail(c, path,
                      "format: unsupported format '%s' (date, time, date-time, email, "
                      "uuid are)",
                      f ? f : "?");
                return 0;
            }
            gt_printf(t, "(\"\\x22\" fmt-%s \"\\x22\")", f);
        } else if (pat) {
            const char *p = json_string_value(pat);
            if (!p) return jfail(c, path, "%s: expected a string", "pattern");
            char name[32], m[200];
            snprintf(name, sizeof name, "pat%d", new_rule(c));
            char *g = grammar_regex_to_gbnf(p, strlen(p), name, 1, m, sizeof m);
            if (!g) return jfail(c, path, "pattern: %s", m);
            gt_printf(t, "(\"\\x22\" %s \"\\x22\")", name);
            /* the pattern's rule goes after the whole grammar: stash it in front */
            gtext tail = {0};
            gt_puts(&tail, g);
            free(g);
            if (tail.oom) c->out.oom = 1;
            gt_puts(t, "\n");
            gt_add(t, tail.s ? tail.s : "", tail.n);
            free(tail.s);
            gt_printf(t, "dummy%d ::= \"\" ", new_rule(c));
        } else if (mnl || mxl) {
            if ((mnl && !json_is_integer(mnl)) || (mxl && !json_is_integer(mxl)))
                return jfail(c, path, "%s: expected an integer", "minLength/maxLength");
            long long lo = mnl ? json_integer_value(mnl) : 0,
                      hi = mxl ? json_integer_value(mxl) : -1;
            if (lo < 0 || (mxl && hi < lo) || hi > 10000 || lo > 10000)
                return jfail(c, path, "%s: bounds out of order or above 10000",
                             "minLength/maxLength");
            if (lo == 0 && !mxl) /* no bound at all: a plain JSON string (xgrammar) */
                gt_printf(t, "%s-string", c->basic);
            else if (hi >= 0)
                gt_printf(t, "(\"\\x22\" [^\\x22\\x5C\\r\\n]{%lld,%lld} \"\\x22\")", lo, hi);
            else
                gt_printf(t, "(\"\\x22\" [^\\x22\\x5C\\r\\n]{%lld,} \"\\x22\")", lo);
        } else
            gt_printf(t, "%s-string", c->basic);
    } else if (strcmp(type, "integer") == 0) {
        if (json_object_get(s, "minimum") || json_object_get(s, "maximum"))
            integer_range(c, s, path);
        else
            gt_puts(t, "basic-integer");
    } else if (strcmp(type, "number") == 0) {
        if (json_object_get(s, "minimum") || json_object_get(s, "maximum"))
            return jfail(c, path, "%s: bounds on a number are not supported (integers only)",
                         "minimum/maximum");
        gt_puts(t, "basic-number");
    } else if (strcmp(type, "boolean") == 0) {
        gt_puts(t, "basic-boolean");
    } else if (strcmp(type, "null") == 0) {
        gt_puts(t, "basic-null");
    } else if (strcmp(type, "array") == 0) {
        json_t *items = json_object_get(s, "items");
        if (json_object_get(s, "prefixItems"))
            return jfail(c, path, "%s: unsupported keyword", "prefixItems");
        json_t *mni = json_object_get(s, "minItems"), *mxi = json_object_get(s, "maxItems");
        long long lo = mni ? json_integer_value(mni) : 0, hi = mxi ? json_integer_value(mxi) : -1;
        if (lo < 0 || (mxi && hi < lo) || hi > 10000 || lo > 10000)
            return jfail(c, path, "%s: bounds out of order or above 10000", "minItems/maxItems");
        int r = new_rule(c);
        /* the item as its own rule, written after this line */
        gt_puts(t, "(");
        if (hi == 0)
            gt_puts(t, "\"[\" ws \"]\"");
        else {
            gt_printf(t, "\"[\" ws item%d (ws \",\" ws item%d)", r, r);
            if (hi < 0)
                gt_printf(t, "{%lld,}", lo > 0 ? lo - 1 : 0);
            else
                gt_printf(t, "{%lld,%lld}", lo > 0 ? lo - 1 : 0, hi - 1);
            gt_puts(t, " ws \"]\"");
            if (lo == 0) gt_puts(t, " | \"[\" ws \"]\"");
        }
        gt_printf(t, ")\nitem%d ::= ", r);
        snprintf(sub, sizeof sub, "%s.items", path);
        if (items)
            conv(c, items, sub, depth + 1);
        else
            gt_printf(t, "%s-any", c->basic);
        gt_printf(t, "\ndummy%d ::= \"\" ", new_rule(c));
    } else if (strcmp(type, "object") == 0) {
        json_t *props = json_object_get(s, "properties"), *req = json_object_get(s, "required"),
               *add = json_object_get(s, "additionalProperties");
        if (add && !json_is_false(add))
            return jfail(c, path, "%s: only false is supported (strict mode)",
                         "additionalProperties");
        if (props && !json_is_object(props))
            return jfail(c, path, "%s: expected an object", "properties");
        if (req && !json_is_array(req)) return jfail(c, path, "%s: expected an array", "required");
        for (size_t j = 0; props && j < json_array_size(req); j++) {
            const char *rk = json_string_value(json_array_get(req, j));
            if (!rk) return jfail(c, path, "%s: expected an array of strings", "required");
            if (!json_object_get(props, rk)) /* only the listed properties are generated */
                return jfail(c, path,
                             "required: '%.100s' is not in properties (no other property is "
                             "generated)",
                             rk);
        }
        if (!props && !add) {
            gt_printf(t, "%s-object", c->basic);
            return 0;
        }
        size_t n = props ? json_object_size(props) : 0;
        if (n == 0) {
            gt_puts(t, "(\"{\" ws \"}\")");
            return 0;
        }
        int r = new_rule(c);
        /* p<r>-<i>: property i; rest<r>-<i>: props i.. after one was written;
         * first<r>-<i>: props i.. before any was */
        const char **keys = malloc(n * sizeof *keys);
        json_t **vals = malloc(n * sizeof(void *));
        uint8_t *required = calloc(n, 1);
        if (!keys || !vals || !required) {
            free(keys);
            free(vals);
            free(required);
            c->out.oom = 1;
            return 0;
        }
        size_t i = 0;
        const char *k;
        json_t *v;
        json_object_foreach(props, k, v)
        {
            keys[i] = k;
            vals[i] = v;
            for (size_t j = 0; req && j < json_array_size(req); j++) {
                const char *rk = json_string_value(json_array_get(req, j));
                if (rk && strcmp(rk, k) == 0) required[i] = 1;
            }
            i++;
        }
        n = i; /* what the iteration gave (json_object_size's count) */
        gt_printf(t, "(\"{\" ws first%d-0 ws \"}\")\n", r);
        for (i = 0; i < n; i++) {
            gt_printf(t, "p%d-%zu ::= ", r, i);
            json_t *key = json_string(keys[i]);
            literal(c, key);
            json_decref(key);
            gt_puts(t, " ws \":\" ws ");
            snprintf(sub, sizeof sub, "%s.properties.%.200s", path, keys[i]);
            conv(c, vals[i], sub, depth + 1);
            gt_puts(t, "\n");
            gt_printf(t, "rest%d-%zu ::= ws \",\" ws p%d-%zu rest%d-%zu", r, i, r, i, r, i + 1);
            if (!required[i]) gt_printf(t, " | rest%d-%zu", r, i + 1);
            gt_printf(t, "\nfirst%d-%zu ::= p%d-%zu rest%d-%zu", r, i, r, i, r, i + 1);
            if (!required[i]) gt_printf(t, " | first%d-%zu", r, i + 1);
            gt_puts(t, "\n");
        }
        gt_printf(t, "rest%d-%zu ::= \"\"\nfirst%d-%zu ::= \"\"\n", r, n, r, n);
        gt_printf(t, "dummy%d ::= \"\" ", new_rule(c));
        free(keys);
        free(vals);
        free(required);
    } else {
        return jfail(c, path, "type: unknown type '%s'", type);
    }
    return 0;
}

static int conv(jctx *c, json_t *s, const char *path, int depth)
{
    gtext *t = &c->out;
    char sub[512];
    if (c->err) return 0;
    if (depth > 64) return jfail(c, path, "%s: schema nested deeper than 64", "depth");
    if (json_is_true(s)) return gt_printf(t, "%s-any", c->basic), 0;
    if (!json_is_object(s)) return jfail(c, path, "%s: expected an object or true", "schema");
    const char *k;
    json_t *v;
    json_object_foreach(s, k, v)
    {
        int known = 0;
        for (int i = 0; KNOWN[i]; i++) known |= strcmp(KNOWN[i], k) == 0;
        if (!known) return jfail(c, path, "%s: unsupported keyword", k);
    }
    json_t *ref = json_object_get(s, "$ref");
    if (ref) {
        const char *r = json_string_value(ref);
        const char *name = NULL;
        json_t *target = NULL;
        if (r && strncmp(r, "#/$defs/", 8) == 0)
            name = r + 8, target = json_object_get(json_object_get(c->root, "$defs"), name);
        else if (r && strncmp(r, "#/definitions/", 14) == 0)
            name = r + 14, target = json_object_get(json_object_get(c->root, "definitions"), name);
        else if (r && strcmp(r, "#") == 0)
            target = c->root;
        if (!target) return jfail(c, path, "$ref: cannot resolve '%s'", r ? r : "?");
        for (int i = 0; i < c->n_refs; i++)
            if (strcmp(c->refs[i], r) == 0) return gt_printf(t, "ref%d", c->ref_rule[i]), 0;
        if (c->n_refs == 64) return jfail(c, path, "$ref: more than 64 %s", "definitions");
        int id = new_rule(c);
        c->refs[c->n_refs] = r;
        c->ref_rule[c->n_refs++] = id;
        gt_printf(t, "ref%d\nref%d ::= ", id, id);
        snprintf(sub, sizeof sub, "%s.$ref", path);
        conv(c, target, sub, depth + 1);
        gt_printf(t, "\ndummy%d ::= \"\" ", new_rule(c));
        return 0;
    }
    json_t *en = json_object_get(s, "enum"), *cn = json_object_get(s, "const");
    if (cn) {
        gt_puts(t, "(");
        literal(c, cn);
        gt_puts(t, ")");
        return 0;
    }
    if (en) {
        if (!json_is_array(en) || json_array_size(en) == 0)
            return jfail(c, path, "%s: expected a non-empty array", "enum");
        gt_puts(t, "(");
        for (size_t i = 0; i < json_array_size(en); i++) {
            if (i) gt_puts(t, " | ");
            literal(c, json_array_get(en, i));
        }
        gt_puts(t, ")");
        return 0;
    }
    json_t *any = json_object_get(s, "anyOf");
    if (!any) any = json_object_get(s, "oneOf");
    if (any) {
        if (!json_is_array(any) || json_array_size(any) == 0)
            return jfail(c, path, "%s: expected a non-empty array", "anyOf");
        int r = new_rule(c);
        /* each branch as its own rule: alt<r>-<i> */
        gt_printf(t, "alt%d\nalt%d ::= ", r, r);
        for (size_t i = 0; i < json_array_size(any); i++)
            gt_printf(t, "%salt%d-%zu", i ? " | " : "", r, i);
        for (size_t i = 0; i < json_array_size(any); i++) {
            gt_printf(t, "\nalt%d-%zu ::= ", r, i);
            snprintf(sub, sizeof sub, "%s.anyOf[%zu]", path, i);
            conv(c, json_array_get(any, i), sub, depth + 1);
        }
        gt_printf(t, "\ndummy%d ::= \"\" ", new_rule(c));
        return 0;
    }
    json_t *type = json_object_get(s, "type");
    if (json_is_array(type)) {
        if (json_array_size(type) == 0) return jfail(c, path, "%s: empty array", "type");
        int r = new_rule(c);
        gt_printf(t, "typ%d\ntyp%d ::= ", r, r);
        for (size_t i = 0; i < json_array_size(type); i++)
            gt_printf(t, "%styp%d-%zu", i ? " | " : "", r, i);
        for (size_t i = 0; i < json_array_size(type); i++) {
            const char *ty = json_string_value(json_array_get(type, i));
            if (!ty) return jfail(c, path, "%s: expected strings", "type");
            gt_printf(t, "\ntyp%d-%zu ::= ", r, i);
            conv_type(c, s, ty, path, depth);
        }
        gt_printf(t, "\ndummy%d ::= \"\" ", new_rule(c));
        return 0;
    }
    if (type) {
        const char *ty = json_string_value(type);
        if (!ty) return jfail(c, path, "%s: expected a string or an array", "type");
        return conv_type(c, s, ty, path, depth);
    }
    if (json_object_get(s, "properties")) return conv_type(c, s, "object", path, depth);
    if (json_object_get(s, "items")) return conv_type(c, s, "array", path, depth);
    gt_printf(t, "%s-any", c->basic);
    return 0;
}

/* The schema's rules, its start rule named root_name, rule numbers continuing
 * from *n_rules (so several schemas' rules can share one grammar), the basic
 * rules first when with_base; unbounded strings and untyped values are the
 * rules `basic`-string, -any, -object. */
static char *schema_rules(const char *json, size_t len, const char *root_name, int *n_rules,
                          int with_base, const char *basic, char *msg, size_t msg_size)
{
    jctx c = {.msg = msg,
              .msg_size = msg_size,
              .n_rules = n_rules ? *n_rules : 0,
              .basic = basic ? basic : "basic"};
    json_error_t je;
    if (!json) {
        jfail(&c, "", "%s", "NULL");
        return NULL;
    }
    c.root = json_loadb(json, len, JSON_DECODE_ANY, &je);
    if (!c.root) {
        if (msg && msg_size)
            snprintf(msg, msg_size, "json_schema: not JSON (line %d: %s)", je.line, je.text);
        return NULL;
    }
    if (with_base) {
        gt_puts(&c.out, BASE);
        value_rules(&c.out, "basic");
        gt_puts(&c.out, BASE_FORMATS);
    }
    gt_printf(&c.out, "%s ::= ", root_name);
    conv(&c, c.root, "", 0);
    gt_puts(&c.out, "\n");
    json_decref(c.root);
    if (n_rules) *n_rules = c.n_rules;
    if (c.out.oom && !c.err) {
        c.err = 1;
        if (msg && msg_size) snprintf(msg, msg_size, "out of memory for the JSON schema");
    }
    if (c.err) {
        free(c.out.s);
        return NULL;
    }
    return c.out.s;
}

char *grammar_json_schema_to_gbnf(const char *json, size_t len, char *msg, size_t msg_size)
{
    return schema_rules(json, len, "root", NULL, 1, NULL, msg, msg_size);
}

char *grammar_json_schema_rules(const char *json, size_t len, const char *root_name, int *n_rules,
                                int with_base, const char *basic, char *msg, size_t msg_size)
{
    return schema_rules(json, len, root_name, n_rules, with_base, basic, msg, msg_size);
}

char *grammar_json_value_rules(const char *prefix)
{
    gtext t = {0};
    if (value_rules(&t, prefix)) {
        free(t.s);
        return NULL;
    }
    return t.s;
}
