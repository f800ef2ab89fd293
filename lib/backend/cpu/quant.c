/* Scalar references for the block formats (quant.h). Layouts and rounding follow
 * ggml's ggml-quants.c reference functions (dequantize_row_*, quantize_row_q8_*_ref);
 * the code is ours. */
#include "backend/cpu/quant.h"

#include <float.h>
#include <math.h>
#include <string.h>

_Static_assert(sizeof(block_q4_0) == 18, "block_q4_0 layout");
_Static_assert(sizeof(block_q4_1) == 20, "block_q4_1 layout");
_Static_assert(sizeof(block_q5_0) == 22, "block_q5_0 layout");
_Static_assert(sizeof(block_q5_1) == 24, "block_q5_1 layout");
_Static_assert(sizeof(block_q8_0) == 34, "block_q8_0 layout");
_Static_assert(sizeof(block_q8_1) == 36, "block_q8_1 layout");
_Static_assert(sizeof(block_q4_K) == 144, "block_q4_K layout");
_Static_assert(sizeof(block_q5_K) == 176, "block_q5_K layout");
_Static_assert(sizeof(block_q6_K) == 210, "block_q6_K layout");
_Static_assert(sizeof(block_q8_K) == 292, "block_q8_K layout");
_Static_assert(sizeof(block_q2_K) == 84, "block_q2_K layout");
_Static_assert(sizeof(block_q3_K) == 110, "block_q3_K layout");
_Static_assert(sizeof(block_iq4_nl) == 18, "block_iq4_nl layout");
_Static_assert(sizeof(block_iq4_xs) == 136, "block_iq4_xs layout");

const float cpu_e2m1_values[16] = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
                                   -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};

const int8_t cpu_iq4nl_values[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                     1,    13,   25,  38,  53,  69,  89,  113};

int cpu_dtype_block_elems(int dtype)
{
    switch (dtype) {
    case MODEL_DTYPE_F32:
    case MODEL_DTYPE_F16:
    case MODEL_DTYPE_BF16:
    case MODEL_DTYPE_FP8_E4M3: return 1;
    case MODEL_DTYPE_Q8_0:
    case MODEL_DTYPE_Q4_0:
    case MODEL_DTYPE_Q4_1:
    case MODEL_DTYPE_Q5_0:
    case MODEL_DTYPE_Q5_1:
    case MODEL_DTYPE_IQ4_NL:
    case MODEL_DTYPE_MXFP4:
    case CPU_DTYPE_Q8_1: return 32;
    case MODEL_DTYPE_Q2_K:
    case MODEL_DTYPE_Q3_K:
    case MODEL_DTYPE_IQ4_XS:
    case MODEL_DTYPE_Q4_K:
    case MODEL_DTYPE_Q5_K:
    case MODEL_DTYPE_Q6_K:
    case CPU_DTYPE_Q8_K: return QK_K;
    default: return 0;
    }
}

size_t cpu_dtype_block_bytes(int dtype)
{
    switch (dtype) {
    case MODEL_DTYPE_F32: return 4;
    case MODEL_DTYPE_F16:
    case MODEL_DTYPE_BF16: return 2;
    case MODEL_DTYPE_FP8_E4M3: return 1;
    case MODEL_DTYPE_Q8_0: return sizeof(block_q8_0);
    case MODEL_DTYPE_Q4_0: return sizeof(block_q4_0);
    case MODEL_DTYPE_Q4_1: return sizeof(block_q4_1);
    case MODEL_DTYPE_Q5_0: return sizeof(block_q5_0);
    case MODEL_DTYPE_Q5_1: return sizeof(block_q5_1);
    case CPU_DTYPE_Q8_1: return sizeof(block_q8_1);
    case MODEL_DTYPE_Q4_K: return sizeof(block_q4_K);
    case MODEL_DTYPE_Q5_K: return sizeof(block_q5_K);
    case MODEL_DTYPE_Q6_K: return sizeof(block_q6_K);
    case CPU_DTYPE_Q8_K: return sizeof(block_q8_K);
    case MODEL_DTYPE_Q2_K: return sizeof(block_q2_K);
    case MODEL_DTYPE_Q3_K: return sizeof(block_q3_K);
    case MODEL_DTYPE_IQ4_NL: return sizeof(block_iq4_nl);
    case MODEL_DTYPE_IQ4_XS: return sizeof(block_iq4_xs);
    case MODEL_DTYPE_MXFP4: return 16;
    default: return 0;
    }
}

