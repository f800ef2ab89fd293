/* Engram's table layout and hash (engram.h): NumPy's seeded draws, sympy's
 * nextprime, and tile-kernels' engram_hash_ref, in C. */
#include "model/engram.h"

#include <stdlib.h>
#include <string.h>

#include "util/error.h"

/* NumPy's SeedSequence (numpy/random/bit_generator.pyx): the seed's 32-bit
 * words hashed into a pool of 4, then 2 n 32-bit words drawn from the pool
 * (generate_state(n, np.uint64): each pair read as one little-endian word). */
enum { SS_POOL = 4 };
#define SS_INIT_A 0x43b0d7e5u
#define SS_MULT_A 0x931e8875u
#define SS_INIT_B 0x8b51f9ddu
#define SS_MULT_B 0x58f38dedu
#define SS_MIX_L  0xca01f9ddu
#define SS_MIX_R  0x4973f715u

static uint32_t ss_hashmix(uint32_t value, uint32_t *hash_const)
{
    value ^= *hash_const;
    *hash_const *= SS_MULT_A;
    value *= *hash_const;
    return value ^ (value >> 16);
}

static uint32_t ss_mix(uint32_t x, uint32_t y)
{
    uint32_t r = SS_MIX_L * x - SS_MIX_R * y;
    return r ^ (r >> 16);
}

