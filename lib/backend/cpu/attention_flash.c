/* Tiled causal GQA attention with an online softmax (FlashAttention's
 * recurrence, on the CPU): the fast path of cpu_attention (attention.h).
 *
 * A task is one KV head and a tile of query tokens: every query head of the
 * group and every token of the tile (up to TILE_ROWS rows) walks the keys
 * together, CHUNK positions at a time. Each chunk's K and V rows are converted
 * to f32 once for all the tile's rows (K transposed, so the scores of a row
 * are CHUNK-wide vector products without horizontal sums); each row keeps a
 * running max m, a running sum l and an unnormalized output O:
 *   m' = max(m, max_p s_p), O = O e^(m - m') + sum_p e^(s_p - m') V_p,
 *   l = l e^(m - m') + sum_p e^(s_p - m'),  out = O / l.
 * Nothing of size n (the context) is kept, and a K/V row is read from memory
 * once per tile instead of once per query head and token.
 *
 * Segments (flash-decoding): a row's keys are split at multiples of
 * FLASH_SEGMENT and each segment's (m, l, O) folded into the row's in order,
 *   M' = max(M, m), O = O e^(M - M') + o e^(m - M'), L alike,
 * in every mode, so a row's result depends on its context length alone. With
 * more tasks than threads (prefill) one task walks a tile's segments in turn;
 * with few (decode: one tile a KV head) each segment is a task of its own
 * for every KV head, and a second pass folds them — the same folds,
 * bit-identical — so a long context's keys are shared among the threads.
 *
 * Memory: a chunk's rows are converted for all the KV heads of a task at
 * once (up to STAGE_FLOATS values a row), the heads of a position lying side
 * by side in its cache row: the cache is read in address order, which the
 * hardware prefetcher streams (measured at decode after 4,096 tokens, SmolLM2
 * shape, 1 thread: f16 58 -> 63, Q8_0 61 -> 77, Q4_0 68 -> 85 tokens/s of
 * the attention op, bench/attention_bench; a head at a time read 128 bytes
 * of every 384 and software prefetch did not make up for it, and did not
 * help the staged step; the in-place f16 step below, whose arithmetic is
 * lighter, reads a head's slice at a time and asks for the next chunk's).
 *
 * Arithmetic: f32 throughout, the f16, Q8_0 or Q4_0 cache's values converted
 * exactly (a chunk's rows dequantized once for the tile's rows); the
 * exponentials, the rescales e^(m - m') too, by exp_ps (a polynomial within
 * 2 ulp of expf on the softmax's range). It is not llama.cpp's order (the
 * reference path in attention.c is): results agree with it to float rounding
 * (tests/unit/test_cpu_kernels.c).
 *
 * Three forms of one arithmetic. The AVX2 chunk step (flash_chunk) holds a
 * row's 16 scores in lanes (K transposed), each row's softmax step
 * horizontal: decode and small calls. Where AVX-512 runs, a prefill's tiles
 * take attention_flash_rows512.c's step, a row in each lane: the scores S^T from the
 * queries transposed once a segment (no K transposes), the max, e^x and the
 * sum tree down the keys as vectors (no horizontal step, one e^x for 16 rows'
 * rescales), and eight tiles a task (cpu_flash_group_task) share each chunk's
 * converted rows, four of them each key's broadcast values (rows_chunk512).
 * Each row's operations and their order are the same in both (a score's fused
 * multiply-adds over the dimensions, the max, softmax_step16's sum tree, O's
 * multiply-adds over the keys), so the outputs are bit-identical and a row's
 * result never depends on the layout its call took. Measured on the attention
 * op alone at SmolLM2's shape (bench/attention_bench, 2 threads, Xeon with
 * AVX-512): a whole prompt of 4,096 2.0-2.7x the AVX2 step's speed (1.6-1.7x
 * before the tiles shared the broadcasts and O was aligned). And where AVX-512
 * runs on an f16, Q8_0 or Q4_0 cache, the tiles flash_segment steps (decode, a
 * draft's check) take
 * flash_chunk_cache, the AVX2 step's layout with the 16 keys in one vector,
 * reading the cache's rows in place (no f32 staging: K transposed in
 * registers, 16-bit values or bytes, V converted where P V reads it),
 * bit-identical to it too; with AVX2 only, decode tiles on an f16 cache take
 * flash_chunk_f16_avx2, the same in two vectors of 8 keys.
 * Roofline per task: reads 2 n head_dim cache elements, 4 n head_dim
 * TILE_ROWS FLOPs. */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/attention.h"
#include "backend/cpu/attention_flash.h"
#include "backend/cpu/quant.h"
#include "backend/cpu/vec_dot.h"

int cpu_attention_avx2_only;

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#    include "backend/cpu/avx2_cache_rows.h"
#    include "backend/cpu/avx2_math.h"
#    include "backend/cpu/avx512_cache_rows.h"

/* The queries q[r] of KV head g's tile (rows from token t0) and the keys
 * valid[r] each sees of the chunk [p0, p0 + len) (0 or less: none). */
