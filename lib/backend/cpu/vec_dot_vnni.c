/* AVX512-VNNI (256-bit, AVX512VL) versions of the 8-bit block dot products:
 * vpdpbusd does the u8 x s8 multiply and the 4-way sum in one instruction where
 * AVX2 needs vpmaddubsw + vpmaddwd. (Not for the K-quants: their sub-block
 * scales multiply int16 pair sums, and a vpdpwssd version measured slower than
 * AVX2's vpmaddwd + vpaddd here.) The integer sums are exact either way, and
 * the float arithmetic around them is the AVX2 kernels', so results are
 * bit-identical to vec_dot_avx2.c (tested). Chosen at run time. */
#include <stddef.h>

#include "backend/cpu/vec_dot.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#    include <immintrin.h>

#    define VNNI __attribute__((target("avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512vnni")))

int cpu_has_avx512_vnni(void)
{
    static int known; /* a constant of the machine: 0 unknown, 1 no, 2 yes */
    int v = __atomic_load_n(&known, __ATOMIC_RELAXED);
    if (v == 0) {
        __builtin_cpu_init();
        v = cpu_has_avx2() && __builtin_cpu_supports("avx512f") &&
                    __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bw") &&
                    __builtin_cpu_supports("avx512vnni")
                ? 2
                : 1;
        __atomic_store_n(&known, v, __ATOMIC_RELAXED);
    }
    return v == 2;
}

VNNI static inline float hsum_ps(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

VNNI static inline float f16(uint16_t h)
{
    return _cvtsh_ss(h);
}

VNNI static inline __m256i unpack_nibbles(const uint8_t *qs)
{
    __m128i b = _mm_loadu_si128((const __m128i *)qs);
    __m128i m = _mm_set1_epi8(0x0f);
    return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(b, 4), m), _mm_and_si128(b, m));
}

VNNI static inline __m256i dot_u8s8(__m256i u, __m256i s)
{
    return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s);
}

VNNI static void dot_q8_0(int64_t n, float *s, const void *w, const void *a)
{
    const block_q8_0 *x = w, *y = a;
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK8_0; i++) {
        __m256i qx = _mm256_loadu_si256((const __m256i *)x[i].qs);
        __m256i qy = _mm256_loadu_si256((const __m256i *)y[i].qs);
        __m256 d = _mm256_set1_ps(f16(x[i].d) * f16(y[i].d));
        __m256i p = dot_u8s8(_mm256_sign_epi8(qx, qx), _mm256_sign_epi8(qy, qx));
        acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(p), acc);
    }
    *s = hsum_ps(acc);
}

VNNI static void dot_q4_0(int64_t n, float *s, const void *w, const void *a)
{
    const block_q4_0 *x = w;
    const block_q8_0 *y = a;
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK4_0; i++) {
        __m256i qx = _mm256_sub_epi8(unpack_nibbles(x[i].qs), _mm256_set1_epi8(8));
        __m256i qy = _mm256_loadu_si256((const __m256i *)y[i].qs);
        __m256 d = _mm256_set1_ps(f16(x[i].d) * f16(y[i].d));
        __m256i p = dot_u8s8(_mm256_sign_epi8(qx, qx), _mm256_sign_epi8(qy, qx));
        acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(p), acc);
    }
    *s = hsum_ps(acc);
}

VNNI static void dot_q4_1(int64_t n, float *s, const void *w, const void *a)
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

#    define ROW(r, T) ((const T *)((const char *)a + (size_t)(r)*stride))

VNNI static void dot4_q8_0(int64_t n, float *s, const void *w, const void *a, size_t stride)
{
    const block_q8_0 *x = w;
    __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                     _mm256_setzero_ps()};
    for (int64_t i = 0; i < n / QK8_0; i++) {
        __m256i qx = _mm256_loadu_si256((const __m256i *)x[i].qs);
        __m256i ax = _mm256_sign_epi8(qx, qx);
        float dx = f16(x[i].d);
        for (int r = 0; r < 4; r++) {
            const block_q8_0 *y = ROW(r, block_q8_0) + i;
            __m256i qy = _mm256_sign_epi8(_mm256_loadu_si256((const __m256i *)y->qs), qx);
            __m256 d = _mm256_set1_ps(dx * f16(y->d));
            acc[r] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(dot_u8s8(ax, qy)), acc[r]);
        }
    }
    for (int r = 0; r < 4; r++) s[r] = hsum_ps(acc[r]);
}

