/* The attention chunk step of a decode over an f16 cache read in place with
 * AVX2 (attention_flash.c's flash_chunk_f16_avx2): avx512_cache_rows.h's
 * step for CPUs without AVX-512, a chunk's 16 keys in two vectors of 8. K's
 * f16 rows are transposed as 16-bit values into a K^T of f16 ([head_dim][16]:
 * a sixth of the bytes the staged step writes, its f32 K, K^T and V; half its
 * shuffles), converted where the scores read it; V's rows converted where
 * P V reads them. Each lane's operations and their order are the staged AVX2
 * step's (avx2_math.h: a score's fused multiply-adds over the dimensions in
 * order from 0, then the scale; O = O corr, then a fused multiply-add per
 * key in key order), so the results are bit-identical to it. x86-64 with GCC
 * or Clang; callers check for AVX2, FMA and F16C (cpu_has_avx2). */
#ifndef DI_BACKEND_CPU_AVX2_CACHE_ROWS_H
#define DI_BACKEND_CPU_AVX2_CACHE_ROWS_H

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#    include <stddef.h>
#    include <stdint.h>

#    include "backend/cpu/avx2_math.h"

/* kt[d][i] (16 f16 a dimension) = key i's dimension d, for the 16 keys'
 * f16 rows k[0, 16) of hd values (a multiple of 16): per 8 keys and 16
 * dimensions, row i loaded whole (its dimensions d0..d0+7, d0+8..d0+15 in
 * the two 128-bit lanes) and three rounds of unpacks transposing the 8 x 8
 * blocks within the lanes, then each lane stored where its dimension goes. */
AVX2 static inline void f16_keys_transpose_avx2(const uint16_t *const *k, ptrdiff_t hd,
                                                uint16_t *kt)
{
    for (ptrdiff_t d0 = 0; d0 < hd; d0 += 16)
        for (ptrdiff_t half = 0; half < 2; half++) {
            __m256i r[8], t[8], u[8];
            UNROLL for (ptrdiff_t i = 0; i < 8; i++) r[i] =
                _mm256_loadu_si256((const __m256i *)(k[8 * half + i] + d0));
            UNROLL for (int i = 0; i < 8; i += 2)
            {
                t[i] = _mm256_unpacklo_epi16(r[i], r[i + 1]);
                t[i + 1] = _mm256_unpackhi_epi16(r[i], r[i + 1]);
            }
            u[0] = _mm256_unpacklo_epi32(t[0], t[2]), u[1] = _mm256_unpackhi_epi32(t[0], t[2]);
            u[2] = _mm256_unpacklo_epi32(t[1], t[3]), u[3] = _mm256_unpackhi_epi32(t[1], t[3]);
            u[4] = _mm256_unpacklo_epi32(t[4], t[6]), u[5] = _mm256_unpackhi_epi32(t[4], t[6]);
            u[6] = _mm256_unpacklo_epi32(t[5], t[7]), u[7] = _mm256_unpackhi_epi32(t[5], t[7]);
            UNROLL for (ptrdiff_t e = 0; e < 4; e++)
            {
                __m256i lo = _mm256_unpacklo_epi64(u[e], u[e + 4]),
                        hi = _mm256_unpackhi_epi64(u[e], u[e + 4]);
                uint16_t *at = kt + (d0 + 2 * e) * 16 + 8 * half;
                _mm_storeu_si128((__m128i *)at, _mm256_castsi256_si128(lo));
                _mm_storeu_si128((__m128i *)(at + (ptrdiff_t)8 * 16),
                                 _mm256_extracti128_si256(lo, 1));
                _mm_storeu_si128((__m128i *)(at + 16), _mm256_castsi256_si128(hi));
                _mm_storeu_si128((__m128i *)(at + (ptrdiff_t)9 * 16),
                                 _mm256_extracti128_si256(hi, 1));
            }
        }
}

/* Scores of nr (1-4, a constant where inlined) query rows against the
 * chunk's K^T in f16 (kt, as f16_keys_transpose_avx2 writes it):
 * sc[r 16 + i] = scale (q_r . key_i), as tile_scores over an f32 K^T. */
AVX2 __attribute__((always_inline)) static inline void f16_tile_scores(const uint16_t *kt,
                                                                       const float *const *q,
                                                                       int nr, ptrdiff_t hd,
                                                                       __m256 scale, float *sc)
{
    __m256 a[4][2];
    UNROLL for (int r = 0; r < 4; r++) a[r][0] = a[r][1] = _mm256_setzero_ps();
    for (ptrdiff_t d = 0; d < hd; d++) {
        const __m256 k0 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(kt + d * 16))),
                     k1 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(kt + d * 16 + 8)));
        UNROLL for (int r = 0; r < 4; r++) if (r < nr)
        {
            const __m256 qd = _mm256_set1_ps(q[r][d]);
            a[r][0] = _mm256_fmadd_ps(qd, k0, a[r][0]);
            a[r][1] = _mm256_fmadd_ps(qd, k1, a[r][1]);
        }
    }
    UNROLL for (int r = 0; r < 4; r++) if (r < nr)
    {
        _mm256_storeu_ps(sc + (ptrdiff_t)r * 16, _mm256_mul_ps(a[r][0], scale));
        _mm256_storeu_ps(sc + (ptrdiff_t)r * 16 + 8, _mm256_mul_ps(a[r][1], scale));
    }
}

/* O = O corr + P V for nr (1-3, a constant where inlined) rows over the
 * dimensions [d0, d0 + 16), V's f16 rows at v[i], each pair of value vectors
 * converted once for the rows; row r's o at o[r], its weights p[r], its keys
 * i < valid[r] (mul, then a fused multiply-add per key in key order, as
 * pv_block64). */
AVX2 __attribute__((always_inline)) static inline void
f16_values_pv_avx2(float *const *o, const float *corr, const float *const *p, const int *valid,
                   int nr, const uint16_t *const *v, ptrdiff_t d0)
{
    __m256 acc[3][2];
    int most = 0;
    UNROLL for (int r = 0; r < 3; r++) if (r < nr)
    {
        most = valid[r] > most ? valid[r] : most;
        const __m256 c = _mm256_set1_ps(corr[r]);
        acc[r][0] = _mm256_mul_ps(_mm256_loadu_ps(o[r] + d0), c);
        acc[r][1] = _mm256_mul_ps(_mm256_loadu_ps(o[r] + d0 + 8), c);
    }
    for (int i = 0; i < most; i++) {
        const __m256 v0 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(v[i] + d0))),
                     v1 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(v[i] + d0 + 8)));
        UNROLL for (int r = 0; r < 3; r++) if (r < nr && i < valid[r])
        {
            const __m256 pr = _mm256_set1_ps(p[r][i]);
            acc[r][0] = _mm256_fmadd_ps(pr, v0, acc[r][0]);
            acc[r][1] = _mm256_fmadd_ps(pr, v1, acc[r][1]);
        }
    }
    UNROLL for (int r = 0; r < 3; r++) if (r < nr)
    {
        _mm256_storeu_ps(o[r] + d0, acc[r][0]);
        _mm256_storeu_ps(o[r] + d0 + 8, acc[r][1]);
    }
}

#endif

#endif