static inline void tile_queries(const flash_job *j, int g, int64_t t0, int rows, int64_t p0,
                                int len, const float **q, int *valid)
{
    for (int r = 0; r < rows; r++) {
        int64_t limit;
        q[r] = row_query(j, g, t0, r, &limit);
        valid[r] = limit - p0 < len ? (int)(limit - p0) : len;
    }
}

/* o[0, 64) = o corr + sum_i p[i] v[i ld + (0, 64)] over i < valid, in key
 * order: eight independent sums. */
AVX2 static inline void pv_block64(float *o, __m256 corr, const float *p, const float *v,
                                   ptrdiff_t ld, int valid)
{
    __m256 acc[8];
    UNROLL for (ptrdiff_t k = 0; k < 8; k++) acc[k] =
        _mm256_mul_ps(_mm256_loadu_ps(o + 8 * k), corr);
    for (ptrdiff_t i = 0; i < valid; i++) {
        __m256 pi = _mm256_set1_ps(p[i]);
        UNROLL for (ptrdiff_t k = 0; k < 8; k++) acc[k] =
            _mm256_fmadd_ps(pi, _mm256_loadu_ps(v + i * ld + 8 * k), acc[k]);
    }
    UNROLL for (ptrdiff_t k = 0; k < 8; k++) _mm256_storeu_ps(o + 8 * k, acc[k]);
}

/* One row's O = O corr + P V over its hd dimensions, 64 (eight independent
 * sums) at a time; V's rows ld floats apart. */
AVX2 static void pv_row(float *orow, float corr, const float *p, const float *v, ptrdiff_t hd,
                        ptrdiff_t ld, int valid)
{
    __m256 cv = _mm256_set1_ps(corr);
    for (ptrdiff_t d0 = 0; d0 < hd; d0 += 64) {
        if (hd - d0 >= 64) { /* (the common case, unrolled whole) */
            pv_block64(orow + d0, cv, p, v + d0, ld, valid);
            continue;
        }
        ptrdiff_t nv = (hd - d0) / 8;
        __m256 acc[8];
        UNROLL for (ptrdiff_t k = 0; k < 8; k++) acc[k] =
            k < nv ? _mm256_mul_ps(_mm256_loadu_ps(orow + d0 + 8 * k), cv) : _mm256_setzero_ps();
        for (ptrdiff_t i = 0; i < valid; i++) {
            __m256 pi = _mm256_set1_ps(p[i]);
            const float *vr = v + i * ld + d0;
            UNROLL for (ptrdiff_t k = 0; k < 8; k++) if (k < nv) acc[k] =
                _mm256_fmadd_ps(pi, _mm256_loadu_ps(vr + 8 * k), acc[k]);
        }
        UNROLL for (ptrdiff_t k = 0; k < nv; k++) _mm256_storeu_ps(orow + d0 + 8 * k, acc[k]);
    }
}

/* Scores of nr (1-4, a constant where inlined) query rows against a chunk
 * held transposed (kt: [hd][CHUNK]): sc[k CHUNK + i] = scale (q_k . key_i),
 * each sum over the dimensions in order, one fused multiply-add per
 * dimension and lane, so a row's scores do not depend on the rows beside it. */
AVX2 __attribute__((always_inline)) static inline void
tile_scores(const float *kt, const float *const *q, int nr, ptrdiff_t hd, __m256 scale, float *sc)
{
    __m256 a[4][2];
    UNROLL for (int k = 0; k < 4; k++) a[k][0] = a[k][1] = _mm256_setzero_ps();
    for (ptrdiff_t d = 0; d < hd; d++) {
        __m256 kk0 = _mm256_load_ps(kt + d * CHUNK), kk1 = _mm256_load_ps(kt + d * CHUNK + 8);
        UNROLL for (int k = 0; k < 4; k++) if (k < nr)
        {
            __m256 qd = _mm256_set1_ps(q[k][d]);
            a[k][0] = _mm256_fmadd_ps(qd, kk0, a[k][0]);
            a[k][1] = _mm256_fmadd_ps(qd, kk1, a[k][1]);
        }
    }
    UNROLL for (int k = 0; k < 4; k++) if (k < nr)
    {
        _mm256_store_ps(sc + (ptrdiff_t)k * CHUNK, _mm256_mul_ps(a[k][0], scale));
        _mm256_store_ps(sc + (ptrdiff_t)k * CHUNK + 8, _mm256_mul_ps(a[k][1], scale));
    }
}

/* The online softmax of KV head g's tile (rows from token t0) over one chunk
 * of keys [p0, p0 + len), len <= CHUNK, into the rows' state st; the chunk's
 * K and V rows, in f32, at kr and v, `ld` floats apart (K's unused rows
 * finite). kt: room for K^T, [hd][CHUNK] f32, 32-byte aligned. */
