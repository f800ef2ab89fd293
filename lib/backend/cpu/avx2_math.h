/* AVX2 helpers shared by the attention kernels (attention_flash.[ch],
 * attention_flash_rows512.c, attention_mla.c, deepseek_v4_ops.c): an 8-lane
 * e^x, horizontal max and sum, an 8 x 8 transpose in registers, a cache row
 * converted to f32. x86-64 with GCC or Clang only; each function carries its
 * own target attribute, so callers compile without -mavx2 and must check
 * cpu_has_avx2() (vec_dot.h) before calling. */
#ifndef DI_BACKEND_CPU_AVX2_MATH_H
#define DI_BACKEND_CPU_AVX2_MATH_H

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#    include <immintrin.h>
#    include <math.h>
#    include <stddef.h>
#    include <string.h>

#    include "backend/cpu/quant.h"

#    define AVX2 __attribute__((target("avx2,fma,f16c")))

/* Loops over register arrays unrolled, so the arrays stay in registers. */
#    define UNROLL _Pragma("GCC unroll 8")

/* e^x for 8 lanes: x = n ln 2 + r with |r| <= ln2 / 2, e^r by its degree-6
 * Taylor polynomial (relative error under 2e-7 there), times 2^n built in the
 * exponent bits. Lanes below -87.3 give 0 (masked positions are -inf), NaN
 * lanes NaN. */
AVX2 static inline __m256 exp_ps(__m256 x)
{
    const __m256 lo = _mm256_set1_ps(-87.3f);
    __m256 under = _mm256_cmp_ps(x, lo, _CMP_LT_OQ);
    x = _mm256_max_ps(lo, x); /* (x second: a NaN lane stays NaN) */
    x = _mm256_min_ps(_mm256_set1_ps(88.3f), x);
    __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504089f)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    /* r = x - n ln2, ln2 split in two so the product is exact */
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693145751953125f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(1.428606765330187e-06f), r);
    __m256 p = _mm256_set1_ps(1.0f / 720);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    __m256i e =
        _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    __m256 v = _mm256_mul_ps(p, _mm256_castsi256_ps(e));
    return _mm256_andnot_ps(under, v);
}

/* exp_ps of one value: exactly 1 at 0, 0 at -inf. */
AVX2 static inline float exp1(float x)
{
    return _mm256_cvtss_f32(exp_ps(_mm256_set1_ps(x)));
}

AVX2 static inline float hmax8(__m256 v)
{
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    return _mm_cvtss_f32(m);
}

AVX2 static inline float hsum8(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* dst[c * dst_stride + r] = r[r][c] for an 8 x 8 block held in registers. */
AVX2 static inline void transpose8(__m256 r[8], float *dst, ptrdiff_t dst_stride)
{
    __m256 t[8];
    UNROLL for (int i = 0; i < 8; i += 2)
    {
        t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
    }
    UNROLL for (int i = 0; i < 8; i += 4)
    {
        r[i] = _mm256_shuffle_ps(t[i], t[i + 2], 0x44);
        r[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], 0xee);
        r[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0x44);
        r[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0xee);
    }
    UNROLL for (int i = 0; i < 4; i++)
    {
        t[i] = _mm256_permute2f128_ps(r[i], r[i + 4], 0x20);
        t[i + 4] = _mm256_permute2f128_ps(r[i], r[i + 4], 0x31);
    }
    UNROLL for (ptrdiff_t i = 0; i < 8; i++) _mm256_storeu_ps(dst + i * dst_stride, t[i]);
}

/* K^T of a chunk of 16 key rows of d values, `ld` floats apart (32-byte
 * aligned, d and ld multiples of 8; unused rows finite) into kt [d][16], in
 * 8 x 8 register blocks. */
AVX2 static inline void transpose_chunk16(const float *rows, ptrdiff_t ld, ptrdiff_t d, float *kt)
{
    for (int i0 = 0; i0 < 16; i0 += 8)
        for (ptrdiff_t e = 0; e < d; e += 8) {
            __m256 r[8];
            UNROLL for (int i = 0; i < 8; i++) r[i] = _mm256_load_ps(rows + (i0 + i) * ld + e);
            transpose8(r, kt + e * 16 + i0, 16);
        }
}

/* Scores of up to four query rows against a chunk of 16 keys held transposed
 * (kt: [d][16], 32-byte aligned): sc[k 16 + i] = scale (q_k . key_i) for
 * k < nr, q_k = q + k q_stride; each sum over the d dimensions in order, one
 * fused multiply-add per dimension and lane, so a row's scores do not depend
 * on the rows beside it. sc 32-byte aligned. */
