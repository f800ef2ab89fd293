/* The tokenizer's encode and decode drivers, and the parts both loaders share.
 *
 * encode, as HF tokenizers' Tokenizer::encode runs it:
 *   1. split the text on added tokens (AddedVocabulary: tokens with
 *      normalized=false are found in the raw text, leftmost-longest, with their
 *      lstrip / rstrip / single_word rules);
 *   2. normalize the pieces between them and split those on normalized=true
 *      added tokens;
 *   3. pre-tokenize each remaining piece (the fast path or the Split pipeline);
 *   4. BPE each pre-token, with a per-call cache of words already seen;
 *   5. add the post-processor's tokens (BOS …) when asked. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "tokenizer/tokenizer.h"
#include "util/utf8.h"

di_status tok_fail(tok_error *err, di_status status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    if (err) {
        err->status = status;
        vsnprintf(err->message, sizeof err->message, fmt, ap);
    }
    va_end(ap);
    return status;
}

int tok_ids_push(tok_ids *v, int32_t id)
{
    if (v->n == v->cap) {
        size_t cap = v->cap ? v->cap * 2 : 256;
        int32_t *ids = realloc(v->ids, cap * sizeof *ids);
        if (!ids) return -1;
        v->ids = ids;
        v->cap = cap;
    }
    v->ids[v->n++] = id;
    return 0;
}

int tok_spans_push(tok_spans *s, uint32_t start, uint32_t len)
{
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 256;
        tok_span *v = realloc(s->v, cap * sizeof *v);
        if (!v) return -1;
        s->v = v;
        s->cap = cap;
    }
    s->v[s->n++] = (tok_span){start, len};
    return 0;
}

/* ------------------------------------------------------------------------- */
/* Construction                                                               */
/* ------------------------------------------------------------------------- */

di_tokenizer_impl *tok_alloc(int32_t n_vocab)
{
    di_tokenizer_impl *tok = calloc(1, sizeof *tok);
    if (!tok) return NULL;
    tok->n_vocab = n_vocab;
    tok->tok_off = calloc((size_t)n_vocab + 1, sizeof *tok->tok_off);
    tok->tok_len = calloc((size_t)n_vocab + 1, sizeof *tok->tok_len);
    tok->tok_flags = calloc((size_t)n_vocab + 1, 1);
    tok->bos_id = tok->eos_id = -1;
    if (!tok->tok_off || !tok->tok_len || !tok->tok_flags ||
        di_bytes_map_init(&tok->vocab, (size_t)n_vocab) != 0 ||
        di_u64_map_init(&tok->merges, (size_t)n_vocab) != 0) {
        tok_free(tok);
        return NULL;
    }
    for (int i = 0; i < 256; i++) tok->byte_token[i] = -1;
    return tok;
}

static size_t pool_cap_of(size_t n)
{
    size_t cap = 1 << 16;
    while (cap < n) cap *= 2;
    return cap;
}

int tok_set_token(di_tokenizer_impl *tok, int32_t id, const uint8_t *bytes, size_t len,
                  unsigned flags)
{
    if (id < 0 || id >= tok->n_vocab) return -1;
    size_t need = tok->pool_len + len;
    if (need > UINT32_MAX) return -1;
    if (pool_cap_of(need) != pool_cap_of(tok->pool_len) || !tok->pool) {
        uint8_t *pool = realloc(tok->pool, pool_cap_of(need));
        if (!pool) return -1;
        tok->pool = pool;
    }
    memcpy(tok->pool + tok->pool_len, bytes, len);
    tok->tok_off[id] = (uint32_t)tok->pool_len;
    tok->tok_len[id] = (uint32_t)len;
    tok->tok_flags[id] = (uint8_t)flags;
    tok->pool_len = need;
    return 0;
}