AVX2 static void flash_chunk(const flash_job *j, int g, int64_t t0, int rows, int64_t p0, int len,
                             const float *kr, const float *v, ptrdiff_t ld, float *st, float *kt)
{
    const ptrdiff_t hd = j->c->head_dim, stride = state_stride(j);
    _Alignas(32) float p[TILE_ROWS * CHUNK], sc[TILE_ROWS * CHUNK], corr[TILE_ROWS];
    int valid[TILE_ROWS];
    const float *q[TILE_ROWS];
    transpose_chunk16(kr, ld, hd, kt);
    tile_queries(j, g, t0, rows, p0, len, q, valid);
    /* the scores of four rows at a time (fewer at the end), each K^T load
     * shared by them */
    const __m256 scale = _mm256_set1_ps(j->scale);
    for (ptrdiff_t r0 = 0; r0 < rows; r0 += 4) {
        int nr = rows - r0 < 4 ? (int)(rows - r0) : 4;
        float *dst = sc + r0 * CHUNK;
        switch (nr) { /* each count its own code: no row computed twice */
        case 1: tile_scores(kt, q + r0, 1, hd, scale, dst); break;
        case 2: tile_scores(kt, q + r0, 2, hd, scale, dst); break;
        case 3: tile_scores(kt, q + r0, 3, hd, scale, dst); break;
        default: tile_scores(kt, q + r0, 4, hd, scale, dst); break;
        }
    }
    /* each row's softmax step: its chunk weights P, its rescale corr */
    for (ptrdiff_t r = 0; r < rows; r++)
        if (valid[r] > 0)
            corr[r] = softmax_step16(sc + r * CHUNK, valid[r], &st[r * stride], &st[r * stride + 1],
                                     p + r * CHUNK);
    /* O = O corr + P V: two rows with the same keys at a time where the
     * width allows (each V load shared), else one; the same sums either way */
    for (ptrdiff_t r = 0; r < rows; r++) {
        if (valid[r] <= 0) continue;
        float *o = st + r * stride + STATE_O;
        if (hd % 32 == 0 && r + 1 < rows && valid[r + 1] == valid[r]) {
            for (ptrdiff_t d0 = 0; d0 < hd; d0 += 32)
                pv_pair32(o + d0, o + stride + d0, corr[r], corr[r + 1], p + r * CHUNK,
                          p + (r + 1) * CHUNK, v + d0, ld, valid[r]);
            r++;
            continue;
        }
        pv_row(o, corr[r], p + r * CHUNK, v, hd, ld, valid[r]);
    }
}

/* Each row's softmax step over a chunk's scores sc [rows][CHUNK] (its state
 * in st, stride apart; its weights into p [rows][CHUNK]), for the rows that
 * see a key of it, listed in order: their output o, weights pr, keys vr and
 * rescale corr. Returns how many. */
AVX2 static int chunk_softmax(const flash_job *j, int rows, const int *valid, const float *sc,
                              float *st, float *p, float *corr, float **o, const float **pr,
                              int *vr)
{
    const ptrdiff_t stride = state_stride(j);
    int n = 0;
    for (ptrdiff_t r = 0; r < rows; r++) {
        if (valid[r] <= 0) continue;
        corr[n] = softmax_step16(sc + r * CHUNK, valid[r], &st[r * stride], &st[r * stride + 1],
                                 p + r * CHUNK);
        o[n] = st + r * stride + STATE_O, pr[n] = p + r * CHUNK, vr[n] = valid[r], n++;
    }
    return n;
}

/* The cache's rows read in place: K's rows past a chunk's end point here
 * (finite, then masked: f16 zeros, or Q8_0 / Q4_0 blocks of scale 0;
 * ZERO_ROW_BYTES, the widest head taken). */
enum { ZERO_ROW_BYTES = 2048 };
static const _Alignas(64) char zero_row[ZERO_ROW_BYTES] = {0};

/* flash_chunk on an f16, Q8_0 or Q4_0 cache where AVX-512 runs, for the
 * tiles flash_segment steps (up to TILE_ROWS rows, the scores
 * CACHE_KEYS_MAX_ROWS a pass): the same arithmetic, bit for bit,
 * with K and V read from the cache rows k[0, CHUNK) and v[0, len) in place
 * (avx512_cache_rows.h) instead of staged in f32. Roofline: reads 2 CHUNK
 * head_dim cache values, 4 CHUNK head_dim rows FLOPs. */
