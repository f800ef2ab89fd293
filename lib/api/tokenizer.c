/* The public tokenizer API (deepinfer.h, "Tokenizer") over lib/tokenizer/. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "util/error.h"
#include "tokenizer/detokenize.h"
#include "tokenizer/tokenizer.h"
#include "util/file.h"

struct di_detokenizer {
    tok_detok state;
};

static int looks_like_gguf(const char *path)
{
    if (di_regular_file(path) != 0) return 0;
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    char magic[4] = {0};
    size_t n = fread(magic, 1, 4, f);
    fclose(f);
    return n == 4 && memcmp(magic, "GGUF", 4) == 0;
}

DI_API di_status di_tokenizer_load(const char *path, di_tokenizer **out, di_error **err)
{
    if (!path || !out)
        return di_error_set(err, DI_ERR_INVALID_ARGUMENT, "path and out must not be NULL");
    *out = NULL;
    tok_error e = {DI_OK, ""};
    di_status st;
    struct stat sb;
    if (stat(path, &sb) != 0) {
        char msg[600];
        snprintf(msg, sizeof msg, "%s: no such file or directory", path);
        return di_error_set(err, DI_ERR_IO, msg);
    }
    if (S_ISDIR(sb.st_mode)) {
        size_t n = strlen(path) + sizeof "/tokenizer.json";
        char *json = malloc(n);
        if (!json) return di_error_set(err, DI_ERR_OUT_OF_MEMORY, "out of memory");
        snprintf(json, n, "%s/tokenizer.json", path);
        struct stat jb;
        if (stat(json, &jb) != 0) {
            free(json);
            char msg[700];
            snprintf(msg, sizeof msg,
                     "%s: is a directory without a tokenizer.json (give a tokenizer.json, a GGUF "
                     "file, or a folder holding tokenizer.json)",
                     path);
            return di_error_set(err, DI_ERR_IO, msg);
        }
        st = tok_load_json(out, json, &e);
        free(json);
    } else if (looks_like_gguf(path)) {
        st = tok_load_gguf(out, path, &e);
    } else {
        st = tok_load_json(out, path, &e);
    }
    return st == DI_OK ? DI_OK : di_error_set(err, st, e.message);
}

DI_API di_status di_tokenizer_load_json(const char *json, size_t len, di_tokenizer **out,
                                        di_error **err)
{
    if (!json || !out)
        return di_error_set(err, DI_ERR_INVALID_ARGUMENT, "json and out must not be NULL");
    *out = NULL;
    tok_error e = {DI_OK, ""};
    di_status st = tok_load_json_text(out, json, len, &e);
    return st == DI_OK ? DI_OK : di_error_set(err, st, e.message);
}

DI_API void di_tokenizer_free(di_tokenizer *tok)
{
    tok_free(tok);
}

DI_API int32_t di_tokenizer_vocab_size(const di_tokenizer *tok)
{
    return tok ? tok->n_vocab : 0;
}

DI_API di_status di_tokenizer_token_id(const di_tokenizer *tok, const char *text, size_t len,
                                       int32_t *id)
{
    if (!tok || !text || !id) return DI_ERR_INVALID_ARGUMENT;
    for (size_t i = tok->n_added; i-- > 0;) /* the last of equal spellings wins, as in encode */
        if (tok->added[i].len == len && memcmp(tok->added[i].content, text, len) == 0) {
            *id = tok->added[i].id;
            return DI_OK;
        }
    int32_t v = di_bytes_map_get(&tok->vocab, text, len);
    if (v < 0) return DI_ERR_NOT_FOUND;
    *id = v;
    return DI_OK;
}

#define ENCODE_FLAGS (DI_TOKENIZE_SPECIAL | DI_TOKENIZE_ADDED | DI_TOKENIZE_ADD_SPECIAL_TOKENS)

DI_API di_status di_tokenizer_encode(const di_tokenizer *tok, const char *text, size_t len,
                                     unsigned flags, int32_t **ids, size_t *n_ids, di_error **err)
{
    if (!tok || (!text && len) || !ids || !n_ids)
        return di_error_set(err, DI_ERR_INVALID_ARGUMENT,
                            "tok, text, ids and n_ids must not be NULL");
    if (flags & ~ENCODE_FLAGS)
        return di_error_set(err, DI_ERR_INVALID_ARGUMENT, "flags: unknown bits set");
    *ids = NULL;
    *n_ids = 0;
    tok_ids out = {0};
    tok_error e = {DI_OK, ""};
    di_status st = tok_encode(tok, (const uint8_t *)(text ? text : ""), len, flags, &out, &e);
    if (st != DI_OK) {
        free(out.ids);
        return di_error_set(err, st, e.message);
    }
    if (out.n == 0) {
        free(out.ids);
        out.ids = NULL;
    }
    *ids = out.ids;
    *n_ids = out.n;
    return DI_OK;
}

DI_API void di_tokens_free(int32_t *ids)
{
    free(ids);
}

DI_API di_status di_tokenizer_decode(const di_tokenizer *tok, const int32_t *ids, size_t n_ids,
                                     unsigned flags, char **text, size_t *len, di_error **err)
{
    if (!tok || (!ids && n_ids) || !text || !len)
        return di_error_set(err, DI_ERR_INVALID_ARGUMENT,
                            "tok, ids, text and len must not be NULL");
    if (flags & ~DI_DECODE_SKIP_SPECIAL)
        return di_error_set(err, DI_ERR_INVALID_ARGUMENT, "flags: unknown bits set");
    *text = NULL;
    *len = 0;
    tok_buf out = {0};
    tok_error e = {DI_OK, ""};
    di_status st = tok_decode(tok, ids, n_ids, flags, &out, &e);
    if (st != DI_OK) {
        free(out.data);
        return di_error_set(err, st, e.message);
    }
    *text = (char *)out.data;
    *len = out.len;
    return DI_OK;
}

DI_API void di_text_free(char *text)
{
    free(text);
}

DI_API di_status di_detokenizer_create(const di_tokenizer *tok, unsigned flags,
                                       di_detokenizer **out)
{
    if (!tok || !out || (flags & ~DI_DECODE_SKIP_SPECIAL)) return DI_ERR_INVALID_ARGUMENT;
    *out = calloc(1, sizeof **out);
    if (!*out) return DI_ERR_OUT_OF_MEMORY;
    (*out)->state.tok = tok;
    (*out)->state.flags = flags;
    return DI_OK;
}

DI_API di_status di_detokenizer_push(di_detokenizer *d, int32_t id, const char **text, size_t *len)
{
    if (!d || !text || !len || id < 0 || id >= d->state.tok->n_vocab)
        return DI_ERR_INVALID_ARGUMENT;
    if (tok_detok_push(&d->state, id) != 0) return DI_ERR_OUT_OF_MEMORY;
    *text = (const char *)d->state.out.data;
    *len = d->state.out.len;
    return DI_OK;
}

DI_API di_status di_detokenizer_flush(di_detokenizer *d, const char **text, size_t *len)
{
    if (!d || !text || !len) return DI_ERR_INVALID_ARGUMENT;
    if (tok_detok_flush(&d->state) != 0) return DI_ERR_OUT_OF_MEMORY;
    *text = (const char *)d->state.out.data;
    *len = d->state.out.len;
    return DI_OK;
}

DI_API void di_detokenizer_free(di_detokenizer *d)
{
    if (!d) return;
    free(d->state.pending.data);
    free(d->state.out.data);
    free(d);
}
