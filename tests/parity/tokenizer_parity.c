/* Tokenizer parity with the oracle (HF tokenizers), on the committed corpus.
 *
 *   tokenizer_parity FIXTURE.json TOKENIZER_PATH CORPUS.txt.zst
 *
 * FIXTURE comes from tests/oracle/make_tokenizer_fixtures.py. For every corpus
 * chunk it checks the count and XXH3-128 of the IDs in both modes ("hf": added
 * tokens recognised; "plain": none), that decode gives HF's decode back (the
 * chunk itself, unless the vocabulary lacks a byte), that the
 * incremental detokenizer fed one ID at a time gives the same text, that the fast
 * pre-tokenizer (when the tokenizer has one) splits exactly as the general
 * Oniguruma path, and that the two BPE merge implementations agree. Then the
 * edge-case strings (full IDs, three modes) and random ID sequences (HF's decode,
 * with and without special tokens). Prints a summary; exits 1 on any mismatch. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>
#include <zstd.h>

#include "tokenizer/detokenize.h"
#include "tokenizer/tokenizer.h"

static int failures;

#define FAIL(...)                                                                                  \
    do {                                                                                           \
        if (failures++ < 20) {                                                                     \
            fprintf(stderr, "FAIL: ");                                                             \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fputc('\n', stderr);                                                                   \
        }                                                                                          \
    } while (0)

static uint8_t *read_zst(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *src = malloc((size_t)n);
    if (!src || fread(src, 1, (size_t)n, f) != (size_t)n) {
        fclose(f);
        free(src);
        return NULL;
    }
    fclose(f);
    unsigned long long size = ZSTD_getFrameContentSize(src, (size_t)n);
    if (size == ZSTD_CONTENTSIZE_ERROR || size == ZSTD_CONTENTSIZE_UNKNOWN) {
        free(src);
        return NULL;
    }
    uint8_t *dst = malloc(size + 1);
    size_t got = dst ? ZSTD_decompress(dst, size, src, (size_t)n) : 0;
    free(src);
    if (!dst || ZSTD_isError(got) || got != size) {
        free(dst);
        return NULL;
    }
    *len = got;
    return dst;
}

static void digest_hex(const int32_t *ids, size_t n, char hex[33])
{
    XXH128_hash_t h = XXH3_128bits(ids, n * sizeof *ids); /* little-endian int32, as the oracle */
    XXH128_canonical_t c;
    XXH128_canonicalFromHash(&c, h);
    for (int i = 0; i < 16; i++) snprintf(hex + 2 * i, 3, "%02x", c.digest[i]);
}

static int encode(const di_tokenizer_impl *tok, const uint8_t *s, size_t n, unsigned flags,
                  tok_ids *out)
{
    tok_error err;
    out->n = 0;
    if (tok_encode(tok, s, n, flags, out, &err) != DI_OK) {
        FAIL("encode failed: %s", err.message);
        return -1;
    }
    return 0;
}

static void check_digest(const char *what, size_t chunk, json_t *want, const tok_ids *got)
{
    char hex[33];
    digest_hex(got->ids, got->n, hex);
    size_t want_n = (size_t)json_integer_value(json_array_get(want, 0));
    const char *want_hex = json_string_value(json_array_get(want, 1));
    if (got->n != want_n || strcmp(hex, want_hex) != 0)
        FAIL("chunk %zu %s: %zu IDs (oracle %zu), digest %s (oracle %s)", chunk, what, got->n,
             want_n, hex, want_hex);
}

/* Decode whole and stream one ID at a time; both must equal `want` (or, when
 * want is NULL, have the length and digest in `want_digest`). */
