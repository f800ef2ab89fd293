/* AVX2 activation quantizers (cpu_quantize_row, quant.h): Q8_0, Q8_1 and Q8_K
 * (and F16 rows, the f16 KV cache's writes, through F16C's vcvtps2ph) with the
 * reference's results bit for bit (the same amax, the same scale and
 * multiplier computed in scalar, vcvtps2dq rounding half to even as nearbyintf
 * and ggml's nearest_int do, the same non-finite handling). Chosen at run time;
 * tests/unit/test_cpu_quant.c compares them with cpu_quantize_row_ref. */
#include <float.h>
#include <math.h>
#include <string.h>

#include "backend/cpu/quant.h"
#include "backend/cpu/vec_dot.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#    include <immintrin.h>
#    define AVX2 __attribute__((target("avx2,fma,f16c")))

/* 32 floats -> 32 int8 (round half to even, values already within +-127.5). */
AVX2 static inline __m256i round_pack(const float *x, __m256 mul)
{
    __m256i a = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x), mul));
    __m256i b = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + 8), mul));
    __m256i c = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + 16), mul));
    __m256i d = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + 24), mul));
    __m256i ab = _mm256_packs_epi32(a, b), cd = _mm256_packs_epi32(c, d);
    __m256i q = _mm256_packs_epi16(ab, cd);
    /* the packs interleave 128-bit lanes: put the eight dwords back in order */
    return _mm256_permutevar8x32_epi32(q, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

/* max |x| over n (a multiple of 8) floats, and whether all are finite. */
AVX2 static inline float abs_max(const float *x, int n, int *finite)
{
    const __m256 sign = _mm256_set1_ps(-0.0f), big = _mm256_set1_ps(FLT_MAX);
    __m256 m = _mm256_setzero_ps();
    int bad = 0;
    for (int i = 0; i < n; i += 8) {
        __m256 a = _mm256_andnot_ps(sign, _mm256_loadu_ps(x + i));
        bad |= _mm256_movemask_ps(_mm256_cmp_ps(a, big, _CMP_NLE_UQ)); /* NaN or inf */
        m = _mm256_max_ps(m, a);
    }
    __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    h = _mm_max_ss(h, _mm_movehdup_ps(h));
    *finite = !bad;
    return _mm_cvtss_f32(h);
}

AVX2 static int32_t sum_i8(__m256i q)
{
    __m256i s16 = _mm256_maddubs_epi16(_mm256_set1_epi8(1), q);
    __m256i s32 = _mm256_madd_epi16(s16, _mm256_set1_epi16(1));
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(s32), _mm256_extracti128_si256(s32, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
    return _mm_cvtsi128_si32(s);
}

AVX2 static void quant_q8_0_avx2(const float *x, block_q8_0 *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, x += 32) {
        int finite;
        float amax = abs_max(x, 32, &finite);
        if (!finite) {
            cpu_quantize_row_ref(MODEL_DTYPE_Q8_0, x, &y[i], 32);
            continue;
        }
        float d = amax / 127.0f, id = cpu_quant_multiplier(127.0f, amax);
        y[i].d = cpu_f32_to_fp16(d);
        _mm256_storeu_si256((__m256i *)y[i].qs, round_pack(x, _mm256_set1_ps(id)));
    }
}

AVX2 static void quant_q8_1_avx2(const float *x, block_q8_1 *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, x += 32) {
        int finite;
        float amax = abs_max(x, 32, &finite);
        if (!finite) {
            cpu_quantize_row_ref(CPU_DTYPE_Q8_1, x, &y[i], 32);
            continue;
        }
        float d = amax / 127.0f, id = cpu_quant_multiplier(127.0f, amax);
        __m256i q = round_pack(x, _mm256_set1_ps(id));
        _mm256_storeu_si256((__m256i *)y[i].qs, q);
        y[i].d = cpu_f32_to_fp16(d);
        y[i].s = cpu_f32_to_fp16((float)sum_i8(q) * d);
    }
}

AVX2 static void quant_q8_K_avx2(const float *x, block_q8_K *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, x += QK_K) {
        int finite;
        float amax = abs_max(x, QK_K, &finite);
        if (!finite || amax == 0.0f) {
            cpu_quantize_row_ref(CPU_DTYPE_Q8_K, x, &y[i], QK_K);
            continue;
        }
        float max = 0; /* the first element of largest magnitude, with its sign */
        for (int j = 0; j < QK_K; j++)
            if (fabsf(x[j]) == amax) {
                max = x[j];
                break;
            }
        float iscale = -127.f / max;
        __m256 mul = _mm256_set1_ps(iscale);
        for (int j = 0; j < QK_K; j += 32) {
            /* iscale * x lies in [-127, 127] but for the max's opposite sign,
             * which can reach 127.x: clamp as the reference does (v < 127) */
            __m256i q = round_pack(x + j, mul);
            q = _mm256_min_epi8(q, _mm256_set1_epi8(127));
            _mm256_storeu_si256((__m256i *)(y[i].qs + j), q);
            __m256i s16 = _mm256_maddubs_epi16(_mm256_set1_epi8(1), q);
            /* pairs -> sums of 16: add adjacent 16-bit pairs four times */
            __m256i s32 = _mm256_madd_epi16(s16, _mm256_set1_epi16(1));
            int32_t v[8];
            _mm256_storeu_si256((__m256i *)v, s32);
            y[i].bsums[j / 16] = (int16_t)(v[0] + v[1] + v[2] + v[3]);
            y[i].bsums[j / 16 + 1] = (int16_t)(v[4] + v[5] + v[6] + v[7]);
        }
        y[i].d = 1 / iscale;
    }
}

/* n floats -> f16, rounded to nearest even (the reference's cpu_f32_to_fp16,
 * which rounds NaN's payload as vcvtps2ph does). */
AVX2 static void f16_avx2(const float *x, uint16_t *y, int64_t n)
{
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(y + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i < n; i++) y[i] = cpu_f32_to_fp16(x[i]);
}

int cpu_quantize_row_avx2(int dtype, const float *x, void *y, int64_t n)
{
    if (!cpu_has_avx2()) return 0;
    switch (dtype) {
    case MODEL_DTYPE_F16: f16_avx2(x, y, n); return 1;
    case MODEL_DTYPE_Q8_0: quant_q8_0_avx2(x, y, n / 32); return 1;
    case CPU_DTYPE_Q8_1: quant_q8_1_avx2(x, y, n / 32); return 1;
    case CPU_DTYPE_Q8_K: quant_q8_K_avx2(x, y, n / QK_K); return 1;
    default: return 0;
    }
}

#else

int cpu_quantize_row_avx2(int dtype, const float *x, void *y, int64_t n)
{
    (void)dtype, (void)x, (void)y, (void)n;
    return 0;
}

#endif
