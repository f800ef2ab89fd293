/* Tool calls in a model's call syntax as one GBNF grammar (grammar.h,
 * grammar_tags): free text that cannot spell the trigger, then the call
 * region whose tags hold their JSON schemas' arguments — xgrammar's structural
 * tags with a trigger, written for our GBNF automaton.
 *
 * Free text that avoids the trigger is the complement of "contains trigger", a
 * regular language: the Knuth–Morris–Pratt automaton of the trigger over code
 * points, one rule per state (tc-text<i>: i code points of the trigger
 * matched), each character leading to the state KMP gives; the character that
 * completes the trigger leads into the region instead. Every state may end
 * (the reply is free text), so the end token is allowed anywhere in it. */
#include "sampler/grammar.h"
#include "sampler/grammar_text.h"

#include <jansson.h>
#include <stdint.h>

/* Decode s as UTF-8 code points into cps (at most max); the count, or -1. */
static int code_points(const char *s, uint32_t *cps, int max)
{
    int n = 0;
    const unsigned char *p = (const unsigned char *)s;
    while (*p) {
        unsigned c = *p;
        int k = c < 0x80             ? 1
                : (c & 0xE0) == 0xC0 ? 2
                : (c & 0xF0) == 0xE0 ? 3
                : (c & 0xF8) == 0xF0 ? 4
                                     : 0;
        if (!k || n == max) return -1;
        uint32_t v = k == 1 ? c : c & (0x7Fu >> k);
        for (int i = 1; i < k; i++) {
            if ((p[i] & 0xC0) != 0x80) return -1;
            v = (v << 6) | (p[i] & 0x3Fu);
        }
        cps[n++] = v;
        p += k;
    }
    return n;
}

/* Text that does not contain the literal t[m] (code points), as rules
 * <name>0 … <name><m-1> (<name><i>: i code points of t matched): each
 * character leads to the state KMP gives — one class for all that lead back
 * to state 0, an alternative for each of the few that do not (so a state has
 * few alternatives, which the mask walk tries at every byte). `end`: an
 * alternative that ends the text (NULL: none); `excluded`: class ranges that
 * are no character of the text ("" for none); `escape`: an alternative that
 * leads back to state 0 (NULL: none); the character that completes t
 * continues with `then` (NULL: it is not allowed). */
static void kmp_rules(gtext *o, const char *name, const uint32_t *t, int m, const char *end,
                      const char *excluded, const char *escape, const char *then)
{
    int fail[64];
    fail[0] = 0;
    for (int i = 1, k = 0; i < m; i++) {
        while (k && t[i] != t[k]) k = fail[k - 1];
        if (t[i] == t[k]) k++;
        fail[i] = k;
    }
    for (int i = 0; i < m; i++) {
        int next[64]; /* the state after t[j] in state i; -1 for a repeated character */
        for (int j = 0; j < m; j++) {
            int seen = 0;
            for (int q = 0; q < j; q++) seen |= t[q] == t[j];
            int k = i; /* KMP */
            while (k && t[k] != t[j]) k = fail[k - 1];
            if (t[k] == t[j]) k++;
            next[j] = seen ? -1 : k;
        }
        if (end)
            gt_printf(o, "%s%d ::= %s | [^%s", name, i, end, excluded);
        else
            gt_printf(o, "%s%d ::= [^%s", name, i, excluded);
        for (int j = 0; j < m; j++)
            if (next[j] > 0) gt_printf(o, "\\U%08X", (unsigned)t[j]);
        gt_printf(o, "] %s0", name);
        if (escape) gt_printf(o, " | %s %s0", escape, name);
        for (int j = 0; j < m; j++) {
            if (next[j] == m && then)
                gt_printf(o, " | \"\\U%08X\" %s", (unsigned)t[j], then);
            else if (next[j] > 0 && next[j] < m)
                gt_printf(o, " | \"\\U%08X\" %s%d", (unsigned)t[j], name, next[j]);
        }
        gt_puts(o, "\n");
    }
}

/* A literal as a GBNF string, every character escaped. */
static void literal(gtext *o, const uint32_t *t, int m)
{
    gt_puts(o, "\"");
    for (int i = 0; i < m; i++) gt_printf(o, "\\U%08X", (unsigned)t[i]);
    gt_puts(o, "\"");
}

/* msg from a converter ("json_schema…", "regex…") with `field` in its place. */
static void rename_error(char *msg, size_t msg_size, const char *field)
{
    if (!msg || !msg_size || !field) return;
    char tmp[512];
    const char *rest = msg;
    if (strncmp(rest, "json_schema", 11) == 0)
        rest += 11;
    else if (strncmp(rest, "regex", 5) == 0)
        rest += 5;
    else
        return;
    snprintf(tmp, sizeof tmp, "%s%s", field, rest);
    snprintf(msg, msg_size, "%s", tmp);
}