size_t cpu_row_bytes(int dtype, int64_t n)
{
    int be = cpu_dtype_block_elems(dtype);
    if (be == 0) return 0;
    return (size_t)(n / be) * cpu_dtype_block_bytes(dtype);
}

int cpu_vec_dot_type(model_dtype weight)
{
    switch (weight) {
    case MODEL_DTYPE_Q8_0:
    case MODEL_DTYPE_Q4_0:
    case MODEL_DTYPE_Q5_0:
    case MODEL_DTYPE_IQ4_NL: return MODEL_DTYPE_Q8_0;
    case MODEL_DTYPE_Q4_1:
    case MODEL_DTYPE_Q5_1: return CPU_DTYPE_Q8_1;
    case MODEL_DTYPE_Q4_K:
    case MODEL_DTYPE_Q5_K:
    case MODEL_DTYPE_Q6_K:
    case MODEL_DTYPE_Q2_K:
    case MODEL_DTYPE_Q3_K:
    case MODEL_DTYPE_IQ4_XS: return CPU_DTYPE_Q8_K;
    case MODEL_DTYPE_F32:
    case MODEL_DTYPE_F16:  /* f32 activations: llama.cpp rounds them to f16/bf16, */
    case MODEL_DTYPE_BF16: /* transformers does not; f32 is closer to both */
    case MODEL_DTYPE_FP8_E4M3:
    default: return MODEL_DTYPE_F32;
    }
}

static uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static float bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

float cpu_fp16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t man = h & 0x3ffu;
    if (exp == 0x1f) return bits_f32(sign | 0x7f800000u | (man << 13)); /* inf, NaN */
    if (exp == 0) {
        if (man == 0) return bits_f32(sign);
        /* subnormal: man * 2^-24 */
        float v = (float)man * 0x1p-24f;
        return sign ? -v : v;
    }
    return bits_f32(sign | ((exp + 112u) << 23) | (man << 13));
}

uint16_t cpu_f32_to_fp16(float f)
{
    uint32_t x = f32_bits(f);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    uint32_t ax = x & 0x7fffffffu;
    if (ax > 0x7f800000u) /* NaN: quiet, the payload's top 10 bits kept (as vcvtps2ph) */
        return (uint16_t)(sign | 0x7e00u | ((ax >> 13) & 0x3ffu));
    if (ax == 0x7f800000u) return (uint16_t)(sign | 0x7c00u); /* inf */
    if (ax >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* rounds to inf */
    if (ax < 0x38800000u) {
        /* subnormal or zero in f16: value / 2^-24, rounded to nearest even */
        float v = bits_f32(ax) * 0x1p24f;
        float r = nearbyintf(v); /* default rounding mode: nearest even */
        return (uint16_t)(sign | (uint16_t)r);
    }
    uint32_t exp = (ax >> 23) - 112u;
    uint32_t man = ax & 0x7fffffu;
    uint32_t h = (exp << 10) | (man >> 13);
    uint32_t rest = man & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) h++; /* may carry into exp: fine */
    return (uint16_t)(sign | h);
}

float cpu_bf16_to_f32(uint16_t h)
{
    return bits_f32((uint32_t)h << 16);
}

uint16_t cpu_f32_to_bf16(float f)
{
    uint32_t u = f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 64u); /* quiet NaN */
    return (uint16_t)((u + (0x7fffu + ((u >> 16) & 1u))) >> 16);
}