AVX512BW static void flash_chunk_cache(const flash_job *j, int g, int64_t t0, int rows, int64_t p0,
                                       int len, const char *const *k, const char *const *v,
                                       float *st)
{
    const ptrdiff_t hd = j->c->head_dim;
    const int type = j->c->dtype == MODEL_DTYPE_Q8_0   ? CACHE_Q8_0
                     : j->c->dtype == MODEL_DTYPE_Q4_0 ? CACHE_Q4_0
                                                       : CACHE_F16;
    _Alignas(64) float p[TILE_ROWS * CHUNK], sc[TILE_ROWS * CHUNK];
    float corr[TILE_ROWS];
    int valid[TILE_ROWS];
    const float *q[TILE_ROWS];
    tile_queries(j, g, t0, rows, p0, len, q, valid);
#    define SCORES(n)                                                                              \
        (type == CACHE_Q8_0   ? cache_keys_scores(k, CACHE_Q8_0, q + r0, n, hd, j->scale, sr)      \
         : type == CACHE_Q4_0 ? cache_keys_scores(k, CACHE_Q4_0, q + r0, n, hd, j->scale, sr)      \
                              : cache_keys_scores(k, CACHE_F16, q + r0, n, hd, j->scale, sr))
    /* CACHE_KEYS_MAX_ROWS rows a pass (K transposed again for each) */
    for (ptrdiff_t r0 = 0; r0 < rows; r0 += CACHE_KEYS_MAX_ROWS) {
        float *sr = sc + r0 * CHUNK;
        switch (rows - r0) { /* each count and cache type its own code */
        case 1: SCORES(1); break;
        case 2: SCORES(2); break;
        case 3: SCORES(3); break;
        case 4: SCORES(4); break;
        case 5: SCORES(5); break;
        case 6: SCORES(6); break;
        case 7: SCORES(7); break;
        default: SCORES(8); break;
        }
    }
#    undef SCORES
    /* each row's softmax step; the rows that see a key of the chunk, in
     * groups sharing each converted V vector: up to three over 64 dimensions
     * a pass, or four to eight (a decode step's query heads of a KV head,
     * e.g. 7 or 8; 9-16 rows in two groups as even as they come) over 32,
     * V converted once for the group, not for every three (1.08-1.15x on
     * the op at 8 rows, head_dim 128, 256 keys: the f16 and Q8_0 caches,
     * bench/README.md, session 53) */
    float *o[TILE_ROWS];
    const float *pr[TILE_ROWS];
    int vr[TILE_ROWS];
    const int n = chunk_softmax(j, rows, valid, sc, st, p, corr, o, pr, vr);
#    define PV(nr, nv)                                                                             \
        (type == CACHE_Q8_0                                                                        \
             ? cache_values_pv(o + r0, corr + r0, pr + r0, vr + r0, nr, v, CACHE_Q8_0, d0, nv)     \
         : type == CACHE_Q4_0                                                                      \
             ? cache_values_pv(o + r0, corr + r0, pr + r0, vr + r0, nr, v, CACHE_Q4_0, d0, nv)     \
             : cache_values_pv(o + r0, corr + r0, pr + r0, vr + r0, nr, v, CACHE_F16, d0, nv))
    _Static_assert((int)TILE_ROWS <= 16, "at most two groups, each of four to eight rows");
    if (n > 3) {
        const int groups = (n + 7) / 8, per = (n + groups - 1) / groups;
        for (int r0 = 0; r0 < n; r0 += per) {
            const int nr = n - r0 < per ? n - r0 : per;
            for (ptrdiff_t d0 = 0; d0 < hd; d0 += 32) {
                const int nv = hd - d0 < 32 ? 1 : 2;
                switch (nr * 2 + (nv == 2)) {
                case 8: PV(4, 1); break;
                case 9: PV(4, 2); break;
                case 10: PV(5, 1); break;
                case 11: PV(5, 2); break;
                case 12: PV(6, 1); break;
                case 13: PV(6, 2); break;
                case 14: PV(7, 1); break;
                case 15: PV(7, 2); break;
                case 16: PV(8, 1); break;
                default: PV(8, 2); break;
                }
            }
        }
        return;
    }
    for (int r0 = 0; r0 < n; r0 += 3) {
        const int nr = n - r0 < 3 ? n - r0 : 3;
        for (ptrdiff_t d0 = 0; d0 < hd; d0 += 64) {
            const int nv = hd - d0 < 64 ? (int)(hd - d0) / 16 : 4;
            /* (64 dimensions, the common case, its own code) */
            switch (nr + 3 * (nv == 4)) {
            case 1: PV(1, nv); break;
            case 2: PV(2, nv); break;
            case 3: PV(3, nv); break;
            case 4: PV(1, 4); break;
            case 5: PV(2, 4); break;
            default: PV(3, 4); break;
            }
        }
    }
#    undef PV
}

/* The largest tiles the AVX2 in-place step takes (a decode step's rows):
 * bigger ones convert V for every group of three rows, where the staged
 * step converts it once. */
enum { IN_PLACE_AVX2_ROWS = 8 };

/* flash_chunk on an f16 cache with AVX2 only, for tiles of at most
 * IN_PLACE_AVX2_ROWS rows: the same arithmetic, bit for bit, with K
 * transposed into an f16 K^T (kt: [hd][CHUNK], 32-byte aligned, in the
 * thread's workspace, not on a host thread's stack) and V read from the cache rows k[0, CHUNK) and
 * v[0, len) in place (avx2_cache_rows.h). Roofline: as flash_chunk_cache's. */