static void check_decode(const di_tokenizer_impl *tok, const int32_t *ids, size_t n, unsigned flags,
                         const char *want, size_t want_len, json_t *want_digest, const char *what)
{
    tok_buf whole = {0};
    tok_error err;
    if (tok_decode(tok, ids, n, flags, &whole, &err) != DI_OK) {
        FAIL("%s: decode failed: %s", what, err.message);
        return;
    }
    if (want_digest) {
        char hex[33];
        XXH128_canonical_t c;
        XXH128_canonicalFromHash(&c, XXH3_128bits(whole.data, whole.len));
        for (int i = 0; i < 16; i++) snprintf(hex + 2 * i, 3, "%02x", c.digest[i]);
        want_len = (size_t)json_integer_value(json_array_get(want_digest, 0));
        if (whole.len != want_len || strcmp(hex, json_string_value(json_array_get(want_digest, 1))))
            FAIL("%s: decode differs from the oracle's (%zu bytes, oracle %zu)", what, whole.len,
                 want_len);
        want = (const char *)whole.data;
        want_len = whole.len;
    } else if (whole.len != want_len || memcmp(whole.data, want, want_len) != 0) {
        FAIL("%s: decode differs (%zu bytes, want %zu)", what, whole.len, want_len);
    }
    tok_detok d = {.tok = tok, .flags = flags};
    tok_buf streamed = {0};
    for (size_t i = 0; i < n; i++) {
        if (tok_detok_push(&d, ids[i]) != 0) break;
        tok_buf_append(&streamed, d.out.data, d.out.len);
    }
    tok_detok_flush(&d);
    tok_buf_append(&streamed, d.out.data, d.out.len);
    if (streamed.len != want_len || (want_len && memcmp(streamed.data, want, want_len) != 0))
        FAIL("%s: streamed detokenize differs from the whole decode", what);
    free(whole.data);
    free(streamed.data);
    free(d.pending.data);
    free(d.out.data);
}

static void check_pretokenize(const di_tokenizer_impl *tok, const uint8_t *s, size_t n,
                              size_t chunk)
{
    if (tok->fast_path == TOK_FAST_NONE) return;
    tok_spans fast = {0}, general = {0};
    if (tok_pretokenize_fast(tok->fast_path, s, n, &fast) ||
        tok_pretokenize_general(tok, s, n, &general)) {
        FAIL("chunk %zu: pre-tokenize failed", chunk);
    } else if (fast.n != general.n || memcmp(fast.v, general.v, fast.n * sizeof *fast.v) != 0) {
        size_t i = 0;
        while (i < fast.n && i < general.n && fast.v[i].start == general.v[i].start &&
               fast.v[i].len == general.v[i].len)
            i++;
        uint32_t at = i < general.n ? general.v[i].start : (uint32_t)n;
        FAIL("chunk %zu: fast pre-tokenizer differs from the general path at piece %zu "
             "(byte %u: fast len %u, general len %u): \"%.*s\"",
             chunk, i, at, i < fast.n ? fast.v[i].len : 0, i < general.n ? general.v[i].len : 0, 24,
             (const char *)s + at);
    }
    /* The two BPE merges agree on every piece. */
    tok_bpe_scratch *bs = tok_bpe_scratch_new();
    tok_ids a = {0}, b = {0};
    for (size_t i = 0; i < general.n && bs; i++) {
        a.n = b.n = 0;
        tok_bpe_word_with(tok, bs, s + general.v[i].start, general.v[i].len, &a, 0);
        tok_bpe_word_with(tok, bs, s + general.v[i].start, general.v[i].len, &b, 1);
        if (a.n != b.n || memcmp(a.ids, b.ids, a.n * sizeof *a.ids) != 0) {
            FAIL("chunk %zu: short and heap BPE merges differ on piece %zu", chunk, i);
            break;
        }
    }
    tok_bpe_scratch_free(bs);
    free(a.ids);
    free(b.ids);
    free(fast.v);
    free(general.v);
}