/* A C string as a GBNF literal; 0, or -1 when it is not UTF-8 (or too long). */
static int literal_of(gtext *o, const char *s)
{
    uint32_t cps[128];
    int n = code_points(s, cps, 128);
    if (n < 0) return -1;
    literal(o, cps, n);
    return 0;
}

/* The rules tc-string (a JSON string whose raw text does not contain
 * `forbid`: the KMP automaton of forbid over its characters, an escape
 * sequence leading back to state 0), tc-array, tc-object and tc-any over it.
 * 0, or -1 with msg when forbid cannot be written so. */
static int forbid_rules(gtext *o, const char *forbid, char *msg, size_t msg_size)
{
    uint32_t t[64];
    int m = code_points(forbid, t, 64);
    /* after '\\' and an escape's characters the automaton must be in state 0 */
    int ok = m > 0 && (t[0] >= 0x80 || !strchr("\"\\/bfnrtu0123456789abcdefABCDEF", (int)t[0]));
    for (int i = 0; ok && i < m; i++) ok = t[i] >= 0x20 && t[i] != '"' && t[i] != '\\';
    if (!ok) {
        snprintf(msg, msg_size,
                 "tool calls: a text with '\"', '\\' or a control character, or that begins "
                 "with a character of an escape, cannot be kept out of JSON strings");
        return -1;
    }
    gt_puts(o, "tc-string ::= \"\\\"\" tc-str0\n");
    kmp_rules(o, "tc-str", t, m, "\"\\\"\"", "\\x00-\\x1F\\x22\\x5C", "\"\\\\\" basic-escape",
              NULL);
    char *v = grammar_json_value_rules("tc");
    if (!v) o->oom = 1;
    if (v) gt_puts(o, v);
    free(v);
    return 0;
}

/* A property whose value is written raw (string="true"): a plain string,
 * without the keywords that constrain its text (which a JSON value keeps). */
static int raw_string(json_t *ps)
{
    const char *type = json_string_value(json_object_get(ps, "type"));
    static const char *const bounds[] = {"pattern", "format", "minLength", "maxLength", "enum",
                                         "const",   "$ref",   "anyOf",     "oneOf"};
    if (!type || strcmp(type, "string") != 0) return 0;
    for (size_t i = 0; i < sizeof bounds / sizeof bounds[0]; i++)
        if (json_object_get(ps, bounds[i])) return 0;
    return 1;
}

/* The DSML parameters of tag i (rule `name`): see grammar.h. The whole schema
 * is compiled first, so its errors name their full path. 0, or -1 with msg. */