AVX2 static void flash_chunk_f16_avx2(const flash_job *j, int g, int64_t t0, int rows, int64_t p0,
                                      int len, const char *const *k, const char *const *v,
                                      float *st, uint16_t *kt)
{
    const ptrdiff_t hd = j->c->head_dim;
    _Alignas(32) float p[IN_PLACE_AVX2_ROWS * CHUNK], sc[IN_PLACE_AVX2_ROWS * CHUNK];
    float corr[IN_PLACE_AVX2_ROWS];
    int valid[IN_PLACE_AVX2_ROWS];
    const float *q[IN_PLACE_AVX2_ROWS];
    tile_queries(j, g, t0, rows, p0, len, q, valid);
    f16_keys_transpose_avx2((const uint16_t *const *)k, hd, kt);
    const __m256 scale = _mm256_set1_ps(j->scale);
    for (ptrdiff_t r0 = 0; r0 < rows; r0 += 4) {
        float *dst = sc + r0 * CHUNK;
        switch (rows - r0) { /* each count its own code */
        case 1: f16_tile_scores(kt, q + r0, 1, hd, scale, dst); break;
        case 2: f16_tile_scores(kt, q + r0, 2, hd, scale, dst); break;
        case 3: f16_tile_scores(kt, q + r0, 3, hd, scale, dst); break;
        default: f16_tile_scores(kt, q + r0, 4, hd, scale, dst); break;
        }
    }
    float *o[IN_PLACE_AVX2_ROWS];
    const float *pr[IN_PLACE_AVX2_ROWS];
    int vr[IN_PLACE_AVX2_ROWS];
    const int n = chunk_softmax(j, rows, valid, sc, st, p, corr, o, pr, vr);
    const uint16_t *const *vh = (const uint16_t *const *)v;
    for (int r0 = 0; r0 < n; r0 += 3)
        for (ptrdiff_t d0 = 0; d0 < hd; d0 += 16) switch (n - r0) {
            case 1: f16_values_pv_avx2(o + r0, corr + r0, pr + r0, vr + r0, 1, vh, d0); break;
            case 2: f16_values_pv_avx2(o + r0, corr + r0, pr + r0, vr + r0, 2, vh, d0); break;
            default: f16_values_pv_avx2(o + r0, corr + r0, pr + r0, vr + r0, 3, vh, d0); break;
            }
}

/* The keys of the chunk from p below k1: 0 to CHUNK. */
static inline int keys_from(int64_t p, int64_t k1)
{
    return k1 - p <= 0 ? 0 : k1 - p < CHUNK ? (int)(k1 - p) : CHUNK;
}

/* Every cache line of the slices [off, off + bytes) of rows k[0, n) and
 * v[0, n), aligned or not: into L1 (near) or L2. */
static inline void prefetch_slices(const char *const *k, const char *const *v, int n, size_t off,
                                   size_t bytes, int near)
{
    for (int i = 0; i < n; i++) {
        const uintptr_t ka = (uintptr_t)(k[i] + off) & 63, va = (uintptr_t)(v[i] + off) & 63;
        for (size_t b = 0; b < bytes + ka; b += 64) {
            if (near)
                __builtin_prefetch(k[i] + off + b - ka, 0, 3);
            else
                __builtin_prefetch(k[i] + off + b - ka, 0, 1);
        }
        for (size_t b = 0; b < bytes + va; b += 64) {
            if (near)
                __builtin_prefetch(v[i] + off + b - va, 0, 3);
            else
                __builtin_prefetch(v[i] + off + b - va, 0, 1);
        }
    }
}

/* flash_segment with flash_chunk_cache or, in_place 2, flash_chunk_f16_avx2
 * (the job's in_place): a chunk at a time, each head of [g0, g1) in turn
 * (the heads of a position side by side in its cache row, so the chunk's
 * rows are read from memory once, in order); the same results. A chunk's 16
 * rows lie in one block (where block_size is a multiple of 16), and a
 * layer's next block n_layer blocks on: a stretch the hardware prefetcher
 * does not follow. Each head's slice of the next chunk's rows is asked for
 * as that head's step starts: decode attention after 4,096 tokens on an f16
 * cache, SmolLM2's shape, 2 threads, 1.13x with all of the next chunk asked
 * for at once, 1.21x spread over the heads, 1.24x two chunks ahead
 * (bench/attention_bench, medians of 8 runs interleaved), at 1 thread 1.18x
 * / 1.14x one / two ahead, so one (into L1). Where a head's slice is four
 * cache lines or more (an f16 head of 128 or wider), the chunk after it is
 * asked for too, into L2 (locality 1: prefetcht2): 1.13-1.25x at 4,096
 * keys, 1 thread, on the 7B shape (16 heads, 2 KV heads of 128), 1.06-1.24x
 * on Llama-3-8B's (32, 8 of 128); on heads of 64 (SmolLM2's 9 of 3, and 20
 * of 4) it cost 3-9 %, and on a Q8_0 head of 128 (136 bytes) it was even
 * (bench/README.md, session 54). */
