/* Loading a Hugging Face tokenizer.json (the `tokenizers` serialisation format):
 * model (BPE: vocab, merges, ignore_merges), added_tokens, normalizer,
 * pre_tokenizer, post_processor and decoder — the parts byte-level BPE
 * tokenizers (DeepSeek V3/V4, Qwen2, GPT-2, Llama 3, SmolLM) use. Anything else
 * is refused with DI_ERR_UNSUPPORTED naming the field, never silently ignored.
 * JSON is parsed by jansson, which validates UTF-8 and reports positions. */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tokenizer.h"
#include "util/file.h"

/* Read a JSON string field; NULL when absent or not a string. */
static const char *str_field(json_t *obj, const char *key)
{
    json_t *v = json_object_get(obj, key);
    return json_is_string(v) ? json_string_value(v) : NULL;
}

static int bool_field(json_t *obj, const char *key, int dflt)
{
    json_t *v = json_object_get(obj, key);
    return json_is_boolean(v) ? json_is_true(v) : dflt;
}

/* The vocabulary string of a byte-level BPE token -> raw bytes (or its UTF-8
 * text when it uses characters outside the byte-level alphabet). */
static size_t token_bytes(const char *s, size_t len, uint8_t *buf, int byte_level)
{
    if (byte_level) {
        long n = tok_byte_level_decode((const uint8_t *)s, len, buf);
        if (n >= 0) return (size_t)n;
    }
    memcpy(buf, s, len);
    return len;
}

static di_status load_pre_tokenizer(di_tokenizer_impl *tok, json_t *pre, const char *where,
                                    const char **patterns, size_t *n_patterns, tok_error *err);

/* Grow *buf to n bytes; on failure *buf is unchanged (and still owned). */
static int grow(uint8_t **buf, size_t n)
{
    uint8_t *p = realloc(*buf, n);
    if (!p) return -1;
    *buf = p;
    return 0;
}

static di_status add_step(di_tokenizer_impl *tok, const char *pattern, size_t len, int literal,
                          tok_split_behavior behavior, int invert, tok_error *err)
{
    tok_split_step *steps = realloc(tok->steps, (tok->n_steps + 1) * sizeof *steps);
    if (!steps) return tok_fail(err, DI_ERR_OUT_OF_MEMORY, "out of memory");
    tok->steps = steps;
    tok_regex *re = tok_regex_compile(pattern, len, literal, err);
    if (!re) return err->status;
    steps[tok->n_steps++] = (tok_split_step){re, behavior, invert};
    return DI_OK;
}

static di_status load_split(di_tokenizer_impl *tok, json_t *pre, const char *where,
                            const char **patterns, size_t *n_patterns, tok_error *err)
{
    json_t *pattern = json_object_get(pre, "pattern");
    const char *regex = str_field(pattern, "Regex");
    const char *literal = str_field(pattern, "String");
    if (!regex && !literal)
        return tok_fail(err, DI_ERR_MODEL_FORMAT,
                        "%s.pattern: expected {\"Regex\": ...} or "
                        "{\"String\": ...}",
                        where);
    const char *b = str_field(pre, "behavior");
    tok_split_behavior behavior;
    if (!b) return tok_fail(err, DI_ERR_MODEL_FORMAT, "%s.behavior: missing", where);
    if (strcmp(b, "Isolated") == 0)
        behavior = TOK_SPLIT_ISOLATED;
    else if (strcmp(b, "Removed") == 0)
        behavior = TOK_SPLIT_REMOVED;
    else if (strcmp(b, "MergedWithPrevious") == 0)
        behavior = TOK_SPLIT_MERGED_WITH_PREVIOUS;
    else if (strcmp(b, "MergedWithNext") == 0)
        behavior = TOK_SPLIT_MERGED_WITH_NEXT;
    else if (strcmp(b, "Contiguous") == 0)
        behavior = TOK_SPLIT_CONTIGUOUS;
    else
        return tok_fail(err, DI_ERR_MODEL_FORMAT, "%s.behavior: unknown value \"%s\"", where, b);
    const char *p = regex ? regex : literal;
    json_t *pv = json_object_get(pattern, regex ? "Regex" : "String");
    if (*n_patterns < 16) patterns[(*n_patterns)++] = regex ? p : "";
    return add_step(tok, p, json_string_length(pv), literal != NULL, behavior,
                    bool_field(pre, "invert", 0), err);
}