di_status tok_add_merge(di_tokenizer_impl *tok, uint32_t rank, const uint8_t *left, size_t left_len,
                        const uint8_t *right, size_t right_len, tok_error *err)
{
    int32_t a = di_bytes_map_get(&tok->vocab, left, left_len);
    int32_t b = di_bytes_map_get(&tok->vocab, right, right_len);
    if (a < 0 || b < 0)
        return tok_fail(err, DI_ERR_MODEL_FORMAT, "merges[%u]: %s part is not in the vocabulary",
                        rank, a < 0 ? "left" : "right");
    uint8_t stack[256];
    uint8_t *joined = left_len + right_len <= sizeof stack ? stack : malloc(left_len + right_len);
    if (!joined) return tok_fail(err, DI_ERR_OUT_OF_MEMORY, "out of memory reading merges");
    memcpy(joined, left, left_len);
    memcpy(joined + left_len, right, right_len);
    int32_t m = di_bytes_map_get(&tok->vocab, joined, left_len + right_len);
    if (joined != stack) free(joined);
    if (m < 0)
        return tok_fail(err, DI_ERR_MODEL_FORMAT,
                        "merges[%u]: the merged token is not in the vocabulary", rank);
    /* A repeated pair keeps its first (lowest) rank, as HF's merge map does. */
    if (di_u64_map_put(&tok->merges, ((uint64_t)(uint32_t)a << 32) | (uint32_t)b,
                       ((uint64_t)rank << 32) | (uint32_t)m) < 0)
        return tok_fail(err, DI_ERR_OUT_OF_MEMORY, "out of memory reading merges");
    return DI_OK;
}

static void trie_free(tok_trie *t)
{
    di_u64_map_free(&t->edges);
    free(t->terminal);
    memset(t, 0, sizeof *t);
}

/* Build the trie of one pass. Returns 0 or -1 (out of memory). */
static int trie_build(const di_tokenizer_impl *tok, int normalized_pass, tok_trie *t)
{
    size_t max_nodes = 1;
    for (size_t i = 0; i < tok->n_added; i++)
        if ((tok->added[i].normalized != 0) == (normalized_pass != 0))
            max_nodes += tok->added[i].len;
    t->terminal = malloc(max_nodes * sizeof *t->terminal);
    if (!t->terminal || di_u64_map_init(&t->edges, max_nodes) != 0) return -1;
    t->terminal[0] = -1;
    t->n_nodes = 1;
    for (size_t i = 0; i < tok->n_added; i++) {
        const tok_added_token *a = &tok->added[i];
        if ((a->normalized != 0) != (normalized_pass != 0)) continue;
        uint64_t node = 0;
        for (size_t j = 0; j < a->len; j++) {
            uint64_t child;
            if (!di_u64_map_get(&t->edges, node << 8 | a->content[j], &child)) {
                child = t->n_nodes++;
                t->terminal[child] = -1;
                if (di_u64_map_put(&t->edges, node << 8 | a->content[j], child) < 0) return -1;
            }
            node = child;
        }
        /* Two added tokens with the same content: the last one wins, as in HF's
         * AddedVocabulary (and llama.cpp's token_to_id map). */
        t->terminal[node] = (int32_t)i;
        t->first_byte[a->content[0]] = 1;
    }
    return 0;
}

/* Set TOK_FLAG_WHOLE on every vocabulary token that BPE rebuilds from its own
 * bytes (most of them; a few are unreachable from their spelling). */
static di_status mark_whole_tokens(di_tokenizer_impl *tok, tok_error *err)
{
    tok_bpe_scratch *s = tok_bpe_scratch_new();
    tok_ids out = {0};
    di_status st = DI_OK;
    if (!s) return tok_fail(err, DI_ERR_OUT_OF_MEMORY, "out of memory");
    const di_bytes_map *v = &tok->vocab;
    for (size_t i = 0; i < v->capacity; i++) {
        if (v->hashes[i] == 0) continue;
        int32_t id = v->values[i];
        out.n = 0;
        if (tok_bpe_word(tok, s, v->pool + v->key_off[i], v->key_len[i], &out) != 0) {
            st = tok_fail(err, DI_ERR_OUT_OF_MEMORY, "out of memory");
            break;
        }
        if (out.n == 1 && out.ids[0] == id && !(tok->tok_flags[id] & TOK_FLAG_ADDED))
            tok->tok_flags[id] |= TOK_FLAG_WHOLE;
    }
    free(out.ids);
    tok_bpe_scratch_free(s);
    return st;
}

