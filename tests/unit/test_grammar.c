/* lib/sampler/grammar: the GBNF, regex and JSON Schema compilers' errors (each
 * with its status and a message naming what is wrong), acceptance of byte
 * strings against the languages the grammars define, masks over a small
 * vocabulary (a token is allowed exactly when its bytes extend the output to a
 * prefix of a sentence), the end token only when complete, rollback, and the
 * sampler applying the mask. Mask parity with xgrammar on a real vocabulary is
 * tests/parity/grammar_parity.py. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "sampler/grammar.h"
#include "sampler/sampler.h"

static void expect_error(di_status (*compile)(const char *, size_t, grammar **, char *, size_t),
                         const char *text, di_status want, const char *needle)
{
    grammar *g = (grammar *)1;
    char msg[512];
    di_status st = compile(text, strlen(text), &g, msg, sizeof msg);
    if (st != want || !strstr(msg, needle))
        fail_msg("%s: got %d \"%s\", want %d with \"%s\"", text, (int)st, msg, (int)want, needle);
    assert_null(g);
}

static void test_gbnf_errors_name_the_rule_and_place(void **state)
{
    (void)state;
    expect_error(grammar_compile_gbnf, "root ::= item\n", DI_ERR_INVALID_REQUEST,
                 "undefined rule 'item'");
    expect_error(grammar_compile_gbnf, "start ::= \"a\"\n", DI_ERR_INVALID_REQUEST,
                 "no rule named 'root'");
    expect_error(grammar_compile_gbnf, "root ::= root \"a\" | \"b\"\n", DI_ERR_INVALID_REQUEST,
                 "rule 'root' is left-recursive");
    expect_error(grammar_compile_gbnf, "root ::= x\nx ::= \"a\"? root\n", DI_ERR_INVALID_REQUEST,
                 "left-recursive");
    expect_error(grammar_compile_gbnf, "root ::= \"abc\n", DI_ERR_INVALID_REQUEST,
                 "unterminated string");
    expect_error(grammar_compile_gbnf, "root ::= [a-\n", DI_ERR_INVALID_REQUEST, "1:");
    expect_error(grammar_compile_gbnf, "root ::= \"a\"{3,2}\n", DI_ERR_INVALID_REQUEST,
                 "max below min");
    expect_error(grammar_compile_gbnf, "root ::= \"\\q\"\n", DI_ERR_INVALID_REQUEST,
                 "unknown escape");
    expect_error(grammar_compile_gbnf, "root = \"a\"\n", DI_ERR_INVALID_REQUEST,
                 "rule 'root': expected '::='");
    expect_error(grammar_compile_gbnf, "root ::= \"a\"\nroot ::= \"b\"\n", DI_ERR_INVALID_REQUEST,
                 "2:1: rule 'root' defined twice");
    expect_error(grammar_compile_gbnf, "root ::= (\"a\" | \"b\"\n", DI_ERR_INVALID_REQUEST,
                 "expected ')'");
    expect_error(grammar_compile_gbnf, "root ::= [z-a]\n", DI_ERR_INVALID_REQUEST, "out of order");
}

static void expect_gbnf_message(const char *text, const char *want)
{
    grammar *g = (grammar *)1;
    char msg[512];
    di_status st = grammar_compile_gbnf(text, strlen(text), &g, msg, sizeof msg);
    assert_int_equal(st, DI_ERR_INVALID_REQUEST);
    assert_string_equal(msg, want);
    assert_null(g);
}

/* An undefined rule is reported at its first reference, a left-recursive
 * rule at its definition — not at the end of the grammar. */
static void test_gbnf_errors_point_at_the_rule(void **state)
{
    (void)state;
    expect_gbnf_message("root ::= \"yes\" | nope", "grammar 1:18: undefined rule 'nope'");
    expect_gbnf_message("root ::= \"yes\" | nope\n\n\n", "grammar 1:18: undefined rule 'nope'");
    expect_gbnf_message("root ::= item\nitem ::= \"a\" | ( \"b\" other )*\nx ::= other\n",
                        "grammar 2:22: undefined rule 'other'");
    /* root only reaches the left-recursive rule: the error names that rule */
    expect_gbnf_message("root ::= \"a\" x\nx ::= x \"b\" | \"c\"\n",
                        "grammar 2:1: rule 'x' is left-recursive (it can reach itself before any "
                        "character; rewrite it right-recursively)");
}

static void test_schema_and_regex_errors_name_the_keyword(void **state)
{
    (void)state;
    expect_error(grammar_compile_json_schema, "{\"type\":\"string\",\"contentEncoding\":\"x\"}",
                 DI_ERR_INVALID_REQUEST, "contentEncoding: unsupported keyword");
    expect_error(grammar_compile_json_schema,
                 "{\"type\":\"object\",\"properties\":{\"a\":{\"$ref\":\"#/$defs/B\"}}}",
                 DI_ERR_INVALID_REQUEST, "json_schema.properties.a: $ref: cannot resolve");
    expect_error(grammar_compile_json_schema, "{\"type\":\"object\",\"additionalProperties\":true}",
                 DI_ERR_INVALID_REQUEST, "additionalProperties");
    expect_error(grammar_compile_json_schema, "{\"type\":\"string\",\"format\":\"ipv9\"}",
                 DI_ERR_INVALID_REQUEST, "unsupported format 'ipv9'");
    expect_error(grammar_compile_json_schema, "{\"type\":\"number\",\"minimum\":1}",
                 DI_ERR_INVALID_REQUEST, "minimum/maximum");
    expect_error(grammar_compile_json_schema, "{\"type\":", DI_ERR_INVALID_REQUEST, "not JSON");
    expect_error(grammar_compile_json_schema, "{\"type\":\"strin\"}", DI_ERR_INVALID_REQUEST,
                 "unknown type 'strin'");
    expect_error(grammar_compile_regex, "a(?=b)", DI_ERR_INVALID_REQUEST, "lookarounds");
    expect_error(grammar_compile_regex, "(ab", DI_ERR_INVALID_REQUEST, "expected ')'");
    expect_error(grammar_compile_regex, "*a", DI_ERR_INVALID_REQUEST, "nothing to repeat");
    expect_error(grammar_compile_regex, "a\\1", DI_ERR_INVALID_REQUEST, "backreferences");
    /* bounds and ranges at the pattern's own offset, not the GBNF it becomes */
    expect_error(grammar_compile_regex, "xa{3,2}", DI_ERR_INVALID_REQUEST,
                 "regex at offset 2: repetition {m,n}: n below m");
    expect_error(grammar_compile_regex, "a{99999}", DI_ERR_INVALID_REQUEST,
                 "offset 1: repetition count above 10000");
    expect_error(grammar_compile_regex, "[z-a]", DI_ERR_INVALID_REQUEST,
                 "offset 1: class range out of order");
    expect_error(grammar_compile_regex, "[\\u00e9-\\u00e0]", DI_ERR_INVALID_REQUEST,
                 "class range out of order");
    /* a JSON string cannot hold these unescaped: a class of only them is refused */
    expect_error(grammar_compile_json_schema,
                 "{\"type\":\"string\",\"pattern\":\"[\\\\x00-\\\\x1f\\\"]\"}",
                 DI_ERR_INVALID_REQUEST, "a class of only characters a JSON string must escape");
    /* only the listed properties are generated: a required one must be listed */
    expect_error(grammar_compile_json_schema,
                 "{\"type\":\"object\",\"properties\":{\"a\":{}},\"required\":[\"b\"]}",
                 DI_ERR_INVALID_REQUEST, "required: 'b' is not in properties");
    /* bounds of 10000 items nested (two arrays a level, 8 levels): a work
     * limit's error, not minutes of compiling and gigabytes */
    enum { DEEP = 65536 };
    char *deep = malloc(DEEP), *next = malloc(DEEP);
    assert_non_null(deep);
    assert_non_null(next);
    strcpy(deep, "{\"type\":\"integer\"}");
    for (int i = 0; i < 8; i++) {
        assert_true(snprintf(next, DEEP,
                             "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"array\","
                             "\"maxItems\":10000,\"items\":%s},\"b\":{\"type\":\"array\","
                             "\"maxItems\":10000,\"items\":%s}}}",
                             deep, deep) < DEEP);
        memcpy(deep, next, DEEP);
    }
    expect_error(grammar_compile_json_schema, deep, DI_ERR_INVALID_REQUEST, "rules");
    free(deep);
    free(next);
}

