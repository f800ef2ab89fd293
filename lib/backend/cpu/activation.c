/* Softmax and the SiLU-gated MLP activation (ops.h). */
#include <math.h>

#include "backend/cpu/ops.h"

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

/* silu(g) u, the formula both forms compute: g / (1 + e^-g) * u. */
static float silu_mul1(float g, float u)
{
    return g / (1.0f + expf(-g)) * u;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#    include "backend/cpu/avx2_math.h"
#    include "backend/cpu/vec_dot.h"

/* Eight lanes of g / (1 + e^-g) u, e^x by exp_ps (within 2 ulp of expf where
 * it does not overflow), g clamped to at most limit and u to [-limit, limit]
 * where clamp is set. */
AVX2 static inline __m256 silu_mul8(__m256 g, __m256 u, int clamp, __m256 limit)
{
    if (clamp) {
        /* (min_ps and max_ps return their second operand where one is NaN:
         * a NaN g becomes the limit and a NaN u stays NaN, as the scalar
         * form's comparisons do) */
        g = _mm256_min_ps(g, limit);
        u = _mm256_max_ps(_mm256_sub_ps(_mm256_setzero_ps(), limit), _mm256_min_ps(limit, u));
    }
    /* e^-g: exp_ps saturates from 88.3, so a gate below -88.3 takes +inf, as
     * expf's overflow gives the scalar form (-0 for a finite gate, NaN for
     * -inf) */
    __m256 e = exp_ps(_mm256_sub_ps(_mm256_setzero_ps(), g));
    e = _mm256_blendv_ps(e, _mm256_set1_ps(INFINITY),
                         _mm256_cmp_ps(g, _mm256_set1_ps(-88.3f), _CMP_LT_OQ));
    return _mm256_mul_ps(_mm256_div_ps(g, _mm256_add_ps(_mm256_set1_ps(1.0f), e)), u);
}

/* The whole row eight at a time; the last n % 8 through an 8-lane copy, so
 * every element takes the same arithmetic wherever it lies (a row's results
 * do not depend on how the threads split it, or on the batch). */
AVX2 static void silu_mul_avx2(float *gate, const float *up, int64_t n, int clamp, float limit)
{
    const __m256 lim = _mm256_set1_ps(limit);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(gate + i,
                         silu_mul8(_mm256_loadu_ps(gate + i), _mm256_loadu_ps(up + i), clamp, lim));
    if (i < n) {
        float g[8] = {0}, u[8] = {0};
        memcpy(g, gate + i, (size_t)(n - i) * sizeof *g);
        memcpy(u, up + i, (size_t)(n - i) * sizeof *u);
        _mm256_storeu_ps(g, silu_mul8(_mm256_loadu_ps(g), _mm256_loadu_ps(u), clamp, lim));
        memcpy(gate + i, g, (size_t)(n - i) * sizeof *g);
    }
}
#endif

void cpu_silu_mul(float *gate, const float *up, int64_t n)
{
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    if (cpu_has_avx2()) {
        silu_mul_avx2(gate, up, n, 0, 0.0f);
        return;
    }
#endif
    for (int64_t i = 0; i < n; i++) gate[i] = silu_mul1(gate[i], up[i]);
}

void cpu_silu_mul_clamp(float *gate, const float *up, int64_t n, float limit)
{
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    if (cpu_has_avx2()) {
        silu_mul_avx2(gate, up, n, 1, limit);
        return;
    }
#endif
    for (int64_t i = 0; i < n; i++) {
        float g = gate[i] < limit ? gate[i] : limit;
        float u = up[i] < -limit ? -limit : up[i] > limit ? limit : up[i];
        gate[i] = silu_mul1(g, u);
    }
}
