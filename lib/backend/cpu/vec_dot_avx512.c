/* AVX-512F dot products for F32, F16 and BF16 weights against f32
 * activations (vec_dot.h): one kernel body for a tile of up to 4 weight rows x
 * 4 tokens, so prefill keeps 16 sums in registers (each weight vector widened
 * once for four tokens, each activation vector loaded once for four rows) and
 * decode walks four rows at a time (four independent multiply-add chains
 * streaming the weights).
 *
 * Bit-identical to the AVX2 kernels (vec_dot_avx2.c): their two 8-lane
 * accumulators take elements i..i+7 and i+8..i+15 of each 16, which are lanes
 * 0-7 and 8-15 of one 16-lane accumulator here, with the same fused
 * multiply-add per element; the end adds the two halves and takes the same
 * horizontal sum, then the same scalar tail. So every (row, token) result is
 * the one-row AVX2 kernel's whatever the tile shape (a NaN result is NaN on
 * both, but where two NaNs meet its sign and payload may differ: the compiler
 * orders a commutative add's operands either way), and a row's logits do not
 * depend on its batch or on which of these paths a product took. Chosen at run
 * time (cpu_has_avx512f). Roofline: decode reads the weight bytes once (2 or 4
 * per element); prefill does 16 multiply-adds per widened weight vector. */
#include <stddef.h>

#include "backend/cpu/quant.h"
#include "backend/cpu/vec_dot.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#    include "backend/cpu/vec_dot_avx2.h"

#    define AVX512        __attribute__((target("avx2,fma,f16c,avx512f")))
#    define INLINE_ALWAYS inline __attribute__((always_inline))
#    define UNROLL        _Pragma("GCC unroll 4")

int cpu_has_avx512f(void)
{
    static int known; /* a constant of the machine: 0 unknown, 1 no, 2 yes */
    int v = __atomic_load_n(&known, __ATOMIC_RELAXED);
    if (v == 0) {
        __builtin_cpu_init();
        v = cpu_has_avx2() && __builtin_cpu_supports("avx512f") ? 2 : 1;
        __atomic_store_n(&known, v, __ATOMIC_RELAXED);
    }
    return v == 2;
}

/* Lanes 0-7 plus lanes 8-15, then the AVX2 kernels' horizontal sum. */
AVX512 static INLINE_ALWAYS float hsum512(__m512 v)
{
    __m256 lo = _mm512_castps512_ps256(v);
    __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1));
    return hsum_ps(_mm256_add_ps(lo, hi));
}

AVX512 static INLINE_ALWAYS __m512 load16_f32(const void *p, int64_t i)
{
    return _mm512_loadu_ps((const float *)p + i);
}
AVX512 static INLINE_ALWAYS __m512 load16_f16(const void *p, int64_t i)
{
    return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)((const uint16_t *)p + i)));
}
AVX512 static INLINE_ALWAYS __m512 load16_bf16(const void *p, int64_t i)
{
    __m512i v =
        _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)((const uint16_t *)p + i)));
    return _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
}
static INLINE_ALWAYS float scalar_f32(const void *p, int64_t i)
{
    return ((const float *)p)[i];
}
AVX512 static INLINE_ALWAYS float scalar_f16(const void *p, int64_t i)
{
    return f16(((const uint16_t *)p)[i]);
}
static INLINE_ALWAYS float scalar_bf16(const void *p, int64_t i)
{
    return cpu_bf16_to_f32(((const uint16_t *)p)[i]);
}

enum { PF_SCALE_f32 = 2, PF_SCALE_f16 = 1, PF_SCALE_bf16 = 1 };

