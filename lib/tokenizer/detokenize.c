/* Decoding: token IDs -> bytes -> UTF-8 text, whole (tok_decode) or one token at
 * a time (the detokenizer). Both replace every maximal ill-formed subpart with
 * U+FFFD, as HF's ByteLevel decoder does through String::from_utf8_lossy, so the
 * streamed pieces concatenate to exactly the whole decode. */
#include "tokenizer/detokenize.h"

#include <stdlib.h>
#include <string.h>

#include "util/utf8.h"

static const uint8_t replacement[3] = {0xEF, 0xBF, 0xBD}; /* U+FFFD */

int tok_buf_append(tok_buf *b, const void *data, size_t n)
{
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap < b->len + n + 1) cap *= 2;
        uint8_t *p = realloc(b->data, cap);
        if (!p) return -1;
        b->data = p;
        b->cap = cap;
    }
    if (n) memcpy(b->data + b->len, data, n);
    b->len += n;
    b->data[b->len] = 0;
    return 0;
}

/* Append the lossy UTF-8 of s[0, n) to out. When hold_incomplete is set, an
 * incomplete sequence at the very end is not converted: its length is returned
 * so the caller can keep it for the next call. */
static int lossy_append(tok_buf *out, const uint8_t *s, size_t n, int hold_incomplete, size_t *held)
{
    size_t i = 0;
    *held = 0;
    while (i < n) {
        di_utf8_scan scan = di_utf8_scan_bytes(s + i, n - i);
        if (tok_buf_append(out, s + i, scan.valid)) return -1;
        i += scan.valid;
        if (scan.state == DI_UTF8_VALID) break;
        if (scan.state == DI_UTF8_INCOMPLETE && hold_incomplete) {
            *held = n - i;
            break;
        }
        i += di_utf8_ill_formed_length(s + i, n - i);
        if (tok_buf_append(out, replacement, sizeof replacement)) return -1;
    }
    return 0;
}

static int skip_token(const di_tokenizer_impl *tok, int32_t id, unsigned flags)
{
    return (flags & DI_DECODE_SKIP_SPECIAL) && (tok->tok_flags[id] & TOK_FLAG_SPECIAL);
}

di_status tok_decode(const di_tokenizer_impl *tok, const int32_t *ids, size_t n, unsigned flags,
                     tok_buf *out, tok_error *err)
{
    tok_buf bytes = {0};
    di_status st = DI_OK;
    for (size_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= tok->n_vocab) {
            st = tok_fail(err, DI_ERR_INVALID_ARGUMENT,
                          "ids[%zu] = %d is outside the vocabulary [0, %d)", i, ids[i],
                          tok->n_vocab);
            goto done;
        }
        if (skip_token(tok, ids[i], flags)) continue;
        if (tok_buf_append(&bytes, tok->pool + tok->tok_off[ids[i]], tok->tok_len[ids[i]]))
            goto oom;
    }
    size_t held;
    if (tok_buf_append(out, "", 0) || lossy_append(out, bytes.data, bytes.len, 0, &held)) goto oom;
    goto done;
oom:
    st = tok_fail(err, DI_ERR_OUT_OF_MEMORY, "out of memory decoding %zu tokens", n);
done:
    free(bytes.data);
    return st;
}

int tok_detok_push(tok_detok *d, int32_t id)
{
    d->out.len = 0;
    if (tok_buf_append(&d->out, "", 0)) return -1;
    if (skip_token(d->tok, id, d->flags)) return 0;
    if (tok_buf_append(&d->pending, d->tok->pool + d->tok->tok_off[id], d->tok->tok_len[id]))
        return -1;
    size_t held;
    if (lossy_append(&d->out, d->pending.data, d->pending.len, 1, &held)) return -1;
    memmove(d->pending.data, d->pending.data + d->pending.len - held, held);
    d->pending.len = held;
    return 0;
}

int tok_detok_flush(tok_detok *d)
{
    d->out.len = 0;
    size_t held;
    if (tok_buf_append(&d->out, "", 0) ||
        lossy_append(&d->out, d->pending.data, d->pending.len, 0, &held))
        return -1;
    d->pending.len = 0;
    return 0;
}
