/* AVX2 dot products of the low-bit and codebook weight types llama.cpp's
 * quantization mixes write besides the common ones (vec_dot.h): Q2_K, Q3_K
 * (K-quants of 16-element sub-blocks) and IQ4_NL, IQ4_XS (a 16-level
 * non-uniform codebook, looked up with one byte shuffle). As in
 * vec_dot_avx2.c, the integer sum of each block is exact (the references'
 * sum), only the order of the f32 accumulation over blocks differs.
 *
 * Roofline per call over n elements: Q2_K reads 84/256 bytes per element,
 * Q3_K 110/256, IQ4_NL 18/32, IQ4_XS 136/256, plus the activation row; 2n
 * integer operations. Decode is memory-bound on them like on the others. */
#include <stddef.h>

#include "backend/cpu/vec_dot.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#    include "backend/cpu/vec_dot_avx2.h"

AVX2 static void dot_q2_K(int64_t n, float *s, const void *w, const void *a)
{
    const block_q2_K *x = w;
    const block_q8_K *y = a;
    __m256 acc = _mm256_setzero_ps();
    float accm = 0;
    const __m256i m3 = _mm256_set1_epi8(3);
    for (int64_t i = 0; i < n / QK_K; i++) {
        __m128i sc8 = _mm_loadu_si128((const __m128i *)x[i].scales);
        __m256i mins =
            _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(sc8, 4), _mm_set1_epi8(0x0f)));
        int summs = weighted_bsums(mins, y[i].bsums);
        int8_t sc[16];
        _mm_storeu_si128((__m128i *)sc, _mm_and_si128(sc8, _mm_set1_epi8(0x0f)));
        const int8_t *q8 = y[i].qs;
        __m256i sumi = _mm256_setzero_si256();
        for (int c = 0; c < 2; c++) {
            __m256i q = _mm256_loadu_si256((const __m256i *)(x[i].qs + (ptrdiff_t)32 * c));
            for (int sh = 0; sh < 4; sh++) {
                /* bytes 0-15: sub-block 8c + 2sh, bytes 16-31: the next one */
                __m256i v = _mm256_and_si256(_mm256_srli_epi16(q, 2 * sh), m3);
                __m256i p = _mm256_maddubs_epi16(v, _mm256_loadu_si256((const __m256i *)q8));
                int j = 8 * c + 2 * sh;
                sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(p, scale_pair(sc[j], sc[j + 1])));
                q8 += 32;
            }
        }
        float dall = y[i].d * f16(x[i].d);
        acc = _mm256_fmadd_ps(_mm256_set1_ps(dall), _mm256_cvtepi32_ps(sumi), acc);
        accm += y[i].d * f16(x[i].dmin) * (float)summs;
    }
    *s = hsum_ps(acc) - accm;
}

/* Q3_K: each value is u - 4 with u = low two bits | high bit << 2 in [0, 7]
 * (the high bit set means no -4), so the sum is sum(sc * u * y) - 4 * sum(sc *
 * bsums): unsigned bytes for vpmaddubsw, the offset in integers. */