/* OCP fp8 e4m3fn: bias 7, no infinities, S.1111.111 is NaN, subnormals 2^-9 * m. */
float cpu_fp8_e4m3_to_f32(uint8_t v)
{
    uint32_t exp = (v >> 3) & 0xfu;
    uint32_t man = v & 7u;
    float r;
    if (exp == 0xf && man == 7) return NAN;
    if (exp == 0)
        r = (float)man * 0x1p-9f;
    else
        r = ldexpf(1.0f + (float)man / 8.0f, (int)exp - 7);
    return (v & 0x80u) ? -r : r;
}

static void dequant_q4_0(const block_q4_0 *x, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++) {
        float d = cpu_fp16_to_f32(x[i].d);
        for (int j = 0; j < 16; j++) {
            y[i * 32 + j] = (float)((x[i].qs[j] & 0xf) - 8) * d;
            y[i * 32 + j + 16] = (float)((x[i].qs[j] >> 4) - 8) * d;
        }
    }
}

static void dequant_q4_1(const block_q4_1 *x, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++) {
        float d = cpu_fp16_to_f32(x[i].d), m = cpu_fp16_to_f32(x[i].m);
        for (int j = 0; j < 16; j++) {
            y[i * 32 + j] = (float)(x[i].qs[j] & 0xf) * d + m;
            y[i * 32 + j + 16] = (float)(x[i].qs[j] >> 4) * d + m;
        }
    }
}

/* The fifth bit of element j (0..31) of a Q5_0/Q5_1 block, as 0 or 16. */
static int q5_high(const uint8_t qh[4], int j)
{
    return ((qh[j / 8] >> (j % 8)) & 1) << 4;
}

static void dequant_q5_0(const block_q5_0 *x, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++) {
        float d = cpu_fp16_to_f32(x[i].d);
        for (int j = 0; j < 16; j++) {
            y[i * 32 + j] = (float)(((x[i].qs[j] & 0xf) | q5_high(x[i].qh, j)) - 16) * d;
            y[i * 32 + j + 16] = (float)(((x[i].qs[j] >> 4) | q5_high(x[i].qh, j + 16)) - 16) * d;
        }
    }
}

static void dequant_q5_1(const block_q5_1 *x, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++) {
        float d = cpu_fp16_to_f32(x[i].d), m = cpu_fp16_to_f32(x[i].m);
        for (int j = 0; j < 16; j++) {
            y[i * 32 + j] = (float)((x[i].qs[j] & 0xf) | q5_high(x[i].qh, j)) * d + m;
            y[i * 32 + j + 16] = (float)((x[i].qs[j] >> 4) | q5_high(x[i].qh, j + 16)) * d + m;
        }
    }
}

static void dequant_q8_0(const block_q8_0 *x, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++) {
        float d = cpu_fp16_to_f32(x[i].d);
        for (int j = 0; j < 32; j++) y[i * 32 + j] = (float)x[i].qs[j] * d;
    }
}

/* The j-th (0..7) 6-bit scale and min of a Q4_K/Q5_K block. */
static void scale_min_k4(int j, const uint8_t *q, uint8_t *sc, uint8_t *m)
{
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (uint8_t)((q[j + 4] & 0xf) | ((q[j - 4] >> 6) << 4));
        *m = (uint8_t)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
}

static void dequant_q4_K(const block_q4_K *x, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++) {
        float d = cpu_fp16_to_f32(x[i].d), dmin = cpu_fp16_to_f32(x[i].dmin);
        const uint8_t *q = x[i].qs;
        for (int j = 0; j < QK_K; j += 64) {
            uint8_t sc, m;
            int is = j / 32;
            scale_min_k4(is, x[i].scales, &sc, &m);
            float d1 = d * (float)sc, m1 = dmin * (float)m;
            scale_min_k4(is + 1, x[i].scales, &sc, &m);
            float d2 = d * (float)sc, m2 = dmin * (float)m;
            for (int l = 0; l < 32; l++) *y++ = d1 * (float)(q[l] & 0xf) - m1;
            for (int l = 0; l < 32; l++) *y++ = d2 * (float)(q[l] >> 4) - m2;
            q += 32;
        }
    }
}