static di_status load_pre_tokenizer(di_tokenizer_impl *tok, json_t *pre, const char *where,
                                    const char **patterns, size_t *n_patterns, tok_error *err)
{
    if (json_is_null(pre) || !pre) return DI_OK;
    const char *type = str_field(pre, "type");
    if (!type) return tok_fail(err, DI_ERR_MODEL_FORMAT, "%s.type: missing", where);
    if (tok->byte_level_split)
        return tok_fail(err, DI_ERR_UNSUPPORTED,
                        "%s: a pre-tokenizer after ByteLevel(use_regex=true) is not supported",
                        where);
    if (strcmp(type, "Sequence") == 0) {
        json_t *list = json_object_get(pre, "pretokenizers");
        if (!json_is_array(list))
            return tok_fail(err, DI_ERR_MODEL_FORMAT, "%s.pretokenizers: expected an array", where);
        for (size_t i = 0; i < json_array_size(list); i++) {
            char sub[128];
            snprintf(sub, sizeof sub, "%s.pretokenizers[%zu]", where, i);
            di_status st =
                load_pre_tokenizer(tok, json_array_get(list, i), sub, patterns, n_patterns, err);
            if (st != DI_OK) return st;
        }
        return DI_OK;
    }
    if (strcmp(type, "Split") == 0) {
        if (tok->byte_level_seen)
            return tok_fail(err, DI_ERR_UNSUPPORTED,
                            "%s: a Split after the ByteLevel pre-tokenizer is not supported",
                            where);
        return load_split(tok, pre, where, patterns, n_patterns, err);
    }
    if (strcmp(type, "ByteLevel") == 0) {
        tok->byte_level_seen = 1;
        if (bool_field(pre, "add_prefix_space", 0))
            return tok_fail(err, DI_ERR_UNSUPPORTED, "%s.add_prefix_space: true is not supported",
                            where);
        if (bool_field(pre, "use_regex", 1)) {
            di_status st = add_step(tok, tok_gpt2_pattern, strlen(tok_gpt2_pattern), 0,
                                    TOK_SPLIT_ISOLATED, 0, err);
            if (st != DI_OK) return st;
            tok->byte_level_split = 1;
        }
        return DI_OK;
    }
    if (strcmp(type, "Digits") == 0) {
        int individual = bool_field(pre, "individual_digits", 0);
        /* HF tests char::is_numeric: every \p{N}, not only decimal digits */
        const char *p = individual ? "\\p{N}" : "\\p{N}+";
        if (*n_patterns < 16) patterns[(*n_patterns)++] = "";
        return add_step(tok, p, strlen(p), 0, TOK_SPLIT_ISOLATED, 0, err);
    }
    return tok_fail(err, DI_ERR_UNSUPPORTED, "%s.type: pre-tokenizer \"%s\" is not supported",
                    where, type);
}

