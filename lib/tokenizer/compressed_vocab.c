/* Engram's compressed vocabulary (tokenizer.h: tok_compressed_vocab): every
 * token's text keyed through the normalizer sequence DeepInfer 0.1.0 builds
 * with HF tokenizers (engram_metadata.py, CompressedVocabulary), in utf8proc:
 *   NFKC, NFD, StripAccents (drop General_Category Mark: Mn, Mc, Me, as
 *   unicode-normalization's is_combining_mark), Lowercase (per code point:
 *   Rust's char::to_lowercase, whose one multi-character mapping, U+0130, NFD
 *   has already split), Replace([ \t\r\n]+ -> " "), Replace(^ $ ->
 *   U+E000), Strip (White_Space at both ends), Replace(U+E000 -> " "). */
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "tokenizer/detokenize.h"
#include "tokenizer/tokenizer.h"
#include "util/hashmap.h"

#define SENTINEL 0xE000 /* the private-use character that keeps a lone space */

static int is_mark(utf8proc_int32_t cp)
{
    utf8proc_category_t c = utf8proc_category(cp);
    return c == UTF8PROC_CATEGORY_MN || c == UTF8PROC_CATEGORY_MC || c == UTF8PROC_CATEGORY_ME;
}

static int is_ascii_space(utf8proc_int32_t cp)
{
    return cp == ' ' || cp == '\t' || cp == '\r' || cp == '\n';
}

/* text's key into *key (UTF-8, not NUL-terminated: *key_len bytes, pointing into
 * scratch or text). Returns 0, -1 when out of memory, -2 when utf8proc refuses. */
static int engram_key(const uint8_t *text, size_t len, utf8proc_int32_t **scratch, size_t *cap,
                      tok_buf *key)
{
    utf8proc_uint8_t *nfkc = NULL, *nfd = NULL;
    utf8proc_ssize_t n = utf8proc_map(text, (utf8proc_ssize_t)len, &nfkc,
                                      UTF8PROC_STABLE | UTF8PROC_COMPOSE | UTF8PROC_COMPAT);
    if (n < 0) return n == UTF8PROC_ERROR_NOMEM ? -1 : -2;
    n = utf8proc_map(nfkc, n, &nfd, UTF8PROC_STABLE | UTF8PROC_DECOMPOSE);
    free(nfkc);
    if (n < 0) return n == UTF8PROC_ERROR_NOMEM ? -1 : -2;
    /* code points, marks dropped, lowercased, ASCII whitespace runs as one space */
    if ((size_t)n > *cap) {
        utf8proc_int32_t *grown = realloc(*scratch, (size_t)n * sizeof *grown);
        if (!grown) {
            free(nfd);
            return -1;
        }
        *scratch = grown, *cap = (size_t)n;
    }
    utf8proc_int32_t *cps = *scratch;
    size_t m = 0;
    for (utf8proc_ssize_t i = 0; i < n;) {
        utf8proc_int32_t cp;
        utf8proc_ssize_t step = utf8proc_iterate(nfd + i, n - i, &cp);
        if (step <= 0) {
            free(nfd);
            return -2;
        }
        i += step;
        if (is_mark(cp)) continue;
        cp = utf8proc_tolower(cp);
        if (is_ascii_space(cp)) {
            if (m && cps[m - 1] == ' ') continue;
            cp = ' ';
        }
        cps[m++] = cp;
    }
    free(nfd);
    if (m == 1 && cps[0] == ' ') cps[0] = SENTINEL;
    size_t lo = 0, hi = m;
    while (lo < hi && tok_is_white_space(cps[lo])) lo++;
    while (hi > lo && tok_is_white_space(cps[hi - 1])) hi--;
    key->len = 0;
    for (size_t i = lo; i < hi; i++) {
        utf8proc_uint8_t b[4];
        utf8proc_ssize_t k = utf8proc_encode_char(cps[i] == SENTINEL ? ' ' : cps[i], b);
        if (tok_buf_append(key, b, (size_t)k)) return -1;
    }
    if (tok_buf_append(key, "", 0)) return -1; /* an empty key still gets its buffer */
    return 0;
}