di_status tok_finish(di_tokenizer_impl *tok, tok_error *err)
{
    for (int b = 0; b < 256; b++) {
        uint8_t byte = (uint8_t)b;
        tok->byte_token[b] = di_bytes_map_get(&tok->vocab, &byte, 1);
    }
    for (size_t i = 0; i < tok->n_added; i++) {
        if (tok->added[i].len == 0)
            return tok_fail(err, DI_ERR_MODEL_FORMAT, "added token %d has empty content",
                            tok->added[i].id);
        if (di_utf8_scan_bytes(tok->added[i].content, tok->added[i].len).state != DI_UTF8_VALID)
            return tok_fail(err, DI_ERR_MODEL_FORMAT, "added token %d is not valid UTF-8",
                            tok->added[i].id);
    }
    for (int pass = 0; pass < 2; pass++)
        if (trie_build(tok, pass, &tok->added_trie[pass]) != 0)
            return tok_fail(err, DI_ERR_OUT_OF_MEMORY, "out of memory indexing added tokens");
    return mark_whole_tokens(tok, err);
}

void tok_free(di_tokenizer_impl *tok)
{
    if (!tok) return;
    free(tok->pool);
    free(tok->tok_off);
    free(tok->tok_len);
    free(tok->tok_flags);
    di_bytes_map_free(&tok->vocab);
    di_u64_map_free(&tok->merges);
    for (size_t i = 0; i < tok->n_added; i++) free(tok->added[i].content);
    free(tok->added);
    trie_free(&tok->added_trie[0]);
    trie_free(&tok->added_trie[1]);
    for (size_t i = 0; i < tok->n_steps; i++) tok_regex_free(tok->steps[i].regex);
    free(tok->steps);
    free(tok->prefix_ids);
    free(tok->suffix_ids);
    free(tok);
}

/* ------------------------------------------------------------------------- */
/* Added tokens                                                               */
/* ------------------------------------------------------------------------- */

static int cp_at(const uint8_t *s, size_t n, size_t i, utf8proc_int32_t *cp)
{
    utf8proc_ssize_t r = utf8proc_iterate(s + i, (utf8proc_ssize_t)(n - i), cp);
    return r > 0 ? (int)r : 1;
}

