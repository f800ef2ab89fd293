/* DeepSeek-V4.1's Engram: the hashed n-gram tables' layout and the hash that
 * picks a token's rows in them, as DeepInfer 0.1.0 computes them
 * (model_executor/models/v4_modules/engram_metadata.py: EngramLayout,
 * NgramHashMapping; the hash itself is tile-kernels 2.1.0's engram_hash_ref).
 *
 * An Engram layer reads, for each token, the compressed IDs (the tokenizer's
 * compressed vocabulary, tokenizer/compressed_vocab.c) of the token and the
 * max_ngram - 1 before it (the pad token's compressed ID before the start).
 * For each n-gram size n = 2..max_ngram and each of n_heads heads it takes one
 * row of a table whose row count is a prime: the rows picked are
 *   h_n = (id_0 * m_0) ^ (id_1 * m_1) ^ ... ^ (id_{n-1} * m_{n-1})   (int64)
 *   row = h_n mod prime[layer][n - 2][head] + offset[layer][n - 2][head]
 * where id_r is the ID r tokens back and m_r the layer's odd multipliers, drawn
 * from NumPy's default_rng(seed + 10007 * layer) (engram_numpy_integers). The
 * tables of one layer are stacked (offsets are their prefix sums). */
#ifndef DI_MODEL_ENGRAM_H
#define DI_MODEL_ENGRAM_H

#include <stddef.h>
#include <stdint.h>

#include "deepinfer/deepinfer.h"

#define ENGRAM_MAX_NGRAM 8 /* the longest n-gram a layout may hash */

/* NumPy's np.random.default_rng(seed).integers(0, bound, size=n,
 * dtype=np.int64), bit for bit (NumPy 1.17 and later: SeedSequence(seed) ->
 * PCG64 (XSL-RR 128/64) -> Lemire's bounded draw on 64-bit words). out: n
 * values in [0, bound). bound must be in [2^32 + 1, 2^63 - 1]: NumPy draws
 * smaller ranges from buffered 32-bit words, which this does not reproduce.
 * Returns 0, or -1 when bound is outside that range. Thread-safe (no state). */
int engram_numpy_integers(uint64_t seed, int64_t bound, size_t n, int64_t *out);

/* sympy.nextprime(n): the smallest prime greater than n, for n < 2^62
 * (deterministic Miller-Rabin). */
uint64_t engram_next_prime(uint64_t n);

/* The tables of every Engram layer of a model. Owns its arrays
 * (engram_layout_free). */
typedef struct engram_layout {
    int n_layers;        /* Engram layers */
    int max_ngram;       /* n-grams of 2..max_ngram tokens */
    int n_heads;         /* tables per n-gram size */
    int n_tables;        /* (max_ngram - 1) * n_heads tables a layer */
    int32_t *layer;      /* [n_layers] the model layers they sit in, in config order */
    int64_t *multiplier; /* [n_layers][max_ngram] odd hash multipliers */
    int64_t *rows;       /* [n_layers][n_tables] each table's rows (a prime) */
    int64_t *offset;     /* [n_layers][n_tables] its first row in the layer's stack */
    int64_t *total_rows; /* [n_layers] rows of the layer's stacked tables */
} engram_layout;

/* Build the layout, as EngramLayout.from_cfg and NgramHashMapping do: for
 * each layer in order, each n-gram size, each head, the table's rows are the
 * next prime after the previous head's (the first head starts from
 * table_vocab[n - 2] - 1), never a prime any earlier table took (across all
 * layers); the multipliers are 2 k + 1 for k drawn from NumPy's
 * default_rng(seed + 10007 * layer).integers(0, bound, size=max_ngram) with
 * bound = max(1, (2^63 - 1) / vocab / 2) for the compressed vocabulary's size
 * vocab. layers: [n_layers] distinct layer numbers; table_vocab:
 * [max_ngram - 1] sizes, each >= 2.
 * Errors (err set, *out zeroed): DI_ERR_MODEL_FORMAT naming what is out of
 * range (max_ngram outside [2, ENGRAM_MAX_NGRAM], n_heads < 1, a table size
 * past 2^31, vocab < 1 or so large that NumPy would draw 32-bit words),
 * DI_ERR_OUT_OF_MEMORY. */
di_status engram_layout_init(engram_layout *out, int n_layers, const int32_t *layers, int max_ngram,
                             const int64_t *table_vocab, int n_heads, int64_t vocab, uint64_t seed,
                             di_error **err);
void engram_layout_free(engram_layout *l);

/* The rows a token reads in layer slot `slot` (0 .. n_layers - 1):
 * ids[r] is the compressed ID r tokens back (ids[0] the token's own), for r in
 * [0, max_ngram), each in [0, the vocabulary engram_layout_init was given);
 * rows: [n_tables] row numbers in the layer's stacked tables (below its
 * total_rows, so below 2^31), n-gram size 2's heads first. Thread-safe. */
void engram_hash(const engram_layout *l, int slot, const int32_t *ids, int32_t *rows);

#endif
