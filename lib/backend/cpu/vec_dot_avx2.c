/* AVX2 + FMA + F16C dot products (vec_dot.h), compiled with function target
 * attributes and chosen at run time, so the library still runs on any x86-64.
 * Integer sums per block are exact (as in the references); only the order of
 * the f32 accumulation differs. */
#include <stddef.h>

#include "backend/cpu/vec_dot.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#    include <cpuid.h>
#    include <stdatomic.h>
#    include <immintrin.h>
#    include <string.h>

#    include "backend/cpu/vec_dot_avx2.h"

/* The four-row kernels' loops over rows unrolled, so their accumulators stay in
 * registers (GCC kept them on the stack, a store and a load around every
 * multiply-add). */
#    define UNROLL4 _Pragma("GCC unroll 4")

static int detect_avx2(void)
{
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return 0;
    unsigned f16c = (c >> 29) & 1u, osxsave = (c >> 27) & 1u;
    __builtin_cpu_init();
    return osxsave && f16c && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}

/* cpuid is slow (a VM exit under a hypervisor), so the answer — a constant of
 * the machine, the same for every thread — is computed once: 0 unknown, 1 no,
 * 2 yes. */
int cpu_has_avx2(void)
{
    static atomic_int known;
    int v = atomic_load_explicit(&known, memory_order_relaxed);
    if (v == 0) {
        v = detect_avx2() ? 2 : 1;
        atomic_store_explicit(&known, v, memory_order_relaxed);
    }
    return v == 2;
}

/* The 32 fifth bits of a Q5_0/Q5_1 block (bit j of qh, little-endian) as bytes:
 * 0x10 where the bit is set, 0 elsewhere. Byte j takes qh's byte j / 8, then
 * keeps bit j % 8. */
AVX2 static inline __m256i q5_high_bits(const uint8_t qh[4])
{
    uint32_t bits;
    memcpy(&bits, qh, sizeof bits);
    __m256i spread = _mm256_shuffle_epi8(
        _mm256_set1_epi32((int)bits),
        _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0));
    __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ULL);
    __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit);
    return _mm256_and_si256(set, _mm256_set1_epi8(0x10));
}

/* A Q5_0/Q5_1 block's 32 unsigned 5-bit values, as bytes in element order. */
AVX2 static inline __m256i unpack_q5(const uint8_t *qs, const uint8_t qh[4])
{
    return _mm256_or_si256(unpack_nibbles(qs), q5_high_bits(qh));
}

AVX2 static void dot_f32(int64_t n, float *s, const void *w, const void *a)
{
    const float *x = w, *y = a;
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i), acc0);
        acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 8), _mm256_loadu_ps(y + i + 8), acc1);
    }
    float sum = hsum_ps(_mm256_add_ps(acc0, acc1));
    for (; i < n; i++) sum += x[i] * y[i];
    *s = sum;
}

AVX2 static void dot_f16(int64_t n, float *s, const void *w, const void *a)
{
    const uint16_t *x = w;
    const float *y = a;
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256 x0 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(x + i)));
        __m256 x1 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(x + i + 8)));
        acc0 = _mm256_fmadd_ps(x0, _mm256_loadu_ps(y + i), acc0);
        acc1 = _mm256_fmadd_ps(x1, _mm256_loadu_ps(y + i + 8), acc1);
    }
    float sum = hsum_ps(_mm256_add_ps(acc0, acc1));
    for (; i < n; i++) sum += f16(x[i]) * y[i];
    *s = sum;
}

AVX2 static inline __m256 bf16x8(const uint16_t *p)
{
    __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
}

AVX2 static void dot_bf16(int64_t n, float *s, const void *w, const void *a)
{
    const uint16_t *x = w;
    const float *y = a;
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        acc0 = _mm256_fmadd_ps(bf16x8(x + i), _mm256_loadu_ps(y + i), acc0);
        acc1 = _mm256_fmadd_ps(bf16x8(x + i + 8), _mm256_loadu_ps(y + i + 8), acc1);
    }
    float sum = hsum_ps(_mm256_add_ps(acc0, acc1));
    for (; i < n; i++) sum += cpu_bf16_to_f32(x[i]) * y[i];
    *s = sum;
}

AVX2 static void dot_q8_0(int64_t n, float *s, const void *w, const void *a)
{
    const block_q8_0 *x = w, *y = a;
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK8_0; i++) {
        __m256i qx = _mm256_loadu_si256((const __m256i *)x[i].qs);
        __m256i qy = _mm256_loadu_si256((const __m256i *)y[i].qs);
        __m256 d = _mm256_set1_ps(f16(x[i].d) * f16(y[i].d));
        acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(dot_s8s8(qx, qy)), acc);
    }
    *s = hsum_ps(acc);
}

