/* Decoding and incremental detokenizing (detokenize.c). */
#ifndef DI_TOKENIZER_DETOKENIZE_H
#define DI_TOKENIZER_DETOKENIZE_H

#include "tokenizer/tokenizer.h"

/* A growable byte buffer, always NUL-terminated once anything was appended. */
typedef struct tok_buf {
    uint8_t *data;
    size_t len, cap;
} tok_buf;

int tok_buf_append(tok_buf *b, const void *data, size_t n);

/* Decode ids into out (appending), lossy as HF's ByteLevel decoder. */
di_status tok_decode(const di_tokenizer_impl *tok, const int32_t *ids, size_t n, unsigned flags,
                     tok_buf *out, tok_error *err);

/* One stream's state: bytes held back (an incomplete UTF-8 sequence, at most 3
 * bytes) and the text produced by the last call. */
typedef struct tok_detok {
    const di_tokenizer_impl *tok;
    unsigned flags;
    tok_buf pending;
    tok_buf out;
} tok_detok;

/* Push one (valid) ID; d->out holds the new text. -1 when out of memory. */
int tok_detok_push(tok_detok *d, int32_t id);
/* End the stream; d->out holds the rest. -1 when out of memory. */
int tok_detok_flush(tok_detok *d);

#endif