static di_status load_normalizer(di_tokenizer_impl *tok, json_t *norm, tok_error *err)
{
    if (!norm || json_is_null(norm)) return DI_OK;
    const char *type = str_field(norm, "type");
    if (!type) return tok_fail(err, DI_ERR_MODEL_FORMAT, "normalizer.type: missing");
    if (strcmp(type, "Sequence") == 0) {
        json_t *list = json_object_get(norm, "normalizers");
        if (!json_is_array(list))
            return tok_fail(err, DI_ERR_MODEL_FORMAT, "normalizer.normalizers: expected an array");
        if (json_array_size(list) == 0) return DI_OK;
        if (json_array_size(list) == 1) return load_normalizer(tok, json_array_get(list, 0), err);
        return tok_fail(err, DI_ERR_UNSUPPORTED,
                        "normalizer: a Sequence of more than one normalizer is not supported");
    }
    static const struct {
        const char *name;
        tok_normalizer form;
    } forms[] = {{"NFC", TOK_NORM_NFC},
                 {"NFD", TOK_NORM_NFD},
                 {"NFKC", TOK_NORM_NFKC},
                 {"NFKD", TOK_NORM_NFKD}};
    for (size_t i = 0; i < sizeof forms / sizeof forms[0]; i++)
        if (strcmp(type, forms[i].name) == 0) {
            tok->normalizer = forms[i].form;
            return DI_OK;
        }
    return tok_fail(err, DI_ERR_UNSUPPORTED, "normalizer.type: \"%s\" is not supported", type);
}

/* TemplateProcessing's "single" template: the special tokens before and after
 * the sequence $A become prefix/suffix IDs. ByteLevel adds nothing. */
static di_status load_post_processor(di_tokenizer_impl *tok, json_t *post, tok_error *err)
{
    if (!post || json_is_null(post)) return DI_OK;
    const char *type = str_field(post, "type");
    if (!type) return tok_fail(err, DI_ERR_MODEL_FORMAT, "post_processor.type: missing");
    if (strcmp(type, "ByteLevel") == 0) return DI_OK;
    if (strcmp(type, "Sequence") == 0) {
        json_t *list = json_object_get(post, "processors");
        for (size_t i = 0; i < json_array_size(list); i++) {
            di_status st = load_post_processor(tok, json_array_get(list, i), err);
            if (st != DI_OK) return st;
        }
        return DI_OK;
    }
    if (strcmp(type, "TemplateProcessing") != 0)
        return tok_fail(err, DI_ERR_UNSUPPORTED, "post_processor.type: \"%s\" is not supported",
                        type);
    json_t *single = json_object_get(post, "single");
    json_t *specials = json_object_get(post, "special_tokens");
    int seen_sequence = 0;
    for (size_t i = 0; i < json_array_size(single); i++) {
        json_t *item = json_array_get(single, i);
        if (json_object_get(item, "Sequence")) {
            seen_sequence = 1;
            continue;
        }
        const char *name = str_field(json_object_get(item, "SpecialToken"), "id");
        json_t *ids = json_object_get(json_object_get(specials, name ? name : ""), "ids");
        if (!name || !json_is_array(ids))
            return tok_fail(err, DI_ERR_MODEL_FORMAT,
                            "post_processor.single[%zu]: unknown special token", i);
        for (size_t j = 0; j < json_array_size(ids); j++) {
            json_int_t id = json_integer_value(json_array_get(ids, j));
            if (id < 0 || id >= tok->n_vocab)
                return tok_fail(err, DI_ERR_MODEL_FORMAT,
                                "post_processor.special_tokens.%s: id %lld out of range", name,
                                (long long)id);
            int32_t **arr = seen_sequence ? &tok->suffix_ids : &tok->prefix_ids;
            size_t *n = seen_sequence ? &tok->n_suffix : &tok->n_prefix;
            int32_t *grown = realloc(*arr, (*n + 1) * sizeof *grown);
            if (!grown) return tok_fail(err, DI_ERR_OUT_OF_MEMORY, "out of memory");
            grown[(*n)++] = (int32_t)id;
            *arr = grown;
        }
    }
    return DI_OK;
}