static void dequant_q5_K(const block_q5_K *x, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++) {
        float d = cpu_fp16_to_f32(x[i].d), dmin = cpu_fp16_to_f32(x[i].dmin);
        const uint8_t *ql = x[i].qs, *qh = x[i].qh;
        unsigned u1 = 1, u2 = 2;
        for (int j = 0; j < QK_K; j += 64) {
            uint8_t sc, m;
            int is = j / 32;
            scale_min_k4(is, x[i].scales, &sc, &m);
            float d1 = d * (float)sc, m1 = dmin * (float)m;
            scale_min_k4(is + 1, x[i].scales, &sc, &m);
            float d2 = d * (float)sc, m2 = dmin * (float)m;
            for (int l = 0; l < 32; l++)
                *y++ = d1 * (float)((ql[l] & 0xf) + ((qh[l] & u1) ? 16 : 0)) - m1;
            for (int l = 0; l < 32; l++)
                *y++ = d2 * (float)((ql[l] >> 4) + ((qh[l] & u2) ? 16 : 0)) - m2;
            ql += 32;
            u1 <<= 2;
            u2 <<= 2;
        }
    }
}

static void dequant_q6_K(const block_q6_K *x, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++) {
        float d = cpu_fp16_to_f32(x[i].d);
        const uint8_t *ql = x[i].ql, *qh = x[i].qh;
        const int8_t *sc = x[i].scales;
        for (int n = 0; n < QK_K; n += 128) {
            for (int l = 0; l < 32; l++) {
                int is = l / 16;
                int q1 = (int)((ql[l] & 0xf) | ((qh[l] & 3) << 4)) - 32;
                int q2 = (int)((ql[l + 32] & 0xf) | (((qh[l] >> 2) & 3) << 4)) - 32;
                int q3 = (int)((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
                int q4 = (int)((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
                y[l] = d * (float)sc[is] * (float)q1;
                y[l + 32] = d * (float)sc[is + 2] * (float)q2;
                y[l + 64] = d * (float)sc[is + 4] * (float)q3;
                y[l + 96] = d * (float)sc[is + 6] * (float)q4;
            }
            y += 128;
            ql += 64;
            qh += 32;
            sc += 8;
        }
    }
}

static void dequant_q2_K(const block_q2_K *x, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++) {
        float d = cpu_fp16_to_f32(x[i].d), dmin = cpu_fp16_to_f32(x[i].dmin);
        const uint8_t *q = x[i].qs, *sc = x[i].scales;
        for (int n = 0; n < QK_K; n += 128) {
            for (int shift = 0; shift < 8; shift += 2) {
                for (ptrdiff_t half = 0; half < 2; half++) {
                    uint8_t s = *sc++;
                    float dl = d * (float)(s & 0xf), ml = dmin * (float)(s >> 4);
                    for (ptrdiff_t l = 0; l < 16; l++)
                        *y++ = dl * (float)((q[half * 16 + l] >> shift) & 3) - ml;
                }
            }
            q += 32;
        }
    }
}

void cpu_k3_scales(const uint8_t q[12], int8_t sc[16])
{
    /* scales 0..7: the low nibbles of q[0..7]; 8..15: their high nibbles; the
     * high 2 bits of scale j in q[8 + j % 4] at bit 2 * (j / 4) */
    for (int j = 0; j < 16; j++) {
        int lo = j < 8 ? (q[j] & 0xf) : (q[j - 8] >> 4);
        int hi = (q[8 + j % 4] >> (2 * (j / 4))) & 3;
        sc[j] = (int8_t)((lo | (hi << 4)) - 32);
    }
}

static void dequant_q3_K(const block_q3_K *x, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++) {
        float d = cpu_fp16_to_f32(x[i].d);
        int8_t sc[16];
        cpu_k3_scales(x[i].scales, sc);
        const uint8_t *q = x[i].qs, *hm = x[i].hmask;
        int is = 0;
        unsigned m = 1;
        for (int n = 0; n < QK_K; n += 128) {
            for (int shift = 0; shift < 8; shift += 2, m <<= 1) {
                for (int half = 0; half < 2; half++) {
                    float dl = d * (float)sc[is++];
                    for (int l = half * 16; l < half * 16 + 16; l++)
                        *y++ = dl * (float)(((q[l] >> shift) & 3) - ((hm[l] & m) ? 0 : 4));
                }
            }
            q += 32;
        }
    }
}

static void dequant_iq4_nl(const block_iq4_nl *x, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++) {
        float d = cpu_fp16_to_f32(x[i].d);
        for (int j = 0; j < 16; j++) {
            y[i * 32 + j] = d * (float)cpu_iq4nl_values[x[i].qs[j] & 0xf];
            y[i * 32 + j + 16] = d * (float)cpu_iq4nl_values[x[i].qs[j] >> 4];
        }
    }
}