AVX2 static void flash_segment_cache(const flash_job *j, int g0, int g1, int64_t t0, int rows,
                                     int64_t k0, int64_t k1, float *st, ptrdiff_t st_head,
                                     uint16_t *kt)
{
    const cpu_kv_cache *c = j->c;
    for (int g = g0; g < g1; g++) state_init(j, rows, st + (g - g0) * st_head);
    /* the rows of the chunks at p0 (row), p0 + CHUNK (next) and, asked for
     * two ahead, p0 + 2 CHUNK (far), each the one after it a chunk before */
    const char *krow[CHUNK], *vrow[CHUNK], *knext[CHUNK], *vnext[CHUNK];
    const char *kfar[CHUNK] = {0}, *vfar[CHUNK] = {0};
    const int far_ahead = c->head_bytes >= 256; /* four lines */
    chunk_rows(c, j->s, j->layer, g0, k0, keys_from(k0, k1), knext, vnext);
    if (far_ahead && keys_from(k0 + CHUNK, k1) > 0)
        chunk_rows(c, j->s, j->layer, g0, k0 + CHUNK, keys_from(k0 + CHUNK, k1), kfar, vfar);
    for (int64_t p0 = k0; p0 < k1; p0 += CHUNK) {
        const int64_t p2 = p0 + (int64_t)2 * CHUNK;
        const int len = keys_from(p0, k1), next = keys_from(p0 + CHUNK, k1),
                  far = far_ahead ? keys_from(p2, k1) : 0;
        memcpy(krow, knext, sizeof krow), memcpy(vrow, vnext, sizeof vrow);
        if (far_ahead) {
            memcpy(knext, kfar, sizeof knext), memcpy(vnext, vfar, sizeof vnext);
            if (far > 0) chunk_rows(c, j->s, j->layer, g0, p2, far, kfar, vfar);
        } else if (next > 0) {
            chunk_rows(c, j->s, j->layer, g0, p0 + CHUNK, next, knext, vnext);
        }
        for (int g = g0; g < g1; g++) {
            const size_t off = (size_t)(g - g0) * c->head_bytes;
            prefetch_slices(knext, vnext, next, off, c->head_bytes, 1);
            prefetch_slices(kfar, vfar, far, off, c->head_bytes, 0);
            const char *k[CHUNK], *v[CHUNK];
            for (int i = 0; i < CHUNK; i++) {
                k[i] = i < len ? krow[i] + off : zero_row;
                v[i] = i < len ? vrow[i] + off : zero_row;
            }
            if (j->in_place == 2)
                flash_chunk_f16_avx2(j, g, t0, rows, p0, len, k, v, st + (g - g0) * st_head, kt);
            else
                flash_chunk_cache(j, g, t0, rows, p0, len, k, v, st + (g - g0) * st_head);
        }
    }
}

/* KV heads staged together: their rows' f32 values, K and V, for a chunk. */
enum { STAGE_FLOATS = 512 };

/* The staged heads' values a row: as many whole heads as STAGE_FLOATS holds
 * (one where a head is wider). */
static ptrdiff_t stage_floats(ptrdiff_t hd)
{
    return hd <= STAGE_FLOATS ? STAGE_FLOATS / hd * hd : hd;
}

/* flash_segment's workspace: the staged K and V rows, [CHUNK][stage_floats]
 * each, then flash_chunk's K^T [hd][CHUNK] (f32; every part a multiple of 16
 * floats, so each stays 64-byte aligned; flash_chunk_f16_avx2's f16 K^T, half
 * the size, takes the f32 one's place). */
static size_t segment_ws_floats(ptrdiff_t hd)
{
    return (size_t)(stage_floats(hd) * 2 * CHUNK + hd * CHUNK);
}

/* One segment of keys [k0, k1) for the rows of KV heads [g0, g1)'s tiles
 * from token t0, head g's state at st + (g - g0) st_head; ws: the thread's
 * workspace (segment_ws_floats, 64-byte aligned). A chunk at a time:
 * its rows for as many heads as STAGE_FLOATS holds (every head of a position
 * side by side in the cache) converted to f32 in one streaming pass, then
 * each head's tile in turn. Each head's arithmetic is its own: the results
 * do not depend on g0, g1. */
AVX2 static void flash_segment(const flash_job *j, int g0, int g1, int64_t t0, int rows, int64_t k0,
                               int64_t k1, float *st, ptrdiff_t st_head, float *ws)
{
    const cpu_kv_cache *c = j->c;
    const ptrdiff_t hd = c->head_dim;
    const int per_stage = (int)(stage_floats(hd) / hd);
    float *kr = ws, *v = ws + CHUNK * stage_floats(hd), *kt = v + CHUNK * stage_floats(hd);
    if (j->in_place == 1 || (j->in_place == 2 && rows <= IN_PLACE_AVX2_ROWS)) {
        /* (the f16 K^T in the f32 K^T's place: half its size) */
        flash_segment_cache(j, g0, g1, t0, rows, k0, k1, st, st_head, (uint16_t *)kt);
        return;
    }
    for (int g = g0; g < g1; g++) state_init(j, rows, st + (g - g0) * st_head);
    for (int64_t p0 = k0; p0 < k1; p0 += CHUNK) {
        const int len = k1 - p0 < CHUNK ? (int)(k1 - p0) : CHUNK;
        for (int s0 = g0; s0 < g1; s0 += per_stage) {
            const int n = g1 - s0 < per_stage ? g1 - s0 : per_stage;
            const ptrdiff_t ld = n * hd; /* the staged heads' values, a row */
            stage_chunk(j, s0, p0, len, ld, kr, v);
            for (int g = s0; g < s0 + n; g++)
                flash_chunk(j, g, t0, rows, p0, len, kr + (g - s0) * hd, v + (g - s0) * hd, ld,
                            st + (g - g0) * st_head, kt);
        }
    }
}