static int dsml_args(gtext *o, const grammar_tag *g, size_t i, const char *name, const char *word,
                     const char *basic, int *n_rules, char *msg, size_t msg_size)
{
    gtext open = {0}, close = {0};
    gt_puts(&open, "\"<｜DSML｜\" ");
    literal_of(&open, word);
    gt_puts(&close, "\"</｜DSML｜\" ");
    literal_of(&close, word);
    gt_puts(&close, " \">\"");
    json_t *root = NULL, *props = NULL;
    int rc = -1;
    if (g->schema) {
        char *check = grammar_json_schema_rules(g->schema, g->schema_len, "tc-check", n_rules, 0,
                                                NULL, msg, msg_size);
        if (!check) {
            rename_error(msg, msg_size, g->field);
            goto done;
        }
        free(check);
        root = json_loadb(g->schema, g->schema_len, 0, NULL);
        props = json_object_get(root, "properties");
    }
    if (!json_is_object(props) || json_object_size(props) == 0) {
        if (props) { /* declared, none: no parameters */
            gt_printf(o, "%s ::= \"\"\n", name);
            rc = 0;
            goto done;
        }
        /* any names and values */
        gt_printf(
            o,
            "%s ::= %s-p*\n%s-p ::= %s \" name=\\\"\" [^\"\\n]+ \"\\\" string=\\\"true\\\">\" "
            "tc-raw0 \"\\n\" | %s \" name=\\\"\" [^\"\\n]+ \"\\\" string=\\\"false\\\">\" "
            "%s-any %s \"\\n\"\n",
            name, name, name, open.s, open.s, basic, close.s);
        rc = 0;
        goto done;
    }
    json_t *required = json_object_get(root, "required");
    json_t *defs = json_object_get(root, "$defs"), *defs2 = json_object_get(root, "definitions");
    gtext seq = {0};
    size_t k = 0;
    const char *key;
    json_t *ps;
    json_object_foreach(props, key, ps)
    {
        int req = 0;
        for (size_t r = 0; r < json_array_size(required); r++)
            req |= json_is_string(json_array_get(required, r)) &&
                   strcmp(json_string_value(json_array_get(required, r)), key) == 0;
        gt_printf(&seq, " %s%s-%zu%s", req ? "" : "(", name, k, req ? "" : ")?");
        gt_printf(o, "%s-%zu ::= %s \" name=\\\"\" ", name, k, open.s);
        if (literal_of(o, key) < 0 || strchr(key, '"')) {
            snprintf(msg, msg_size, "%s.properties: a name DSML cannot write", g->field);
            free(seq.s);
            goto done;
        }
        if (raw_string(ps)) {
            gt_puts(o, " \"\\\" string=\\\"true\\\">\" tc-raw0 \"\\n\"\n");
        } else {
            json_t *w = json_deep_copy(ps);
            if (json_is_object(w) && defs && !json_object_get(w, "$defs"))
                json_object_set(w, "$defs", defs);
            if (json_is_object(w) && defs2 && !json_object_get(w, "definitions"))
                json_object_set(w, "definitions", defs2);
            char *text = w ? json_dumps(w, JSON_COMPACT | JSON_ENCODE_ANY) : NULL;
            json_decref(w);
            char vname[64];
            snprintf(vname, sizeof vname, "tc-v%zu-%zu", i, k);
            char *r = text ? grammar_json_schema_rules(text, strlen(text), vname, n_rules, 0, basic,
                                                       msg, msg_size)
                           : NULL;
            int no_text = text == NULL;
            free(text);
            if (!r) {
                if (no_text)
                    snprintf(msg, msg_size, "out of memory for the tool-call grammar");
                else { /* (the whole schema compiled: a property alone may not, "$ref": "#") */
                    char field[256];
                    snprintf(field, sizeof field, "%s.properties.%s", g->field, key);
                    rename_error(msg, msg_size, field);
                }
                free(seq.s);
                goto done;
            }
            gt_printf(o, " \"\\\" string=\\\"false\\\">\" %s %s \"\\n\"\n", vname, close.s);
            gt_puts(o, r);
            free(r);
        }
        k++;
    }
    gt_printf(o, "%s ::=%s\n", name, seq.s ? seq.s : " \"\"");
    o->oom |= seq.oom;
    free(seq.s);
    rc = 0;
done:
    o->oom |= open.oom | close.oom;
    free(open.s);
    free(close.s);
    json_decref(root);
    return rc;
}