/* The tile: R rows x T tokens (compile-time constants once inlined). */
#    define FLOAT_TILE(sfx)                                                                        \
        AVX512 static INLINE_ALWAYS void tile_##sfx(int64_t n, float *s, const char *w,            \
                                                    size_t w_stride, const char *a, size_t stride, \
                                                    const int R, const int T)                      \
        {                                                                                          \
            __m512 acc[4][4];                                                                      \
            UNROLL for (int r = 0; r < R; r++) UNROLL for (int t = 0; t < T; t++) acc[r][t] =      \
                _mm512_setzero_ps();                                                               \
            int64_t i = 0;                                                                         \
            for (; i + 16 <= n; i += 16) {                                                         \
                __m512 y[4];                                                                       \
                UNROLL for (int t = 0; t < T; t++) y[t] =                                          \
                    _mm512_loadu_ps((const float *)(a + (size_t)t * stride) + i);                  \
                UNROLL for (int r = 0; r < R; r++)                                                 \
                {                                                                                  \
                    if (T == 1 && R == 4)                                                          \
                        _mm_prefetch((const char *)(w + (size_t)(r + 4) * w_stride) +              \
                                         i * (int64_t)sizeof(float) / 2 * PF_SCALE_##sfx,          \
                                     _MM_HINT_T0);                                                 \
                    __m512 x = load16_##sfx(w + (size_t)r * w_stride, i);                          \
                    UNROLL for (int t = 0; t < T; t++) acc[r][t] =                                 \
                        _mm512_fmadd_ps(x, y[t], acc[r][t]);                                       \
                }                                                                                  \
            }                                                                                      \
            UNROLL for (int r = 0; r < R; r++) UNROLL for (int t = 0; t < T; t++)                  \
            {                                                                                      \
                const char *x = w + (size_t)r * w_stride;                                          \
                const float *y = (const float *)(a + (size_t)t * stride);                          \
                float sum = hsum512(acc[r][t]);                                                    \
                for (int64_t k = i; k < n; k++) sum += scalar_##sfx(x, k) * y[k];                  \
                s[r * 4 + t] = sum;                                                                \
            }                                                                                      \
        }                                                                                          \
        AVX512 static void dot_tile_##sfx(int64_t n, float *s, const void *w, size_t w_stride,     \
                                          int n_rows, const void *a, size_t stride, int n_tok)     \
        {                                                                                          \
            if (n_rows == 4 && n_tok == 4)                                                         \
                tile_##sfx(n, s, w, w_stride, a, stride, 4, 4);                                    \
            else if (n_rows == 4)                                                                  \
                tile_##sfx(n, s, w, w_stride, a, stride, 4, 1);                                    \
            else if (n_tok == 4)                                                                   \
                tile_##sfx(n, s, w, w_stride, a, stride, 1, 4);                                    \
            else                                                                                   \
                tile_##sfx(n, s, w, w_stride, a, stride, 1, 1);                                    \
        }                                                                                          \
        AVX512 static void dot1_##sfx(int64_t n, float *s, const void *w, const void *a)           \
        {                                                                                          \
            float s16[16];                                                                         \
            tile_##sfx(n, s16, w, 0, a, 0, 1, 1);                                                  \
            *s = s16[0];                                                                           \
        }                                                                                          \
        AVX512 static void dot4_##sfx(int64_t n, float *s, const void *w, const void *a,           \
                                      size_t stride)                                               \
        {                                                                                          \
            float s16[16];                                                                         \
            tile_##sfx(n, s16, w, 0, a, stride, 1, 4);                                             \
            for (int t = 0; t < 4; t++) s[t] = s16[t];                                             \
        }

FLOAT_TILE(f32)
FLOAT_TILE(f16)
FLOAT_TILE(bf16)

cpu_vec_dot_tile_fn cpu_vec_dot_tile_avx512(model_dtype dtype)
{
    if (!cpu_has_avx512f()) return NULL;
    switch (dtype) {
    case MODEL_DTYPE_F32: return dot_tile_f32;
    case MODEL_DTYPE_F16: return dot_tile_f16;
    case MODEL_DTYPE_BF16: return dot_tile_bf16;
    default: return NULL;
    }
}

cpu_vec_dot_fn cpu_vec_dot_avx512(model_dtype dtype)
{
    if (!cpu_has_avx512f()) return NULL;
    switch (dtype) {
    case MODEL_DTYPE_F32: return dot1_f32;
    case MODEL_DTYPE_F16: return dot1_f16;
    case MODEL_DTYPE_BF16: return dot1_bf16;
    default: return NULL;
    }
}

cpu_vec_dot4_fn cpu_vec_dot4_avx512(model_dtype dtype)
{
    if (!cpu_has_avx512f()) return NULL;
    switch (dtype) {
    case MODEL_DTYPE_F32: return dot4_f32;
    case MODEL_DTYPE_F16: return dot4_f16;
    case MODEL_DTYPE_BF16: return dot4_bf16;
    default: return NULL;
    }
}

#else

int cpu_has_avx512f(void)
{
    return 0;
}
cpu_vec_dot_tile_fn cpu_vec_dot_tile_avx512(model_dtype dtype)
{
    (void)dtype;
    return NULL;
}
cpu_vec_dot_fn cpu_vec_dot_avx512(model_dtype dtype)
{
    (void)dtype;
    return NULL;
}
cpu_vec_dot4_fn cpu_vec_dot4_avx512(model_dtype dtype)
{
    (void)dtype;
    return NULL;
}

#endif
