/* Grammar-constrained decoding: GBNF grammars, regular expressions and JSON
 * Schemas compiled to one pushdown automaton over bytes, a byte trie of the
 * vocabulary, and per-request matchers that give a token mask per step.
 *
 * A compiled grammar (grammar) is a flat array of elements in llama.cpp's GBNF
 * layout: each rule is its alternatives, each alternative a sequence of byte
 * sets and rule references. Character classes over code points are compiled
 * to UTF-8 byte sequences (valid UTF-8 only), repetitions to right-recursive
 * helper rules. The matcher's state is a set of stacks; stacks are persistent
 * lists of (element, parent) nodes hash-consed in the matcher's pool, so a
 * state is a short array of node ids: cheap to copy, compare and roll back.
 * A mask walks the vocabulary's sorted token list (the trie in pre-order,
 * each token sharing its longest common prefix with the one before), keeping
 * one stack set per depth and skipping every token under a dead prefix.
 * docs/grammar.md has the formats, the subset supported and the errors.
 *
 * Thread-safety: a grammar and a grammar_vocab are immutable once built and
 * may be shared by threads; a matcher is used by one thread at a time. */
#ifndef DI_SAMPLER_GRAMMAR_H
#define DI_SAMPLER_GRAMMAR_H

#include <stddef.h>
#include <stdint.h>

#include "deepinfer/deepinfer.h"

typedef struct grammar grammar;
typedef struct grammar_vocab grammar_vocab;
typedef struct grammar_matcher grammar_matcher;

/* Compile len bytes of GBNF (llama.cpp's grammars/README.md; start rule
 * `root`). Errors: DI_ERR_INVALID_REQUEST with msg naming the rule and the
 * line:column (a syntax error; an undefined rule, at its first reference; a
 * left-recursive rule, at its definition; no root), DI_ERR_OUT_OF_MEMORY. */
di_status grammar_compile_gbnf(const char *text, size_t len, grammar **out, char *msg,
                               size_t msg_size);
/* Compile a regular expression (the subset docs/grammar.md lists) that the
 * whole output must match. Errors as grammar_compile_gbnf. */
di_status grammar_compile_regex(const char *pattern, size_t len, grammar **out, char *msg,
                                size_t msg_size);
/* Compile a JSON Schema (len bytes of JSON) to the grammar of the JSON texts it
 * accepts, with xgrammar's default layout (any whitespace between tokens).
 * Errors: DI_ERR_INVALID_REQUEST naming the schema path and the keyword that is
 * wrong or unsupported, DI_ERR_OUT_OF_MEMORY. */
di_status grammar_compile_json_schema(const char *json, size_t len, grammar **out, char *msg,
                                      size_t msg_size);
void grammar_free(grammar *g);

/* The regex as GBNF text (malloc'd, NUL-terminated, rules named prefix...,
 * the whole pattern rule `prefix`); json_string 1 keeps `"`, `\` and control
 * characters out of what it matches. Returns NULL with msg set on a bad
 * pattern or no memory (grammar_regex.c). */
char *grammar_regex_to_gbnf(const char *pattern, size_t len, const char *prefix, int json_string,
                            char *msg, size_t msg_size);
/* The JSON schema as GBNF text (malloc'd), or NULL with msg set
 * (grammar_json_schema.c). */
char *grammar_json_schema_to_gbnf(const char *json, size_t len, char *msg, size_t msg_size);

/* The schema's rules for a grammar that holds several (grammar_tags.c):
 * the start rule named root_name, rule numbers continuing from *n_rules
 * (updated), the shared basic rules (ws, basic-any, basic-object, …) first
 * when with_base. Strings without length bounds, pattern or format, and
 * values of any type, are the rules `basic`-string, `basic`-any and
 * `basic`-object (basic NULL: "basic", the shared ones; another prefix: the
 * caller defines P-string and takes P-array, P-object and P-any from
 * grammar_json_value_rules). malloc'd, or NULL with msg set. */