static int holds_replacement(const uint8_t *s, size_t n)
{
    for (size_t i = 0; i + 3 <= n; i++)
        if (s[i] == 0xEF && s[i + 1] == 0xBF && s[i + 2] == 0xBD) return 1;
    return 0;
}

di_status tok_compressed_vocab(const di_tokenizer_impl *tok, int32_t **old2new, int32_t *n_ids,
                               int32_t *n_keys, tok_error *err)
{
    /* DeepInfer asserts the pad token's place */
    static const char pad[] = "<\xef\xbd\x9c\xe2\x96\x81pad\xe2\x96\x81\xef\xbd\x9c>";
    int32_t pad_id;
    if (di_tokenizer_token_id(tok, pad, sizeof pad - 1, &pad_id) != DI_OK || pad_id != 2)
        return tok_fail(err, DI_ERR_MODEL_FORMAT,
                        "the tokenizer has no <\xef\xbd\x9c\xe2\x96\x81pad\xe2\x96\x81\xef\xbd"
                        "\x9c> token at id 2, which Engram's compressed vocabulary requires "
                        "(DeepInfer's CompressedVocabulary)");
    /* the IDs DeepInfer maps: range(get_vocab_size()), the count of the tokens
     * (an ID space with holes maps fewer than its largest ID) */
    int32_t count = 0;
    for (int32_t id = 0; id < tok->n_vocab; id++)
        count += tok->tok_len[id] > 0 || (tok->tok_flags[id] & TOK_FLAG_ADDED);
    di_status st = DI_OK;
    int32_t *map = malloc((size_t)(count ? count : 1) * sizeof *map);
    utf8proc_int32_t *scratch = NULL;
    size_t cap = 0;
    tok_buf text = {0}, key = {0};
    uint8_t *spelled = NULL; /* a token's spelling in GPT-2's alphabet */
    size_t spelled_cap = 0;
    di_bytes_map keys;
    if (di_bytes_map_init(&keys, (size_t)tok->n_vocab)) {
        free(map);
        return tok_fail(err, DI_ERR_OUT_OF_MEMORY, "out of memory for the compressed vocabulary");
    }
    if (!map) goto oom;
    for (int32_t id = 0; id < count; id++) {
        text.len = 0;
        st = tok_decode(tok, &id, 1, 0, &text, err);
        if (st != DI_OK) goto done;
        const uint8_t *k = text.data;
        size_t k_len = text.len;
        if (holds_replacement(text.data, text.len)) {
            /* the vocabulary's spelling: byte-level tokens in GPT-2's alphabet */
            const uint8_t *raw = tok->pool + tok->tok_off[id];
            size_t raw_len = tok->tok_len[id];
            if (tok->decoder_byte_level && !(tok->tok_flags[id] & TOK_FLAG_ADDED)) {
                if (2 * raw_len + 1 > spelled_cap) {
                    uint8_t *grown = realloc(spelled, 2 * raw_len + 1);
                    if (!grown) goto oom;
                    spelled = grown, spelled_cap = 2 * raw_len + 1;
                }
                k = spelled, k_len = tok_byte_level_encode(raw, raw_len, spelled);
            } else {
                k = raw, k_len = raw_len;
            }
        } else {
            int r = engram_key(text.data, text.len, &scratch, &cap, &key);
            if (r == -1) goto oom;
            if (r == -2) {
                st = tok_fail(err, DI_ERR_INTERNAL,
                              "token %d: utf8proc refused its text while building the compressed "
                              "vocabulary",
                              id);
                goto done;
            }
            if (key.len) k = key.data, k_len = key.len;
        }
        int32_t next = (int32_t)keys.count;
        if (di_bytes_map_put(&keys, k, k_len, next) < 0) goto oom;
        map[id] = di_bytes_map_get(&keys, k, k_len);
    }
    *old2new = map, map = NULL;
    *n_ids = count;
    *n_keys = (int32_t)keys.count;
    goto done;
oom:
    st = tok_fail(err, DI_ERR_OUT_OF_MEMORY, "out of memory for the compressed vocabulary");
done:
    di_bytes_map_free(&keys);
    free(map);
    free(scratch);
    free(text.data);
    free(key.data);
    free(spelled);
    return st;
}