AVX2 static inline void scores4x16(const float *kt, const float *q, ptrdiff_t q_stride, int nr,
                                   ptrdiff_t d, float scale, float *sc)
{
    const float *qr[4];
    UNROLL for (int k = 0; k < 4; k++) qr[k] = q + (k < nr ? k : 0) * q_stride;
    __m256 a[4][2];
    UNROLL for (int k = 0; k < 4; k++) a[k][0] = a[k][1] = _mm256_setzero_ps();
    for (ptrdiff_t e = 0; e < d; e++) {
        __m256 k0 = _mm256_load_ps(kt + e * 16), k1 = _mm256_load_ps(kt + e * 16 + 8);
        UNROLL for (int k = 0; k < 4; k++)
        {
            __m256 qd = _mm256_set1_ps(qr[k][e]);
            a[k][0] = _mm256_fmadd_ps(qd, k0, a[k][0]);
            a[k][1] = _mm256_fmadd_ps(qd, k1, a[k][1]);
        }
    }
    const __m256 sv = _mm256_set1_ps(scale);
    for (ptrdiff_t k = 0; k < nr; k++) {
        _mm256_store_ps(sc + k * 16, _mm256_mul_ps(a[k][0], sv));
        _mm256_store_ps(sc + k * 16 + 8, _mm256_mul_ps(a[k][1], sv));
    }
}

/* One online-softmax step of a row over a 16-key chunk: of the scores
 * s[0, 16) the first `valid` count (the rest are -inf); the running max *m and
 * sum *l move on; p[0, 16) gets the chunk's weights e^(s - m') (0 while m' is
 * -inf); returned, the rescale of the row's earlier sums e^(m - m') (exactly 1
 * while the max stands, 0 before the row's first finite score), by exp_ps too,
 * so a vector of rows can take the same step (avx512_rows.h's
 * rows_softmax_pv512). */
AVX2 static inline float softmax_step16(const float *s, int valid, float *m, float *l, float *p)
{
    const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), vv = _mm256_set1_epi32(valid);
    const __m256 keep0 = _mm256_castsi256_ps(_mm256_cmpgt_epi32(vv, idx));
    const __m256 keep1 =
        _mm256_castsi256_ps(_mm256_cmpgt_epi32(vv, _mm256_add_epi32(idx, _mm256_set1_epi32(8))));
    const __m256 ninf = _mm256_set1_ps(-INFINITY);
    __m256 s0 = _mm256_blendv_ps(ninf, _mm256_loadu_ps(s), keep0);
    __m256 s1 = _mm256_blendv_ps(ninf, _mm256_loadu_ps(s + 8), keep1);
    float mnew = hmax8(_mm256_max_ps(s0, s1));
    if (*m > mnew) mnew = *m;
    /* a NaN score, now or before, makes the row NaN, as the reference's: the
     * max takes NaN whatever its place among the keys (avx512_rows.h's
     * row-per-lane step does the same) */
    const __m256 nan =
        _mm256_or_ps(_mm256_cmp_ps(s0, s0, _CMP_UNORD_Q), _mm256_cmp_ps(s1, s1, _CMP_UNORD_Q));
    if (_mm256_movemask_ps(nan) != 0 || isnan(*m)) mnew = NAN;
    /* every score so far -inf: e^x of x - 0, not of -inf + inf (NaN), so the
     * weights and the rescale are 0 and the state stays m = -inf, l = 0,
     * O = 0 until a finite key (rows_softmax_pv512 the same) */
    const float shift = mnew == -INFINITY ? 0.0f : mnew;
    float corr = exp1(*m - shift);
    __m256 mv = _mm256_set1_ps(shift);
    __m256 e0 = exp_ps(_mm256_sub_ps(s0, mv)), e1 = exp_ps(_mm256_sub_ps(s1, mv));
    _mm256_storeu_ps(p, e0);
    _mm256_storeu_ps(p + 8, e1);
    const float kept = *l * corr; /* (two statements: never contracted to an fma) */
    *l = kept + hsum8(_mm256_add_ps(e0, e1));
    *m = mnew;
    return corr;
}

/* Two rows' o[0, 32) = o corr + sum_i p[i] v[i hd + (0, 32)] over i < valid,
 * in key order (one fused multiply-add per key and lane), each V load shared by
 * the two rows; v rows hd floats apart. */
