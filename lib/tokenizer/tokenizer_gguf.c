/* Loading a byte-level BPE tokenizer from GGUF metadata (ggml's docs/gguf.md,
 * "tokenizer.ggml.*"): tokens, token_type, merges, the pre-tokenizer name, BOS/EOS
 * and the add-BOS/EOS flags. Only the metadata is read, so the model file may be
 * truncated or split (GGUF_OPEN_METADATA_ONLY).
 *
 * Token types, as llama.cpp defines them: 1 normal, 2 unknown, 3 control,
 * 4 user-defined, 5 unused, 6 byte. Normal tokens are byte-level BPE tokens;
 * control tokens become special added tokens and user-defined tokens non-special
 * added tokens, both matched as raw text (llama.cpp matches user-defined tokens
 * even when special tokens are not parsed, as HF does with non-special added
 * tokens).
 *
 * The pre-tokenizer name selects the split patterns the model's own
 * tokenizer.json uses (the patterns are model data: they come from the
 * Hugging Face tokenizers of those models). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/gguf.h"
#include "tokenizer/tokenizer.h"

/* Split patterns of the byte-level tokenizers we know by their GGUF pre name. */
static const char pat_deepseek_v3_digits[] = "\\p{N}{1,3}";
static const char pat_deepseek_v3_cjk[] = "[一-龥぀-ゟ゠-ヿ]+";
static const char pat_deepseek_v3_main[] =
    "[!\"#$%&'()*+,\\-./"
    ":;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+|"
    " ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+";
static const char pat_qwen2[] = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}|"
                                " ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
                                "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char pat_llama3[] = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}"
                                 "{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
                                 "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char pat_digit[] = "\\p{N}";

typedef struct pre_recipe {
    const char *names; /* the GGUF pre names, '|'-separated */
    const char *patterns[3];
    int gpt2_split; /* then the ByteLevel GPT-2 split */
    int nfc;        /* normalize to NFC. GGUF does not record a normalizer; Qwen2's
                       tokenizer.json has NFC, but llama.cpp does not apply it and
                       utf8proc's NFC (Unicode 15) differs from HF's (older tables) on
                       rare characters, so none is set: docs/tokenizer.md */
} pre_recipe;

static const pre_recipe pre_recipes[] = {
    {"deepseek-v3", {pat_deepseek_v3_digits, pat_deepseek_v3_cjk, pat_deepseek_v3_main}, 0, 0},
    {"qwen2|deepseek-r1-qwen", {pat_qwen2}, 0, 0},
    {"llama3|llama-bpe|smaug-bpe|dbrx", {pat_llama3}, 0, 0},
    {"smollm|starcoder|refact|command-r|codeshell", {pat_digit}, 1, 0},
    {"gpt2|gpt-2|default", {NULL}, 1, 0},
};

static int name_in(const char *list, const char *name, size_t len)
{
    const char *p = list;
    while (*p) {
        const char *bar = strchr(p, '|');
        size_t n = bar ? (size_t)(bar - p) : strlen(p);
        if (n == len && memcmp(p, name, len) == 0) return 1;
        if (!bar) break;
        p = bar + 1;
    }
    return 0;
}

static di_status set_pre_tokenizer(di_tokenizer_impl *tok, const char *pre, size_t len,
                                   tok_error *err)
{
    for (size_t r = 0; r < sizeof pre_recipes / sizeof pre_recipes[0]; r++) {
        const pre_recipe *rec = &pre_recipes[r];
        if (!name_in(rec->names, pre, len)) continue;
        size_t n = 0;
        while (n < 3 && rec->patterns[n]) n++;
        tok->steps = calloc(n + 1, sizeof *tok->steps);
        if (!tok->steps) return tok_fail(err, DI_ERR_OUT_OF_MEMORY, "out of memory");
        for (size_t i = 0; i < n + (size_t)rec->gpt2_split; i++) {
            const char *p = i < n ? rec->patterns[i] : tok_gpt2_pattern;
            tok_regex *re = tok_regex_compile(p, strlen(p), 0, err);
            if (!re) return err->status;
            tok->steps[tok->n_steps++] = (tok_split_step){re, TOK_SPLIT_ISOLATED, 0};
        }
        tok->byte_level_split = rec->gpt2_split;
        if (rec->nfc) tok->normalizer = TOK_NORM_NFC;
        tok->fast_path = tok_detect_fast_path(rec->patterns, n, rec->gpt2_split);
        return DI_OK;
    }
    return tok_fail(err, DI_ERR_UNSUPPORTED,
                    "tokenizer.ggml.pre \"%.*s\" is not a pre-tokenizer deepinfer knows", (int)len,
                    pre);
}

