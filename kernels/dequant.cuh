/* Dequantization of one group of 32 consecutive elements of a weight row, in
 * registers, for every storage type the CUDA kernels take: the matrix-vector
 * products, embedding rows and whole-weight dequantization all read weights
 * through dq_group. Block layouts are ggml's (ggml-common.h, docs/gguf.md):
 *   Q8_0  34 bytes / 32: f16 d, int8 q[32]                 y = d q
 *   Q4_0  18 bytes / 32: f16 d, nibbles[16]                y = d (q - 8)
 *   Q4_1  20 bytes / 32: f16 d, f16 m, nibbles[16]         y = d q + m
 *   Q4_K 144 bytes / 256: f16 d, f16 dmin, 6-bit scales[12], nibbles[128]
 *   Q6_K 210 bytes / 256: ql[128], qh[64], int8 scales[16], f16 d
 * (low nibbles are elements 0..15 of a 32-block, high 16..31; the K-quants'
 * sub-block order is ggml's dequantize_row_q4_K / _q6_K). Host and device
 * code alike, so tests/cuda/test_cuda_dequant.cpp (plain C++) checks every
 * format against the CPU backend's cpu_dequantize_row on any machine, with or
 * without nvcc or a GPU. */
#ifndef DI_KERNELS_DEQUANT_CUH
#define DI_KERNELS_DEQUANT_CUH

#include <stdint.h>
#include <string.h>

#include "kernels.h"

#ifdef __CUDACC__
#    define DI_HD __host__ __device__ __forceinline__
#else /* plain C++ (tests/cuda/test_cuda_dequant.cpp): host code only */
#    define DI_HD static inline
#endif

