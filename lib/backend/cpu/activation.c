/* Softmax, e^x in rows and the SiLU-gated MLP activation (ops.h). */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "backend/cpu/ops.h"

int cpu_exp_avx2_only;

void cpu_softmax(float *x, int64_t n)
{
    float max = -INFINITY;
    for (int64_t i = 0; i < n; i++) max = x[i] > max ? x[i] : max;
    double sum = 0;
    for (int64_t i = 0; i < n; i++) {
        x[i] = expf(x[i] - max);
        sum += x[i];
    }
    float inv = (float)(1.0 / sum);
    for (int64_t i = 0; i < n; i++) x[i] *= inv;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#    include <immintrin.h>

#    include "backend/cpu/vec_dot.h"

#    define AVX2   __attribute__((target("avx2,fma")))
#    define AVX512 __attribute__((target("avx2,fma,avx512f")))

/* e^x as glibc's expf computes it (since 2.27, sysdeps/ieee754/flt-32/e_expf.c,
 * the __expf_fma variant its ifunc picks where the CPU has FMA), step for
 * step in double: x N / ln2 = k + r, N = 32, k an integer, |r| <= 1/2;
 * e^x = 2^(k / N) 2^(r / N), 2^(k / N) from a table of 2^(i / N) with k / N's
 * integer part added to the exponent, 2^(r / N) by a cubic in r. The table
 * and the constants are the function's, the fused products those of its FMA
 * build (read from its machine code: k and r each one, the cubic three; an
 * unfused r gives the same floats). So the results are its bits, not an
 * approximation of them: all 2^32 floats compared once (AVX-512 and AVX2
 * forms, glibc 2.36), none apart. */
enum { EXP_TABLE = 32 };

/* exp_table[i] = the bits of 2^(i / 32) rounded to double, less i << 47
 * (adding k << 47 then makes 2^(k / 32)'s bits). */
static const uint64_t exp_table[EXP_TABLE] = {
    0x3ff0000000000000, 0x3fefd9b0d3158574, 0x3fefb5586cf9890f, 0x3fef9301d0125b51,
    0x3fef72b83c7d517b, 0x3fef54873168b9aa, 0x3fef387a6e756238, 0x3fef1e9df51fdee1,
    0x3fef06fe0a31b715, 0x3feef1a7373aa9cb, 0x3feedea64c123422, 0x3feece086061892d,
    0x3feebfdad5362a27, 0x3feeb42b569d4f82, 0x3feeab07dd485429, 0x3feea47eb03a5585,
    0x3feea09e667f3bcd, 0x3fee9f75e8ec5f74, 0x3feea11473eb0187, 0x3feea589994cce13,
    0x3feeace5422aa0db, 0x3feeb737b0cdc5e5, 0x3feec49182a3f090, 0x3feed503b23e255d,
    0x3feee89f995ad3ad, 0x3feeff76f2fb5e47, 0x3fef199bdd85529c, 0x3fef3720dcef9069,
    0x3fef5818dcfba487, 0x3fef7c97337b9b5f, 0x3fefa4afa2a490da, 0x3fefd0765b6e4540,
};
static const double exp_inv_ln2_n = 0x1.71547652b82fep+0 * EXP_TABLE; /* N / ln2 */
static const double exp_shift = 0x1.8p+52; /* + 1.5 2^52 rounds to an integer, ties to even */
static const double exp_c0 = 0x1.c6af84b912394p-5 / EXP_TABLE / EXP_TABLE / EXP_TABLE;
static const double exp_c1 = 0x1.ebfce50fac4f3p-3 / EXP_TABLE / EXP_TABLE;
static const double exp_c2 = 0x1.62e42ff0c52d6p-1 / EXP_TABLE;

/* The common path of e^x for |x| < 88 (where glibc takes it too), four
 * lanes in double, the table read by four scalar loads: with a vpgatherqq
 * instead, a SiLU row took 3.6-4.4 ns an element on the Xeon (model 106) of
 * bench/README.md's session 50, more than the scalar expf's 3.3; with the
 * loads 1.8. */
AVX2 static inline __m128 exp4_core(__m128 x)
{
    const __m256d xd = _mm256_cvtps_pd(x), inv = _mm256_set1_pd(exp_inv_ln2_n),
                  shift = _mm256_set1_pd(exp_shift);
    const __m256d kds = _mm256_fmadd_pd(inv, xd, shift);
    const __m256i ki = _mm256_castpd_si256(kds);
    const __m256d kd = _mm256_sub_pd(kds, shift), r = _mm256_fmsub_pd(inv, xd, kd);
    _Alignas(32) uint64_t k[4];
    _mm256_store_si256((__m256i *)k, ki);
    __m256i t = _mm256_setr_epi64x(
        (long long)exp_table[k[0] % EXP_TABLE], (long long)exp_table[k[1] % EXP_TABLE],
        (long long)exp_table[k[2] % EXP_TABLE], (long long)exp_table[k[3] % EXP_TABLE]);
    t = _mm256_add_epi64(t, _mm256_slli_epi64(ki, 47));
    const __m256d z = _mm256_fmadd_pd(r, _mm256_set1_pd(exp_c0), _mm256_set1_pd(exp_c1)),
                  r2 = _mm256_mul_pd(r, r);
    __m256d y = _mm256_fmadd_pd(r, _mm256_set1_pd(exp_c2), _mm256_set1_pd(1.0));
    y = _mm256_fmadd_pd(z, r2, y);
    return _mm256_cvtpd_ps(_mm256_mul_pd(y, _mm256_castsi256_pd(t)));
}

/* exp4_core's arithmetic for eight lanes with AVX-512F: the table held in
 * four registers, read by two two-register permutes and a blend. */
AVX512 static inline __m256 exp8_core512(__m256 x)
{
    const __m512d xd = _mm512_cvtps_pd(x), inv = _mm512_set1_pd(exp_inv_ln2_n),
                  shift = _mm512_set1_pd(exp_shift);
    const __m512d kds = _mm512_fmadd_pd(inv, xd, shift);
    const __m512i ki = _mm512_castpd_si512(kds);
    const __m512d kd = _mm512_sub_pd(kds, shift), r = _mm512_fmsub_pd(inv, xd, kd);
    const __m512i t0 = _mm512_loadu_si512(exp_table), t1 = _mm512_loadu_si512(exp_table + 8),
                  t2 = _mm512_loadu_si512(exp_table + 16), t3 = _mm512_loadu_si512(exp_table + 24);
    const __m512i lo = _mm512_permutex2var_epi64(t0, ki, t1), /* (index bits 0-3) */
        hi = _mm512_permutex2var_epi64(t2, ki, t3);
    __m512i t = _mm512_mask_blend_epi64(_mm512_test_epi64_mask(ki, _mm512_set1_epi64(16)), lo, hi);
    t = _mm512_add_epi64(t, _mm512_slli_epi64(ki, 47));
    const __m512d z = _mm512_fmadd_pd(r, _mm512_set1_pd(exp_c0), _mm512_set1_pd(exp_c1)),
                  r2 = _mm512_mul_pd(r, r);
    __m512d y = _mm512_fmadd_pd(r, _mm512_set1_pd(exp_c2), _mm512_set1_pd(1.0));
    y = _mm512_fmadd_pd(z, r2, y);
    return _mm512_cvtpd_ps(_mm512_mul_pd(y, _mm512_castsi512_pd(t)));
}

/* One value, glibc's edge cases included: |x| >= 88 is NaN, +-inf,
 * overflow (+inf above 0x1.62e42ep6), underflow (+0 below -0x1.9fe368p6) or
 * the common path (the values of round-to-nearest, the mode the library
 * runs in; glibc's errno is not set). */
AVX2 static float exp1_exact(float x)
{
    uint32_t bits;
    memcpy(&bits, &x, sizeof bits);
    if (((bits >> 20) & 0x7ff) >= 0x42b) {
        if (bits == 0xff800000u) return 0.0f;              /* -inf */
        if (((bits >> 20) & 0x7ff) >= 0x7f8) return x + x; /* +inf, NaN */
        if (x > 0x1.62e42ep6f) return INFINITY;
        if (x < -0x1.9fe368p6f) return 0.0f;
    }
    return _mm_cvtss_f32(exp4_core(_mm_set1_ps(x)));
}

/* Eight lanes of e^x, glibc's expf bits, by core (exp8_core512 with AVX-512F,
 * exp8_core's two exp4_core with AVX2); lanes with |x| >= 88 one at a time. */
#    define EXP8_EXACT(suffix, core)                                                               \
        TARGET_##suffix static inline __m256 exp8_exact_##suffix(__m256 x)                         \
        {                                                                                          \
            const __m256 big = _mm256_cmp_ps(_mm256_andnot_ps(_mm256_set1_ps(-0.0f), x),           \
                                             _mm256_set1_ps(88.0f), _CMP_NLT_UQ); /* (or NaN) */   \
            /* (the core on 0 there: no inf - inf or overflow raises a floating-point              \
             * exception glibc's expf does not) */                                                 \
            __m256 y = core(_mm256_andnot_ps(big, x));                                             \
            int m = _mm256_movemask_ps(big);                                                       \
            if (m) {                                                                               \
                _Alignas(32) float xs[8], ys[8];                                                   \
                _mm256_store_ps(xs, x), _mm256_store_ps(ys, y);                                    \
                for (int i = 0; i < 8; i++)                                                        \
                    if (m >> i & 1) ys[i] = exp1_exact(xs[i]);                                     \
                y = _mm256_load_ps(ys);                                                            \
            }                                                                                      \
            return y;                                                                              \
        }
AVX2 static inline __m256 exp8_core(__m256 x)
{
    return _mm256_set_m128(exp4_core(_mm256_extractf128_ps(x, 1)),
                           exp4_core(_mm256_castps256_ps128(x)));
}
#    define TARGET_avx2   AVX2
#    define TARGET_avx512 AVX512
EXP8_EXACT(avx2, exp8_core)
EXP8_EXACT(avx512, exp8_core512)

/* silu(g) u = g / (1 + e^-g) u in eight lanes, e^-g by exp8 (exp8_exact_avx2 or
 * exp8_exact_avx512): the scalar form's operations on the same values, so its
 * bits; g clamped to at most limit and u to [-limit, limit] where clamp is
 * set. The row: eight at a time, the last n % 8 through an 8-lane copy (each
 * lane's arithmetic is its own, so an element's bits do not depend on n or on
 * where its row starts). And e^x over a row, the tail one at a time. */
#    define SILU_ROWS(suffix, exp8)                                                                \
        TARGET_##suffix static inline __m256 silu_mul8_##suffix(__m256 g, __m256 u, int clamp,     \
                                                                __m256 limit)                      \
        {                                                                                          \
            if (clamp) {                                                                           \
                /* (min_ps and max_ps return their second operand where one is                     \
                 * NaN: a NaN g becomes the limit and a NaN u stays NaN, as the                    \
                 * scalar form's comparisons do) */                                                \
                g = _mm256_min_ps(g, limit);                                                       \
                u = _mm256_max_ps(_mm256_sub_ps(_mm256_setzero_ps(), limit),                       \
                                  _mm256_min_ps(limit, u));                                        \
            }                                                                                      \
            const __m256 e = exp8(_mm256_sub_ps(_mm256_setzero_ps(), g));                          \
            return _mm256_mul_ps(_mm256_div_ps(g, _mm256_add_ps(_mm256_set1_ps(1.0f), e)), u);     \
        }                                                                                          \
        TARGET_##suffix static void silu_mul_rows_##suffix(float *gate, const float *up,           \
                                                           int64_t n, int clamp, float limit)      \
        {                                                                                          \
            const __m256 lim = _mm256_set1_ps(limit);                                              \
            int64_t i = 0;                                                                         \
            for (; i + 8 <= n; i += 8)                                                             \
                _mm256_storeu_ps(gate + i,                                                         \
                                 silu_mul8_##suffix(_mm256_loadu_ps(gate + i),                     \
                                                    _mm256_loadu_ps(up + i), clamp, lim));         \
            if (i < n) {                                                                           \
                float g[8] = {0}, u[8] = {0};                                                      \
                memcpy(g, gate + i, (size_t)(n - i) * sizeof *g);                                  \
                memcpy(u, up + i, (size_t)(n - i) * sizeof *u);                                    \
                _mm256_storeu_ps(                                                                  \
                    g, silu_mul8_##suffix(_mm256_loadu_ps(g), _mm256_loadu_ps(u), clamp, lim));    \
                memcpy(gate + i, g, (size_t)(n - i) * sizeof *g);                                  \
            }                                                                                      \
        }                                                                                          \
        TARGET_##suffix static void exp_rows_##suffix(const float *x, float *y, int64_t n)         \
        {                                                                                          \
            int64_t i = 0;                                                                         \
            for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, exp8(_mm256_loadu_ps(x + i)));      \
            for (; i < n; i++) y[i] = exp1_exact(x[i]);                                            \
        }