/* A vocabulary of the given NUL-terminated strings (id = index); id n is the end token. */
static grammar_vocab *vocab_of(const char *const *toks, int32_t n)
{
    const uint8_t **bytes = calloc((size_t)n + 1, sizeof *bytes);
    size_t *lens = calloc((size_t)n + 1, sizeof *lens);
    uint8_t *excl = calloc((size_t)n + 1, 1);
    for (int32_t i = 0; i < n; i++) {
        bytes[i] = (const uint8_t *)toks[i];
        lens[i] = strlen(toks[i]);
    }
    excl[n] = 1; /* the end token: special */
    grammar_vocab *v;
    assert_int_equal(grammar_vocab_create(n + 1, bytes, lens, excl, &v), DI_OK);
    free(bytes);
    free(lens);
    free(excl);
    return v;
}

static grammar_matcher *matcher(const char *gbnf, const grammar_vocab *v, int32_t eos)
{
    grammar *g;
    char msg[256];
    if (grammar_compile_gbnf(gbnf, strlen(gbnf), &g, msg, sizeof msg) != DI_OK) fail_msg("%s", msg);
    grammar_matcher *m;
    assert_int_equal(grammar_matcher_create(g, v, &eos, 1, &m), DI_OK);
    return m;
}

static int accepts(const char *gbnf, const char *s)
{
    static const char *const one[] = {"x"};
    grammar_vocab *v = vocab_of(one, 1);
    grammar_matcher *m = matcher(gbnf, v, 1);
    int ok = grammar_matcher_accept_bytes(m, (const uint8_t *)s, strlen(s)) == 0 &&
             grammar_matcher_is_complete(m);
    grammar_matcher_free(m);
    grammar_vocab_free(v);
    return ok;
}

static void test_gbnf_languages(void **state)
{
    (void)state;
    const char *rep = "root ::= \"a\"{2,3} \"b\"+ \"c\"? [x-z]*\n";
    assert_true(accepts(rep, "aab"));
    assert_true(accepts(rep, "aaabbbczzx"));
    assert_false(accepts(rep, "ab"));
    assert_false(accepts(rep, "aaaab"));
    assert_false(accepts(rep, "aabcc"));
    const char *rec = "root ::= obj\nobj ::= \"(\" obj* \")\" # nesting\n";
    assert_true(accepts(rec, "(()(()))"));
    assert_false(accepts(rec, "(()"));
    const char *neg = "root ::= [^a-c\\n] \".\" .\n";
    assert_true(accepts(neg, "d.\xce\xb1")); /* . is any character: α is two bytes */
    assert_false(accepts(neg, "b.x"));
    assert_false(accepts(neg, "d.\xce")); /* half a character is not complete */
    assert_false(accepts(neg, "\xff.x")); /* not UTF-8 */
    const char *alt = "root ::= (\"cat\" | \"dog\") (\",\" ws (\"cat\" | \"dog\"))*\n"
                      "ws ::= [ \\t]*\n";
    assert_true(accepts(alt, "cat,  dog,dog"));
    assert_false(accepts(alt, "cat,"));
    assert_true(accepts("root ::= [\\u00e9-\\u00ea]+ \"\\x41\"\n", "\xc3\xa9\xc3\xaa"
                                                                   "A"));
}