AVX2 static void dot_q4_0(int64_t n, float *s, const void *w, const void *a)
{
    const block_q4_0 *x = w;
    const block_q8_0 *y = a;
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK4_0; i++) {
        __m256i qx = _mm256_sub_epi8(unpack_nibbles(x[i].qs), _mm256_set1_epi8(8));
        __m256i qy = _mm256_loadu_si256((const __m256i *)y[i].qs);
        __m256 d = _mm256_set1_ps(f16(x[i].d) * f16(y[i].d));
        acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(dot_s8s8(qx, qy)), acc);
    }
    *s = hsum_ps(acc);
}

AVX2 static void dot_q4_1(int64_t n, float *s, const void *w, const void *a)
{
    const block_q4_1 *x = w;
    const block_q8_1 *y = a;
    __m256 acc = _mm256_setzero_ps();
    float summ = 0;
    for (int64_t i = 0; i < n / QK4_1; i++) {
        __m256i qx = unpack_nibbles(x[i].qs);
        __m256i qy = _mm256_loadu_si256((const __m256i *)y[i].qs);
        __m256 d = _mm256_set1_ps(f16(x[i].d) * f16(y[i].d));
        acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(dot_u8s8(qx, qy)), acc);
        summ += f16(x[i].m) * f16(y[i].s);
    }
    *s = hsum_ps(acc) + summ;
}

AVX2 static void dot_q5_0(int64_t n, float *s, const void *w, const void *a)
{
    const block_q5_0 *x = w;
    const block_q8_0 *y = a;
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK5_0; i++) {
        __m256i qx = _mm256_sub_epi8(unpack_q5(x[i].qs, x[i].qh), _mm256_set1_epi8(16));
        __m256i qy = _mm256_loadu_si256((const __m256i *)y[i].qs);
        __m256 d = _mm256_set1_ps(f16(x[i].d) * f16(y[i].d));
        acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(dot_s8s8(qx, qy)), acc);
    }
    *s = hsum_ps(acc);
}

AVX2 static void dot_q5_1(int64_t n, float *s, const void *w, const void *a)
{
    const block_q5_1 *x = w;
    const block_q8_1 *y = a;
    __m256 acc = _mm256_setzero_ps();
    float summ = 0;
    for (int64_t i = 0; i < n / QK5_1; i++) {
        __m256i qx = unpack_q5(x[i].qs, x[i].qh);
        __m256i qy = _mm256_loadu_si256((const __m256i *)y[i].qs);
        __m256 d = _mm256_set1_ps(f16(x[i].d) * f16(y[i].d));
        acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(dot_u8s8(qx, qy)), acc);
        summ += f16(x[i].m) * f16(y[i].s);
    }
    *s = hsum_ps(acc) + summ;
}

AVX2 static inline void k4_scales(const uint8_t *q, uint8_t sc[8], uint8_t m[8])
{
    uint32_t u[3];
    memcpy(u, q, 12);
    /* bytes 0-3: low 6 bits sc[0..3], top 2 bits high part of sc[4..7];
     * bytes 4-7: low 6 bits m[0..3], top 2 bits high part of m[4..7];
     * bytes 8-11: low nibble sc[4..7] low bits, high nibble m[4..7] low bits. */
    uint32_t sc_lo = u[0] & 0x3f3f3f3fu, m_lo = u[1] & 0x3f3f3f3fu;
    uint32_t sc_hi = (u[2] & 0x0f0f0f0fu) | ((u[0] >> 2) & 0x30303030u);
    uint32_t m_hi = ((u[2] >> 4) & 0x0f0f0f0fu) | ((u[1] >> 2) & 0x30303030u);
    memcpy(sc, &sc_lo, 4);
    memcpy(sc + 4, &sc_hi, 4);
    memcpy(m, &m_lo, 4);
    memcpy(m + 4, &m_hi, 4);
}

/* sum_j m[j] * (bsums[2j] + bsums[2j+1]) for the eight 6-bit mins of a Q4_K/Q5_K
 * block: the pair sums fit int16 (|.| <= 2 * 16 * 127), so one vpmaddwd does
 * the eight products. An exact integer, as the scalar loop computes it. */
AVX2 static inline int k4_min_sum(const uint8_t m[8], const int16_t *bsums)
{
    __m256i bs = _mm256_loadu_si256((const __m256i *)bsums);
    __m256i pairs = _mm256_madd_epi16(bs, _mm256_set1_epi16(1)); /* 8 x int32 */
    __m128i p16 =
        _mm_packs_epi32(_mm256_castsi256_si128(pairs), _mm256_extracti128_si256(pairs, 1));
    __m128i m16 = _mm_cvtepu8_epi16(_mm_loadl_epi64((const __m128i *)m));
    __m128i prod = _mm_madd_epi16(p16, m16); /* 4 x int32 */
    prod = _mm_add_epi32(prod, _mm_shuffle_epi32(prod, 0x4e));
    prod = _mm_add_epi32(prod, _mm_shuffle_epi32(prod, 0xb1));
    return _mm_cvtsi128_si32(prod);
}