SILU_ROWS(avx2, exp8_exact_avx2)
SILU_ROWS(avx512, exp8_exact_avx512)

/* 2 AVX-512F, 1 AVX2 (with FMA), 0 neither: libm's expf. */
static int exp_level(void)
{
    if (cpu_has_avx512f() && !cpu_exp_avx2_only) return 2;
    return cpu_has_avx2() ? 1 : 0;
}
#    define HAVE_EXACT_EXP 1
#endif

void cpu_exp_rows(const float *x, float *y, int64_t n)
{
#ifdef HAVE_EXACT_EXP
    switch (exp_level()) {
    case 2: exp_rows_avx512(x, y, n); return;
    case 1: exp_rows_avx2(x, y, n); return;
    default: break;
    }
#endif
    for (int64_t i = 0; i < n; i++) y[i] = expf(x[i]);
}

void cpu_silu_mul(float *gate, const float *up, int64_t n)
{
#ifdef HAVE_EXACT_EXP
    switch (exp_level()) {
    case 2: silu_mul_rows_avx512(gate, up, n, 0, 0.0f); return;
    case 1: silu_mul_rows_avx2(gate, up, n, 0, 0.0f); return;
    default: break;
    }
#endif
    for (int64_t i = 0; i < n; i++) gate[i] = gate[i] / (1.0f + expf(-gate[i])) * up[i];
}

void cpu_silu_mul_clamp(float *gate, const float *up, int64_t n, float limit)
{
#ifdef HAVE_EXACT_EXP
    switch (exp_level()) {
    case 2: silu_mul_rows_avx512(gate, up, n, 1, limit); return;
    case 1: silu_mul_rows_avx2(gate, up, n, 1, limit); return;
    default: break;
    }
#endif
    for (int64_t i = 0; i < n; i++) {
        float g = gate[i] < limit ? gate[i] : limit;
        float u = up[i] < -limit ? -limit : up[i] > limit ? limit : up[i];
        gate[i] = g / (1.0f + expf(-g)) * u;
    }
}