static void test_regex_and_schema_languages(void **state)
{
    (void)state;
    static const char *const one[] = {"x"};
    grammar_vocab *v = vocab_of(one, 1);
    struct {
        int schema;
        const char *src, *text;
        int ok;
    } cases[] = {
        {0, "[a-z]+@(x|yz)\\.com", "ab@yz.com", 1},
        {0, "[a-z]+@(x|yz)\\.com", "ab@y.com", 0},
        {0, "\\d{2,3}-\\w?", "123-", 1},
        {0, "\\d{2,3}-\\w?", "1-a", 0},
        {0, "(ab){2,}c{0,1}", "ababab", 1},
        {0, "(ab){2,}c{0,1}", "abc", 0},
        /* a pattern matches the decoded string: '"', '\\' and controls are
         * generated as their escapes, and kept out of classes */
        {1, "{\"type\":\"string\",\"pattern\":\"a\\\"b\\\\\\\\c\\\\n\"}", "\"a\\\"b\\\\c\\n\"", 1},
        {1, "{\"type\":\"string\",\"pattern\":\"a\\\"b\\\\\\\\c\\\\n\"}", "\"a\"b\\c\n\"", 0},
        {1, "{\"type\":\"string\",\"pattern\":\"[ -~]{3}\"}", "\"a b\"", 1},
        {1, "{\"type\":\"string\",\"pattern\":\"[ -~]{3}\"}", "\"a\"b\"", 0},
        {1, "{\"type\":\"string\",\"pattern\":\"[ -~]{3}\"}", "\"a\\b\"", 0},
        {1, "{\"type\":\"string\",\"pattern\":\"x\\\\sy\"}", "\"x y\"", 1},
        {1, "{\"type\":\"string\",\"pattern\":\"x\\\\sy\"}", "\"x\ty\"", 0},
        {1,
         "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\",\"minimum\":-5,"
         "\"maximum\":120},\"b\":{\"enum\":[\"x\",null]}},\"required\":[\"a\",\"b\"]}",
         "{ \"a\" : 120 ,\n\"b\":null}", 1},
        {1,
         "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\",\"minimum\":-5,"
         "\"maximum\":120}},\"required\":[\"a\"]}",
         "{\"a\":121}", 0},
        {1,
         "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":{\"type\":"
         "\"string\"}},\"required\":[\"b\"]}",
         "{\"b\":\"q\\n\"}", 1},
        {1,
         "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":{\"type\":"
         "\"string\"}},\"required\":[\"b\"]}",
         "{\"a\":1}", 0},
        {1, "{\"type\":\"array\",\"items\":{\"type\":\"boolean\"},\"minItems\":1,\"maxItems\":2}",
         "[true, false]", 1},
        {1, "{\"type\":\"array\",\"items\":{\"type\":\"boolean\"},\"minItems\":1,\"maxItems\":2}",
         "[]", 0},
        {1, "{\"type\":\"string\",\"format\":\"date\"}", "\"2024-02-31\"", 1},
        {1, "{\"type\":\"string\",\"format\":\"date\"}", "\"2024-13-01\"", 0},
        {1,
         "{\"anyOf\":[{\"type\":\"null\"},{\"$ref\":\"#/$defs/N\"}],\"$defs\":{\"N\":{"
         "\"type\":\"number\"}}}",
         "-1.5e+3", 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        grammar *g;
        char msg[256];
        di_status st =
            cases[i].schema
                ? grammar_compile_json_schema(cases[i].src, strlen(cases[i].src), &g, msg,
                                              sizeof msg)
                : grammar_compile_regex(cases[i].src, strlen(cases[i].src), &g, msg, sizeof msg);
        if (st != DI_OK) fail_msg("case %zu: %s", i, msg);
        int32_t eos = 1;
        grammar_matcher *m;
        assert_int_equal(grammar_matcher_create(g, v, &eos, 1, &m), DI_OK);
        int ok = grammar_matcher_accept_bytes(m, (const uint8_t *)cases[i].text,
                                              strlen(cases[i].text)) == 0 &&
                 grammar_matcher_is_complete(m);
        if (ok != cases[i].ok)
            fail_msg("case %zu: %s on %s gave %d", i, cases[i].src, cases[i].text, ok);
        grammar_matcher_free(m);
    }
    grammar_vocab_free(v);
}

static int bit(const uint32_t *mask, int32_t i)
{
    return (mask[i >> 5] >> (i & 31)) & 1;
}

static void test_mask_end_token_and_rollback(void **state)
{
    (void)state;
    /* 0 "a", 1 "ab", 2 "b", 3 "abc", 4 "c", 5 "" (never), 6 "é" half, 7 end */
    static const char *const toks[] = {"a", "ab", "b", "abc", "c", "", "\xc3"};
    grammar_vocab *v = vocab_of(toks, 7);
    grammar_matcher *m = matcher("root ::= \"a\" \"b\"+ [\\u00e9]?\n", v, 7);
    uint32_t mask[1];
    assert_int_equal(grammar_matcher_fill_mask(m, mask), 2);
    assert_true(bit(mask, 0) && bit(mask, 1));
    assert_int_equal(grammar_matcher_accept(m, 2), -1);      /* "b" first: rejected, state kept */
    assert_int_equal(grammar_matcher_accept(m, 7), -1);      /* not complete: no end */
    assert_int_equal(grammar_matcher_accept(m, 1), 0);       /* "ab" */
    assert_int_equal(grammar_matcher_fill_mask(m, mask), 3); /* "b", "\xc3", end */
    assert_true(bit(mask, 2) && bit(mask, 6) && bit(mask, 7));
    assert_false(bit(mask, 5) || bit(mask, 3));
    assert_int_equal(grammar_matcher_accept(m, 6), 0); /* half of é */
    /* mid-character, and no token spells the rest of é: nothing continues, so
     * the mask falls back to the end token (the output ends, not breaks) */
    assert_int_equal(grammar_matcher_fill_mask(m, mask), 1);
    assert_true(bit(mask, 7));
    assert_false(grammar_matcher_is_complete(m));
    assert_int_equal(grammar_matcher_rollback(m, 1), 0);
    assert_int_equal(grammar_matcher_accept(m, 7), 0); /* back after "ab": complete */
    assert_true(grammar_matcher_is_terminated(m));
    assert_int_equal(grammar_matcher_fill_mask(m, mask), 1);
    assert_true(bit(mask, 7));
    assert_int_equal(grammar_matcher_rollback(m, 2), 0);
    assert_int_equal(grammar_matcher_fill_mask(m, mask), 2);
    assert_int_equal(grammar_matcher_rollback(m, 1), -1);
    grammar_matcher_free(m);
    grammar_vocab_free(v);
}

static void test_sampler_never_draws_a_masked_token(void **state)
{
    (void)state;
    static const char *const toks[] = {"x", "y", "z", "w"};
    grammar_vocab *v = vocab_of(toks, 4);
    for (int greedy = 0; greedy < 2; greedy++) {
        sampler_params p = {0};
        p.temperature = greedy ? 0.0f : 1.0f;
        p.top_p = 1.0f;
        p.top_k = greedy ? 0 : 3;
        p.repetition_penalty = 1.0f;
        p.seed = 5;
        sampler *s;
        char msg[128];
        assert_int_equal(sampler_create(&p, 5, &s, msg, sizeof msg), DI_OK);
        assert_int_equal(sampler_set_grammar(s, matcher("root ::= [yw] \"z\"\n", v, 4)), DI_OK);
        for (int step = 0; step < 2; step++) {
            float logits[5] = {9.0f, 1.0f, 8.0f, 0.5f, 7.0f};
            sampler_candidate scratch[10];
            int32_t t = sampler_sample(s, logits, scratch);
            if (step == 0) assert_true(t == 1 || t == 3);
            if (step == 0 && greedy) assert_int_equal(t, 1);
            if (step == 1) assert_int_equal(t, 2);
            assert_int_equal(sampler_accept(s, t), 0);
        }
        float logits[5] = {9.0f, 1.0f, 8.0f, 0.5f, 7.0f};
        sampler_candidate c[10];
        assert_int_equal(sampler_sample(s, logits, c), 4); /* complete: the end token */
        sampler_free(s);
    }
    grammar_vocab_free(v);
}

/* ---- tool calls as grammar tags (grammar_tags.c) ----------------------------- */

static int tags_accept(const grammar_tags *spec, const char *s)
{
    grammar *g;
    char msg[512];
    if (grammar_compile_tags(spec, &g, msg, sizeof msg) != DI_OK) fail_msg("%s", msg);
    static const char *const one[] = {"x"};
    grammar_vocab *v = vocab_of(one, 1);
    int32_t eos = 1;
    grammar_matcher *m;
    assert_int_equal(grammar_matcher_create(g, v, &eos, 1, &m), DI_OK);
    int ok = grammar_matcher_accept_bytes(m, (const uint8_t *)s, strlen(s)) == 0 &&
             grammar_matcher_is_complete(m);
    grammar_matcher_free(m);
    grammar_vocab_free(v);
    return ok;
}

static const grammar_tag hermes_tags[] = {
    {"ws \"{\" ws \"\\\"name\\\"\" ws \":\" ws \"\\\"f\\\"\" ws \",\" ws \"\\\"arguments\\\"\" ws "
     "\":\" ws",
     "{\"type\":\"object\",\"properties\":{\"x\":{\"type\":\"integer\"}},\"required\":[\"x\"]}", 72,
     "ws \"}\" ws \"</tool_call>\"", "tools[0].function.parameters"},
    {"ws \"{\" ws \"\\\"name\\\"\" ws \":\" ws \"\\\"g\\\"\" ws \",\" ws \"\\\"arguments\\\"\" ws "
     "\":\" ws",
     NULL, 0, "ws \"}\" ws \"</tool_call>\"", "tools[1].function.parameters"},
};

/* Hermes calls after free text: the text may be anything that does not spell
 * the trigger; a call's name is a declared one and its arguments match that
 * tool's schema (any object for a tool without one); only whitespace follows. */
static void test_tags_free_text_then_calls(void **state)
{
    (void)state;
    grammar_tags spec = {.trigger = "<tool_call>",
                         .tags = hermes_tags,
                         .n_tags = 2,
                         .separator = "ws \"<tool_call>\"",
                         .close = "",
                         .start = GRAMMAR_TAGS_TEXT_OR_CALLS};
    assert_int_equal((int)strlen(hermes_tags[0].schema), (int)hermes_tags[0].schema_len);
    static const char *const good[] = {
        "",
        "Hello, world.",
        "a <tool b </tool_call> <tool_cal",
        "<tool_call>{\"name\": \"f\", \"arguments\": {\"x\": 3}}</tool_call>",
        "<tool_call>{\"name\": \"f\", \"arguments\": {\n    \"x\":\t 3\n}}</tool_call>",
        "I will call.\n<tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\": -12}}\n</tool_call>\n",
        "<<tool_call>{\"name\":\"g\",\"arguments\":{\"q\":[1,\"s\"]}}</tool_call><tool_call>"
        "{\"name\": \"f\", \"arguments\": {\"x\": 0}}</tool_call>",
    };
    static const char *const bad[] = {
        "<tool_call>{\"name\": \"h\", \"arguments\": {}}</tool_call>",
        "<tool_call>{\"name\": \"f\", \"arguments\": {\"x\": \"3\"}}</tool_call>",
        "<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>",
        "<tool_call>{\"name\": \"g\", \"arguments\": [1]}</tool_call>",
        /* a run of whitespace: blank lines, or more than two spaces */
        "<tool_call>{\"name\": \"f\", \"arguments\": {\"x\":\n\n 3}}</tool_call>",
        "<tool_call>{\"name\": \"f\", \"arguments\": {\"x\":   3}}</tool_call>",
        "<tool_call>{\"name\": \"f\", \"arguments\": {\"x\": 3}}</tool_call> and text",
        "text <tool_call> more text",
        "<tool_call>",
    };
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++)
        if (!tags_accept(&spec, good[i])) fail_msg("rejected: %s", good[i]);
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        if (tags_accept(&spec, bad[i])) fail_msg("accepted: %s", bad[i]);
}

/* Free text avoids a self-overlapping trigger exactly: over random strings of
 * {a, b, c}, a string is accepted as text exactly when it does not contain
 * "abab" (the region after it needs a call, which these never spell). */
static void test_tags_free_text_is_the_trigger_complement(void **state)
{
    (void)state;
    grammar_tags spec = {.trigger = "abab",
                         .tags = hermes_tags,
                         .n_tags = 1,
                         .close = "",
                         .start = GRAMMAR_TAGS_TEXT_OR_CALLS};
    uint64_t x = 0x9E3779B97F4A7C15ull;
    for (int k = 0; k < 300; k++) {
        char s[16];
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        int n = (int)(x % 12);
        for (int i = 0; i < n; i++) s[i] = "abc"[(x >> (8 + 2 * i)) % 3];
        s[n] = 0;
        int want = strstr(s, "abab") == NULL;
        if (tags_accept(&spec, s) != want) fail_msg("'%s': expected %d", s, want);
    }
}

/* A call required from the start (leading whitespace allowed), and a named
 * call whose prompt wrote everything up to the arguments. */
static void test_tags_forced_calls(void **state)
{
    (void)state;
    grammar_tags spec = {.trigger = "<tool_call>",
                         .tags = hermes_tags,
                         .n_tags = 2,
                         .separator = "ws \"<tool_call>\"",
                         .close = "",
                         .start = GRAMMAR_TAGS_CALLS};
    assert_true(
        tags_accept(&spec, "\n<tool_call>{\"name\": \"g\", \"arguments\": {}}</tool_call>"));
    assert_false(
        tags_accept(&spec, " <tool_call>{\"name\": \"g\", \"arguments\": {}}</tool_call>"));
    assert_false(tags_accept(&spec, ""));
    assert_false(
        tags_accept(&spec, "Sure. <tool_call>{\"name\": \"g\", \"arguments\": {}}</tool_call>"));
    spec.start = GRAMMAR_TAGS_AFTER_TRIGGER;
    assert_true(tags_accept(&spec, "\n{\"name\": \"f\", \"arguments\": {\"x\": 1}}\n</tool_call>"));
    assert_false(
        tags_accept(&spec, "<tool_call>{\"name\": \"f\", \"arguments\": {\"x\": 1}}</tool_call>"));
    spec.start = GRAMMAR_TAGS_IN_ARGS;
    spec.n_tags = 1;
    assert_true(tags_accept(&spec, "{\"x\": 7}}\n</tool_call>"));
    assert_false(tags_accept(&spec, "{\"y\": 7}}\n</tool_call>"));
    assert_false(tags_accept(&spec, "{\"x\": 7}"));
}

/* A tag's schema that does not compile names the tag's field; a format's
 * error names the format's field. */
static void test_tags_errors_name_the_field(void **state)
{
    (void)state;
    grammar_tag bad = hermes_tags[0];
    bad.schema =
        "{\"type\":\"object\",\"properties\":{\"x\":{\"type\":\"string\",\"format\":\"ipv9\"}}}";
    bad.schema_len = strlen(bad.schema);
    bad.field = "tools[2].function.parameters";
    grammar_tags spec = {.trigger = "<tool_call>", .tags = &bad, .n_tags = 1, .close = ""};
    grammar *g = NULL;
    char msg[512];
    assert_int_equal(grammar_compile_tags(&spec, &g, msg, sizeof msg), DI_ERR_INVALID_REQUEST);
    assert_null(g);
    assert_non_null(strstr(msg, "tools[2].function.parameters.properties.x: format: unsupported "
                                "format 'ipv9'"));
    bad.schema = "{\"type\":";
    bad.schema_len = strlen(bad.schema);
    assert_int_equal(grammar_compile_tags(&spec, &g, msg, sizeof msg), DI_ERR_INVALID_REQUEST);
    assert_non_null(strstr(msg, "tools[2].function.parameters: not JSON"));
    spec.tags = hermes_tags;
    spec.answer = "[a-";
    spec.answer_len = 3;
    spec.answer_is_regex = 1;
    spec.answer_field = "response_format.regex";
    assert_int_equal(grammar_compile_tags(&spec, &g, msg, sizeof msg), DI_ERR_INVALID_REQUEST);
    assert_non_null(strstr(msg, "response_format.regex at offset"));
    spec.answer = NULL;
    spec.trigger = "";
    assert_int_equal(grammar_compile_tags(&spec, &g, msg, sizeof msg), DI_ERR_INVALID_REQUEST);
    spec.trigger = "<tool_call>";
    spec.n_tags = 0;
    assert_int_equal(grammar_compile_tags(&spec, &g, msg, sizeof msg), DI_ERR_INVALID_REQUEST);
    assert_string_equal(msg, "tool calls: no tool to call");
}

/* The matcher's mask cache gives the mask a fresh matcher computes: along
 * a random token sequence through free text, a trigger and a call (states
 * that come back, and rollbacks), each step's mask equals that of a new
 * matcher advanced by the same tokens (whose first mask is never cached). */
static void test_mask_cache_equals_a_fresh_walk(void **state)
{
    (void)state;
    static const char *const toks[] = {
        "a",  "<",       "tool",         "_call", ">",  "{\"name\": \"g\", ", "\"arguments\": ",
        "{}", "}",       "</tool_call>", " ",     "<t", "ool_call>",          "b<",
        "{",  "\"x\": 1"};
    int32_t n = (int32_t)(sizeof toks / sizeof toks[0]);
    grammar_vocab *v = vocab_of(toks, n);
    grammar_tags spec = {.trigger = "<tool_call>",
                         .tags = hermes_tags,
                         .n_tags = 2,
                         .separator = "ws \"<tool_call>\"",
                         .close = "",
                         .start = GRAMMAR_TAGS_TEXT_OR_CALLS};
    char msg[512];
    grammar *g;
    assert_int_equal(grammar_compile_tags(&spec, &g, msg, sizeof msg), DI_OK);
    int32_t eos = n;
    grammar_matcher *m;
    assert_int_equal(grammar_matcher_create(g, v, &eos, 1, &m), DI_OK);
    int32_t seq[64];
    int n_seq = 0;
    uint64_t x = 12345;
    uint32_t a[1], b[1];
    for (int step = 0; step < 60; step++) {
        int32_t ca = grammar_matcher_fill_mask(m, a);
        grammar_matcher *f;
        assert_int_equal(grammar_compile_tags(&spec, &g, msg, sizeof msg), DI_OK);
        assert_int_equal(grammar_matcher_create(g, v, &eos, 1, &f), DI_OK);
        for (int i = 0; i < n_seq; i++) assert_int_equal(grammar_matcher_accept(f, seq[i]), 0);
        int32_t cb = grammar_matcher_fill_mask(f, b);
        grammar_matcher_free(f);
        assert_int_equal(ca, cb);
        assert_int_equal(a[0], b[0]);
        if (ca == 0 || grammar_matcher_is_terminated(m)) break;
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        if (n_seq > 2 && x % 7 == 0) { /* a rollback now and then */
            assert_int_equal(grammar_matcher_rollback(m, 1), 0);
            n_seq--;
            continue;
        }
        int32_t pick = -1;
        for (int32_t k = 0, r = (int32_t)(x % (uint64_t)ca); k <= n; k++)
            if ((a[0] >> k) & 1 && r-- == 0) pick = k;
        if (pick == eos || n_seq == 64) break;
        assert_int_equal(grammar_matcher_accept(m, pick), 0);
        seq[n_seq++] = pick;
    }
    grammar_matcher_free(m);
    grammar_vocab_free(v);
}

/* A grammar with no byte sets at all (only empty strings) compiles, and its
 * mask holds the end token alone: the language is the empty sentence (found
 * by UBSan: the compiler copied its sets from a null pointer). */
static void test_grammar_of_empty_strings_allows_only_the_end(void **state)
{
    (void)state;
    static const char *const toks[] = {"a", "ab"};
    grammar_vocab *v = vocab_of(toks, 2);
    static const char *const gbnfs[] = {"root ::= \"\"\n", "root ::= x x | \"\"\nx ::= \"\"\n"};
    for (int i = 0; i < 2; i++) {
        grammar_matcher *m = matcher(gbnfs[i], v, 2);
        uint32_t mask[1];
        assert_int_equal(grammar_matcher_fill_mask(m, mask), 1);
        assert_int_equal(mask[0], 1u << 2);
        assert_int_equal(grammar_matcher_fill_mask_exact(m, mask), 1);
        assert_int_equal(mask[0], 1u << 2);
        assert_true(grammar_matcher_is_complete(m));
        grammar_matcher_free(m);
    }
    grammar_vocab_free(v);
}

/* When no token of the vocabulary continues the output, the mask allows the
 * end token (the output ends rather than breaks the grammar), and accepting
 * it ends the matcher as a complete output's would (it was refused, so the
 * engine failed the request as out of memory). */
static void test_end_token_allowed_when_nothing_continues_is_accepted(void **state)
{
    (void)state;
    static const char *const toks[] = {"a", "ab"};
    grammar_vocab *v = vocab_of(toks, 2);
    grammar_matcher *m = matcher("root ::= \"a\" \"x\"\n", v, 2);
    uint32_t mask[1];
    assert_int_equal(grammar_matcher_fill_mask(m, mask), 1);
    assert_int_equal(mask[0], 1u << 0);
    assert_int_equal(grammar_matcher_accept(m, 2), -1); /* "a" continues: not yet */
    assert_int_equal(grammar_matcher_accept(m, 0), 0);
    assert_int_equal(grammar_matcher_fill_mask(m, mask), 1);
    assert_int_equal(mask[0], 1u << 2); /* "x": no token spells it */
    assert_int_equal(grammar_matcher_accept(m, 2), 0);
    assert_true(grammar_matcher_is_terminated(m));
    assert_int_equal(grammar_matcher_rollback(m, 1), 0);
    assert_false(grammar_matcher_is_terminated(m));
    grammar_matcher_free(m);
    grammar_vocab_free(v);
}

/* The adaptive mask (entries per truncated stack top, uncertain tokens
 * walked whole) equals the exact walk of the whole vocabulary at every step
 * of random walks through JSON schemas and a recursive GBNF grammar, over a
 * vocabulary of random multi-character tokens that cross rule ends (`1,`,
 * `"}`, `a"]`): each step's mask and count are compared on the same matcher. */
static void test_adaptive_mask_equals_the_exact_walk(void **state)
{
    (void)state;
    static const char alphabet[] = "{}[]\":, 0123456789abcdxyz-.\\\ne";
    /* tokens that leave a frame and, on another branch of it, go on before
     * they die: "ab" may end `item` (the context then reads "cx") or go on
     * as "bcd" */
    static const char *const fixed[] = {"abcx", "abcdcx", "bcx", "abc"};
    enum { N_TOK = 3000 };
    char *toks[N_TOK];
    uint64_t x = 0x9e3779b97f4a7c15u;
    for (int32_t i = 0; i < N_TOK; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        if (i >= N_TOK - 4) {
            size_t fl = strlen(fixed[i - (N_TOK - 4)]);
            toks[i] = malloc(fl + 1);
            memcpy(toks[i], fixed[i - (N_TOK - 4)], fl + 1);
            continue;
        }
        size_t len = i < (int32_t)sizeof alphabet - 1 ? 1 : 2 + (size_t)(x % 5);
        toks[i] = malloc(len + 1);
        for (size_t j = 0; j < len; j++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            toks[i][j] = len == 1 ? alphabet[i] : alphabet[x % (sizeof alphabet - 1)];
        }
        toks[i][len] = 0;
    }
    grammar_vocab *v = vocab_of((const char *const *)toks, N_TOK);
    static const char *const schemas[] = {
        "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\"},\"b\":{\"type\":"
        "\"array\",\"items\":{\"type\":\"integer\"}},\"c\":{\"anyOf\":[{\"type\":\"number\"},"
        "{\"type\":\"null\"}]}},\"required\":[\"a\",\"b\"]}",
        "{\"type\":\"array\",\"items\":{\"type\":\"string\",\"maxLength\":3},\"minItems\":1}",
        "{\"type\":\"object\",\"properties\":{\"x\":{\"type\":\"object\",\"properties\":{\"y\":"
        "{\"enum\":[\"ab\",\"abc\",12]}},\"required\":[\"y\"]}},\"required\":[\"x\"]}"};
    static const char *const gbnfs[] = {"root ::= \"[\" list \"]\"\n"
                                        "list ::= item (\",\" item)*\n"
                                        "item ::= [a-c]+ | [0-9]+ \".\"? [0-9]* | root\n",
                                        "root ::= (item \"cx\")+ \"]\"\n"
                                        "item ::= \"a\" (\"b\" | \"bcd\")\n"};
    size_t words = (N_TOK + 1 + 31) / 32;
    uint32_t *a = malloc(words * sizeof *a), *b = malloc(words * sizeof *b);
    int steps = 0;
    for (int gi = 0; gi < 5; gi++)
        for (int run = 0; run < 3; run++) {
            grammar *g;
            char msg[256];
            if (gi < 3)
                assert_int_equal(grammar_compile_json_schema(schemas[gi], strlen(schemas[gi]), &g,
                                                             msg, sizeof msg),
                                 DI_OK);
            else
                assert_int_equal(
                    grammar_compile_gbnf(gbnfs[gi - 3], strlen(gbnfs[gi - 3]), &g, msg, sizeof msg),
                    DI_OK);
            int32_t eos = N_TOK;
            grammar_matcher *m;
            assert_int_equal(grammar_matcher_create(g, v, &eos, 1, &m), DI_OK);
            for (int step = 0; step < 80; step++, steps++) {
                int32_t ca = grammar_matcher_fill_mask(m, a);
                int32_t cb = grammar_matcher_fill_mask_exact(m, b);
                assert_int_equal(ca, cb);
                assert_memory_equal(a, b, words * sizeof *a);
                if (ca == 0) break;
                /* a random allowed token, a long one when there is one */
                int32_t pick = -1, best = -1;
                x ^= x << 13, x ^= x >> 7, x ^= x << 17;
                for (int32_t k = 0, r = (int32_t)(x % (uint64_t)ca); k <= N_TOK; k++)
                    if ((a[k >> 5] >> (k & 31)) & 1) {
                        if (r-- == 0) pick = k;
                        if (k < N_TOK && strlen(toks[k]) > 2 && best < 0 && r < ca / 2) best = k;
                    }
                if (best >= 0 && x % 3) pick = best;
                if (pick == eos) break;
                assert_int_equal(grammar_matcher_accept(m, pick), 0);
            }
            grammar_matcher_free(m);
        }
    assert_true(steps > 100);
    free(a);
    free(b);
    grammar_vocab_free(v);
    for (int32_t i = 0; i < N_TOK; i++) free(toks[i]);
}

/* An ambiguous grammar stops the matcher: 60 copies of a repetition that can
 * match nothing (fewer than the 64 the compiler refuses) multiply the stacks
 * as "a"s come; past the limit (lowered here to 512) a mask or an accept fails and the
 * error names the ambiguity; a grammar whose start already passes it is
 * DI_ERR_INVALID_REQUEST at grammar_matcher_create. Many copies are refused
 * at compile time, naming the repetition. */
static void test_ambiguous_grammar_stops_the_matcher(void **state)
{
    (void)state;
    static const char *const toks[] = {"a", "b"};
    grammar_vocab *v = vocab_of(toks, 2);
    int32_t eos = 2;
    grammar_matcher *m = matcher("root ::= (\"a\"{0,1000}){0,60}\n", v, eos);
    grammar_matcher_set_max_stacks(m, 512);
    uint32_t mask[1];
    int k = 0;
    for (; k < 200; k++) {
        if (grammar_matcher_fill_mask(m, mask) < 0) break;
        if (grammar_matcher_accept(m, 0) != 0) break;
    }
    assert_true(k > 0 && k < 200);
    const char *why;
    assert_int_equal(grammar_matcher_error(m, &why), DI_ERR_INVALID_REQUEST);
    assert_non_null(strstr(why, "parses of the output at once"));
    grammar_matcher_free(m);
    /* the start alone: 100 alternatives */
    char text[1024] = "root ::= \"x0\"";
    for (int i = 1; i < 100; i++)
        snprintf(text + strlen(text), sizeof text - strlen(text), " | \"x%d\"", i);
    grammar *g;
    char msg[256];
    assert_int_equal(grammar_compile_gbnf(text, strlen(text), &g, msg, sizeof msg), DI_OK);
    assert_int_equal(grammar_matcher_create(g, v, &eos, 1, &m), DI_OK); /* 100 < 32768 */
    grammar_matcher_free(m);
    static const char many[] = "root ::= (\"a\"{0,1000}){0,1000}\n";
    assert_int_equal(grammar_compile_gbnf(many, strlen(many), &g, msg, sizeof msg),
                     DI_ERR_INVALID_REQUEST);
    assert_non_null(strstr(msg, "1:23: repetition {0,1000} of something that can match nothing"));
    static const char few[] = "root ::= (\"a\"?){3} \"b\"\n";
    assert_int_equal(grammar_compile_gbnf(few, strlen(few), &g, msg, sizeof msg), DI_OK);
    grammar_free(g);
    grammar_vocab_free(v);
}

/* Random GBNF grammars over the alphabet "abc" (literals, classes, groups
 * with * + ? {m,n}, several rules; references go to later rules, or back to
 * the own rule in tail position: nested self-references make ambiguous
 * grammars whose stack sets grow exponentially, see docs/grammar.md) against
 * the exact walk at every step of random walks with rollbacks interleaved,
 * over a vocabulary of every string up to 3 bytes, longer random ones (some
 * with bytes no grammar has, so that sometimes no token continues) and one
 * of 300 bytes (past the walk's 255-byte stack arrays). */
static uint64_t rg_x;
static uint32_t rg_rand(uint32_t n)
{
    rg_x ^= rg_x << 13, rg_x ^= rg_x >> 7, rg_x ^= rg_x << 17;
    return (uint32_t)(rg_x % n);
}

static void rg_item(char *g, int rule, int n_rules, int depth)
{
    static const char *const cls[] = {"[a-c]", "[ab]", "[^a]", "[c]", "[^b-c]"};
    static const char *const ops[] = {"", "*", "+", "?", "{2}", "{0,3}", "{1,2}", "{2,}"};
    char buf[32];
    uint32_t k = rg_rand(depth > 1 ? 3 : 5);
    if (k == 0) {
        strcat(g, "\"");
        for (uint32_t i = 0, l = 1 + rg_rand(3); i < l; i++) strncat(g, &"abc"[rg_rand(3)], 1);
        strcat(g, "\"");
    } else if (k == 1 || (k == 2 && rule + 1 == n_rules))
        strcat(g, cls[rg_rand(5)]);
    else if (k == 2) {
        snprintf(buf, sizeof buf, "r%d", rule + 1 + (int)rg_rand((uint32_t)(n_rules - rule - 1)));
        strcat(g, buf);
    } else {
        strcat(g, "(");
        for (uint32_t a = 0, na = 1 + rg_rand(3); a < na; a++) {
            if (a) strcat(g, " | ");
            uint32_t n = rg_rand(4);
            if (!n) strcat(g, "\"\"");
            for (uint32_t i = 0; i < n; i++, strcat(g, " ")) rg_item(g, rule, n_rules, depth + 1);
        }
        strcat(g, ")");
        strcat(g, ops[rg_rand(8)]);
    }
}

static void test_random_grammars_mask_equals_the_exact_walk(void **state)
{
    (void)state;
    enum { N_TOK = 39 + 40 + 1 };
    char *toks[N_TOK];
    int32_t nt = 0;
    rg_x = 0x2545f4914f6cdd1du;
    for (int len = 1, cnt = 3; len <= 3; len++, cnt *= 3)
        for (int c = 0; c < cnt; c++, nt++) {
            toks[nt] = calloc(4, 1);
            for (int i = 0, v = c; i < len; i++, v /= 3) toks[nt][i] = "abc"[v % 3];
        }
    for (int i = 0; i < 40; i++, nt++) {
        uint32_t len = 4 + rg_rand(9);
        toks[nt] = calloc(len + 1, 1);
        for (uint32_t j = 0; j < len; j++) toks[nt][j] = "abcxy"[rg_rand(5)];
    }
    toks[nt] = calloc(301, 1);
    for (int j = 0; j < 300; j++) toks[nt][j] = j < 280 ? 'c' : "ab"[j % 2];
    nt++;
    grammar_vocab *v = vocab_of((const char *const *)toks, N_TOK);
    uint32_t a[(N_TOK + 1 + 31) / 32], b[(N_TOK + 1 + 31) / 32];
    int compiled = 0, steps = 0;
    for (int it = 0; it < 800; it++) {
        char g[8192] = "";
        int n_rules = 1 + (int)rg_rand(4);
        for (int r = 0; r < n_rules; r++) {
            char head[16];
            snprintf(head, sizeof head, r ? "r%d ::= " : "root ::= ", r);
            strcat(g, head);
            for (uint32_t al = 0, na = 1 + rg_rand(3); al < na; al++) {
                if (al) strcat(g, " | ");
                uint32_t n = rg_rand(4);
                if (!n) strcat(g, "\"\"");
                for (uint32_t i = 0; i < n; i++, strcat(g, " ")) rg_item(g, r, n_rules, 0);
                if (n && rg_rand(4) == 0) strcat(g, r ? "r" : "root"); /* tail self-call */
                if (n && r && g[strlen(g) - 1] == 'r') {
                    snprintf(head, sizeof head, "%d", r);
                    strcat(g, head);
                }
            }
            strcat(g, "\n");
        }
        grammar *gr;
        char msg[256];
        if (grammar_compile_gbnf(g, strlen(g), &gr, msg, sizeof msg) != DI_OK) continue;
        compiled++;
        int32_t eos = N_TOK;
        grammar_matcher *m;
        assert_int_equal(grammar_matcher_create(gr, v, &eos, 1, &m), DI_OK);
        int depth = 0;
        for (int step = 0; step < 24; step++, steps++) {
            int32_t ca = grammar_matcher_fill_mask(m, a),
                    cb = grammar_matcher_fill_mask_exact(m, b);
            if (ca != cb || memcmp(a, b, sizeof a) != 0)
                fail_msg("step %d: fast %d, exact %d, in\n%s", step, ca, cb, g);
            if (ca <= 0) break;
            if (depth && rg_rand(5) == 0) {
                int32_t n = 1 + (int32_t)rg_rand((uint32_t)depth);
                assert_int_equal(grammar_matcher_rollback(m, n), 0);
                depth -= n;
                continue;
            }
            int32_t pick = -1;
            for (int32_t k = 0, r = (int32_t)rg_rand((uint32_t)ca); k <= N_TOK && pick < 0; k++)
                if (((a[k >> 5] >> (k & 31)) & 1) && r-- == 0) pick = k;
            if (grammar_matcher_accept(m, pick) != 0)
                fail_msg("step %d: token %d (%.20s) allowed, refused by accept in\n%s", step, pick,
                         pick < N_TOK ? toks[pick] : "<end>", g);
            depth++;
            if (pick == eos) break;
        }
        grammar_matcher_free(m);
    }
    if (compiled < 250 || steps < 2000) fail_msg("compiled %d, steps %d", compiled, steps);
    grammar_vocab_free(v);
    for (int32_t i = 0; i < N_TOK; i++) free(toks[i]);
}

/* DeepSeek V4's DSML parameters: each property in schema order as a
 * parameter element (a plain string raw with string="true", anything else as
 * JSON with string="false"), the required ones present; a raw value ends at
 * the first "</｜DSML｜" (it may hold "</" and "<｜DSML｜" otherwise); a schema
 * without properties takes any parameters. */
static void test_tags_dsml_parameters(void **state)
{
    (void)state;
    static const char schema[] =
        "{\"type\":\"object\",\"properties\":{\"n\":{\"type\":\"integer\"},\"note\":{\"type\":"
        "\"string\"},\"opt\":{\"type\":\"boolean\"}},\"required\":[\"n\",\"note\"]}";
    grammar_tag tags[2] = {
        {"\"<｜DSML｜invoke name=\\\"f\\\">\\n\"", schema, sizeof schema - 1,
         "\"</｜DSML｜invoke>\\n\"", "tools[0].function.parameters"},
        {"\"<｜DSML｜invoke name=\\\"g\\\">\\n\"", NULL, 0, "\"</｜DSML｜invoke>\\n\"",
         "tools[1].function.parameters"},
    };
    grammar_tags spec = {.trigger = "<｜DSML｜",
                         .open = "\"tool_calls>\\n\"",
                         .dsml = "parameter",
                         .tags = tags,
                         .n_tags = 2,
                         .separator = "\"\"",
                         .close = "\"</｜DSML｜tool_calls>\"",
                         .start = GRAMMAR_TAGS_TEXT_OR_CALLS};
#define P(name, str, v)                                                                            \
    "<｜DSML｜parameter name=\"" name "\" string=\"" str "\">" v "</｜DSML｜parameter>\n"
#define CALL(name, params)                                                                         \
    "<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"" name "\">\n" params "</｜DSML｜invoke>\n"    \
    "</｜DSML｜tool_calls>"
    static const char *const good[] = {
        "Sure.\n\n" CALL("f", P("n", "false", "3") P("note", "true", "a </b> <｜DSML｜ \" {")),
        CALL("f", P("n", "false", "-1") P("note", "true", "") P("opt", "false", "true")),
        CALL("g", P("anything", "true", "x") P("k", "false", "[1, {\"a\": null}]")),
        CALL("g", ""),
        "text with ｜DSML｜ but no opening",
    };
    static const char *const bad[] = {
        CALL("f", P("note", "true", "a") P("n", "false", "3")),     /* order */
        CALL("f", P("n", "false", "3")),                            /* required note */
        CALL("f", P("n", "true", "3") P("note", "true", "a")),      /* n is not raw */
        CALL("f", P("n", "false", "\"3\"") P("note", "true", "a")), /* n is an integer */
        CALL("f", P("n", "false", "3") P("note", "true", "a") P("x", "false", "1")),
        CALL("h", ""),
        "<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"f\">\n" P(
            "n", "false",
            "3") "<｜DSML｜parameter name=\"note\" string=\"true\">a</｜DSML｜invoke>",
    };
#undef P
#undef CALL
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++)
        if (!tags_accept(&spec, good[i])) fail_msg("rejected: %s", good[i]);
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        if (tags_accept(&spec, bad[i])) fail_msg("accepted: %s", bad[i]);
    /* a property's schema error names its path in the whole schema */
    grammar_tag t = tags[0];
    t.schema =
        "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\",\"format\":\"ipv9\"}}}";
    t.schema_len = strlen(t.schema);
    spec.tags = &t;
    spec.n_tags = 1;
    grammar *g = NULL;
    char msg[512];
    assert_int_equal(grammar_compile_tags(&spec, &g, msg, sizeof msg), DI_ERR_INVALID_REQUEST);
    assert_non_null(strstr(msg, "tools[0].function.parameters.properties.a: format: unsupported"));
}

/* One syntax's call around a JSON string argument, for
 * test_tags_strings_keep_out_the_closing_marker: the text before and after
 * the string, the marker the stream parser ends the call at, and pieces that
 * spell it, its prefixes and near misses (escapes included). */
typedef struct marker_case {
    grammar_tags spec;
    const char *before, *mid, *after, *marker;
    const char *pieces[12];
} marker_case;

/* Does spec accept before + s + mid + s + after (s as a string of the schema,
 * then as a key of an untyped value)? */
static int string_accepted(const marker_case *mc, const char *s)
{
    char text[512];
    snprintf(text, sizeof text, "%s%s%s%s%s", mc->before, s, mc->mid, s, mc->after);
    return tags_accept(&mc->spec, text);
}

/* Inside a call, a JSON string may not spell the call's closing marker (the
 * stream parser would end the call there): over random strings built from the
 * marker's pieces, a string is accepted exactly when its raw text does not
 * contain the marker (strstr), for Hermes, V3 and a DSML JSON value, in a
 * schema's string and in an untyped value's keys and strings; without
 * `forbid` every one of them is accepted (they are all valid JSON). */
static void test_tags_strings_keep_out_the_closing_marker(void **state)
{
    (void)state;
    static const char str_schema[] =
        "{\"type\":\"object\",\"properties\":{\"s\":{\"type\":\"string\"},\"u\":{}},"
        "\"required\":[\"s\",\"u\"]}";
    static const char dsml_schema[] =
        "{\"type\":\"object\",\"properties\":{\"s\":{\"type\":\"array\",\"items\":{\"type\":"
        "\"string\"}},\"u\":{\"type\":\"object\"}},\"required\":[\"s\",\"u\"]}";
    grammar_tag hermes = {"\"\"", str_schema, sizeof str_schema - 1, "ws \"}\" ws \"</tool_call>\"",
                          "tools[0].function.parameters"};
    grammar_tag v3 = {"\"\"", str_schema, sizeof str_schema - 1, "\"\\n```<｜tool▁call▁end｜>\"",
                      "tools[0].function.parameters"};
    grammar_tag dsml = {"\"\"", dsml_schema, sizeof dsml_schema - 1, "\"</｜DSML｜invoke>\\n\"",
                        "tools[0].function.parameters"};
    marker_case cases[] = {
        {{.trigger = "<tool_call>",
          .tags = &hermes,
          .n_tags = 1,
          .close = "",
          .start = GRAMMAR_TAGS_IN_ARGS,
          .forbid = "</tool_call>"},
         "{\"s\": \"",
         "\", \"u\": {\"",
         "\": [1]}}}</tool_call>",
         "</tool_call>",
         {"<", "/", "</", "tool_call", "tool_cal", ">", "</tool_call>", "<\\/tool_call>", "\\\\",
          "\\u003c", "a", "<tool_call>"}},
        {{.trigger = "<｜tool▁calls▁begin｜>",
          .tags = &v3,
          .n_tags = 1,
          .close = "\"<｜tool▁calls▁end｜>\"",
          .start = GRAMMAR_TAGS_IN_ARGS,
          .forbid = "<｜tool▁call▁end｜>"},
         "{\"s\": \"",
         "\", \"u\": {\"",
         "\": \"x\"}}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
         "<｜tool▁call▁end｜>",
         {"<", "｜", "<｜", "tool▁call▁end", "tool▁call", "｜>", "▁", "<｜tool▁call▁end｜>",
          "<｜tool▁call▁end", "\\\"", "end", "<｜tool▁calls▁end｜>"}},
        {{.trigger = "<｜DSML｜",
          .open = "\"tool_calls>\\n\"",
          .dsml = "parameter",
          .tags = &dsml,
          .n_tags = 1,
          .close = "\"</｜DSML｜tool_calls>\"",
          .start = GRAMMAR_TAGS_IN_ARGS,
          .forbid = "</｜DSML｜"},
         "<｜DSML｜parameter name=\"s\" string=\"false\">[\"",
         "\"]</｜DSML｜parameter>\n<｜DSML｜parameter name=\"u\" string=\"false\">{\"",
         "\": 1}</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>",
         "</｜DSML｜",
         {"<", "/", "</", "｜", "DSML", "｜DSML｜", "</｜DSML", "</｜DSML｜", "<\\/｜DSML｜",
          "<｜DSML｜", "x", "parameter>"}},
    };
    uint64_t x = 0x2545F4914F6CDD1Dull;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        marker_case *mc = &cases[c];
        int n_marker = 0, n_clean = 0;
        for (int k = 0; k < 150; k++) {
            char s[160] = "";
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            int n = (int)(x % 6);
            for (int i = 0; i < n; i++) strcat(s, mc->pieces[(x >> (8 + 4 * i)) % 12]);
            int want = strstr(s, mc->marker) == NULL;
            n_marker += !want;
            n_clean += want;
            if (string_accepted(mc, s) != want) fail_msg("case %zu: '%s': expected %d", c, s, want);
            const char *forbid = mc->spec.forbid;
            mc->spec.forbid = NULL;
            if (!string_accepted(mc, s)) fail_msg("case %zu without forbid: '%s' rejected", c, s);
            mc->spec.forbid = forbid;
        }
        assert_true(n_marker >= 10 && n_clean >= 10);
    }
    /* a text the automaton cannot keep out of strings is refused */
    grammar_tags bad = cases[0].spec;
    bad.forbid = "b\"";
    grammar *g = NULL;
    char msg[512];
    assert_int_equal(grammar_compile_tags(&bad, &g, msg, sizeof msg), DI_ERR_INVALID_REQUEST);
    assert_non_null(strstr(msg, "cannot be kept out of JSON strings"));
}