int tok_is_white_space(int32_t cp)
{
    /* Rust's char::is_whitespace: the White_Space property. */
    return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
           (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F ||
           cp == 0x205F || cp == 0x3000;
}

static int is_word_char(utf8proc_int32_t cp)
{
    utf8proc_category_t c = utf8proc_category(cp);
    return cp == '_' || (c >= UTF8PROC_CATEGORY_LU && c <= UTF8PROC_CATEGORY_LO) ||
           (c >= UTF8PROC_CATEGORY_ND && c <= UTF8PROC_CATEGORY_NO);
}

/* The last code point before byte offset `end`. */
static utf8proc_int32_t cp_before(const uint8_t *s, size_t end)
{
    size_t i = end;
    while (i > 0 && (s[i - 1] & 0xC0) == 0x80) i--;
    if (i > 0) i--;
    utf8proc_int32_t cp = -1;
    utf8proc_iterate(s + i, (utf8proc_ssize_t)(end - i), &cp);
    return cp;
}

/* Is added token t allowed in this pass, under these flags? */
static int added_in_pass(const tok_added_token *t, int normalized_pass)
{
    return (t->normalized != 0) == (normalized_pass != 0);
}

static int added_enabled(const tok_added_token *t, unsigned flags)
{
    return t->special ? (flags & DI_TOKENIZE_SPECIAL) != 0 : (flags & DI_TOKENIZE_ADDED) != 0;
}

/* A piece of the text after added-token splitting: either an added token (id >= 0)
 * or text to normalize/pre-tokenize (id -1). */
typedef struct piece {
    size_t start, len;
    int32_t id;
} piece;

typedef struct pieces {
    piece *v;
    size_t n, cap;
} pieces;

static int pieces_push(pieces *p, size_t start, size_t len, int32_t id)
{
    if (p->n == p->cap) {
        size_t cap = p->cap ? p->cap * 2 : 16;
        piece *v = realloc(p->v, cap * sizeof *v);
        if (!v) return -1;
        p->v = v;
        p->cap = cap;
    }
    p->v[p->n++] = (piece){start, len, id};
    return 0;
}

/* Split s[0, n) on the added tokens of one pass, leftmost-longest, as
 * AddedVocabulary::find_matches does; every token of the pass takes part in the
 * matching, and one that `flags` disables is then skipped as text (HF's
 * encode_special_tokens). Pieces get offsets relative to `base`. */
static int split_on_added(const di_tokenizer_impl *tok, const uint8_t *s, size_t n, size_t base,
                          int normalized_pass, unsigned flags, pieces *out)
{
    const tok_trie *trie = &tok->added_trie[normalized_pass ? 1 : 0];
    size_t start_offset = 0, i = 0;
    /* Skip the scan when no token of this pass is enabled: every match would be
     * skipped as text, so the split would be the identity. */
    int any = 0;
    for (size_t k = 0; k < tok->n_added && !any; k++)
        any =
            added_in_pass(&tok->added[k], normalized_pass) && added_enabled(&tok->added[k], flags);
    while (any && i < n) {
        if (!trie->first_byte[s[i]]) {
            i++;
            continue;
        }
        /* the longest added token of this pass starting at i */
        const tok_added_token *hit = NULL;
        uint64_t node = 0;
        for (size_t j = i; j < n; j++) {
            if (!di_u64_map_get(&trie->edges, node << 8 | s[j], &node)) break;
            if (trie->terminal[node] >= 0) hit = &tok->added[trie->terminal[node]];
        }
        if (!hit) {
            i++;
            continue;
        }
        size_t start = i, stop = i + hit->len;
        i = stop;
        if (!added_enabled(hit, flags)) continue;
        if (hit->single_word) {
            int start_ok = start == 0 || !is_word_char(cp_before(s, start));
            utf8proc_int32_t next = -1;
            if (stop < n) cp_at(s, n, stop, &next);
            int stop_ok = stop == n || !is_word_char(next);
            if (!start_ok || !stop_ok) continue;
        }
        if (hit->lstrip) {
            size_t j = start;
            while (j > start_offset) {
                size_t k = j;
                while (k > 0 && (s[k - 1] & 0xC0) == 0x80) k--;
                if (k > 0) k--;
                if (!tok_is_white_space(cp_before(s, j))) break;
                j = k;
            }
            start = j;
        }
        if (hit->rstrip) {
            while (stop < n) {
                utf8proc_int32_t cp;
                int w = cp_at(s, n, stop, &cp);
                if (!tok_is_white_space(cp)) break;
                stop += (size_t)w;
            }
            i = stop;
        }
        if (start_offset < start && pieces_push(out, base + start_offset, start - start_offset, -1))
            return -1;
        if (pieces_push(out, base + start, stop - start, hit->id)) return -1;
        start_offset = stop;
    }
    if (start_offset < n && pieces_push(out, base + start_offset, n - start_offset, -1)) return -1;
    return 0;
}

/* ------------------------------------------------------------------------- */
/* Encode                                                                     */
/* ------------------------------------------------------------------------- */

/* A per-call word cache: natural text repeats its words, and looking one up is
 * cheaper than merging it again. Direct-mapped and of fixed size (sized to the
 * text, at most WORD_CACHE_SLOTS), with the word and its IDs inline in the slot,
 * so it stays in the CPU caches however long the text is; a collision simply
 * replaces the slot. Only words of up to WORD_CACHE_BYTES bytes that encode to
 * up to WORD_CACHE_IDS tokens are cached. */
#define WORD_CACHE_SLOTS 2048
#define WORD_CACHE_BYTES 22
#define WORD_CACHE_IDS   6

typedef struct cache_slot {
    uint32_t hash;
    uint8_t len; /* 0: empty */
    uint8_t n_ids;
    uint8_t bytes[WORD_CACHE_BYTES];
    int32_t ids[WORD_CACHE_IDS];
} cache_slot;

typedef struct encode_state {
    const di_tokenizer_impl *tok;
    tok_bpe_scratch *bpe;
    tok_spans spans;
    cache_slot *cache;
    uint32_t cache_mask;
} encode_state;

static uint32_t word_hash(const uint8_t *w, size_t len)
{
    /* FNV-1a: short keys, and the slot keeps the bytes to confirm a hit */
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < len; i++) h = (h ^ w[i]) * 16777619u;
    return h;
}