static void seed_sequence_state(uint64_t seed, uint64_t state[4])
{
    /* the seed as NumPy coerces an int: its 32-bit words, low first (0 is one word) */
    uint32_t entropy[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
    size_t n_entropy = seed >> 32 ? 2 : 1;
    uint32_t pool[SS_POOL], hash_const = SS_INIT_A;
    for (size_t i = 0; i < SS_POOL; i++)
        pool[i] = ss_hashmix(i < n_entropy ? entropy[i] : 0, &hash_const);
    for (size_t src = 0; src < SS_POOL; src++)
        for (size_t dst = 0; dst < SS_POOL; dst++)
            if (src != dst) pool[dst] = ss_mix(pool[dst], ss_hashmix(pool[src], &hash_const));
    uint32_t words[8];
    hash_const = SS_INIT_B;
    for (size_t i = 0; i < 8; i++) {
        uint32_t v = pool[i % SS_POOL] ^ hash_const;
        hash_const *= SS_MULT_B;
        v *= hash_const;
        words[i] = v ^ (v >> 16);
    }
    for (size_t i = 0; i < 4; i++) state[i] = (uint64_t)words[2 * i + 1] << 32 | words[2 * i];
}

/* PCG64 as NumPy runs it (numpy/random/src/pcg64): a 128-bit LCG whose output
 * is the XSL-RR of the state after each step. */
__extension__ typedef unsigned __int128 u128; /* GCC and clang on 64-bit targets */

typedef struct pcg64 {
    u128 state, inc;
} pcg64;

#define PCG64_MULT ((u128)2549297995355413924ULL << 64 | 4865540595714422341ULL)

static void pcg64_step(pcg64 *g)
{
    g->state = g->state * PCG64_MULT + g->inc;
}

static uint64_t pcg64_next(pcg64 *g)
{
    pcg64_step(g);
    uint64_t x = (uint64_t)(g->state >> 64) ^ (uint64_t)g->state;
    unsigned rot = (unsigned)(g->state >> 122);
    return (x >> rot) | (x << ((64 - rot) & 63));
}

static void pcg64_seed(pcg64 *g, uint64_t seed)
{
    uint64_t s[4];
    seed_sequence_state(seed, s);
    u128 initstate = (u128)s[0] << 64 | s[1];
    u128 initseq = (u128)s[2] << 64 | s[3];
    g->state = 0;
    g->inc = initseq << 1 | 1;
    pcg64_step(g);
    g->state += initstate;
    pcg64_step(g);
}

int engram_numpy_integers(uint64_t seed, int64_t bound, size_t n, int64_t *out)
{
    if (bound <= (int64_t)UINT32_MAX + 1) return -1;
    pcg64 g;
    pcg64_seed(&g, seed);
    /* Lemire's bounded draw (numpy/random/src/distributions: bounded_lemire_uint64) */
    uint64_t range = (uint64_t)bound; /* values in [0, range) */
    for (size_t i = 0; i < n; i++) {
        u128 m = (u128)pcg64_next(&g) * range;
        uint64_t leftover = (uint64_t)m;
        if (leftover < range) {
            uint64_t threshold = (UINT64_MAX - (range - 1)) % range;
            while (leftover < threshold) {
                m = (u128)pcg64_next(&g) * range;
                leftover = (uint64_t)m;
            }
        }
        out[i] = (int64_t)(m >> 64);
    }
    return 0;
}

static uint64_t mulmod(uint64_t a, uint64_t b, uint64_t m)
{
    return (uint64_t)((u128)a * b % m);
}

static uint64_t powmod(uint64_t a, uint64_t e, uint64_t m)
{
    uint64_t r = 1;
    for (a %= m; e; e >>= 1, a = mulmod(a, a, m))
        if (e & 1) r = mulmod(r, a, m);
    return r;
}

/* Miller-Rabin with the first 12 primes as bases: exact below 3.3e24. */
static int is_prime(uint64_t n)
{
    static const uint64_t bases[] = {2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37};
    if (n < 2) return 0;
    for (size_t i = 0; i < sizeof bases / sizeof *bases; i++) {
        if (n == bases[i]) return 1;
        if (n % bases[i] == 0) return 0;
    }
    uint64_t d = n - 1;
    int s = 0;
    while (!(d & 1)) d >>= 1, s++;
    for (size_t i = 0; i < sizeof bases / sizeof *bases; i++) {
        uint64_t x = powmod(bases[i], d, n);
        if (x == 1 || x == n - 1) continue;
        int r = 1;
        for (; r < s; r++) {
            x = mulmod(x, x, n);
            if (x == n - 1) break;
        }
        if (r == s) return 0;
    }
    return 1;
}

uint64_t engram_next_prime(uint64_t n)
{
    for (uint64_t p = n + 1;; p++)
        if (is_prime(p)) return p;
}

void engram_layout_free(engram_layout *l)
{
    if (!l) return;
    free(l->layer);
    free(l->multiplier);
    free(l->rows);
    free(l->offset);
    free(l->total_rows);
    memset(l, 0, sizeof *l);
}

/* 1 when p is among the first n of taken[] */
static int taken_already(const int64_t *taken, size_t n, int64_t p)
{
    for (size_t i = 0; i < n; i++)
        if (taken[i] == p) return 1;
    return 0;
}

di_status engram_layout_init(engram_layout *out, int n_layers, const int32_t *layers, int max_ngram,
                             const int64_t *table_vocab, int n_heads, int64_t vocab, uint64_t seed,
                             di_error **err)
{
    memset(out, 0, sizeof *out);
    if (n_layers < 1)
        return di_error_setf(err, DI_ERR_MODEL_FORMAT, "Engram: no layers (%d)", n_layers);
    if (max_ngram < 2 || max_ngram > ENGRAM_MAX_NGRAM)
        return di_error_setf(err, DI_ERR_MODEL_FORMAT,
                             "Engram: the longest n-gram (%d) is outside [2, %d]", max_ngram,
                             ENGRAM_MAX_NGRAM);
    if (n_heads < 1 || n_heads > 1024)
        return di_error_setf(err, DI_ERR_MODEL_FORMAT,
                             "Engram: %d heads a n-gram size (expected 1 to 1024)", n_heads);
    for (int n = 0; n < max_ngram - 1; n++)
        if (table_vocab[n] < 2 || table_vocab[n] > INT32_MAX)
            return di_error_setf(err, DI_ERR_MODEL_FORMAT,
                                 "Engram: the %d-gram tables' size %lld is outside [2, 2^31)",
                                 n + 2, (long long)table_vocab[n]);
    if (vocab < 1)
        return di_error_setf(err, DI_ERR_MODEL_FORMAT,
                             "Engram: the compressed vocabulary has %lld tokens", (long long)vocab);
    int64_t bound = INT64_MAX / vocab / 2;
    if (bound < 1) bound = 1;
    if (bound <= (int64_t)UINT32_MAX + 1)
        return di_error_setf(err, DI_ERR_MODEL_FORMAT,
                             "Engram: a compressed vocabulary of %lld tokens is too large "
                             "(NumPy's 32-bit draws are not reproduced)",
                             (long long)vocab);
    out->n_layers = n_layers;
    out->max_ngram = max_ngram;
    out->n_heads = n_heads;
    out->n_tables = (max_ngram - 1) * n_heads;
    size_t n_all = (size_t)n_layers * (size_t)out->n_tables;
    out->layer = malloc((size_t)n_layers * sizeof *out->layer);
    out->multiplier = malloc((size_t)n_layers * (size_t)max_ngram * sizeof *out->multiplier);
    out->rows = malloc(n_all * sizeof *out->rows);
    out->offset = malloc(n_all * sizeof *out->offset);
    out->total_rows = malloc((size_t)n_layers * sizeof *out->total_rows);
    if (!out->layer || !out->multiplier || !out->rows || !out->offset || !out->total_rows) {
        engram_layout_free(out);
        return di_error_setf(err, DI_ERR_OUT_OF_MEMORY, "Engram: out of memory for %d layers",
                             n_layers);
    }
    size_t k = 0; /* tables laid out so far, across layers */
    for (int s = 0; s < n_layers; s++) {
        out->layer[s] = layers[s];
        int64_t *mult = out->multiplier + (size_t)s * (size_t)max_ngram;
        engram_numpy_integers(seed + 10007u * (uint64_t)(int64_t)layers[s], bound,
                              (size_t)max_ngram, mult);
        for (int r = 0; r < max_ngram; r++) mult[r] = mult[r] * 2 + 1;
        int64_t total = 0;
        for (int n = 0; n < max_ngram - 1; n++) {
            uint64_t start = (uint64_t)table_vocab[n] - 1;
            for (int h = 0; h < n_heads; h++, k++) {
                uint64_t p = engram_next_prime(start);
                while (taken_already(out->rows, k, (int64_t)p)) p = engram_next_prime(p);
                out->rows[k] = (int64_t)p;
                out->offset[k] = total;
                total += (int64_t)p;
                start = p;
            }
        }
        if (total > INT32_MAX) {
            engram_layout_free(out);
            return di_error_setf(err, DI_ERR_MODEL_FORMAT,
                                 "Engram: layer %d's tables hold %lld rows (past 2^31)", layers[s],
                                 (long long)total);
        }
        out->total_rows[s] = total;
    }
    return DI_OK;
}

void engram_hash(const engram_layout *l, int slot, const int32_t *ids, int32_t *rows)
{
    const int64_t *mult = l->multiplier + (size_t)slot * (size_t)l->max_ngram;
    const int64_t *p = l->rows + (size_t)slot * (size_t)l->n_tables;
    const int64_t *off = l->offset + (size_t)slot * (size_t)l->n_tables;
    /* the products fit: an ID is below the vocabulary, a multiplier below
     * 2^63 / vocab (engram_layout_init's bound), so h stays non-negative */
    uint64_t h = (uint64_t)ids[0] * (uint64_t)mult[0];
    for (int n = 1, t = 0; n < l->max_ngram; n++) {
        h ^= (uint64_t)ids[n] * (uint64_t)mult[n];
        for (int j = 0; j < l->n_heads; j++, t++)
            rows[t] = (int32_t)((int64_t)(h % (uint64_t)p[t]) + off[t]);
    }
}