AVX2 static void dot_q3_K(int64_t n, float *s, const void *w, const void *a)
{
    const block_q3_K *x = w;
    const block_q8_K *y = a;
    __m256 acc = _mm256_setzero_ps();
    const __m256i m3 = _mm256_set1_epi8(3), one = _mm256_set1_epi8(1);
    for (int64_t i = 0; i < n / QK_K; i++) {
        int8_t sc[16];
        cpu_k3_scales(x[i].scales, sc);
        int off =
            weighted_bsums(_mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)sc)), y[i].bsums);
        __m256i hm = _mm256_loadu_si256((const __m256i *)x[i].hmask);
        const int8_t *q8 = y[i].qs;
        __m256i sumi = _mm256_setzero_si256();
        for (int c = 0; c < 2; c++) {
            __m256i q = _mm256_loadu_si256((const __m256i *)(x[i].qs + (ptrdiff_t)32 * c));
            for (int sh = 0; sh < 4; sh++) {
                int bit = 4 * c + sh, j = 8 * c + 2 * sh;
                __m256i lo = _mm256_and_si256(_mm256_srli_epi16(q, 2 * sh), m3);
                __m256i hi =
                    _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hm, bit), one), 2);
                __m256i p = _mm256_maddubs_epi16(_mm256_or_si256(lo, hi),
                                                 _mm256_loadu_si256((const __m256i *)q8));
                sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(p, scale_pair(sc[j], sc[j + 1])));
                q8 += 32;
            }
        }
        sumi = _mm256_sub_epi32(sumi, _mm256_setr_epi32(4 * off, 0, 0, 0, 0, 0, 0, 0));
        float d = f16(x[i].d) * y[i].d;
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
    }
    *s = hsum_ps(acc);
}

/* The codebook in both 128-bit lanes, for vpshufb. */
AVX2 static inline __m256i iq4nl_table(void)
{
    __m128i t = _mm_loadu_si128((const __m128i *)cpu_iq4nl_values);
    return _mm256_set_m128i(t, t);
}

/* A block's 32 values, codebook-decoded, in element order. */
AVX2 static inline __m256i iq4_values(__m256i table, const uint8_t *qs)
{
    return _mm256_shuffle_epi8(table, unpack_nibbles(qs));
}

AVX2 static void dot_iq4_nl(int64_t n, float *s, const void *w, const void *a)
{
    const block_iq4_nl *x = w;
    const block_q8_0 *y = a;
    const __m256i table = iq4nl_table();
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK4_NL; i++) {
        __m256i qx = iq4_values(table, x[i].qs); /* -127..113: no -128 */
        __m256i qy = _mm256_loadu_si256((const __m256i *)y[i].qs);
        __m256 d = _mm256_set1_ps(f16(x[i].d) * f16(y[i].d));
        acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(dot_s8s8(qx, qy)), acc);
    }
    *s = hsum_ps(acc);
}

AVX2 static void dot_iq4_xs(int64_t n, float *s, const void *w, const void *a)
{
    const block_iq4_xs *x = w;
    const block_q8_K *y = a;
    const __m256i table = iq4nl_table();
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; i++) {
        int8_t sc[8];
        cpu_iq4xs_scales(&x[i], sc);
        __m256i sumi = _mm256_setzero_si256();
        for (int ib = 0; ib < 8; ib++) {
            __m256i qx = iq4_values(table, x[i].qs + (ptrdiff_t)16 * ib);
            __m256i qy = _mm256_loadu_si256((const __m256i *)(y[i].qs + (ptrdiff_t)32 * ib));
            /* |x| * |y| * 2 <= 127 * 127 * 2: the pair sums fit int16 */
            __m256i p = _mm256_maddubs_epi16(_mm256_sign_epi8(qx, qx), _mm256_sign_epi8(qy, qx));
            sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(p, _mm256_set1_epi16(sc[ib])));
        }
        float d = f16(x[i].d) * y[i].d;
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
    }
    *s = hsum_ps(acc);
}

cpu_vec_dot_fn cpu_vec_dot_avx2_lowbit(model_dtype dtype)
{
    if (!cpu_has_avx2()) return NULL;
    switch (dtype) {
    case MODEL_DTYPE_Q2_K: return dot_q2_K;
    case MODEL_DTYPE_Q3_K: return dot_q3_K;
    case MODEL_DTYPE_IQ4_NL: return dot_iq4_nl;
    case MODEL_DTYPE_IQ4_XS: return dot_iq4_xs;
    default: return NULL;
    }
}

#else

cpu_vec_dot_fn cpu_vec_dot_avx2_lowbit(model_dtype dtype)
{
    (void)dtype;
    return NULL;
}

#endif
