/* The attention chunk step of a decode over an f16, Q8_0 or Q4_0 cache,
 * read in place (attention_flash.c's flash_chunk_cache): a chunk's 16 keys
 * in the lanes of one AVX-512 vector, as the AVX2 step holds them in two
 * (avx2_math.h), but K transposed in registers from the cache's rows (16-bit
 * values, or the blocks' values as bytes) and converted there, and V
 * converted where P V reads it, so nothing is staged in f32: the AVX2 step
 * wrote each chunk's K and V rows out in f32 and K again transposed (at
 * decode after 4,096 tokens that copy was a quarter of the time). Q8_0's
 * values are q d, Q4_0's (q - 8) d, as load_q8_0 and load_q4_0 compute them.
 * Each lane's operations and their order are the AVX2 step's (a score's
 * fused multiply-adds over the dimensions in order, then the scale; O = O
 * corr, then a fused multiply-add per key in key order), so the results are
 * bit-identical to it. x86-64 with GCC or Clang; callers check for AVX-512
 * with BW (cpu_has_avx512_vnni implies it). */
#ifndef DI_BACKEND_CPU_AVX512_CACHE_ROWS_H
#define DI_BACKEND_CPU_AVX512_CACHE_ROWS_H

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#    include <stddef.h>
#    include <stdint.h>

#    include "backend/cpu/avx2_math.h"
#    include "backend/cpu/quant.h"

#    define AVX512BW __attribute__((target("avx2,fma,f16c,avx512f,avx512bw")))

/* Most query rows one call of cache_keys_scores takes (its accumulators). */
enum { CACHE_KEYS_MAX_ROWS = 8 };

/* Dimensions [d0, d0 + 16) of 16 keys' f16 rows k[0, 16), transposed: w[e]
 * holds dimension d0 + e of the 16 keys in its low 256 bits and d0 + 8 + e
 * in its high 256, key order in each. Each row starts as its dimensions
 * d0..d0+7 of key i, of key i + 8, then d0+8..d0+15 of key i, of key i + 8
 * (one 128-bit lane each); three rounds of unpacks transpose the 8 x 8
 * blocks of 16-bit values within the lanes. */
AVX512BW __attribute__((always_inline)) static inline void
f16_keys_transpose16(const uint16_t *const *k, ptrdiff_t d0, __m512i w[8])
{
    __m512i r[8], t[8];
    UNROLL for (int i = 0; i < 8; i++)
    {
        __m512i x = _mm512_inserti64x4(
            _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(k[i] + d0))),
            _mm256_loadu_si256((const __m256i *)(k[i + 8] + d0)), 1);
        r[i] = _mm512_shuffle_i64x2(x, x, _MM_SHUFFLE(3, 1, 2, 0));
    }
    UNROLL for (int i = 0; i < 8; i += 2)
    {
        t[i] = _mm512_unpacklo_epi16(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_epi16(r[i], r[i + 1]);
    }
    /* t[0..3]: rows 0-3, t[4..7]: rows 4-7; in pairs (lo, hi) of elements */
    __m512i u[8] = {
        _mm512_unpacklo_epi32(t[0], t[2]), _mm512_unpackhi_epi32(t[0], t[2]),
        _mm512_unpacklo_epi32(t[1], t[3]), _mm512_unpackhi_epi32(t[1], t[3]),
        _mm512_unpacklo_epi32(t[4], t[6]), _mm512_unpackhi_epi32(t[4], t[6]),
        _mm512_unpacklo_epi32(t[5], t[7]), _mm512_unpackhi_epi32(t[5], t[7]),
    };
    UNROLL for (int e = 0; e < 4; e++)
    {
        w[(ptrdiff_t)2 * e] = _mm512_unpacklo_epi64(u[e], u[e + 4]);
        w[(ptrdiff_t)2 * e + 1] = _mm512_unpackhi_epi64(u[e], u[e + 4]);
    }
}

/* The cache types read in place: f16, Q8_0 and Q4_0 (a constant where
 * inlined). */
enum { CACHE_F16 = 0, CACHE_Q8_0 = 1, CACHE_Q4_0 = 2 };

/* Block b (32 values) of a Q8_0 or Q4_0 row as 32 signed bytes, values 0-15
 * in the low 128 bits and 16-31 in the high: Q8_0's q, Q4_0's nibble - 8
 * (its low nibbles the first 16, as load_q4_0). */