static di_status load_from_json(di_tokenizer_impl **out, json_t *root, tok_error *err)
{
    di_tokenizer_impl *tok = NULL;
    di_status st;
    uint8_t *buf = NULL;
    *out = NULL;
    if (!json_is_object(root)) return tok_fail(err, DI_ERR_MODEL_FORMAT, "expected a JSON object");
    json_t *model = json_object_get(root, "model");
    const char *mtype = str_field(model, "type");
    if (!json_is_object(model))
        return tok_fail(err, DI_ERR_MODEL_FORMAT,
                        "model: missing (not a tokenizer.json: its \"model\" object, the "
                        "tokenizer's, is not there)");
    if (mtype && strcmp(mtype, "BPE") != 0)
        return tok_fail(err, DI_ERR_UNSUPPORTED,
                        "model.type: \"%s\" is not supported (only byte-level BPE)", mtype);
    json_t *vocab = json_object_get(model, "vocab");
    json_t *merges = json_object_get(model, "merges");
    json_t *added = json_object_get(root, "added_tokens");
    if (!json_is_object(vocab))
        return tok_fail(err, DI_ERR_MODEL_FORMAT, "model.vocab: expected an object");
    if (!json_is_array(merges))
        return tok_fail(err, DI_ERR_MODEL_FORMAT, "model.merges: expected an array");
    if (added && !json_is_array(added))
        return tok_fail(err, DI_ERR_MODEL_FORMAT, "added_tokens: expected an array");
    if (str_field(model, "continuing_subword_prefix") || str_field(model, "end_of_word_suffix"))
        return tok_fail(err, DI_ERR_UNSUPPORTED,
                        "model: continuing_subword_prefix / end_of_word_suffix are not supported");
    if (bool_field(model, "byte_fallback", 0))
        return tok_fail(err, DI_ERR_UNSUPPORTED, "model.byte_fallback: true is not supported");
    static const char *const refused[] = {"truncation", "padding"};
    for (size_t i = 0; i < 2; i++)
        if (json_object_get(root, refused[i]) && !json_is_null(json_object_get(root, refused[i])))
            return tok_fail(err, DI_ERR_UNSUPPORTED, "%s: not supported (encode whole texts)",
                            refused[i]);
    if (json_object_get(model, "dropout") && !json_is_null(json_object_get(model, "dropout")))
        return tok_fail(err, DI_ERR_UNSUPPORTED, "model.dropout: BPE dropout is not supported");
    json_t *decoder = json_object_get(root, "decoder");
    const char *dtype = str_field(decoder, "type");
    if (dtype && strcmp(dtype, "ByteLevel") != 0)
        return tok_fail(err, DI_ERR_UNSUPPORTED, "decoder.type: \"%s\" is not supported", dtype);
    const char *pre_json = NULL;
    {
        char *dumped = json_dumps(json_object_get(root, "pre_tokenizer"), JSON_COMPACT);
        int bl = dumped && strstr(dumped, "\"ByteLevel\"") != NULL;
        free(dumped);
        pre_json = bl ? "ByteLevel" : NULL;
    }
    int byte_level = dtype != NULL || pre_json != NULL;

    /* One past the largest id, over the vocabulary and the added tokens. */
    json_int_t max_id = -1;
    const char *key;
    json_t *value;
    json_object_foreach(vocab, key, value)
    {
        if (!json_is_integer(value) || json_integer_value(value) < 0 ||
            json_integer_value(value) >= (1 << 30))
            return tok_fail(err, DI_ERR_MODEL_FORMAT,
                            "model.vocab[\"%s\"]: expected an id in [0, 2^30)", key);
        if (json_integer_value(value) > max_id) max_id = json_integer_value(value);
    }
    for (size_t i = 0; i < json_array_size(added); i++) {
        json_t *id = json_object_get(json_array_get(added, i), "id");
        if (!json_is_integer(id) || json_integer_value(id) < 0 ||
            json_integer_value(id) >= (1 << 30))
            return tok_fail(err, DI_ERR_MODEL_FORMAT,
                            "added_tokens[%zu].id: expected an id in [0, 2^30)", i);
        if (json_integer_value(id) > max_id) max_id = json_integer_value(id);
    }
    if (max_id < 0) return tok_fail(err, DI_ERR_MODEL_FORMAT, "model.vocab: empty");
    size_t n_entries = json_object_size(vocab) + json_array_size(added);
    if ((size_t)max_id > 2 * n_entries + 65536)
        return tok_fail(err, DI_ERR_MODEL_FORMAT,
                        "token id %lld is far beyond the %zu tokens the file defines",
                        (long long)max_id, n_entries);
    tok = tok_alloc((int32_t)max_id + 1);
    if (!tok) return tok_fail(err, DI_ERR_OUT_OF_MEMORY, "out of memory loading the vocabulary");
    tok->decoder_byte_level = byte_level;
    tok->ignore_merges = bool_field(model, "ignore_merges", 0);

    json_object_foreach(vocab, key, value)
    {
        size_t klen = strlen(key);
        if (grow(&buf, klen + 1)) goto oom;
        size_t n = token_bytes(key, klen, buf, byte_level);
        int32_t id = (int32_t)json_integer_value(value);
        if (tok_set_token(tok, id, buf, n, 0) != 0) goto oom;
        int r = di_bytes_map_put(&tok->vocab, buf, n, id);
        if (r < 0) goto oom;
    }

    for (size_t i = 0; i < json_array_size(merges); i++) {
        json_t *m = json_array_get(merges, i);
        const char *left, *right;
        size_t left_len, right_len;
        if (json_is_string(m)) {
            /* "left right": split at the first space (merge parts never contain one:
             * byte-level spells the space byte as U+0120) */
            const char *s = json_string_value(m);
            const char *sp = strchr(s, ' ');
            if (!sp) {
                st = tok_fail(err, DI_ERR_MODEL_FORMAT,
                              "model.merges[%zu]: expected \"left right\"", i);
                goto fail;
            }
            left = s;
            left_len = (size_t)(sp - s);
            right = sp + 1;
            right_len = strlen(right);
        } else if (json_is_array(m) && json_array_size(m) == 2 &&
                   json_is_string(json_array_get(m, 0)) && json_is_string(json_array_get(m, 1))) {
            left = json_string_value(json_array_get(m, 0));
            left_len = json_string_length(json_array_get(m, 0));
            right = json_string_value(json_array_get(m, 1));
            right_len = json_string_length(json_array_get(m, 1));
        } else {
            st = tok_fail(err, DI_ERR_MODEL_FORMAT,
                          "model.merges[%zu]: expected a string or a pair of strings", i);
            goto fail;
        }
        if (grow(&buf, left_len + right_len + 2)) goto oom;
        size_t a = token_bytes(left, left_len, buf, byte_level);
        size_t b = token_bytes(right, right_len, buf + a, byte_level);
        st = tok_add_merge(tok, (uint32_t)i, buf, a, buf + a, b, err);
        if (st != DI_OK) goto fail;
    }

    tok->added = calloc(json_array_size(added) + 1, sizeof *tok->added);
    if (!tok->added) goto oom;
    for (size_t i = 0; i < json_array_size(added); i++) {
        json_t *a = json_array_get(added, i);
        json_t *content = json_object_get(a, "content");
        if (!json_is_string(content)) {
            st = tok_fail(err, DI_ERR_MODEL_FORMAT, "added_tokens[%zu].content: expected a string",
                          i);
            goto fail;
        }
        tok_added_token *t = &tok->added[tok->n_added++];
        t->len = json_string_length(content);
        t->content = malloc(t->len + 1);
        if (!t->content) goto oom;
        memcpy(t->content, json_string_value(content), t->len);
        t->id = (int32_t)json_integer_value(json_object_get(a, "id"));
        t->special = (uint8_t)bool_field(a, "special", 0);
        t->lstrip = (uint8_t)bool_field(a, "lstrip", 0);
        t->rstrip = (uint8_t)bool_field(a, "rstrip", 0);
        t->single_word = (uint8_t)bool_field(a, "single_word", 0);
        t->normalized = (uint8_t)bool_field(a, "normalized", !t->special);
        /* An added token decodes to its content, as HF's id_to_token gives it;
         * when the model vocab has the same id, the added token takes it over. */
        /* HF decodes added tokens through the decoder too: a spelling made only
         * of byte-level characters decodes to those bytes */
        if (grow(&buf, t->len + 1)) goto oom;
        size_t dn = token_bytes((const char *)t->content, t->len, buf, byte_level);
        if (tok_set_token(tok, t->id, buf, dn,
                          TOK_FLAG_ADDED | (t->special ? TOK_FLAG_SPECIAL : 0)) != 0)
            goto oom;
    }

    st = load_normalizer(tok, json_object_get(root, "normalizer"), err);
    if (st != DI_OK) goto fail;
    const char *patterns[16];
    size_t n_patterns = 0;
    st = load_pre_tokenizer(tok, json_object_get(root, "pre_tokenizer"), "pre_tokenizer", patterns,
                            &n_patterns, err);
    if (st != DI_OK) goto fail;
    /* The fast paths implement Isolated, non-inverted splits of exactly those
     * patterns (a normalizer runs before them and does not matter). */
    int plain_steps = n_patterns == tok->n_steps;
    for (size_t i = 0; i < tok->n_steps; i++)
        plain_steps &= tok->steps[i].behavior == TOK_SPLIT_ISOLATED && !tok->steps[i].invert;
    tok->fast_path = plain_steps ? tok_detect_fast_path(patterns, n_patterns, tok->byte_level_split)
                                 : TOK_FAST_NONE;
    st = load_post_processor(tok, json_object_get(root, "post_processor"), err);
    if (st != DI_OK) goto fail;
    st = tok_finish(tok, err);
    if (st != DI_OK) goto fail;
    free(buf);
    *out = tok;
    return DI_OK;
oom:
    st = tok_fail(err, DI_ERR_OUT_OF_MEMORY, "out of memory loading the tokenizer");
fail:
    free(buf);
    tok_free(tok);
    return st;
}