/* sum_j sc[j] * bsums[j] over the sixteen int8 scales of a Q6_K block (the
 * -32 offset's weight); exact. */
AVX2 static inline int q6_offset_sum(const int8_t *sc, const int16_t *bsums)
{
    return weighted_bsums(_mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)sc)), bsums);
}

AVX2 static void dot_q4_K(int64_t n, float *s, const void *w, const void *a)
{
    const block_q4_K *x = w;
    const block_q8_K *y = a;
    __m256 acc = _mm256_setzero_ps();
    float accm = 0;
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    for (int64_t i = 0; i < n / QK_K; i++) {
        uint8_t sc[8], m[8];
        k4_scales(x[i].scales, sc, m);
        int summ = k4_min_sum(m, y[i].bsums);
        __m256i sumi = _mm256_setzero_si256();
        for (ptrdiff_t j = 0; j < 4; j++) {
            __m256i q = _mm256_loadu_si256((const __m256i *)(x[i].qs + 32 * j));
            __m256i lo = _mm256_and_si256(q, m4);
            __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
            __m256i y0 = _mm256_loadu_si256((const __m256i *)(y[i].qs + 64 * j));
            __m256i y1 = _mm256_loadu_si256((const __m256i *)(y[i].qs + 64 * j + 32));
            __m256i p0 = _mm256_madd_epi16(_mm256_maddubs_epi16(lo, y0),
                                           _mm256_set1_epi16((short)sc[2 * j]));
            __m256i p1 = _mm256_madd_epi16(_mm256_maddubs_epi16(hi, y1),
                                           _mm256_set1_epi16((short)sc[2 * j + 1]));
            sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(p0, p1));
        }
        float d = f16(x[i].d) * y[i].d;
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
        accm += f16(x[i].dmin) * y[i].d * (float)summ;
    }
    *s = hsum_ps(acc) - accm;
}

AVX2 static void dot_q5_K(int64_t n, float *s, const void *w, const void *a)
{
    const block_q5_K *x = w;
    const block_q8_K *y = a;
    __m256 acc = _mm256_setzero_ps();
    float accm = 0;
    const __m256i m4 = _mm256_set1_epi8(0x0f), one = _mm256_set1_epi8(1);
    for (int64_t i = 0; i < n / QK_K; i++) {
        uint8_t sc[8], m[8];
        k4_scales(x[i].scales, sc, m);
        int summ = k4_min_sum(m, y[i].bsums);
        __m256i qh = _mm256_loadu_si256((const __m256i *)x[i].qh);
        __m256i sumi = _mm256_setzero_si256();
        for (ptrdiff_t j = 0; j < 4; j++) {
            __m256i q = _mm256_loadu_si256((const __m256i *)(x[i].qs + 32 * j));
            __m256i h0 = _mm256_slli_epi16(_mm256_and_si256(qh, one), 4);
            __m256i h1 = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 1), one), 4);
            qh = _mm256_srli_epi16(qh, 2);
            __m256i lo = _mm256_or_si256(_mm256_and_si256(q, m4), h0);
            __m256i hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q, 4), m4), h1);
            __m256i y0 = _mm256_loadu_si256((const __m256i *)(y[i].qs + 64 * j));
            __m256i y1 = _mm256_loadu_si256((const __m256i *)(y[i].qs + 64 * j + 32));
            __m256i p0 = _mm256_madd_epi16(_mm256_maddubs_epi16(lo, y0),
                                           _mm256_set1_epi16((short)sc[2 * j]));
            __m256i p1 = _mm256_madd_epi16(_mm256_maddubs_epi16(hi, y1),
                                           _mm256_set1_epi16((short)sc[2 * j + 1]));
            sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(p0, p1));
        }
        float d = f16(x[i].d) * y[i].d;
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
        accm += f16(x[i].dmin) * y[i].d * (float)summ;
    }
    *s = hsum_ps(acc) - accm;
}