AVX512BW __attribute__((always_inline)) static inline __m256i block_bytes(const char *row,
                                                                          ptrdiff_t b, int type)
{
    if (type == CACHE_Q8_0)
        return _mm256_loadu_si256((const __m256i *)((const block_q8_0 *)row)[b].qs);
    const __m128i qs = _mm_loadu_si128((const __m128i *)((const block_q4_0 *)row)[b].qs);
    const __m128i low = _mm_set1_epi8(0x0f), eight = _mm_set1_epi8(8);
    return _mm256_set_m128i(_mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(qs, 4), low), eight),
                            _mm_sub_epi8(_mm_and_si128(qs, low), eight));
}

/* Block b's scale d (f16 bits) of a Q8_0 or Q4_0 row. */
static inline uint16_t block_scale(const char *row, ptrdiff_t b, int type)
{
    return type == CACHE_Q8_0 ? ((const block_q8_0 *)row)[b].d : ((const block_q4_0 *)row)[b].d;
}

/* Block b of 16 keys' Q8_0 or Q4_0 rows k[0, 16) (32 dimensions from 32 b),
 * transposed: w[e] holds dimension 32 b + e of the 16 keys (bytes, key order)
 * in its low 128 bits and 32 b + 16 + e in its high 128; four rounds of
 * unpacks transpose the 16 x 16 blocks of bytes within the lanes. */
AVX512BW __attribute__((always_inline)) static inline void
block_keys_transpose32(const char *const *k, ptrdiff_t b, int type, __m256i w[16])
{
    __m256i r[16], a[16], c[16];
    UNROLL for (int i = 0; i < 16; i++) r[i] = block_bytes(k[i], b, type);
    UNROLL for (int i = 0; i < 16; i += 2)
    { /* a[i]: elements 0-7 of rows i, i + 1 interleaved; a[i + 1]: 8-15 */
        a[i] = _mm256_unpacklo_epi8(r[i], r[i + 1]);
        a[i + 1] = _mm256_unpackhi_epi8(r[i], r[i + 1]);
    }
    UNROLL for (ptrdiff_t q = 0; q < 4; q++)
    { /* r[4 q + g]: elements 4 g .. 4 g + 3 of rows 4 q .. 4 q + 3 */
        r[4 * q] = _mm256_unpacklo_epi16(a[4 * q], a[4 * q + 2]);
        r[4 * q + 1] = _mm256_unpackhi_epi16(a[4 * q], a[4 * q + 2]);
        r[4 * q + 2] = _mm256_unpacklo_epi16(a[4 * q + 1], a[4 * q + 3]);
        r[4 * q + 3] = _mm256_unpackhi_epi16(a[4 * q + 1], a[4 * q + 3]);
    }
    UNROLL for (ptrdiff_t h = 0; h < 2; h++) UNROLL for (ptrdiff_t g = 0; g < 4; g++)
    { /* c[8 h + 2 g + s]: elements 4 g + 2 s, + 1 of rows 8 h .. 8 h + 7 */
        c[8 * h + 2 * g] = _mm256_unpacklo_epi32(r[8 * h + g], r[8 * h + 4 + g]);
        c[8 * h + 2 * g + 1] = _mm256_unpackhi_epi32(r[8 * h + g], r[8 * h + 4 + g]);
    }
    UNROLL for (ptrdiff_t e = 0; e < 8; e++)
    {
        w[2 * e] = _mm256_unpacklo_epi64(c[e], c[8 + e]);
        w[2 * e + 1] = _mm256_unpackhi_epi64(c[e], c[8 + e]);
    }
}

/* 16 signed bytes (Q8_0's or Q4_0's values) times their keys' (or a key's)
 * scales d. */
AVX512BW __attribute__((always_inline)) static inline __m512 byte_values(__m128i q, __m512 d)
{
    return _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q)), d);
}

/* Scores of nr (1..CACHE_KEYS_MAX_ROWS, a constant where inlined) query rows
 * against 16 keys whose cache rows (of type, CACHE_*) are k[0, 16) (head_dim
 * hd, a multiple of 16, of 32 for Q8_0 and Q4_0): sc[r 16 + i] = scale
 * (q_r . key_i), each sum over the dimensions in order, one fused
 * multiply-add per dimension and lane, as avx2_math.h's tile_scores over
 * K^T. */