void cpu_iq4xs_scales(const block_iq4_xs *b, int8_t sc[8])
{
    for (int ib = 0; ib < 8; ib++) {
        int lo = (b->scales_l[ib / 2] >> (4 * (ib % 2))) & 0xf;
        int hi = (b->scales_h >> (2 * ib)) & 3;
        sc[ib] = (int8_t)((lo | (hi << 4)) - 32);
    }
}

static void dequant_iq4_xs(const block_iq4_xs *x, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++) {
        float d = cpu_fp16_to_f32(x[i].d);
        int8_t sc[8];
        cpu_iq4xs_scales(&x[i], sc);
        for (ptrdiff_t ib = 0; ib < 8; ib++) {
            const uint8_t *qs = x[i].qs + ib * 16;
            float dl = d * (float)sc[ib];
            for (int j = 0; j < 16; j++) {
                y[j] = dl * (float)cpu_iq4nl_values[qs[j] & 0xf];
                y[j + 16] = dl * (float)cpu_iq4nl_values[qs[j] >> 4];
            }
            y += 32;
        }
    }
}

void cpu_dequantize_row(int dtype, const void *x, float *y, int64_t n)
{
    switch (dtype) {
    case MODEL_DTYPE_F32: memcpy(y, x, (size_t)n * sizeof(float)); break;
    case MODEL_DTYPE_F16:
        for (int64_t i = 0; i < n; i++) y[i] = cpu_fp16_to_f32(((const uint16_t *)x)[i]);
        break;
    case MODEL_DTYPE_BF16:
        for (int64_t i = 0; i < n; i++) y[i] = cpu_bf16_to_f32(((const uint16_t *)x)[i]);
        break;
    case MODEL_DTYPE_FP8_E4M3:
        for (int64_t i = 0; i < n; i++) y[i] = cpu_fp8_e4m3_to_f32(((const uint8_t *)x)[i]);
        break;
    case MODEL_DTYPE_MXFP4:
        for (int64_t i = 0; i < n; i++)
            y[i] = cpu_e2m1_values[(((const uint8_t *)x)[i / 2] >> (4 * (i & 1))) & 15];
        break;
    case MODEL_DTYPE_Q4_0: dequant_q4_0(x, y, n / 32); break;
    case MODEL_DTYPE_Q4_1: dequant_q4_1(x, y, n / 32); break;
    case MODEL_DTYPE_Q5_0: dequant_q5_0(x, y, n / 32); break;
    case MODEL_DTYPE_Q5_1: dequant_q5_1(x, y, n / 32); break;
    case MODEL_DTYPE_Q8_0: dequant_q8_0(x, y, n / 32); break;
    case MODEL_DTYPE_Q4_K: dequant_q4_K(x, y, n / QK_K); break;
    case MODEL_DTYPE_Q5_K: dequant_q5_K(x, y, n / QK_K); break;
    case MODEL_DTYPE_Q6_K: dequant_q6_K(x, y, n / QK_K); break;
    case MODEL_DTYPE_Q2_K: dequant_q2_K(x, y, n / QK_K); break;
    case MODEL_DTYPE_Q3_K: dequant_q3_K(x, y, n / QK_K); break;
    case MODEL_DTYPE_IQ4_NL: dequant_iq4_nl(x, y, n / QK4_NL); break;
    case MODEL_DTYPE_IQ4_XS: dequant_iq4_xs(x, y, n / QK_K); break;
    case CPU_DTYPE_Q8_1: {
        const block_q8_1 *b = x;
        for (int64_t i = 0; i < n / 32; i++)
            for (int j = 0; j < 32; j++)
                y[i * 32 + j] = (float)b[i].qs[j] * cpu_fp16_to_f32(b[i].d);
        break;
    }
    case CPU_DTYPE_Q8_K: {
        const block_q8_K *b = x;
        for (int64_t i = 0; i < n / QK_K; i++)
            for (int j = 0; j < QK_K; j++) y[i * QK_K + j] = (float)b[i].qs[j] * b[i].d;
        break;
    }
    default: break;
    }
}