AVX2 static void dot_q6_K(int64_t n, float *s, const void *w, const void *a)
{
    const block_q6_K *x = w;
    const block_q8_K *y = a;
    __m256 acc = _mm256_setzero_ps();
    const __m256i m4 = _mm256_set1_epi8(0x0f), m3 = _mm256_set1_epi8(0x03);
    for (int64_t i = 0; i < n / QK_K; i++) {
        const uint8_t *ql = x[i].ql, *qh = x[i].qh;
        const int8_t *sc = x[i].scales;
        const int8_t *q8 = y[i].qs;
        /* the -32 offset: sum over sub-blocks of sc * 32 * sum(y) */
        int off = q6_offset_sum(sc, y[i].bsums);
        __m256i sumi = _mm256_setzero_si256();
        for (int h = 0; h < 2; h++) {
            __m256i l0 = _mm256_loadu_si256((const __m256i *)ql);
            __m256i l1 = _mm256_loadu_si256((const __m256i *)(ql + 32));
            __m256i hb = _mm256_loadu_si256((const __m256i *)qh);
            __m256i q1 = _mm256_or_si256(_mm256_and_si256(l0, m4),
                                         _mm256_slli_epi16(_mm256_and_si256(hb, m3), 4));
            __m256i q2 = _mm256_or_si256(
                _mm256_and_si256(l1, m4),
                _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 2), m3), 4));
            __m256i q3 = _mm256_or_si256(
                _mm256_and_si256(_mm256_srli_epi16(l0, 4), m4),
                _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 4), m3), 4));
            __m256i q4 = _mm256_or_si256(
                _mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
                _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 6), m3), 4));
            __m256i p1 = _mm256_maddubs_epi16(q1, _mm256_loadu_si256((const __m256i *)q8));
            __m256i p2 = _mm256_maddubs_epi16(q2, _mm256_loadu_si256((const __m256i *)(q8 + 32)));
            __m256i p3 = _mm256_maddubs_epi16(q3, _mm256_loadu_si256((const __m256i *)(q8 + 64)));
            __m256i p4 = _mm256_maddubs_epi16(q4, _mm256_loadu_si256((const __m256i *)(q8 + 96)));
            p1 = _mm256_madd_epi16(p1, scale_pair(sc[0], sc[1]));
            p2 = _mm256_madd_epi16(p2, scale_pair(sc[2], sc[3]));
            p3 = _mm256_madd_epi16(p3, scale_pair(sc[4], sc[5]));
            p4 = _mm256_madd_epi16(p4, scale_pair(sc[6], sc[7]));
            sumi = _mm256_add_epi32(
                sumi, _mm256_add_epi32(_mm256_add_epi32(p1, p2), _mm256_add_epi32(p3, p4)));
            ql += 64;
            qh += 32;
            sc += 8;
            q8 += 128;
        }
        /* the offset in integers, so that nothing cancels in floating point */
        sumi = _mm256_sub_epi32(sumi, _mm256_setr_epi32(32 * off, 0, 0, 0, 0, 0, 0, 0));
        float d = f16(x[i].d) * y[i].d;
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
    }
    *s = hsum_ps(acc);
}

/* Eight fp8-e4m3 bytes as f32: normal numbers by moving the fields into an f32
 * (exponent bias 7 -> 127), subnormals as man * 2^-9, the sign last. NaN
 * encodings (S.1111.111) are not produced by quantizers and are not special-cased. */
AVX2 static inline __m256 fp8x8(const uint8_t *p)
{
    __m256i b = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)p));
    __m256i e = _mm256_and_si256(_mm256_srli_epi32(b, 3), _mm256_set1_epi32(0xf));
    __m256i m = _mm256_and_si256(b, _mm256_set1_epi32(7));
    __m256i normal =
        _mm256_or_si256(_mm256_slli_epi32(_mm256_add_epi32(e, _mm256_set1_epi32(120)), 23),
                        _mm256_slli_epi32(m, 20));
    __m256 sub = _mm256_mul_ps(_mm256_cvtepi32_ps(m), _mm256_set1_ps(0x1p-9f));
    __m256 is_sub = _mm256_castsi256_ps(_mm256_cmpeq_epi32(e, _mm256_setzero_si256()));
    __m256 v = _mm256_blendv_ps(_mm256_castsi256_ps(normal), sub, is_sub);
    __m256i sign = _mm256_slli_epi32(_mm256_and_si256(b, _mm256_set1_epi32(0x80)), 24);
    return _mm256_or_ps(v, _mm256_castsi256_ps(sign));
}

/* MXFP4's codes (unscaled) . f32, 32 values at a time: the nibbles put in
 * element order (2i low, 2i + 1 high), looked up as twice their e2m1 value in
 * int8 (exact), widened to f32; the sum halved at the end (exact). */