VNNI static void dot4_q4_1(int64_t n, float *s, const void *w, const void *a, size_t stride)
{
    const block_q4_1 *x = w;
    __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                     _mm256_setzero_ps()};
    float summ[4] = {0, 0, 0, 0};
    for (int64_t i = 0; i < n / QK4_1; i++) {
        __m256i qx = unpack_nibbles(x[i].qs);
        float dx = f16(x[i].d), mx = f16(x[i].m);
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

/* Two weight rows x four activation rows (prefill, cpu_vec_dot2x4_fn): each
 * activation block is loaded and its scales widened once for both rows, each
 * weight block unpacked once for the four tokens; every (row, token) sum is
 * the one-row kernel's, in the same order (bit-identical). s[r * 4 + t]. */
VNNI static void dot2x4_q4_1(int64_t n, float *s, const void *w, size_t w_stride, const void *a,
                             size_t stride)
{
    const block_q4_1 *x0 = w, *x1 = (const block_q4_1 *)((const char *)w + w_stride);
    __m256 acc[8];
    float summ[8];
    for (int k = 0; k < 8; k++) {
        acc[k] = _mm256_setzero_ps();
        summ[k] = 0;
    }
    for (int64_t i = 0; i < n / QK4_1; i++) {
        __m256i q0 = unpack_nibbles(x0[i].qs), q1 = unpack_nibbles(x1[i].qs);
        float d0 = f16(x0[i].d), m0 = f16(x0[i].m), d1 = f16(x1[i].d), m1 = f16(x1[i].m);
        for (int t = 0; t < 4; t++) {
            const block_q8_1 *y = ROW(t, block_q8_1) + i;
            __m256i qy = _mm256_loadu_si256((const __m256i *)y->qs);
            float dy = f16(y->d), sy = f16(y->s);
            acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(d0 * dy), _mm256_cvtepi32_ps(dot_u8s8(q0, qy)),
                                     acc[t]);
            acc[4 + t] = _mm256_fmadd_ps(_mm256_set1_ps(d1 * dy),
                                         _mm256_cvtepi32_ps(dot_u8s8(q1, qy)), acc[4 + t]);
            summ[t] += m0 * sy;
            summ[4 + t] += m1 * sy;
        }
    }
    for (int k = 0; k < 8; k++) s[k] = hsum_ps(acc[k]) + summ[k];
}

cpu_vec_dot2x4_fn cpu_vec_dot2x4_vnni(model_dtype dtype)
{
    if (!cpu_has_avx512_vnni()) return NULL;
    return dtype == MODEL_DTYPE_Q4_1 ? dot2x4_q4_1 : NULL;
}

cpu_vec_dot_fn cpu_vec_dot_vnni(model_dtype dtype)
{
    if (!cpu_has_avx512_vnni()) return NULL;
    switch (dtype) {
    case MODEL_DTYPE_Q8_0: return dot_q8_0;
    case MODEL_DTYPE_Q4_0: return dot_q4_0;
    case MODEL_DTYPE_Q4_1: return dot_q4_1;
    default: return NULL;
    }
}

cpu_vec_dot4_fn cpu_vec_dot4_vnni(model_dtype dtype)
{
    if (!cpu_has_avx512_vnni()) return NULL;
    switch (dtype) {
    case MODEL_DTYPE_Q8_0: return dot4_q8_0;
    case MODEL_DTYPE_Q4_1: return dot4_q4_1;
    default: return NULL;
    }
}

#else

int cpu_has_avx512_vnni(void)
{
    return 0;
}
cpu_vec_dot_fn cpu_vec_dot_vnni(model_dtype dtype)
{
    (void)dtype;
    return NULL;
}
cpu_vec_dot4_fn cpu_vec_dot4_vnni(model_dtype dtype)
{
    (void)dtype;
    return NULL;
}

#endif