DI_HD float dq_f16(uint16_t h)
{
    /* exact IEEE binary16 -> binary32, subnormals and specials included */
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
    uint32_t bits;
    if (exp == 0) {
        if (man == 0) {
            bits = sign;
        } else { /* subnormal: normalise */
            int e = -1;
            do {
                e++;
                man <<= 1;
            } while ((man & 0x400u) == 0);
            bits = sign | ((uint32_t)(127 - 15 - e) << 23) | ((man & 0x3ffu) << 13);
        }
    } else if (exp == 31) {
        bits = sign | 0x7f800000u | (man << 13);
    } else {
        bits = sign | ((exp - 15 + 127) << 23) | (man << 13);
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

DI_HD float dq_bf16(uint16_t h)
{
    uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

/* A little-endian f16 field of a block: every one sits at an even offset of
 * an even-sized block, so 2-byte loads are aligned. */
DI_HD uint16_t dq_u16(const uint8_t *p)
{
#ifdef __CUDA_ARCH__
    return *(const uint16_t *)p; /* one aligned load on the device */
#else
    uint16_t v; /* host (tests): no aliasing of the byte buffer */
    memcpy(&v, p, 2);
    return v;
#endif
}

/* ggml's get_scale_min_k4: sub-block j's 6-bit scale and min. */
DI_HD void dq_scale_min_k4(int j, const uint8_t *q, int *sc, int *m)
{
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
        *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

/* Elements per block and bytes per block (1 and the element size for the
 * float types); 0 for a type the kernels do not take. */
DI_HD int dq_block_elems(int dtype)
{
    switch (dtype) {
    case DI_CUDA_F32:
    case DI_CUDA_F16:
    case DI_CUDA_BF16: return 1;
    case DI_CUDA_Q8_0:
    case DI_CUDA_Q4_0:
    case DI_CUDA_Q4_1: return 32;
    case DI_CUDA_Q4_K:
    case DI_CUDA_Q6_K: return 256;
    default: return 0;
    }
}
DI_HD int dq_block_bytes(int dtype)
{
    switch (dtype) {
    case DI_CUDA_F32: return 4;
    case DI_CUDA_F16:
    case DI_CUDA_BF16: return 2;
    case DI_CUDA_Q8_0: return 34;
    case DI_CUDA_Q4_0: return 18;
    case DI_CUDA_Q4_1: return 20;
    case DI_CUDA_Q4_K: return 144;
    case DI_CUDA_Q6_K: return 210;
    default: return 0;
    }
}

/* Elements [32 g, 32 g + cnt) of a row of n_in elements (cnt = min(32, n_in - 32
 * g); below 32 only for the float types, whose n_in is any length) into y. */
DI_HD int dq_group(int dtype, const uint8_t *row, int64_t n_in, int64_t g, float y[32])
{
    const int64_t i0 = g * 32;
    const int cnt = n_in - i0 < 32 ? (int)(n_in - i0) : 32;
    switch (dtype) {
    case DI_CUDA_F32: {
        const float *p = (const float *)row + i0;
        for (int i = 0; i < cnt; i++) y[i] = p[i];
        break;
    }
    case DI_CUDA_F16: { /* rows are 2-byte aligned (even row_bytes, aligned bases) */
        const uint8_t *p = row + i0 * 2;
        for (int i = 0; i < cnt; i++) y[i] = dq_f16(dq_u16(p + 2 * i));
        break;
    }
    case DI_CUDA_BF16: {
        const uint8_t *p = row + i0 * 2;
        for (int i = 0; i < cnt; i++) y[i] = dq_bf16(dq_u16(p + 2 * i));
        break;
    }
    case DI_CUDA_Q8_0: {
        const uint8_t *b = row + g * 34;
        const float d = dq_f16(dq_u16(b));
        for (int i = 0; i < 32; i++) y[i] = d * (float)(int8_t)b[2 + i];
        break;
    }
    case DI_CUDA_Q4_0: {
        const uint8_t *b = row + g * 18;
        const float d = dq_f16(dq_u16(b));
        for (int i = 0; i < 16; i++) {
            y[i] = d * (float)((b[2 + i] & 0xF) - 8);
            y[i + 16] = d * (float)((b[2 + i] >> 4) - 8);
        }
        break;
    }
    case DI_CUDA_Q4_1: {
        const uint8_t *b = row + g * 20;
        const float d = dq_f16(dq_u16(b)), m = dq_f16(dq_u16(b + 2));
        for (int i = 0; i < 16; i++) {
            y[i] = d * (float)(b[4 + i] & 0xF) + m;
            y[i + 16] = d * (float)(b[4 + i] >> 4) + m;
        }
        break;
    }
    case DI_CUDA_Q4_K: {
        const uint8_t *b = row + (g / 8) * 144;
        const int s = (int)(g % 8);
        const float d = dq_f16(dq_u16(b)), dmin = dq_f16(dq_u16(b + 2));
        int sc, m;
        dq_scale_min_k4(s, b + 4, &sc, &m);
        const float d1 = d * (float)sc, m1 = dmin * (float)m;
        const uint8_t *q = b + 16 + (s / 2) * 32;
        const int shift = (s & 1) ? 4 : 0;
        for (int i = 0; i < 32; i++) y[i] = d1 * (float)((q[i] >> shift) & 0xF) - m1;
        break;
    }
    case DI_CUDA_Q6_K: {
        const uint8_t *b = row + (g / 8) * 210;
        const int s = (int)(g % 8), half = s / 4, k = s % 4;
        const uint8_t *ql = b + half * 64 + (k & 1) * 32, *qh = b + 128 + half * 32;
        const int8_t *sc = (const int8_t *)(b + 192) + half * 8 + 2 * k;
        const float d = dq_f16(dq_u16(b + 208));
        for (int i = 0; i < 32; i++) {
            const int lo = k >= 2 ? ql[i] >> 4 : ql[i] & 0xF;
            const int q = (lo | (((qh[i] >> (2 * k)) & 3) << 4)) - 32;
            y[i] = d * (float)sc[i / 16] * (float)q;
        }
        break;
    }
    default: return 0;
    }
    return cnt;
}

#endif
