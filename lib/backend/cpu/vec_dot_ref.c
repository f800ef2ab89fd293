/* Scalar references of the dot products (vec_dot.h), block by block as ggml's
 * ggml_vec_dot_*_generic functions compute them: an exact integer sum per block
 * (or sub-block), scaled by the product of the f16/f32 block scales. */
#include <stddef.h>

#include "backend/cpu/matmul_amx.h"
#include "backend/cpu/vec_dot.h"

static void dot_f32(int64_t n, float *s, const void *w, const void *a)
{
    const float *x = w, *y = a;
    double sum = 0; /* ggml_vec_dot_f32's scalar path accumulates in double */
    for (int64_t i = 0; i < n; i++) sum += (double)x[i] * (double)y[i];
    *s = (float)sum;
}

static void dot_f16(int64_t n, float *s, const void *w, const void *a)
{
    const uint16_t *x = w;
    const float *y = a;
    double sum = 0;
    for (int64_t i = 0; i < n; i++) sum += (double)cpu_fp16_to_f32(x[i]) * (double)y[i];
    *s = (float)sum;
}

static void dot_bf16(int64_t n, float *s, const void *w, const void *a)
{
    const uint16_t *x = w;
    const float *y = a;
    double sum = 0;
    for (int64_t i = 0; i < n; i++) sum += (double)cpu_bf16_to_f32(x[i]) * (double)y[i];
    *s = (float)sum;
}

/* MXFP4's codes (unscaled: the caller applies each 32's scale) . f32 */
static void dot_mxfp4(int64_t n, float *s, const void *w, const void *a)
{
    const uint8_t *x = w;
    const float *y = a;
    double sum = 0;
    for (int64_t i = 0; i < n; i++)
        sum += (double)cpu_e2m1_values[(x[i / 2] >> (4 * (i & 1))) & 15] * (double)y[i];
    *s = (float)sum;
}

static void dot_fp8(int64_t n, float *s, const void *w, const void *a)
{
    const uint8_t *x = w;
    const float *y = a;
    double sum = 0;
    for (int64_t i = 0; i < n; i++) sum += (double)cpu_fp8_e4m3_to_f32(x[i]) * (double)y[i];
    *s = (float)sum;
}

static void dot_q8_0(int64_t n, float *s, const void *w, const void *a)
{
    const block_q8_0 *x = w, *y = a;
    float sum = 0;
    for (int64_t i = 0; i < n / QK8_0; i++) {
        int sumi = 0;
        for (int j = 0; j < QK8_0; j++) sumi += x[i].qs[j] * y[i].qs[j];
        sum += (float)sumi * (cpu_fp16_to_f32(x[i].d) * cpu_fp16_to_f32(y[i].d));
    }
    *s = sum;
}

static void dot_q4_0(int64_t n, float *s, const void *w, const void *a)
{
    const block_q4_0 *x = w;
    const block_q8_0 *y = a;
    float sum = 0;
    for (int64_t i = 0; i < n / QK4_0; i++) {
        int sumi = 0;
        for (int j = 0; j < 16; j++) {
            sumi += ((x[i].qs[j] & 0xf) - 8) * y[i].qs[j];
            sumi += ((x[i].qs[j] >> 4) - 8) * y[i].qs[j + 16];
        }
        sum += (float)sumi * (cpu_fp16_to_f32(x[i].d) * cpu_fp16_to_f32(y[i].d));
    }
    *s = sum;
}

static void dot_q4_1(int64_t n, float *s, const void *w, const void *a)
{
    const block_q4_1 *x = w;
    const block_q8_1 *y = a;
    float sum = 0;
    for (int64_t i = 0; i < n / QK4_1; i++) {
        int sumi = 0;
        for (int j = 0; j < 16; j++) {
            sumi += (x[i].qs[j] & 0xf) * y[i].qs[j];
            sumi += (x[i].qs[j] >> 4) * y[i].qs[j + 16];
        }
        sum += (cpu_fp16_to_f32(x[i].d) * cpu_fp16_to_f32(y[i].d)) * (float)sumi +
               cpu_fp16_to_f32(x[i].m) * cpu_fp16_to_f32(y[i].s);
    }
    *s = sum;
}

/* Element j (0..31) of a Q5_0/Q5_1 block as an unsigned 5-bit value. */
static int q5_value(const uint8_t *qs, const uint8_t qh[4], int j)
{
    int lo = j < 16 ? (qs[j] & 0xf) : (qs[j - 16] >> 4);
    return lo | (((qh[j / 8] >> (j % 8)) & 1) << 4);
}