static void check_ids(const char *what, const char *text, json_t *want, const tok_ids *got)
{
    size_t n = json_array_size(want);
    int same = n == got->n;
    for (size_t i = 0; same && i < n; i++)
        same = json_integer_value(json_array_get(want, i)) == got->ids[i];
    if (!same) FAIL("edge case %s \"%.40s\": %zu IDs, oracle %zu", what, text, got->n, n);
}

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: tokenizer_parity FIXTURE.json TOKENIZER CORPUS.txt.zst\n");
        return 2;
    }
    json_error_t jerr;
    json_t *fx = json_load_file(argv[1], JSON_ALLOW_NUL, &jerr);
    size_t corpus_len = 0;
    uint8_t *corpus = read_zst(argv[3], &corpus_len);
    if (!fx || !corpus) {
        fprintf(stderr, "tokenizer_parity: cannot read %s\n", !fx ? argv[1] : argv[3]);
        return 2;
    }
    char hex[33];
    XXH128_canonical_t c;
    XXH128_canonicalFromHash(&c, XXH3_128bits(corpus, corpus_len));
    for (int i = 0; i < 16; i++) snprintf(hex + 2 * i, 3, "%02x", c.digest[i]);
    if (strcmp(hex, json_string_value(json_object_get(fx, "corpus_xxh3"))) != 0) {
        fprintf(stderr, "tokenizer_parity: the corpus is not the one the fixture was made from\n");
        return 2;
    }
    di_tokenizer_impl *tok = NULL;
    tok_error err;
    di_status st = strstr(argv[2], ".gguf") ? tok_load_gguf(&tok, argv[2], &err)
                                            : tok_load_json(&tok, argv[2], &err);
    if (st != DI_OK) {
        fprintf(stderr, "tokenizer_parity: %s\n", err.message);
        return 2;
    }
    const char *name = json_string_value(json_object_get(fx, "tokenizer"));
    json_t *chunks = json_object_get(fx, "chunks");
    tok_ids ids = {0};
    size_t n_tokens = 0;
    int before = failures;
    for (size_t k = 0; k < json_array_size(chunks); k++) {
        json_t *ch = json_array_get(chunks, k);
        size_t off = (size_t)json_integer_value(json_object_get(ch, "offset"));
        size_t len = (size_t)json_integer_value(json_object_get(ch, "length"));
        if (off > corpus_len || len > corpus_len - off) {
            FAIL("chunk %zu lies outside the corpus", k);
            continue;
        }
        const uint8_t *s = corpus + off;
        if (encode(tok, s, len, 0, &ids) == 0)
            check_digest("plain", k, json_object_get(ch, "plain"), &ids);
        if (encode(tok, s, len, DI_TOKENIZE_SPECIAL | DI_TOKENIZE_ADDED, &ids) == 0) {
            check_digest("hf", k, json_object_get(ch, "hf"), &ids);
            char what[48];
            snprintf(what, sizeof what, "chunk %zu", k);
            check_decode(tok, ids.ids, ids.n, 0, NULL, 0, json_object_get(ch, "decode"), what);
            n_tokens += ids.n;
        }
        check_pretokenize(tok, s, len, k);
    }
    int chunk_failures = failures - before;

    json_t *edges = json_object_get(fx, "edge_cases");
    before = failures;
    for (size_t k = 0; k < json_array_size(edges); k++) {
        json_t *e = json_array_get(edges, k);
        const char *text = json_string_value(json_object_get(e, "text"));
        size_t len = json_string_length(json_object_get(e, "text"));
        static const struct {
            const char *key;
            unsigned flags;
        } modes[] = {{"hf", DI_TOKENIZE_SPECIAL | DI_TOKENIZE_ADDED},
                     {"hf_add_special", DI_TOKENIZE_HF_DEFAULT},
                     {"plain", 0}};
        for (size_t m = 0; m < 3; m++)
            if (encode(tok, (const uint8_t *)text, len, modes[m].flags, &ids) == 0)
                check_ids(modes[m].key, text, json_object_get(e, modes[m].key), &ids);
    }
    int edge_failures = failures - before;

    json_t *decodes = json_object_get(fx, "decode");
    before = failures;
    for (size_t k = 0; k < json_array_size(decodes); k++) {
        json_t *d = json_array_get(decodes, k);
        json_t *arr = json_object_get(d, "ids");
        ids.n = 0;
        for (size_t i = 0; i < json_array_size(arr); i++)
            tok_ids_push(&ids, (int32_t)json_integer_value(json_array_get(arr, i)));
        char what[48];
        snprintf(what, sizeof what, "decode case %zu", k);
        json_t *t = json_object_get(d, "text");
        check_decode(tok, ids.ids, ids.n, 0, json_string_value(t), json_string_length(t), NULL,
                     what);
        t = json_object_get(d, "text_skip_special");
        check_decode(tok, ids.ids, ids.n, DI_DECODE_SKIP_SPECIAL, json_string_value(t),
                     json_string_length(t), NULL, what);
    }
    int decode_failures = failures - before;

    printf("%s: %zu chunks (%zu tokens, %zu bytes): %s; %zu edge cases: %s; %zu decode cases: %s\n",
           name, json_array_size(chunks), n_tokens, corpus_len,
           chunk_failures ? "MISMATCH" : "identical", json_array_size(edges),
           edge_failures ? "MISMATCH" : "identical", json_array_size(decodes),
           decode_failures ? "MISMATCH" : "identical");
    free(ids.ids);
    tok_free(tok);
    free(corpus);
    json_decref(fx);
    return failures ? 1 : 0;
}