/* Q8_0 and Q8_1 as llama.cpp's x86 kernels quantize activations: the scale is
 * amax / 127, the values are multiplied by 127 / amax and rounded to nearest
 * even (vroundps), so that the integer sums, and the logits, match. */
static int8_t round_q8(float v)
{
    return (int8_t)nearbyintf(v);
}

/* A block holding a NaN or an infinity (corrupt weights upstream) is stored as
 * scale NaN and zero values, so every product with it is NaN: the fault shows
 * in the logits instead of vanishing in an int8 conversion (undefined for a
 * NaN). The amax pass finds it: |x| <= FLT_MAX is false for both. */
enum { F16_NAN = 0x7e00 };

float cpu_quant_multiplier(float num, float den)
{
    float m = den != 0.0f ? num / den : 0.0f;
    return fabsf(m) <= FLT_MAX ? m : 0.0f;
}

static void quant_q8_0(const float *x, block_q8_0 *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++) {
        float amax = 0;
        int finite = 1;
        for (int j = 0; j < 32; j++) {
            float a = fabsf(x[i * 32 + j]);
            finite &= a <= FLT_MAX;
            amax = fmaxf(amax, a);
        }
        if (!finite) {
            memset(&y[i], 0, sizeof y[i]);
            y[i].d = F16_NAN;
            continue;
        }
        float d = amax / 127.0f;
        float id = cpu_quant_multiplier(127.0f, amax);
        y[i].d = cpu_f32_to_fp16(d);
        for (int j = 0; j < 32; j++) y[i].qs[j] = round_q8(x[i * 32 + j] * id);
    }
}

/* ggml's quantize_row_q4_0_ref: the block's value of largest magnitude, with
 * its sign, maps to -8 (d = max / -8), the others to the nearest of 16 steps
 * (x / d + 8.5 truncated, at most 15); the first 16 in the low nibbles. Used
 * for the Q4_0 KV cache. A block holding a NaN or an infinity is stored as
 * quant_q8_0 stores one. */
static void quant_q4_0(const float *x, block_q4_0 *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++) {
        const float *xb = x + i * 32;
        float amax = 0, max = 0;
        int finite = 1;
        for (int j = 0; j < 32; j++) {
            float a = fabsf(xb[j]);
            finite &= a <= FLT_MAX;
            if (a > amax) amax = a, max = xb[j];
        }
        if (!finite) {
            memset(&y[i], 0, sizeof y[i]);
            y[i].d = F16_NAN;
            continue;
        }
        float d = max / -8.0f, id = cpu_quant_multiplier(1.0f, d);
        y[i].d = cpu_f32_to_fp16(d);
        for (int j = 0; j < 16; j++) {
            int lo = (int)(xb[j] * id + 8.5f), hi = (int)(xb[j + 16] * id + 8.5f);
            lo = lo < 15 ? lo : 15, hi = hi < 15 ? hi : 15;
            y[i].qs[j] = (uint8_t)(lo | hi << 4);
        }
    }
}