char *grammar_tags_to_gbnf(const grammar_tags *spec, char *msg, size_t msg_size)
{
    gtext o = {0};
    uint32_t t[64];
    int m = spec->trigger ? code_points(spec->trigger, t, 64) : 0;
    if (m < 0 || (m == 0 && spec->start == GRAMMAR_TAGS_TEXT_OR_CALLS)) {
        snprintf(msg, msg_size,
                 "tool calls: the trigger is empty, longer than 64 characters "
                 "or not UTF-8");
        return NULL;
    }
    if (!spec->n_tags || (spec->start == GRAMMAR_TAGS_IN_ARGS && spec->n_tags != 1)) {
        snprintf(msg, msg_size, "tool calls: no tool to call");
        return NULL;
    }
    int n_rules = 0;
    { /* the basic rules (ws, basic-any, …), once */
        static const char obj[] = "{\"type\":\"object\"}";
        char *r = grammar_json_schema_rules(obj, sizeof obj - 1, "tc-any-object", &n_rules, 1, NULL,
                                            msg, msg_size);
        if (!r) return NULL;
        /* whitespace between JSON tokens: a little, or one line break and an
         * indentation — not xgrammar's any run, in which a model can put off
         * the end of a call for ever (SmolLM2 does: blank lines to max_tokens) */
        static const char any_ws[] = "ws ::= [ \\n\\r\\t]*\n";
        if (strncmp(r, any_ws, sizeof any_ws - 1) == 0) {
            gt_puts(&o, "ws ::= [ \\t]{0,2} | \"\\n\" [ \\t]{0,16}\n");
            gt_puts(&o, r + sizeof any_ws - 1);
        } else
            gt_puts(&o, r);
        free(r);
    }
    /* the strings inside calls: without spec->forbid (tc-string, …), or the
     * shared basic rules */
    const char *basic = spec->forbid ? "tc" : "basic";
    if (spec->forbid && forbid_rules(&o, spec->forbid, msg, msg_size) < 0) {
        free(o.s);
        return NULL;
    }
    if (spec->dsml) { /* a raw value: text up to "</｜DSML｜", then the word and '>' */
        uint32_t ct[16];
        int cm = code_points("</｜DSML｜", ct, 16);
        gtext then = {0};
        literal_of(&then, spec->dsml);
        gt_puts(&then, " \">\"");
        kmp_rules(&o, "tc-raw", ct, cm, NULL, "", NULL, then.s ? then.s : "\"\"");
        o.oom |= then.oom;
        free(then.s);
    }
    for (size_t i = 0; i < spec->n_tags; i++) {
        const grammar_tag *g = &spec->tags[i];
        char name[32];
        snprintf(name, sizeof name, "tc-args%zu", i);
        if (spec->dsml) {
            if (dsml_args(&o, g, i, name, spec->dsml, basic, &n_rules, msg, msg_size) < 0) {
                free(o.s);
                return NULL;
            }
        } else if (g->schema) {
            char *r = grammar_json_schema_rules(g->schema, g->schema_len, name, &n_rules, 0, basic,
                                                msg, msg_size);
            if (!r) {
                rename_error(msg, msg_size, g->field);
                free(o.s);
                return NULL;
            }
            gt_puts(&o, r);
            free(r);
        } else
            gt_printf(&o, "%s ::= %s-object\n", name, basic);
        gt_printf(&o, "tc-call%zu ::= %s tc-args%zu %s\n", i, g->begin, i, g->end);
    }
    gt_puts(&o, "tc-call ::= ");
    for (size_t i = 0; i < spec->n_tags; i++) gt_printf(&o, "%stc-call%zu", i ? " | " : "", i);
    gt_puts(&o, "\n");
    /* the calls after the first; then what closes the region */
    if (spec->separator)
        gt_printf(&o, "tc-more ::= (%s tc-call)*\n", spec->separator);
    else
        gt_puts(&o, "tc-more ::= \"\"\n");
    /* at most two spaces or newlines around the region: a run of whitespace
     * would let a model that wants to go on writing put off the end forever */
    gt_puts(&o, "tc-blank ::= [ \\n]? [ \\n]?\n");
    gt_printf(&o, "tc-calls ::= tc-call tc-more %s tc-blank\n", spec->close ? spec->close : "");
    gt_printf(&o, "tc-after-trigger ::= %s tc-calls\n", spec->open ? spec->open : "");
    switch (spec->start) {
    case GRAMMAR_TAGS_TEXT_OR_CALLS:
        if (spec->answer) {
            char *r = spec->answer_is_regex
                          ? grammar_regex_to_gbnf(spec->answer, spec->answer_len, "tc-answer", 0,
                                                  msg, msg_size)
                          : grammar_json_schema_rules(spec->answer, spec->answer_len, "tc-answer",
                                                      &n_rules, 0, NULL, msg, msg_size);
            if (!r) {
                rename_error(msg, msg_size, spec->answer_field);
                free(o.s);
                return NULL;
            }
            gt_puts(&o, r);
            free(r);
            gt_puts(&o, "\nroot ::= tc-answer | tc-blank ");
            literal(&o, t, m);
            gt_puts(&o, " tc-after-trigger\n");
        } else {
            gt_puts(&o, "root ::= tc-text0\n");
            kmp_rules(&o, "tc-text", t, m, "\"\"", "", NULL, "tc-after-trigger");
        }
        break;
    case GRAMMAR_TAGS_CALLS: /* (two newlines at most before, which the parsers drop after
                                 </think>: no run of whitespace, no answer text) */
        gt_puts(&o, "root ::= \"\\n\"? \"\\n\"? ");
        literal(&o, t, m);
        gt_puts(&o, " tc-after-trigger\n");
        break;
    case GRAMMAR_TAGS_AFTER_TRIGGER: gt_puts(&o, "root ::= tc-calls\n"); break;
    case GRAMMAR_TAGS_IN_ARGS:
        gt_printf(&o, "root ::= tc-args0 %s tc-more %s tc-blank\n", spec->tags[0].end,
                  spec->close ? spec->close : "");
        break;
    }
    if (o.oom) {
        free(o.s);
        snprintf(msg, msg_size, "out of memory for the tool-call grammar");
        return NULL;
    }
    return o.s;
}

di_status grammar_compile_tags(const grammar_tags *spec, grammar **out, char *msg, size_t msg_size)
{
    *out = NULL;
    char *text = grammar_tags_to_gbnf(spec, msg, msg_size);
    if (!text)
        return strncmp(msg, "out of memory", 13) == 0 ? DI_ERR_OUT_OF_MEMORY
                                                      : DI_ERR_INVALID_REQUEST;
    di_status st = grammar_compile_gbnf(text, strlen(text), out, msg, msg_size);
    free(text);
    return st;
}