static int encode_words(encode_state *st, const uint8_t *text, size_t len, tok_ids *out)
{
    st->spans.n = 0;
    int rc = st->tok->fast_path != TOK_FAST_NONE
                 ? tok_pretokenize_fast(st->tok->fast_path, text, len, &st->spans)
                 : tok_pretokenize_general(st->tok, text, len, &st->spans);
    if (rc != 0) return rc;
    for (size_t k = 0; k < st->spans.n; k++) {
        const uint8_t *w = text + st->spans.v[k].start;
        size_t wlen = st->spans.v[k].len;
        if (wlen > WORD_CACHE_BYTES) {
            if (tok_bpe_word(st->tok, st->bpe, w, wlen, out) != 0) return -1;
            continue;
        }
        uint32_t h = word_hash(w, wlen);
        cache_slot *slot = &st->cache[h & st->cache_mask];
        if (slot->len == wlen && slot->hash == h && memcmp(slot->bytes, w, wlen) == 0) {
            for (uint8_t j = 0; j < slot->n_ids; j++)
                if (tok_ids_push(out, slot->ids[j]) != 0) return -1;
            continue;
        }
        /* A word that is itself a token whose own bytes merge back into it. */
        int32_t whole = di_bytes_map_get(&st->tok->vocab, w, wlen);
        if (whole >= 0 && (st->tok->tok_flags[whole] & TOK_FLAG_WHOLE)) {
            if (tok_ids_push(out, whole) != 0) return -1;
            slot->hash = h;
            slot->len = (uint8_t)wlen;
            slot->n_ids = 1;
            memcpy(slot->bytes, w, wlen);
            slot->ids[0] = whole;
            continue;
        }
        size_t before = out->n;
        if (tok_bpe_word(st->tok, st->bpe, w, wlen, out) != 0) return -1;
        size_t n = out->n - before;
        if (n == 0 || n > WORD_CACHE_IDS) continue;
        slot->hash = h;
        slot->len = (uint8_t)wlen;
        slot->n_ids = (uint8_t)n;
        memcpy(slot->bytes, w, wlen);
        memcpy(slot->ids, out->ids + before, n * sizeof *out->ids);
    }
    return 0;
}

static uint8_t *normalize(tok_normalizer form, const uint8_t *s, size_t len, size_t *out_len)
{
    utf8proc_option_t opt = UTF8PROC_STABLE;
    switch (form) {
    case TOK_NORM_NFC: opt |= UTF8PROC_COMPOSE; break;
    case TOK_NORM_NFD: opt |= UTF8PROC_DECOMPOSE; break;
    case TOK_NORM_NFKC: opt |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT; break;
    case TOK_NORM_NFKD: opt |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT; break;
    case TOK_NORM_NONE: break;
    }
    utf8proc_uint8_t *dst = NULL;
    utf8proc_ssize_t n = utf8proc_map(s, (utf8proc_ssize_t)len, &dst, opt);
    if (n < 0) return NULL;
    *out_len = (size_t)n;
    return dst;
}