AVX2 static void dot_mxfp4(int64_t n, float *s, const void *w, const void *a)
{
    const uint8_t *x = w;
    const float *y = a;
    const __m128i table = _mm_setr_epi8(0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12);
    const __m128i lo4 = _mm_set1_epi8(0x0f);
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        __m128i b = _mm_loadu_si128((const __m128i *)(x + i / 2));
        __m128i lo = _mm_and_si128(b, lo4), hi = _mm_and_si128(_mm_srli_epi16(b, 4), lo4);
        __m128i v0 = _mm_shuffle_epi8(table, _mm_unpacklo_epi8(lo, hi)); /* elements 0..15 */
        __m128i v1 = _mm_shuffle_epi8(table, _mm_unpackhi_epi8(lo, hi)); /* 16..31 */
        __m128i q[4] = {v0, _mm_srli_si128(v0, 8), v1, _mm_srli_si128(v1, 8)};
        for (int k = 0; k < 4; k++) {
            __m256 f = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q[k]));
            if (k & 1)
                acc1 = _mm256_fmadd_ps(f, _mm256_loadu_ps(y + i + 8 * (int64_t)k), acc1);
            else
                acc0 = _mm256_fmadd_ps(f, _mm256_loadu_ps(y + i + 8 * (int64_t)k), acc0);
        }
    }
    float sum = 0.5f * hsum_ps(_mm256_add_ps(acc0, acc1));
    for (; i < n; i++) sum += cpu_e2m1_values[(x[i / 2] >> (4 * (i & 1))) & 15] * y[i];
    *s = sum;
}

AVX2 static void dot_fp8(int64_t n, float *s, const void *w, const void *a)
{
    const uint8_t *x = w;
    const float *y = a;
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        acc0 = _mm256_fmadd_ps(fp8x8(x + i), _mm256_loadu_ps(y + i), acc0);
        acc1 = _mm256_fmadd_ps(fp8x8(x + i + 8), _mm256_loadu_ps(y + i + 8), acc1);
    }
    float sum = hsum_ps(_mm256_add_ps(acc0, acc1));
    for (; i < n; i++) sum += cpu_fp8_e4m3_to_f32(x[i]) * y[i];
    *s = sum;
}

/* Four activation rows against one weight row (cpu_vec_dot4_fn): the weight
 * blocks are decoded once for the four; each row's arithmetic is exactly that of
 * the single-row kernel above, so the results are bit-identical. */
#    define ROW(r, T) ((const T *)((const char *)a + (size_t)(r)*stride))

AVX2 static void dot4_q8_0(int64_t n, float *s, const void *w, const void *a, size_t stride)
{
    const block_q8_0 *x = w;
    __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                     _mm256_setzero_ps()};
    for (int64_t i = 0; i < n / QK8_0; i++) {
        __m256i qx = _mm256_loadu_si256((const __m256i *)x[i].qs);
        __m256i ax = _mm256_sign_epi8(qx, qx);
        float dx = f16(x[i].d);
        UNROLL4
        for (int r = 0; r < 4; r++) {
            const block_q8_0 *y = ROW(r, block_q8_0) + i;
            __m256i qy = _mm256_sign_epi8(_mm256_loadu_si256((const __m256i *)y->qs), qx);
            __m256 d = _mm256_set1_ps(dx * f16(y->d));
            acc[r] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(dot_u8s8(ax, qy)), acc[r]);
        }
    }
    for (int r = 0; r < 4; r++) s[r] = hsum_ps(acc[r]);
}

AVX2 static void dot4_q4_1(int64_t n, float *s, const void *w, const void *a, size_t stride)
{
    const block_q4_1 *x = w;
    __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                     _mm256_setzero_ps()};
    float summ[4] = {0, 0, 0, 0};
    for (int64_t i = 0; i < n / QK4_1; i++) {
        __m256i qx = unpack_nibbles(x[i].qs);
        float dx = f16(x[i].d), mx = f16(x[i].m);
        UNROLL4
        for (int r = 0; r < 4; r++) {
            const block_q8_1 *y = ROW(r, block_q8_1) + i;
            __m256i qy = _mm256_loadu_si256((const __m256i *)y->qs);
            __m256 d = _mm256_set1_ps(dx * f16(y->d));
            acc[r] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(dot_u8s8(qx, qy)), acc[r]);
            summ[r] += mx * f16(y->s);
        }
    }
    for (int r = 0; r < 4; r++) s[r] = hsum_ps(acc[r]) + summ[r];
}

AVX2 static void dot4_q5_0(int64_t n, float *s, const void *w, const void *a, size_t stride)
{
    const block_q5_0 *x = w;
    __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                     _mm256_setzero_ps()};
    for (int64_t i = 0; i < n / QK5_0; i++) {
        __m256i qx = _mm256_sub_epi8(unpack_q5(x[i].qs, x[i].qh), _mm256_set1_epi8(16));
        __m256i ax = _mm256_sign_epi8(qx, qx);
        float dx = f16(x[i].d);
        UNROLL4
        for (int r = 0; r < 4; r++) {
            const block_q8_0 *y = ROW(r, block_q8_0) + i;
            __m256i qy = _mm256_sign_epi8(_mm256_loadu_si256((const __m256i *)y->qs), qx);
            __m256 d = _mm256_set1_ps(dx * f16(y->d));
            acc[r] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(dot_u8s8(ax, qy)), acc[r]);
        }
    }
    for (int r = 0; r < 4; r++) s[r] = hsum_ps(acc[r]);
}