/* A task: one KV head and a tile, every segment in turn, folded as they end.
 * Its workspace (the thread's): the segment's state [TILE_ROWS][hd + STATE_O], the
 * output O [TILE_ROWS][hd], then flash_segment's. */
AVX2 static void flash_task(void *ctx, int64_t task, int thread)
{
    const flash_job *j = ctx;
    const ptrdiff_t hd = j->c->head_dim, stride = state_stride(j);
    const int g = (int)(task % j->c->n_head_kv);
    int64_t t0, t1;
    const int rows = tile_rows(j, task / j->c->n_head_kv, &t0, &t1);
    float *st = cpu_threadpool_scratch(j->pool, thread), *O = st + TILE_ROWS * stride,
          *seg_ws = O + TILE_ROWS * hd;
    float M[TILE_ROWS], L[TILE_ROWS];
    for (int r = 0; r < rows; r++) M[r] = -INFINITY, L[r] = 0;
    memset(O, 0, (size_t)rows * (size_t)hd * sizeof *O); /* (every row sees a key) */
    const int64_t n = j->pos0 + t1; /* the tile's last token sees the most keys */
    for (int64_t seg = 0; seg * FLASH_SEGMENT < n; seg++) {
        int64_t k0, k1;
        segment_keys(seg, n, &k0, &k1);
        flash_segment(j, g, g + 1, t0, rows, k0, k1, st, 0, seg_ws);
        for (int r = 0; r < rows; r++) merge_segment(hd, &M[r], &L[r], O + r * hd, st + r * stride);
    }
    write_rows(j, g, t0, rows, L, O);
}

/* Split mode (flash-decoding): a task is one tile and segment for every KV
 * head, a chunk of keys at a time for each head in turn (the heads of a
 * position share its cache lines: the segment is read from memory once, in
 * order); each head's rows' state goes to j->part for flash_merge_task. */
AVX2 static void flash_split_task(void *ctx, int64_t task, int thread)
{
    const flash_job *j = ctx;
    const ptrdiff_t stride = state_stride(j), st_head = j->n_seg * TILE_ROWS * stride;
    const int64_t seg = task % j->n_seg, tile = task / j->n_seg;
    int64_t t0, t1, k0, k1;
    const int rows = tile_rows(j, tile, &t0, &t1);
    const int64_t n = j->pos0 + t1; /* the tile's last token sees the most keys */
    float *st = j->part + (tile * j->c->n_head_kv * j->n_seg + seg) * TILE_ROWS * stride;
    if (seg * FLASH_SEGMENT >= n) { /* past this tile's keys: nothing */
        for (int g = 0; g < j->c->n_head_kv; g++) state_init(j, rows, st + g * st_head);
        return;
    }
    segment_keys(seg, n, &k0, &k1);
    flash_segment(j, 0, j->c->n_head_kv, t0, rows, k0, k1, st, st_head,
                  cpu_threadpool_scratch(j->pool, thread));
}

/* Split mode's second pass: a KV head and tile, its segments folded in order
 * (the same folds as flash_task, so the results are bit-identical); the
 * output O [TILE_ROWS][hd] in the thread's workspace. */
AVX2 static void flash_merge_task(void *ctx, int64_t gt, int thread)
{
    const flash_job *j = ctx;
    const ptrdiff_t hd = j->c->head_dim, stride = state_stride(j);
    const int g = (int)(gt % j->c->n_head_kv);
    int64_t t0, t1;
    const int rows = tile_rows(j, gt / j->c->n_head_kv, &t0, &t1);
    float *O = cpu_threadpool_scratch(j->pool, thread);
    float M[TILE_ROWS], L[TILE_ROWS];
    for (int r = 0; r < rows; r++) M[r] = -INFINITY, L[r] = 0;
    memset(O, 0, (size_t)rows * (size_t)hd * sizeof *O); /* (every row sees a key) */
    for (int64_t seg = 0; seg < j->n_seg; seg++) {
        const float *st = j->part + (gt * j->n_seg + seg) * TILE_ROWS * stride;
        for (int r = 0; r < rows; r++) merge_segment(hd, &M[r], &L[r], O + r * hd, st + r * stride);
    }
    write_rows(j, g, t0, rows, L, O);
}