AVX512BW __attribute__((always_inline)) static inline void
cache_keys_scores(const char *const *k, int type, const float *const *q, int nr, ptrdiff_t hd,
                  float scale, float *sc)
{
    __m512 s[CACHE_KEYS_MAX_ROWS];
    UNROLL for (int r = 0; r < nr; r++) s[r] = _mm512_setzero_ps();
    if (type != CACHE_F16) {
        for (ptrdiff_t b = 0; b < hd / 32; b++) {
            _Alignas(32) uint16_t dh[16];
            UNROLL for (int i = 0; i < 16; i++) dh[i] = block_scale(k[i], b, type);
            const __m512 d = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)dh));
            __m256i w[16];
            block_keys_transpose32(k, b, type, w);
            UNROLL for (int half = 0; half < 2; half++) UNROLL for (int e = 0; e < 16; e++)
            {
                const __m512 kd = byte_values(
                    half ? _mm256_extracti128_si256(w[e], 1) : _mm256_castsi256_si128(w[e]), d);
                UNROLL for (int r = 0; r < nr; r++) s[r] = _mm512_fmadd_ps(
                    _mm512_set1_ps(q[r][32 * b + (ptrdiff_t)16 * half + e]), kd, s[r]);
            }
        }
    } else {
        const uint16_t *const *kh = (const uint16_t *const *)k;
        for (ptrdiff_t d0 = 0; d0 < hd; d0 += 16) {
            __m512i w[8];
            f16_keys_transpose16(kh, d0, w);
            UNROLL for (int half = 0; half < 2; half++) UNROLL for (int e = 0; e < 8; e++)
            {
                const __m512 kd = _mm512_cvtph_ps(half ? _mm512_extracti64x4_epi64(w[e], 1)
                                                       : _mm512_castsi512_si256(w[e]));
                UNROLL for (int r = 0; r < nr; r++) s[r] =
                    _mm512_fmadd_ps(_mm512_set1_ps(q[r][d0 + (ptrdiff_t)8 * half + e]), kd, s[r]);
            }
        }
    }
    const __m512 sv = _mm512_set1_ps(scale);
    UNROLL for (int r = 0; r < nr; r++)
        _mm512_storeu_ps(sc + (ptrdiff_t)r * 16, _mm512_mul_ps(s[r], sv));
}

/* O = O corr + P V for nr (1..8, a constant where inlined) rows over
 * dimensions [d0, d0 + 16 nv) (nv 1..4, nr nv <= 16 accumulators; d0 a
 * multiple of 32 for Q8_0 and Q4_0), V's cache rows (of type, CACHE_*) at
 * v[i]: each value vector converted once for the rows; row r's o at o[r], its
 * weights p[r], its keys i < valid[r] (mul, then a fused multiply-add per key
 * in key order, as pv_block64). */
AVX512BW __attribute__((always_inline)) static inline void
cache_values_pv(float *const *o, const float *corr, const float *const *p, const int *valid, int nr,
                const char *const *v, int type, ptrdiff_t d0, int nv)
{
    __m512 acc[8][4];
    int most = 0;
    UNROLL for (int r = 0; r < nr; r++)
    {
        most = valid[r] > most ? valid[r] : most;
        const __m512 c = _mm512_set1_ps(corr[r]);
        UNROLL for (int k = 0; k < 4; k++) acc[r][k] =
            k < nv ? _mm512_mul_ps(_mm512_loadu_ps(o[r] + d0 + (ptrdiff_t)16 * k), c)
                   : _mm512_setzero_ps();
    }
    for (int i = 0; i < most; i++) {
        __m512 vv[4];
        if (type != CACHE_F16) {
            const ptrdiff_t b0 = d0 / 32;
            UNROLL for (int k = 0; k < 4; k += 2) if (k < nv)
            {
                const __m256i q = block_bytes(v[i], b0 + k / 2, type);
                const __m512 d =
                    _mm512_cvtph_ps(_mm256_set1_epi16((short)block_scale(v[i], b0 + k / 2, type)));
                vv[k] = byte_values(_mm256_castsi256_si128(q), d);
                vv[k + 1] = k + 1 < nv ? byte_values(_mm256_extracti128_si256(q, 1), d)
                                       : _mm512_setzero_ps();
            }
            UNROLL for (int k = 0; k < 4; k++) if (k >= nv) vv[k] = _mm512_setzero_ps();
        } else {
            const uint16_t *vh = (const uint16_t *)v[i] + d0;
            UNROLL for (int k = 0; k < 4; k++) vv[k] =
                k < nv
                    ? _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(vh + (ptrdiff_t)16 * k)))
                    : _mm512_setzero_ps();
        }
        UNROLL for (int r = 0; r < nr; r++) if (i < valid[r])
        {
            const __m512 pr = _mm512_set1_ps(p[r][i]);
            UNROLL for (int k = 0; k < 4; k++) if (k < nv) acc[r][k] =
                _mm512_fmadd_ps(pr, vv[k], acc[r][k]);
        }
    }
    UNROLL for (int r = 0; r < nr; r++) UNROLL for (int k = 0; k < 4; k++) if (k < nv)
        _mm512_storeu_ps(o[r] + d0 + (ptrdiff_t)16 * k, acc[r][k]);
}

#endif

#endif