AVX2 static void dot4_q5_1(int64_t n, float *s, const void *w, const void *a, size_t stride)
{
    const block_q5_1 *x = w;
    __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                     _mm256_setzero_ps()};
    float summ[4] = {0, 0, 0, 0};
    for (int64_t i = 0; i < n / QK5_1; i++) {
        __m256i qx = unpack_q5(x[i].qs, x[i].qh);
        float dx = f16(x[i].d), mx = f16(x[i].m);
        UNROLL4
        for (int r = 0; r < 4; r++) {
            const block_q8_1 *y = ROW(r, block_q8_1) + i;
            __m256i qy = _mm256_loadu_si256((const __m256i *)y->qs);
            __m256 d = _mm256_set1_ps(dx * f16(y->d));
            acc[r] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(dot_u8s8(qx, qy)), acc[r]);
            summ[r] += mx * f16(y->s);
        }
    }
    for (int r = 0; r < 4; r++) s[r] = hsum_ps(acc[r]) + summ[r];
}

AVX2 static void dot4_q4_K(int64_t n, float *s, const void *w, const void *a, size_t stride)
{
    const block_q4_K *x = w;
    __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                     _mm256_setzero_ps()};
    float accm[4] = {0, 0, 0, 0};
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    for (int64_t i = 0; i < n / QK_K; i++) {
        uint8_t sc[8], m[8];
        k4_scales(x[i].scales, sc, m);
        __m256i lo[4], hi[4];
        for (ptrdiff_t j = 0; j < 4; j++) {
            __m256i q = _mm256_loadu_si256((const __m256i *)(x[i].qs + 32 * j));
            lo[j] = _mm256_and_si256(q, m4);
            hi[j] = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
        }
        float xd = f16(x[i].d), xdmin = f16(x[i].dmin);
        UNROLL4
        for (int r = 0; r < 4; r++) {
            const block_q8_K *y = ROW(r, block_q8_K) + i;
            int summ = k4_min_sum(m, y->bsums);
            __m256i sumi = _mm256_setzero_si256();
            for (ptrdiff_t j = 0; j < 4; j++) {
                __m256i y0 = _mm256_loadu_si256((const __m256i *)(y->qs + 64 * j));
                __m256i y1 = _mm256_loadu_si256((const __m256i *)(y->qs + 64 * j + 32));
                __m256i p0 = _mm256_madd_epi16(_mm256_maddubs_epi16(lo[j], y0),
                                               _mm256_set1_epi16((short)sc[2 * j]));
                __m256i p1 = _mm256_madd_epi16(_mm256_maddubs_epi16(hi[j], y1),
                                               _mm256_set1_epi16((short)sc[2 * j + 1]));
                sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(p0, p1));
            }
            acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(xd * y->d), _mm256_cvtepi32_ps(sumi), acc[r]);
            accm[r] += xdmin * y->d * (float)summ;
        }
    }
    for (int r = 0; r < 4; r++) s[r] = hsum_ps(acc[r]) - accm[r];
}