size_t cpu_attention_scratch_bytes(int64_t head_dim)
{
    const ptrdiff_t hd = head_dim;
    const size_t task =
                     (size_t)(TILE_ROWS * (hd + STATE_O) + TILE_ROWS * hd) + segment_ws_floats(hd),
                 group = cpu_flash_group_ws_floats(hd);
    return (task > group ? task : group) * sizeof(float);
}

int cpu_attention_flash(cpu_threadpool *pool, const cpu_kv_cache *c, const cpu_kv_seq *s, int layer,
                        const float *q, int n_head, int64_t pos0, int64_t n_tokens, float scale,
                        float *out)
{
    int group = n_head / c->n_head_kv;
    if (!cpu_has_avx2() || c->head_dim % 8 != 0 || group > TILE_ROWS) return 0;
    /* the threads' workspace (no pool, or no memory for it: the reference
     * path instead) */
    if (cpu_threadpool_reserve(pool, cpu_attention_scratch_bytes(c->head_dim)) != DI_OK) return 0;
    flash_job j = {
        .c = c,
        .s = s,
        .layer = layer,
        .n_head = n_head,
        .group = group,
        .tile_tokens = TILE_ROWS / group,
        .q = q,
        .pos0 = pos0,
        .n_tokens = n_tokens,
        .scale = scale,
        .out = out,
        .pool = pool,
    };
    float *qr = NULL; /* q H . k H = q . k (kv_cache.h): q rotated once */
    if (c->rotated) {
        size_t n = (size_t)n_tokens * (size_t)n_head * (size_t)c->head_dim;
        if (!(qr = malloc(n * sizeof *qr))) return 0; /* (the reference path instead) */
        memcpy(qr, q, n * sizeof *qr);
        for (size_t i = 0; i < n; i += (size_t)c->head_dim) cpu_kv_rotate(qr + i, c->head_dim);
        j.q = qr;
    }
    j.wide = c->head_dim % 16 == 0 && cpu_has_avx512_vnni() && !cpu_attention_avx2_only;
    j.in_place =
        j.wide &&
                (c->dtype == MODEL_DTYPE_F16 || c->dtype == MODEL_DTYPE_Q8_0 ||
                 c->dtype == MODEL_DTYPE_Q4_0) &&
                c->head_bytes <= ZERO_ROW_BYTES
            ? 1
        : c->dtype == MODEL_DTYPE_F16 && c->head_dim % 16 == 0 && c->head_bytes <= ZERO_ROW_BYTES
            ? 2
            : 0;
    j.n_tiles = (n_tokens + j.tile_tokens - 1) / j.tile_tokens;
    j.n_seg = (pos0 + n_tokens + FLASH_SEGMENT - 1) / FLASH_SEGMENT;
    int64_t tasks = j.n_tiles * c->n_head_kv;
    int threads = cpu_threadpool_size(pool);
    /* several segments and few tasks for the threads, or one tile (decode,
     * whatever the threads: a segment's rows are read once for every KV
     * head): split the keys too */
    if (j.n_seg > 1 && (tasks < 2 * (int64_t)threads || j.n_tiles == 1)) {
        size_t bytes =
            (size_t)(tasks * j.n_seg) * TILE_ROWS * (size_t)(c->head_dim + STATE_O) * sizeof(float);
        j.part = aligned_alloc(64, (bytes + 63) / 64 * 64); /* (STATE_O's alignment) */
    }
    if (j.part) {
        cpu_threadpool_run(pool, j.n_tiles * j.n_seg, flash_split_task, &j);
        cpu_threadpool_run(pool, tasks, flash_merge_task, &j);
        free(j.part);
    } else if (j.wide && j.n_tiles > 1) {
        /* GROUP_TILES tiles a task where that leaves each thread four tasks
         * or more (a task's keys grow along the prompt: fewer would leave a
         * thread the last long one), else half as many */
        const int64_t groups = (j.n_tiles + GROUP_TILES - 1) / GROUP_TILES * c->n_head_kv;
        j.group_tiles = groups >= 4 * (int64_t)threads ? GROUP_TILES : GROUP_TILES / 2;
        cpu_threadpool_run(pool, (j.n_tiles + j.group_tiles - 1) / j.group_tiles * c->n_head_kv,
                           cpu_flash_group_task, &j);
    } else { /* (the AVX2 step, or without memory for the parts: the same
              * folds in one pass) */
        cpu_threadpool_run(pool, tasks, flash_task, &j);
    }
    free(qr);
    return 1;
}

#else

size_t cpu_attention_scratch_bytes(int64_t head_dim)
{
    (void)head_dim;
    return 0;
}

int cpu_attention_flash(cpu_threadpool *pool, const cpu_kv_cache *c, const cpu_kv_seq *s, int layer,
                        const float *q, int n_head, int64_t pos0, int64_t n_tokens, float scale,
                        float *out)
{
    (void)pool, (void)c, (void)s, (void)layer, (void)q, (void)n_head, (void)pos0;
    (void)n_tokens, (void)scale, (void)out;
    return 0;
}

#endif