char *grammar_json_schema_rules(const char *json, size_t len, const char *root_name, int *n_rules,
                                int with_base, const char *basic, char *msg, size_t msg_size);
/* The rules P-array, P-object and P-any (any JSON value) over the strings of
 * a rule P-string the caller defines, P = prefix (as the basic rules are
 * over basic-string); malloc'd GBNF text, NULL when memory runs out. */
char *grammar_json_value_rules(const char *prefix);

/* Tool calls in a model's own call syntax: xgrammar's "structural tags" (a
 * trigger text, then tags of begin, JSON-schema content and end), written as
 * GBNF so that one automaton holds the free text and the calls.
 *
 * The call region is `trigger open call (separator call)* close`, where a
 * call is one of the tags: `begin args end`, args the tag's schema (NULL: any
 * JSON object) — or, with `dsml` set, DeepSeek V4's DSML parameters: each of
 * the schema's properties (in schema order, the required ones present) as
 * `<｜DSML｜{dsml} name="K" string="true">RAW</｜DSML｜{dsml}>\n` when it is a
 * plain string (RAW: any text without "</｜DSML｜"), else with
 * `string="false"` and the property's JSON value (NULL schema: any names and
 * values). open, begin, end, separator and close are GBNF sequences (they may
 * use the rules `ws` — whitespace between JSON tokens, here at most two
 * spaces or tabs, or a line break and up to 16 (an indentation) — and
 * `tc-blank`, at most two spaces or newlines); trigger is literal UTF-8 text
 * of at most 64 characters. After the region at most two spaces or newlines
 * may follow (then the end token).
 * Thread-safety: pure functions of their arguments. */
typedef struct grammar_tag {
    const char *begin;  /* GBNF sequence before the arguments */
    const char *schema; /* the arguments' JSON Schema (schema_len bytes), or NULL */
    size_t schema_len;
    const char *end;   /* GBNF sequence after the arguments */
    const char *field; /* the request field of the schema, for errors
                          ("tools[2].function.parameters") */
} grammar_tag;

typedef enum grammar_tags_start {
    /* free text that does not contain the trigger; then, optionally, the
     * region (its trigger included): a reply that may call tools */
    GRAMMAR_TAGS_TEXT_OR_CALLS = 0,
    /* the region, trigger included, after at most two newlines: a call is
     * required */
    GRAMMAR_TAGS_CALLS = 1,
    /* the region after its trigger and open (the prompt wrote them) */
    GRAMMAR_TAGS_AFTER_TRIGGER = 2,
    /* inside the first tag's arguments (the prompt wrote the trigger and
     * that tag's begin: a named tool_choice) */
    GRAMMAR_TAGS_IN_ARGS = 3,
} grammar_tags_start;

typedef struct grammar_tags {
    const char *trigger;
    const char *open; /* GBNF after the trigger, before the first call; NULL: none */
    const char *dsml; /* the DSML parameter tag word ("parameter", V4.1 " parameter"),
                         or NULL: the arguments are JSON */
    const grammar_tag *tags;
    size_t n_tags;
    const char *separator; /* GBNF between calls; NULL: one call only */
    const char *close;     /* GBNF after the last call ("" for none) */
    grammar_tags_start start;
    /* GRAMMAR_TAGS_TEXT_OR_CALLS: what a reply that is not a call must match
     * instead of free text (a response_format): a JSON Schema (answer_len
     * bytes) or, with answer_is_regex, a regular expression; NULL: free text.
     * answer_field names it in errors ("response_format.json_schema.schema"). */
    const char *answer;
    size_t answer_len;
    int answer_is_regex;
    const char *answer_field;
    /* Text that no JSON string inside a call may contain (UTF-8, at most 64
     * characters; NULL: none): the call's closing marker the stream parser
     * looks for in the raw text (Hermes "</tool_call>", V3
     * "<｜tool▁call▁end｜>", DSML "</｜DSML｜"), which a string value would
     * otherwise be able to spell. It applies to the arguments' strings
     * without length bounds, pattern or format (and to the keys and strings
     * of untyped values), written raw: an escaped character (`\/`) breaks
     * it. It must not hold '"', '\\' or control characters, nor begin with
     * an escape's character. The answer of a response format is left as
     * it is. */
    const char *forbid;
} grammar_tags;