static di_status parse_and_load(di_tokenizer_impl **out, json_t *root, json_error_t *jerr,
                                const char *what, tok_error *err)
{
    if (!root)
        return tok_fail(err, DI_ERR_MODEL_FORMAT, "%s: invalid JSON at line %d column %d: %s", what,
                        jerr->line, jerr->column, jerr->text);
    di_status st = load_from_json(out, root, err);
    json_decref(root);
    return st;
}

di_status tok_load_json(di_tokenizer_impl **out, const char *path, tok_error *err)
{
    if (di_regular_file(path) != 0)
        return tok_fail(err, DI_ERR_IO, "%s: %s%s", path,
                        errno == EINVAL ? "not a regular file" : "cannot open: ",
                        errno == EINVAL ? "" : strerror(errno));
    FILE *f = fopen(path, "rb");
    if (!f) return tok_fail(err, DI_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    json_error_t jerr;
    json_t *root = json_loadf(f, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &jerr);
    fclose(f);
    di_status st = parse_and_load(out, root, &jerr, path, err);
    if (st != DI_OK && root) {
        /* prefix the path so the message says which file */
        char msg[sizeof err->message + 256];
        snprintf(msg, sizeof msg, "%.200s: %s", path, err->message);
        size_t n = strlen(msg);
        if (n >= sizeof err->message) n = sizeof err->message - 1;
        memcpy(err->message, msg, n);
        err->message[n] = 0;
    }
    return st;
}

di_status tok_load_json_text(di_tokenizer_impl **out, const char *text, size_t len, tok_error *err)
{
    json_error_t jerr;
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &jerr);
    return parse_and_load(out, root, &jerr, "tokenizer.json", err);
}
