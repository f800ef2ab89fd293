/* The attention chunk step of a decode over an f16 cache, read in place
 * (attention_flash.c's flash_chunk_f16): a chunk's 16 keys in the lanes of
 * one AVX-512 vector, as the AVX2 step holds them in two (avx2_math.h), but
 * K transposed and converted in registers from the cache's f16 rows and V
 * converted where P V reads it, so nothing is staged in f32: the AVX2 step
 * wrote each chunk's K and V rows out in f32 and K again transposed (at
 * decode after 4,096 tokens that copy was a quarter of the time). Each lane's
 * operations and their order are the AVX2 step's (a score's fused
 * multiply-adds over the dimensions in order, then the scale; O = O corr,
 * then a fused multiply-add per key in key order), so the results are
 * bit-identical to it. x86-64 with GCC or Clang; callers check for AVX-512
 * with BW (cpu_has_avx512_vnni implies it). */
#ifndef DI_BACKEND_CPU_AVX512_F16_KEYS_H
#define DI_BACKEND_CPU_AVX512_F16_KEYS_H

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#    include <stddef.h>
#    include <stdint.h>

#    include "backend/cpu/avx2_math.h"

#    define AVX512BW __attribute__((target("avx2,fma,f16c,avx512f,avx512bw")))

/* Most query rows one call of f16_keys_scores takes (its accumulators). */
enum { F16_KEYS_MAX_ROWS = 8 };

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

/* Scores of nr (1..F16_KEYS_MAX_ROWS, a constant where inlined) query rows
 * against 16 keys whose f16 rows are k[0, 16) (head_dim hd, a multiple of
 * 16): sc[r 16 + i] = scale (q_r . key_i), each sum over the dimensions in
 * order, one fused multiply-add per dimension and lane, as avx2_math.h's
 * tile_scores over K^T. */
AVX512BW __attribute__((always_inline)) static inline void f16_keys_scores(const uint16_t *const *k,
                                                                           const float *const *q,
                                                                           int nr, ptrdiff_t hd,
                                                                           float scale, float *sc)
{
    __m512 s[F16_KEYS_MAX_ROWS];
    UNROLL for (int r = 0; r < nr; r++) s[r] = _mm512_setzero_ps();
    for (ptrdiff_t d0 = 0; d0 < hd; d0 += 16) {
        __m512i w[8];
        f16_keys_transpose16(k, d0, w);
        UNROLL for (int e = 0; e < 8; e++)
        {
            __m512 kd = _mm512_cvtph_ps(_mm512_castsi512_si256(w[e]));
            UNROLL for (int r = 0; r < nr; r++) s[r] =
                _mm512_fmadd_ps(_mm512_set1_ps(q[r][d0 + e]), kd, s[r]);
        }
        UNROLL for (int e = 0; e < 8; e++)
        {
            __m512 kd = _mm512_cvtph_ps(_mm512_extracti64x4_epi64(w[e], 1));
            UNROLL for (int r = 0; r < nr; r++) s[r] =
                _mm512_fmadd_ps(_mm512_set1_ps(q[r][d0 + 8 + e]), kd, s[r]);
        }
    }
    const __m512 sv = _mm512_set1_ps(scale);
    UNROLL for (int r = 0; r < nr; r++)
        _mm512_storeu_ps(sc + (ptrdiff_t)r * 16, _mm512_mul_ps(s[r], sv));
}

/* O = O corr + P V for nr (1..3, a constant where inlined) rows over
 * dimensions [d0, d0 + 16 nv) (nv 1..4), V's f16 rows at v[i]: each value
 * vector converted once for the rows; row r's o at o[r], its weights p[r],
 * its keys i < valid[r] (mul, then a fused multiply-add per key in key order,
 * as pv_block64). */
AVX512BW __attribute__((always_inline)) static inline void
f16_values_pv(float *const *o, const float *corr, const float *const *p, const int *valid, int nr,
              const uint16_t *const *v, ptrdiff_t d0, int nv)
{
    __m512 acc[3][4];
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
        UNROLL for (int k = 0; k < 4; k++) vv[k] =
            k < nv ? _mm512_cvtph_ps(
                         _mm256_loadu_si256((const __m256i *)(v[i] + d0 + (ptrdiff_t)16 * k)))
                   : _mm512_setzero_ps();
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