AVX2 static void dot4_q6_K(int64_t n, float *s, const void *w, const void *a, size_t stride)
{
    const block_q6_K *x = w;
    __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                     _mm256_setzero_ps()};
    const __m256i m4 = _mm256_set1_epi8(0x0f), m3 = _mm256_set1_epi8(0x03);
    for (int64_t i = 0; i < n / QK_K; i++) {
        __m256i q[8], scl[8];
        const uint8_t *ql = x[i].ql, *qh = x[i].qh;
        const int8_t *sc = x[i].scales;
        for (ptrdiff_t h = 0; h < 2; h++) {
            __m256i l0 = _mm256_loadu_si256((const __m256i *)(ql + 64 * h));
            __m256i l1 = _mm256_loadu_si256((const __m256i *)(ql + 64 * h + 32));
            __m256i hb = _mm256_loadu_si256((const __m256i *)(qh + 32 * h));
            q[4 * h] = _mm256_or_si256(_mm256_and_si256(l0, m4),
                                       _mm256_slli_epi16(_mm256_and_si256(hb, m3), 4));
            q[4 * h + 1] = _mm256_or_si256(
                _mm256_and_si256(l1, m4),
                _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 2), m3), 4));
            q[4 * h + 2] = _mm256_or_si256(
                _mm256_and_si256(_mm256_srli_epi16(l0, 4), m4),
                _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 4), m3), 4));
            q[4 * h + 3] = _mm256_or_si256(
                _mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
                _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 6), m3), 4));
            for (ptrdiff_t k = 0; k < 4; k++)
                scl[4 * h + k] = scale_pair(sc[8 * h + 2 * k], sc[8 * h + 2 * k + 1]);
        }
        float xd = f16(x[i].d);
        UNROLL4
        for (int r = 0; r < 4; r++) {
            const block_q8_K *y = ROW(r, block_q8_K) + i;
            int off = q6_offset_sum(sc, y->bsums);
            __m256i sumi = _mm256_setzero_si256();
            for (ptrdiff_t h = 0; h < 2; h++) {
                __m256i p[4];
                for (ptrdiff_t k = 0; k < 4; k++)
                    p[k] = _mm256_madd_epi16(
                        _mm256_maddubs_epi16(
                            q[4 * h + k],
                            _mm256_loadu_si256((const __m256i *)(y->qs + 128 * h + 32 * k))),
                        scl[4 * h + k]);
                sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(_mm256_add_epi32(p[0], p[1]),
                                                               _mm256_add_epi32(p[2], p[3])));
            }
            sumi = _mm256_sub_epi32(sumi, _mm256_setr_epi32(32 * off, 0, 0, 0, 0, 0, 0, 0));
            float d = xd * y->d;
            acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc[r]);
        }
    }
    for (int r = 0; r < 4; r++) s[r] = hsum_ps(acc[r]);
}

/* F32 / F16 / BF16 weights, four f32 activation rows: each weight vector is
 * loaded and widened once; every row keeps the single-row kernel's two
 * accumulators and order, so results are bit-identical. */
#    define DOT4_FLOAT(name, T, LOAD8, SCALAR)                                                     \
        AVX2 static void name(int64_t n, float *s, const void *w, const void *a, size_t stride)    \
        {                                                                                          \
            const T *x = w;                                                                        \
            __m256 acc0[4], acc1[4];                                                               \
            for (int r = 0; r < 4; r++) acc0[r] = acc1[r] = _mm256_setzero_ps();                   \
            int64_t i = 0;                                                                         \
            for (; i + 16 <= n; i += 16) {                                                         \
                __m256 x0 = LOAD8(x + i), x1 = LOAD8(x + i + 8);                                   \
                UNROLL4 for (int r = 0; r < 4; r++)                                                \
                {                                                                                  \
                    const float *y = ROW(r, float);                                                \
                    acc0[r] = _mm256_fmadd_ps(x0, _mm256_loadu_ps(y + i), acc0[r]);                \
                    acc1[r] = _mm256_fmadd_ps(x1, _mm256_loadu_ps(y + i + 8), acc1[r]);            \
                }                                                                                  \
            }                                                                                      \
            for (int r = 0; r < 4; r++) {                                                          \
                const float *y = ROW(r, float);                                                    \
                float sum = hsum_ps(_mm256_add_ps(acc0[r], acc1[r]));                              \
                for (int64_t k = i; k < n; k++) sum += SCALAR(x[k]) * y[k];                        \
                s[r] = sum;                                                                        \
            }                                                                                      \
        }

AVX2 static inline __m256 load8_f32(const float *p)
{
    return _mm256_loadu_ps(p);
}
AVX2 static inline __m256 load8_f16(const uint16_t *p)
{
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
}
static inline float same_f32(float v)
{
    return v;
}

/* MXFP4 rows with their scales (cpu_vec_dot_mxfp4_fn), n_rows of 1 to 4:
 * each block's codes decoded once (twice their e2m1 value in int8, exact),
 * its products summed in two accumulators per row, and the block's sum times
 * half its scale (exact) added into the row's running vector; one horizontal
 * sum at the end. Every row takes the same operations whatever n_rows is. */