/* With an output format, the reply is the format's answer or calls. */
static void test_tags_answer_or_calls(void **state)
{
    (void)state;
    grammar_tags spec = {.trigger = "<tool_call>",
                         .tags = hermes_tags,
                         .n_tags = 2,
                         .close = "",
                         .answer = "[0-9]{3}",
                         .answer_len = 8,
                         .answer_is_regex = 1};
    assert_true(tags_accept(&spec, "123"));
    assert_false(tags_accept(&spec, "12a"));
    assert_true(tags_accept(&spec, "<tool_call>{\"name\": \"g\", \"arguments\": {}}</tool_call>"));
    assert_false(
        tags_accept(&spec, "123<tool_call>{\"name\": \"g\", \"arguments\": {}}</tool_call>"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gbnf_errors_name_the_rule_and_place),
        cmocka_unit_test(test_gbnf_errors_point_at_the_rule),
        cmocka_unit_test(test_schema_and_regex_errors_name_the_keyword),
        cmocka_unit_test(test_gbnf_languages),
        cmocka_unit_test(test_regex_and_schema_languages),
        cmocka_unit_test(test_mask_end_token_and_rollback),
        cmocka_unit_test(test_sampler_never_draws_a_masked_token),
        cmocka_unit_test(test_tags_free_text_then_calls),
        cmocka_unit_test(test_tags_free_text_is_the_trigger_complement),
        cmocka_unit_test(test_tags_forced_calls),
        cmocka_unit_test(test_tags_errors_name_the_field),
        cmocka_unit_test(test_tags_answer_or_calls),
        cmocka_unit_test(test_tags_dsml_parameters),
        cmocka_unit_test(test_tags_strings_keep_out_the_closing_marker),
        cmocka_unit_test(test_mask_cache_equals_a_fresh_walk),
        cmocka_unit_test(test_adaptive_mask_equals_the_exact_walk),
        cmocka_unit_test(test_ambiguous_grammar_stops_the_matcher),
        cmocka_unit_test(test_grammar_of_empty_strings_allows_only_the_end),
        cmocka_unit_test(test_random_grammars_mask_equals_the_exact_walk),
        cmocka_unit_test(test_end_token_allowed_when_nothing_continues_is_accepted),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