static void dot_q5_0(int64_t n, float *s, const void *w, const void *a)
{
    const block_q5_0 *x = w;
    const block_q8_0 *y = a;
    float sum = 0;
    for (int64_t i = 0; i < n / QK5_0; i++) {
        int sumi = 0;
        for (int j = 0; j < 32; j++) sumi += (q5_value(x[i].qs, x[i].qh, j) - 16) * y[i].qs[j];
        sum += (float)sumi * (cpu_fp16_to_f32(x[i].d) * cpu_fp16_to_f32(y[i].d));
    }
    *s = sum;
}

static void dot_q5_1(int64_t n, float *s, const void *w, const void *a)
{
    const block_q5_1 *x = w;
    const block_q8_1 *y = a;
    float sum = 0;
    for (int64_t i = 0; i < n / QK5_1; i++) {
        int sumi = 0;
        for (int j = 0; j < 32; j++) sumi += q5_value(x[i].qs, x[i].qh, j) * y[i].qs[j];
        sum += (cpu_fp16_to_f32(x[i].d) * cpu_fp16_to_f32(y[i].d)) * (float)sumi +
               cpu_fp16_to_f32(x[i].m) * cpu_fp16_to_f32(y[i].s);
    }
    *s = sum;
}

static void dot_q4_K(int64_t n, float *s, const void *w, const void *a)
{
    const block_q4_K *x = w;
    const block_q8_K *y = a;
    float sum = 0;
    for (int64_t i = 0; i < n / QK_K; i++) {
        uint8_t sc[8], m[8];
        cpu_k4_scales(x[i].scales, sc, m);
        int sumi = 0, summ = 0;
        for (ptrdiff_t j = 0; j < 8; j++) {
            const uint8_t *q = x[i].qs + (j / 2) * 32;
            const int8_t *q8 = y[i].qs + j * 32;
            int d = 0;
            for (int l = 0; l < 32; l++) d += ((j & 1) ? (q[l] >> 4) : (q[l] & 0xf)) * q8[l];
            sumi += sc[j] * d;
            summ += m[j] * (y[i].bsums[2 * j] + y[i].bsums[2 * j + 1]);
        }
        float d = cpu_fp16_to_f32(x[i].d) * y[i].d;
        float dmin = cpu_fp16_to_f32(x[i].dmin) * y[i].d;
        sum += d * (float)sumi - dmin * (float)summ;
    }
    *s = sum;
}

static void dot_q5_K(int64_t n, float *s, const void *w, const void *a)
{
    const block_q5_K *x = w;
    const block_q8_K *y = a;
    float sum = 0;
    for (int64_t i = 0; i < n / QK_K; i++) {
        uint8_t sc[8], m[8];
        cpu_k4_scales(x[i].scales, sc, m);
        int sumi = 0, summ = 0;
        for (ptrdiff_t j = 0; j < 8; j++) {
            const uint8_t *q = x[i].qs + (j / 2) * 32;
            const int8_t *q8 = y[i].qs + j * 32;
            int d = 0;
            for (int l = 0; l < 32; l++) {
                int v = (j & 1) ? (q[l] >> 4) : (q[l] & 0xf);
                v += ((x[i].qh[l] >> j) & 1) << 4;
                d += v * q8[l];
            }
            sumi += sc[j] * d;
            summ += m[j] * (y[i].bsums[2 * j] + y[i].bsums[2 * j + 1]);
        }
        float d = cpu_fp16_to_f32(x[i].d) * y[i].d;
        float dmin = cpu_fp16_to_f32(x[i].dmin) * y[i].d;
        sum += d * (float)sumi - dmin * (float)summ;
    }
    *s = sum;
}