static void quant_q8_1(const float *x, block_q8_1 *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++) {
        float amax = 0;
        int finite = 1;
        for (int j = 0; j < 32; j++) {
            float a = fabsf(x[i * 32 + j]);
            finite &= a <= FLT_MAX;
            amax = fmaxf(amax, a);
        }
        if (!finite) {
            memset(&y[i], 0, sizeof y[i]);
            y[i].d = y[i].s = F16_NAN;
            continue;
        }
        float d = amax / 127.0f;
        float id = cpu_quant_multiplier(127.0f, amax);
        int sum = 0;
        for (int j = 0; j < 32; j++) {
            y[i].qs[j] = round_q8(x[i * 32 + j] * id);
            sum += y[i].qs[j];
        }
        y[i].d = cpu_f32_to_fp16(d);
        y[i].s = cpu_f32_to_fp16((float)sum * d);
    }
}

/* ggml's nearest_int: round half to even through the float mantissa trick. */
static int nearest_int(float fval)
{
    float val = fval + 12582912.f;
    int32_t i;
    memcpy(&i, &val, sizeof i);
    return (i & 0x007fffff) - 0x00400000;
}

/* Q8_K: the scale maps the value of largest magnitude to -127 (ggml's choice,
 * which its SIMD kernels rely on); values are clamped to 127. */
static void quant_q8_K(const float *x, block_q8_K *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++) {
        const float *xb = x + i * QK_K;
        float max = 0, amax = 0;
        int finite = 1;
        for (int j = 0; j < QK_K; j++) {
            float ax = fabsf(xb[j]);
            finite &= ax <= FLT_MAX;
            if (ax > amax) {
                amax = ax;
                max = xb[j];
            }
        }
        if (!finite || amax == 0.0f) {
            memset(&y[i], 0, sizeof y[i]);
            if (!finite) y[i].d = NAN;
            continue;
        }
        float iscale = -127.f / max;
        for (int j = 0; j < QK_K; j++) {
            int v = nearest_int(iscale * xb[j]);
            y[i].qs[j] = (int8_t)(v < 127 ? v : 127);
        }
        for (int j = 0; j < QK_K / 16; j++) {
            int sum = 0;
            for (int k = 0; k < 16; k++) sum += y[i].qs[j * 16 + k];
            y[i].bsums[j] = (int16_t)sum;
        }
        y[i].d = 1 / iscale;
    }
}

void cpu_quantize_row_ref(int dtype, const float *x, void *y, int64_t n)
{
    switch (dtype) {
    case MODEL_DTYPE_F32: memcpy(y, x, (size_t)n * sizeof(float)); break;
    case MODEL_DTYPE_F16:
        for (int64_t i = 0; i < n; i++) ((uint16_t *)y)[i] = cpu_f32_to_fp16(x[i]);
        break;
    case MODEL_DTYPE_BF16:
        for (int64_t i = 0; i < n; i++) ((uint16_t *)y)[i] = cpu_f32_to_bf16(x[i]);
        break;
    case MODEL_DTYPE_Q8_0: quant_q8_0(x, y, n / 32); break;
    case MODEL_DTYPE_Q4_0: quant_q4_0(x, y, n / 32); break;
    case CPU_DTYPE_Q8_1: quant_q8_1(x, y, n / 32); break;
    case CPU_DTYPE_Q8_K: quant_q8_K(x, y, n / QK_K); break;
    default: break;
    }
}

void cpu_k4_scales(const uint8_t q[K_SCALE_SIZE], uint8_t sc[8], uint8_t m[8])
{
    for (int j = 0; j < 8; j++) {
        if (j < 4) {
            sc[j] = q[j] & 63;
            m[j] = q[j + 4] & 63;
        } else {
            sc[j] = (uint8_t)((q[j + 4] & 0xf) | ((q[j - 4] >> 6) << 4));
            m[j] = (uint8_t)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
        }
    }
}