di_status tok_encode(const di_tokenizer_impl *tok, const uint8_t *text, size_t len, unsigned flags,
                     tok_ids *out, tok_error *err)
{
    di_utf8_scan scan = di_utf8_scan_bytes(text, len);
    if (scan.state != DI_UTF8_VALID)
        return tok_fail(err, DI_ERR_INVALID_UTF8, "text is not valid UTF-8 at byte offset %zu",
                        scan.valid);
    if (len > UINT32_MAX)
        return tok_fail(err, DI_ERR_INVALID_ARGUMENT, "text of %zu bytes is longer than 4 GiB",
                        len);

    di_status status = DI_OK;
    encode_state st = {.tok = tok};
    pieces raw = {0}, norm = {0};
    uint8_t *normalized = NULL;
    st.bpe = tok_bpe_scratch_new();
    uint32_t slots = 64; /* about one slot per 8 bytes of text, up to the maximum */
    while (slots < WORD_CACHE_SLOTS && (size_t)slots * 8 < len) slots *= 2;
    st.cache = calloc(slots, sizeof *st.cache);
    st.cache_mask = slots - 1;
    if (!st.bpe || !st.cache) goto oom;

    if ((flags & DI_TOKENIZE_ADD_SPECIAL_TOKENS) && tok->n_prefix)
        for (size_t i = 0; i < tok->n_prefix; i++)
            if (tok_ids_push(out, tok->prefix_ids[i]) != 0) goto oom;

    if (split_on_added(tok, text, len, 0, 0, flags, &raw) != 0) goto oom;
    for (size_t p = 0; p < raw.n; p++) {
        if (raw.v[p].id >= 0) {
            if (tok_ids_push(out, raw.v[p].id) != 0) goto oom;
            continue;
        }
        const uint8_t *s = text + raw.v[p].start;
        size_t n = raw.v[p].len;
        if (tok->normalizer != TOK_NORM_NONE) {
            free(normalized);
            normalized = normalize(tok->normalizer, s, n, &n);
            if (!normalized) goto oom;
            s = normalized;
        }
        norm.n = 0;
        if (split_on_added(tok, s, n, 0, 1, flags, &norm) != 0) goto oom;
        for (size_t q = 0; q < norm.n; q++) {
            if (norm.v[q].id >= 0) {
                if (tok_ids_push(out, norm.v[q].id) != 0) goto oom;
            } else {
                int rc = encode_words(&st, s + norm.v[q].start, norm.v[q].len, out);
                if (rc == -2) {
                    status = tok_fail(err, DI_ERR_UNSUPPORTED,
                                      "a pre-tokenizer pattern gave up on this text (the regex "
                                      "engine's backtracking limit)");
                    goto done;
                }
                if (rc != 0) goto oom;
            }
        }
    }

    if ((flags & DI_TOKENIZE_ADD_SPECIAL_TOKENS) && tok->n_suffix)
        for (size_t i = 0; i < tok->n_suffix; i++)
            if (tok_ids_push(out, tok->suffix_ids[i]) != 0) goto oom;
    goto done;
oom:
    status = tok_fail(err, DI_ERR_OUT_OF_MEMORY, "out of memory while encoding %zu bytes", len);
done:
    free(normalized);
    free(raw.v);
    free(norm.v);
    free(st.spans.v);
    free(st.cache);
    tok_bpe_scratch_free(st.bpe);
    return status;
}

/* ------------------------------------------------------------------------- */
/* Decode                                                                     */
/* ------------------------------------------------------------------------- */

di_status tok_token_bytes(const di_tokenizer_impl *tok, int32_t id, const uint8_t **bytes,
                          size_t *len, tok_error *err)
{
    if (id < 0 || id >= tok->n_vocab)
        return tok_fail(err, DI_ERR_INVALID_ARGUMENT,
                        "token id %d is outside the vocabulary [0, %d)", id, tok->n_vocab);
    *bytes = tok->pool + tok->tok_off[id];
    *len = tok->tok_len[id];
    return DI_OK;
}