/* The grammar of spec as GBNF text (malloc'd), or NULL with msg set: a
 * schema error names the tag's field in place of "json_schema"
 * (`tools[0].function.parameters.properties.x: format: …`). */
char *grammar_tags_to_gbnf(const grammar_tags *spec, char *msg, size_t msg_size);
/* Compile spec (grammar_tags_to_gbnf, then grammar_compile_gbnf). Errors:
 * DI_ERR_INVALID_REQUEST (a schema, msg as above; an empty trigger with free
 * text; no tags), DI_ERR_OUT_OF_MEMORY. */
di_status grammar_compile_tags(const grammar_tags *spec, grammar **out, char *msg, size_t msg_size);

/* The vocabulary as a sorted token list: n_vocab token byte strings
 * (bytes[i], lens[i]; copied). A token with excluded[i] set (special tokens,
 * may be NULL) or no bytes is never allowed by a mask, except the end tokens
 * a matcher names. Errors: DI_ERR_OUT_OF_MEMORY, DI_ERR_INVALID_ARGUMENT. */
di_status grammar_vocab_create(int32_t n_vocab, const uint8_t *const *bytes, const size_t *lens,
                               const uint8_t *excluded, grammar_vocab **out);
void grammar_vocab_free(grammar_vocab *v);
int32_t grammar_vocab_size(const grammar_vocab *v);

/* A matcher at the start of g over v, taking ownership of g (freed with the
 * matcher). v must outlive it. eos: the end tokens (copied), allowed exactly
 * when the grammar is complete. Errors: DI_ERR_OUT_OF_MEMORY. */
di_status grammar_matcher_create(grammar *g, const grammar_vocab *v, const int32_t *eos,
                                 size_t n_eos, grammar_matcher **out);
void grammar_matcher_free(grammar_matcher *m);

/* The tokens allowed next: bit i of mask[i / 32] set when token i may follow
 * (mask has (n_vocab + 31) / 32 words). After an end token, only end tokens.
 * Returns the number of allowed tokens, or -1 when out of memory. */
int32_t grammar_matcher_fill_mask(grammar_matcher *m, uint32_t *mask);
/* The same mask from a walk of the whole vocabulary, without the matcher's
 * caches (the reference the fast path is tested against; the benchmark's
 * baseline). Returns as grammar_matcher_fill_mask. */
int32_t grammar_matcher_fill_mask_exact(grammar_matcher *m, uint32_t *mask);
/* Advance by token: 0, or -1 when the grammar does not allow it (the state is
 * unchanged) or memory ran out. Each accept is one step of history. */
int grammar_matcher_accept(grammar_matcher *m, int32_t token);
/* Advance by raw bytes (tests): 0, or -1 (unchanged). Not a history step. */
int grammar_matcher_accept_bytes(grammar_matcher *m, const uint8_t *bytes, size_t len);
/* Undo the last n accepted tokens (speculative decoding): 0, or -1 when fewer
 * than n are in the history (nothing undone). */
int grammar_matcher_rollback(grammar_matcher *m, int32_t n);
/* 1 when the output so far is a complete sentence of the grammar. */
int grammar_matcher_is_complete(const grammar_matcher *m);
/* 1 once an end token was accepted. */
int grammar_matcher_is_terminated(const grammar_matcher *m);
/* Why the last fill_mask or accept failed: DI_ERR_INVALID_REQUEST for a set
 * of more than 32768 stacks (an ambiguous grammar; grammar_matcher_create
 * returns it for its start), DI_ERR_OUT_OF_MEMORY, or DI_OK (*why NULL);
 * *why is static text. */
di_status grammar_matcher_error(const grammar_matcher *m, const char **why);
/* The stack limit (32768 by default; tests lower it). */
void grammar_matcher_set_max_stacks(grammar_matcher *m, size_t n);

#endif