AVX2 static inline __attribute__((always_inline)) void
mxfp4_scaled_rows(int64_t n, float *s, const void *w, const float *scales, const void *a,
                  size_t stride, const int n_rows)
{
    const uint8_t *x = w;
    const __m128i table = _mm_setr_epi8(0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12);
    const __m128i lo4 = _mm_set1_epi8(0x0f);
    __m256 acc[4];
    for (int r = 0; r < 4; r++) acc[r] = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        __m128i b = _mm_loadu_si128((const __m128i *)(x + i / 2));
        __m128i lo = _mm_and_si128(b, lo4), hi = _mm_and_si128(_mm_srli_epi16(b, 4), lo4);
        __m128i v0 = _mm_shuffle_epi8(table, _mm_unpacklo_epi8(lo, hi));
        __m128i v1 = _mm_shuffle_epi8(table, _mm_unpackhi_epi8(lo, hi));
        __m256 f0 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v0)),
               f1 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(v0, 8))),
               f2 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v1)),
               f3 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(v1, 8)));
        __m256 half_scale = _mm256_set1_ps(0.5f * scales[i / 32]);
        UNROLL4 for (int r = 0; r < n_rows; r++)
        {
            const float *y = ROW(r, float);
            __m256 b0 = _mm256_mul_ps(f0, _mm256_loadu_ps(y + i));
            __m256 b1 = _mm256_mul_ps(f1, _mm256_loadu_ps(y + i + 8));
            b0 = _mm256_fmadd_ps(f2, _mm256_loadu_ps(y + i + 16), b0);
            b1 = _mm256_fmadd_ps(f3, _mm256_loadu_ps(y + i + 24), b1);
            acc[r] = _mm256_fmadd_ps(_mm256_add_ps(b0, b1), half_scale, acc[r]);
        }
    }
    for (int r = 0; r < n_rows; r++) {
        const float *y = ROW(r, float);
        float sum = hsum_ps(acc[r]);
        for (int64_t k = i; k < n; k++)
            sum += cpu_e2m1_values[(x[k / 2] >> (4 * (k & 1))) & 15] * scales[k / 32] * y[k];
        s[r] = sum;
    }
}

/* n_rows of 1 to 4 (cpu_vec_dot_mxfp4_fn): the rows' loop unrolled for four. */
AVX2 static void dot_mxfp4_scaled(int64_t n, float *s, const void *w, const float *scales,
                                  const void *a, size_t stride, int n_rows)
{
    if (n_rows == 4)
        mxfp4_scaled_rows(n, s, w, scales, a, stride, 4);
    else
        mxfp4_scaled_rows(n, s, w, scales, a, stride, n_rows);
}

cpu_vec_dot_mxfp4_fn cpu_vec_dot_mxfp4_avx2(void)
{
    return cpu_has_avx2() ? dot_mxfp4_scaled : NULL;
}

DOT4_FLOAT(dot4_f32, float, load8_f32, same_f32)
DOT4_FLOAT(dot4_f16, uint16_t, load8_f16, f16)
DOT4_FLOAT(dot4_bf16, uint16_t, bf16x8, cpu_bf16_to_f32)

cpu_vec_dot4_fn cpu_vec_dot4_avx2(model_dtype dtype)
{
    if (!cpu_has_avx2()) return NULL;
    switch (dtype) {
    case MODEL_DTYPE_F32: return dot4_f32;
    case MODEL_DTYPE_F16: return dot4_f16;
    case MODEL_DTYPE_BF16: return dot4_bf16;
    case MODEL_DTYPE_Q8_0: return dot4_q8_0;
    case MODEL_DTYPE_Q4_1: return dot4_q4_1;
    case MODEL_DTYPE_Q5_0: return dot4_q5_0;
    case MODEL_DTYPE_Q5_1: return dot4_q5_1;
    case MODEL_DTYPE_Q4_K: return dot4_q4_K;
    case MODEL_DTYPE_Q6_K: return dot4_q6_K;
    default: return NULL;
    }
}

cpu_vec_dot_fn cpu_vec_dot_avx2(model_dtype dtype)
{
    if (!cpu_has_avx2()) return NULL;
    switch (dtype) {
    case MODEL_DTYPE_F32: return dot_f32;
    case MODEL_DTYPE_F16: return dot_f16;
    case MODEL_DTYPE_BF16: return dot_bf16;
    case MODEL_DTYPE_FP8_E4M3: return dot_fp8;
    case MODEL_DTYPE_MXFP4: return dot_mxfp4;
    case MODEL_DTYPE_Q8_0: return dot_q8_0;
    case MODEL_DTYPE_Q4_0: return dot_q4_0;
    case MODEL_DTYPE_Q4_1: return dot_q4_1;
    case MODEL_DTYPE_Q5_0: return dot_q5_0;
    case MODEL_DTYPE_Q5_1: return dot_q5_1;
    case MODEL_DTYPE_Q4_K: return dot_q4_K;
    case MODEL_DTYPE_Q5_K: return dot_q5_K;
    case MODEL_DTYPE_Q6_K: return dot_q6_K;
    default: return cpu_vec_dot_avx2_lowbit(dtype);
    }
}

#else

int cpu_has_avx2(void)
{
    return 0;
}
cpu_vec_dot_fn cpu_vec_dot_avx2(model_dtype dtype)
{
    (void)dtype;
    return NULL;
}
cpu_vec_dot_mxfp4_fn cpu_vec_dot_mxfp4_avx2(void)
{
    return NULL;
}

#endif