AVX2 static inline void pv_pair32(float *o0, float *o1, float corr0, float corr1, const float *p0,
                                  const float *p1, const float *v, ptrdiff_t hd, int valid)
{
    __m256 a[4], b[4];
    const __m256 c0 = _mm256_set1_ps(corr0), c1 = _mm256_set1_ps(corr1);
    UNROLL for (ptrdiff_t k = 0; k < 4; k++)
    {
        a[k] = _mm256_mul_ps(_mm256_loadu_ps(o0 + 8 * k), c0);
        b[k] = _mm256_mul_ps(_mm256_loadu_ps(o1 + 8 * k), c1);
    }
    for (ptrdiff_t i = 0; i < valid; i++) {
        __m256 x = _mm256_set1_ps(p0[i]), y = _mm256_set1_ps(p1[i]);
        UNROLL for (ptrdiff_t k = 0; k < 4; k++)
        {
            __m256 vv = _mm256_loadu_ps(v + i * hd + 8 * k);
            a[k] = _mm256_fmadd_ps(x, vv, a[k]);
            b[k] = _mm256_fmadd_ps(y, vv, b[k]);
        }
    }
    UNROLL for (ptrdiff_t k = 0; k < 4; k++)
    {
        _mm256_storeu_ps(o0 + 8 * k, a[k]);
        _mm256_storeu_ps(o1 + 8 * k, b[k]);
    }
}

/* One chunk of 16 keys for a tile's rows, after their scores sc [rows][16]:
 * each row's online-softmax step (softmax_step16: m, l, corr, p [rows][16]),
 * then o[r][0, width) = o corr + P V two rows at a time, an odd last row paired
 * with itself (the same sums, written twice); o rows o_stride floats apart, the
 * chunk's value rows v_stride apart, width a multiple of 32. */
AVX2 static inline void softmax_pv16(const float *sc, int valid, ptrdiff_t rows, float *m, float *l,
                                     float *corr, float *p, float *o, ptrdiff_t o_stride,
                                     const float *v, ptrdiff_t v_stride, ptrdiff_t width)
{
    for (ptrdiff_t r = 0; r < rows; r++)
        corr[r] = softmax_step16(sc + r * 16, valid, &m[r], &l[r], p + r * 16);
    for (ptrdiff_t r = 0; r < rows; r += 2) {
        const ptrdiff_t r1 = r + 1 < rows ? r + 1 : r;
        for (ptrdiff_t d0 = 0; d0 < width; d0 += 32)
            pv_pair32(o + r * o_stride + d0, o + r1 * o_stride + d0, corr[r], corr[r1], p + r * 16,
                      p + r1 * 16, v + d0, v_stride, valid);
    }
}

/* A Q8_0 block's 32 values, q d, into dst (exactly as cpu_dequantize_row). */
AVX2 static inline void load_q8_0(const block_q8_0 *x, float *dst)
{
    const __m256 d = _mm256_set1_ps(cpu_fp16_to_f32(x->d));
    UNROLL for (int k = 0; k < 4; k++)
    {
        __m128i q = _mm_loadl_epi64((const __m128i *)(x->qs + (ptrdiff_t)8 * k));
        _mm256_storeu_ps(dst + (ptrdiff_t)8 * k,
                         _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)), d));
    }
}

/* A Q4_0 block's 32 values, (nibble - 8) d, into dst: the low nibbles are
 * values 0-15, the high ones 16-31 (exactly as cpu_dequantize_row). */
AVX2 static inline void load_q4_0(const block_q4_0 *x, float *dst)
{
    const __m256 d = _mm256_set1_ps(cpu_fp16_to_f32(x->d));
    const __m128i qs = _mm_loadu_si128((const __m128i *)x->qs), low = _mm_set1_epi8(0x0f),
                  eight = _mm_set1_epi8(8);
    const __m128i lo = _mm_sub_epi8(_mm_and_si128(qs, low), eight),
                  hi = _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(qs, 4), low), eight);
    const __m128i part[4] = {lo, _mm_srli_si128(lo, 8), hi, _mm_srli_si128(hi, 8)};
    UNROLL for (int k = 0; k < 4; k++)
        _mm256_storeu_ps(dst + (ptrdiff_t)8 * k,
                         _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(part[k])), d));
}

/* n floats of a cache row (f16, f32, Q8_0 or Q4_0; n a multiple of 8, of 32
 * for the blocked ones) into dst. */
AVX2 static inline void load_kv_row(model_dtype dtype, const void *src, ptrdiff_t n, float *dst)
{
    switch (dtype) {
    case MODEL_DTYPE_F32: memcpy(dst, src, (size_t)n * sizeof(float)); return;
    case MODEL_DTYPE_Q8_0:
        for (ptrdiff_t i = 0; i < n; i += 32) load_q8_0((const block_q8_0 *)src + i / 32, dst + i);
        return;
    case MODEL_DTYPE_Q4_0:
        for (ptrdiff_t i = 0; i < n; i += 32) load_q4_0((const block_q4_0 *)src + i / 32, dst + i);
        return;
    default: break;
    }
    const uint16_t *h = (const uint16_t *)src;
    for (ptrdiff_t i = 0; i < n; i += 8)
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(h + i))));
}

#endif

#endif