static di_status bad_kv(tok_error *err, const char *path, const char *key, const char *why)
{
    return tok_fail(err, DI_ERR_MODEL_FORMAT, "%s: %s %s", path, key, why);
}

di_status tok_load_gguf(di_tokenizer_impl **out, const char *path, tok_error *err)
{
    *out = NULL;
    gguf_file *f = NULL;
    di_tokenizer_impl *tok = NULL;
    uint8_t *buf = NULL;
    di_status st = gguf_open(path, GGUF_OPEN_METADATA_ONLY, &f, err->message, sizeof err->message);
    if (st != DI_OK) {
        err->status = st;
        return st;
    }
    const char *model;
    size_t model_len;
    if (!gguf_get_string(f, "tokenizer.ggml.model", &model, &model_len)) {
        st = bad_kv(err, path, "tokenizer.ggml.model",
                    gguf_find(f, "tokenizer.ggml.model") ? "is not a string"
                                                         : "is missing: the file has no tokenizer");
        goto fail;
    }
    if (model_len != 4 || memcmp(model, "gpt2", 4) != 0) {
        st = tok_fail(
            err, DI_ERR_UNSUPPORTED,
            "%s: tokenizer.ggml.model \"%.*s\" is not supported (only gpt2 byte-level BPE)", path,
            (int)model_len, model);
        goto fail;
    }
    const gguf_kv *tokens = gguf_find(f, "tokenizer.ggml.tokens");
    const gguf_kv *types = gguf_find(f, "tokenizer.ggml.token_type");
    const gguf_kv *merges = gguf_find(f, "tokenizer.ggml.merges");
    if (!tokens || tokens->type != GGUF_TYPE_ARRAY || tokens->elem_type != GGUF_TYPE_STRING ||
        tokens->count == 0 || tokens->count > (1u << 30)) {
        st = bad_kv(err, path, "tokenizer.ggml.tokens",
                    "is missing or not a non-empty string array");
        goto fail;
    }
    if (types && (types->type != GGUF_TYPE_ARRAY || types->elem_type != GGUF_TYPE_INT32 ||
                  types->count != tokens->count)) {
        st = bad_kv(err, path, "tokenizer.ggml.token_type",
                    "is not an int32 array as long as the tokens");
        goto fail;
    }
    if (!merges || merges->type != GGUF_TYPE_ARRAY || merges->elem_type != GGUF_TYPE_STRING) {
        st = bad_kv(err, path, "tokenizer.ggml.merges", "is missing or not a string array");
        goto fail;
    }
    tok = tok_alloc((int32_t)tokens->count);
    if (!tok) goto oom;
    tok->decoder_byte_level = 1;
    tok->added = calloc(tokens->count, sizeof *tok->added);
    if (!tok->added) goto oom;

    const uint8_t *pos = tokens->value;
    for (uint64_t i = 0; i < tokens->count; i++) {
        const char *s;
        size_t len;
        gguf_next_string(&pos, &s, &len);
        int32_t type = 1;
        if (types) memcpy(&type, types->value + 4 * i, 4);
        int32_t id = (int32_t)i;
        if (type == 3 || type == 4) {
            tok_added_token *t = &tok->added[tok->n_added++];
            t->content = malloc(len + 1);
            if (!t->content) goto oom;
            memcpy(t->content, s, len);
            t->len = len;
            t->id = id;
            t->special = type == 3;
            if (tok_set_token(tok, id, t->content, len,
                              TOK_FLAG_ADDED | (type == 3 ? TOK_FLAG_SPECIAL : 0)) != 0)
                goto oom;
            continue;
        }
        uint8_t *grown = realloc(buf, len + 1);
        if (!grown) goto oom;
        buf = grown;
        long n = tok_byte_level_decode((const uint8_t *)s, len, buf);
        if (n < 0) {
            memcpy(buf, s, len); /* outside the byte-level alphabet: kept as text */
            n = (long)len;
        }
        /* an unused slot (type 5, vocabulary padding) decodes to nothing, as in
         * llama.cpp and in the model's own tokenizer, which does not have it */
        if (tok_set_token(tok, id, buf, type == 5 ? 0 : (size_t)n, 0) != 0) goto oom;
        if (type != 5 && di_bytes_map_put(&tok->vocab, buf, (size_t)n, id) < 0) goto oom;
    }

    pos = merges->value;
    for (uint64_t i = 0; i < merges->count; i++) {
        const char *s;
        size_t len;
        gguf_next_string(&pos, &s, &len);
        const char *sp = memchr(s, ' ', len);
        if (!sp || sp == s) {
            char key[64];
            snprintf(key, sizeof key, "tokenizer.ggml.merges[%llu]", (unsigned long long)i);
            st = bad_kv(err, path, key, "is not \"left right\"");
            goto fail;
        }
        uint8_t *grown = realloc(buf, len + 1);
        if (!grown) goto oom;
        buf = grown;
        long a = tok_byte_level_decode((const uint8_t *)s, (size_t)(sp - s), buf);
        long b = tok_byte_level_decode((const uint8_t *)sp + 1, len - (size_t)(sp - s) - 1,
                                       buf + (a < 0 ? 0 : a));
        if (a < 0 || b < 0) {
            char key[64];
            snprintf(key, sizeof key, "tokenizer.ggml.merges[%llu]", (unsigned long long)i);
            st = bad_kv(err, path, key, "is not in the byte-level alphabet");
            goto fail;
        }
        st = tok_add_merge(tok, (uint32_t)i, buf, (size_t)a, buf + a, (size_t)b, err);
        if (st != DI_OK) goto fail;
    }

    const char *pre = "default";
    size_t pre_len = 7;
    gguf_get_string(f, "tokenizer.ggml.pre", &pre, &pre_len);
    st = set_pre_tokenizer(tok, pre, pre_len, err);
    if (st != DI_OK) goto fail;

    uint32_t bos, eos;
    int add_bos = 0, add_eos = 0;
    if (gguf_get_u32(f, "tokenizer.ggml.bos_token_id", &bos) && bos < tokens->count)
        tok->bos_id = (int32_t)bos;
    if (gguf_get_u32(f, "tokenizer.ggml.eos_token_id", &eos) && eos < tokens->count)
        tok->eos_id = (int32_t)eos;
    gguf_get_bool(f, "tokenizer.ggml.add_bos_token", &add_bos);
    gguf_get_bool(f, "tokenizer.ggml.add_eos_token", &add_eos);
    if (add_bos && tok->bos_id >= 0) {
        tok->prefix_ids = malloc(sizeof *tok->prefix_ids);
        if (!tok->prefix_ids) goto oom;
        tok->prefix_ids[tok->n_prefix++] = tok->bos_id;
    }
    if (add_eos && tok->eos_id >= 0) {
        tok->suffix_ids = malloc(sizeof *tok->suffix_ids);
        if (!tok->suffix_ids) goto oom;
        tok->suffix_ids[tok->n_suffix++] = tok->eos_id;
    }
    st = tok_finish(tok, err);
    if (st != DI_OK) goto fail;
    free(buf);
    gguf_close(f);
    *out = tok;
    return DI_OK;
oom:
    st = tok_fail(err, DI_ERR_OUT_OF_MEMORY, "%s: out of memory loading the tokenizer", path);
fail:
    free(buf);
    tok_free(tok);
    gguf_close(f);
    return st;
}