static void dot_q6_K(int64_t n, float *s, const void *w, const void *a)
{
    const block_q6_K *x = w;
    const block_q8_K *y = a;
    float sum = 0;
    for (int64_t i = 0; i < n / QK_K; i++) {
        int8_t q[QK_K];
        const uint8_t *ql = x[i].ql, *qh = x[i].qh;
        for (int h = 0; h < 2; h++) {
            for (int l = 0; l < 32; l++) {
                q[h * 128 + l] = (int8_t)((int)((ql[l] & 0xf) | ((qh[l] & 3) << 4)) - 32);
                q[h * 128 + l + 32] =
                    (int8_t)((int)((ql[l + 32] & 0xf) | (((qh[l] >> 2) & 3) << 4)) - 32);
                q[h * 128 + l + 64] =
                    (int8_t)((int)((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32);
                q[h * 128 + l + 96] =
                    (int8_t)((int)((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32);
            }
            ql += 64;
            qh += 32;
        }
        int sumi = 0;
        for (ptrdiff_t j = 0; j < 16; j++) {
            int d = 0;
            for (ptrdiff_t l = 0; l < 16; l++) d += q[j * 16 + l] * y[i].qs[j * 16 + l];
            sumi += x[i].scales[j] * d;
        }
        sum += cpu_fp16_to_f32(x[i].d) * y[i].d * (float)sumi;
    }
    *s = sum;
}

static void dot_q2_K(int64_t n, float *s, const void *w, const void *a)
{
    const block_q2_K *x = w;
    const block_q8_K *y = a;
    float sum = 0;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const uint8_t *sc = x[i].scales;
        int summs = 0, isum = 0;
        for (ptrdiff_t j = 0; j < 16; j++) summs += y[i].bsums[j] * (sc[j] >> 4);
        for (ptrdiff_t j = 0; j < 16; j++) {
            /* sub-block j: 16 elements of qs[32 * (j / 8) + 16 * (j % 2) ...],
             * shifted by 2 * ((j / 2) % 4) */
            const uint8_t *q = x[i].qs + 32 * (j / 8) + 16 * (j % 2);
            int shift = 2 * (int)((j / 2) % 4), d = 0;
            for (ptrdiff_t l = 0; l < 16; l++) d += y[i].qs[j * 16 + l] * ((q[l] >> shift) & 3);
            isum += (sc[j] & 0xf) * d;
        }
        float dall = y[i].d * cpu_fp16_to_f32(x[i].d);
        float dmin = y[i].d * cpu_fp16_to_f32(x[i].dmin);
        sum += dall * (float)isum - dmin * (float)summs;
    }
    *s = sum;
}

static void dot_q3_K(int64_t n, float *s, const void *w, const void *a)
{
    const block_q3_K *x = w;
    const block_q8_K *y = a;
    float sum = 0;
    for (int64_t i = 0; i < n / QK_K; i++) {
        int8_t sc[16];
        cpu_k3_scales(x[i].scales, sc);
        int isum = 0;
        for (ptrdiff_t j = 0; j < 16; j++) {
            const uint8_t *q = x[i].qs + 32 * (j / 8) + 16 * (j % 2);
            const uint8_t *hm = x[i].hmask + 16 * (j % 2);
            int shift = 2 * (int)((j / 2) % 4), bit = (int)(j / 2), d = 0;
            for (ptrdiff_t l = 0; l < 16; l++) {
                int v = ((q[l] >> shift) & 3) - (((hm[l] >> bit) & 1) ? 0 : 4);
                d += y[i].qs[j * 16 + l] * v;
            }
            isum += sc[j] * d;
        }
        sum += cpu_fp16_to_f32(x[i].d) * y[i].d * (float)isum;
    }
    *s = sum;
}

static void dot_iq4_nl(int64_t n, float *s, const void *w, const void *a)
{
    const block_iq4_nl *x = w;
    const block_q8_0 *y = a;
    float sum = 0;
    for (int64_t i = 0; i < n / QK4_NL; i++) {
        int sumi = 0;
        for (int j = 0; j < 16; j++) {
            sumi += cpu_iq4nl_values[x[i].qs[j] & 0xf] * y[i].qs[j];
            sumi += cpu_iq4nl_values[x[i].qs[j] >> 4] * y[i].qs[j + 16];
        }
        sum += (float)sumi * (cpu_fp16_to_f32(x[i].d) * cpu_fp16_to_f32(y[i].d));
    }
    *s = sum;
}

static void dot_iq4_xs(int64_t n, float *s, const void *w, const void *a)
{
    const block_iq4_xs *x = w;
    const block_q8_K *y = a;
    float sum = 0;
    for (int64_t i = 0; i < n / QK_K; i++) {
        int8_t sc[8];
        cpu_iq4xs_scales(&x[i], sc);
        int isum = 0;
        for (ptrdiff_t ib = 0; ib < 8; ib++) {
            const uint8_t *qs = x[i].qs + ib * 16;
            const int8_t *q8 = y[i].qs + ib * 32;
            int d = 0;
            for (ptrdiff_t j = 0; j < 16; j++) {
                d += cpu_iq4nl_values[qs[j] & 0xf] * q8[j];
                d += cpu_iq4nl_values[qs[j] >> 4] * q8[j + 16];
            }
            isum += sc[ib] * d;
        }
        sum += cpu_fp16_to_f32(x[i].d) * y[i].d * (float)isum;
    }
    *s = sum;
}

cpu_vec_dot_fn cpu_vec_dot_ref(model_dtype dtype)
{
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
    case MODEL_DTYPE_Q2_K: return dot_q2_K;
    case MODEL_DTYPE_Q3_K: return dot_q3_K;
    case MODEL_DTYPE_IQ4_NL: return dot_iq4_nl;
    case MODEL_DTYPE_IQ4_XS: return dot_iq4_xs;
    default: return NULL;
    }
}

cpu_vec_dot_fn cpu_vec_dot(model_dtype dtype)
{
    cpu_vec_dot_fn f = cpu_vec_dot_vnni(dtype);
    if (!f) f = cpu_vec_dot_avx512(dtype);
    if (!f) f = cpu_vec_dot_avx2(dtype);
    return f ? f : cpu_vec_dot_ref(dtype);
}

/* The kernel families, named as the kernels line and di_cpu_kernels say them. */
#define K_AMX_INT8                                                                                 \
    "amx-int8 (prefill tiles of 16 rows x 16 tokens: "                                             \
    "Q8_0/Q4_0/Q4_1/Q5_0/Q5_1/IQ4_NL/Q2_K/Q3_K/Q4_K/Q5_K/Q6_K/IQ4_XS)"
#define K_AMX_BF16 "amx-bf16 (BF16 products, prefill and decode)"
#define K_PACKED   "packed 8-row Q8_0/Q4_0/Q4_1/Q5_0/Q5_1/Q2_K/Q3_K/Q4_K/Q5_K/Q6_K/IQ4_NL/IQ4_XS"
#define K_VNNI     "avx512-vnni (8-bit products; " K_PACKED ", 16 rows a pass at prefill)"
#define K_TILES(t) "avx512f (" t " tiles of 4 rows x 4 tokens)"
#define K_AVX2     "avx2+fma+f16c (the rest)"
#define K_ASK      " (AMX: the tile state is asked of Linux at the first product that uses it)"

const char *cpu_kernels_describe(void)
{
    const int amx = cpu_amx_possible() ? cpu_amx_asked() : 0; /* -1: not asked yet */
    if (amx != 0) {
        if (cpu_amx_bf16_possible())
            return amx > 0 ? K_AMX_INT8 ", " K_AMX_BF16 ", " K_VNNI
                                        ", " K_TILES("F32/F16") ", " K_AVX2
                           : K_AMX_INT8 ", " K_AMX_BF16 ", " K_VNNI
                                        ", " K_TILES("F32/F16") ", " K_AVX2 K_ASK;
        return amx > 0 ? K_AMX_INT8 ", " K_VNNI ", " K_TILES("F32/F16/BF16") ", " K_AVX2
                       : K_AMX_INT8 ", " K_VNNI ", " K_TILES("F32/F16/BF16") ", " K_AVX2 K_ASK;
    }
    if (cpu_has_avx512_vnni()) return K_VNNI ", " K_TILES("F32/F16/BF16") ", " K_AVX2;
    if (cpu_has_avx512f())
        return K_TILES("F32/F16/BF16") ", avx2+fma+f16c (" K_PACKED
                                       " too; no avx512-vnni on this CPU)";
    if (cpu_has_avx2()) return "avx2+fma+f16c (" K_PACKED " too; no avx512-vnni on this CPU)";
    return "scalar reference (no avx2 on this CPU)";
}

const char *cpu_kernels_name(void)
{
    (void)cpu_has_amx(); /* (asks, so the line says what the products take) */
    return cpu_kernels_describe();
}

static void dot_mxfp4_scaled_ref(int64_t n, float *s, const void *w, const float *scales,
                                 const void *a, size_t stride, int n_rows)
{
    const uint8_t *x = w;
    for (int r = 0; r < n_rows; r++) {
        const float *y = (const float *)((const char *)a + (size_t)r * stride);
        float sum = 0;
        for (int64_t i = 0; i < n; i += 32) {
            float blk = 0;
            for (int64_t k = i; k < n && k < i + 32; k++)
                blk += cpu_e2m1_values[(x[k / 2] >> (4 * (k & 1))) & 15] * y[k];
            sum += blk * scales[i / 32];
        }
        s[r] = sum;
    }
}

cpu_vec_dot_mxfp4_fn cpu_vec_dot_mxfp4_ref(void)
{
    return dot_mxfp4_scaled_ref;
}

cpu_vec_dot_mxfp4_fn cpu_vec_dot_mxfp4(void)
{
    cpu_vec_dot_mxfp4_fn f = cpu_vec_dot_mxfp4_avx2();
    return f ? f : dot_mxfp4_scaled_ref;
}

cpu_vec_dot4_fn cpu_vec_dot4(model_dtype dtype)
{
    cpu_vec_dot4_fn f = cpu_vec_dot4_vnni(dtype);
    if (!f) f = cpu_vec_dot4_avx512(dtype);
    return f ? f : cpu_vec_dot4_avx2(dtype);
}

void cpu_quantize_row(int dtype, const float *x, void *y, int64_t n)
{
    if (!cpu_quantize_row_avx2(dtype, x, y, n)) cpu_quantize_row_ref(dtype, x, y, n);
}
