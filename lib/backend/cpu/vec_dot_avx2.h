/* Inline AVX2 helpers shared by the AVX2 dot products (vec_dot_avx2.c,
 * vec_dot_avx2_lowbit.c): horizontal sums, f16 scales, nibble unpacking and
 * the byte products. Include only from code compiled for x86-64 with GCC or
 * Clang; each function carries its own target attribute. */
#ifndef DI_BACKEND_CPU_VEC_DOT_AVX2_H
#define DI_BACKEND_CPU_VEC_DOT_AVX2_H

#include <immintrin.h>
#include <stdint.h>

#define AVX2 __attribute__((target("avx2,fma,f16c")))

AVX2 static inline float hsum_ps(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

AVX2 static inline float f16(uint16_t h)
{
    return _cvtsh_ss(h);
}

/* 16 bytes of nibbles -> 32 bytes: low nibbles first, then high ones. */
AVX2 static inline __m256i unpack_nibbles(const uint8_t *qs)
{
    __m128i b = _mm_loadu_si128((const __m128i *)qs);
    __m128i m = _mm_set1_epi8(0x0f);
    __m128i lo = _mm_and_si128(b, m);
    __m128i hi = _mm_and_si128(_mm_srli_epi16(b, 4), m);
    return _mm256_set_m128i(hi, lo);
}

/* Sum of products of unsigned bytes u (< 128) and signed bytes s, as 8 int32. */
AVX2 static inline __m256i dot_u8s8(__m256i u, __m256i s)
{
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
}

/* Signed x signed bytes (no -128 in x): |x| * (y with x's sign). */
AVX2 static inline __m256i dot_s8s8(__m256i x, __m256i y)
{
    return dot_u8s8(_mm256_sign_epi8(x, x), _mm256_sign_epi8(y, x));
}

/* Two int8 scales, each repeated over 8 int16 lanes (one 128-bit half each). */
AVX2 static inline __m256i scale_pair(int8_t a, int8_t b)
{
    return _mm256_set_m128i(_mm_set1_epi16(b), _mm_set1_epi16(a));
}

/* sum_j w[j] * bsums[j] over a Q8_K block's sixteen 16-element sums, w the
 * sub-blocks' int16 weights (scales, mins; |w| <= 255): exact. */
AVX2 static inline int weighted_bsums(__m256i w16, const int16_t *bsums)
{
    __m256i prod = _mm256_madd_epi16(w16, _mm256_loadu_si256((const __m256i *)bsums));
    __m128i p = _mm_add_epi32(_mm256_castsi256_si128(prod), _mm256_extracti128_si256(prod, 1));
    p = _mm_add_epi32(p, _mm_shuffle_epi32(p, 0x4e));
    p = _mm_add_epi32(p, _mm_shuffle_epi32(p, 0xb1));
    return _mm_cvtsi128_si32(p);
}

#endif
