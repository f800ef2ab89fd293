/* Block formats of quantized weights and activations, as ggml lays them out
 * (ggml-common.h), with scalar reference conversions.
 *
 * Weights are used straight from their stored blocks; the matrix products
 * quantize the activations into the partner format llama.cpp pairs with each
 * weight type (cpu_vec_dot_type): Q8_1 for Q4_1/Q5_1, Q8_0 for Q4_0/Q5_0/Q8_0/IQ4_NL, Q8_K for the
 * K-quants and IQ4_XS — so the integer dot products, and the rounding, are those of
 * llama.cpp — and f32 for F32, F16, BF16 and FP8 weights (llama.cpp rounds the
 * activations of F16/BF16 weights to those types; transformers does not, and
 * the products stay memory-bound either way).
 *
 * Every function here is a plain scalar reference: the SIMD kernels are tested
 * against them. All are thread-safe (no state). */
#ifndef DI_BACKEND_CPU_QUANT_H
#define DI_BACKEND_CPU_QUANT_H

#include <stddef.h>
#include <stdint.h>

#include "backend/types.h"

enum {
    QK4_0 = 32,
    QK4_1 = 32,
    QK5_0 = 32,
    QK5_1 = 32,
    QK8_0 = 32,
    QK8_1 = 32,
    QK_K = 256,
    QK4_NL = 32,
    K_SCALE_SIZE = 12
};

/* x[i] = (q[i] - 8) * d; element j < 16 in the low nibble of qs[j], j >= 16 in the
 * high nibble of qs[j - 16]. 18 bytes. */
typedef struct block_q4_0 {
    uint16_t d; /* f16 */
    uint8_t qs[QK4_0 / 2];
} block_q4_0;

/* x[i] = q[i] * d + m; nibble order as Q4_0. 20 bytes. */
typedef struct block_q4_1 {
    uint16_t d, m; /* f16 */
    uint8_t qs[QK4_1 / 2];
} block_q4_1;

/* x[i] = (q[i] - 16) * d with q[i] 5 bits: the low 4 as Q4_0's nibbles, the fifth
 * bit of element j in bit j of qh (little-endian u32). 22 bytes. */
typedef struct block_q5_0 {
    uint16_t d; /* f16 */
    uint8_t qh[4];
    uint8_t qs[QK5_0 / 2];
} block_q5_0;

/* x[i] = q[i] * d + m, q[i] 5 bits laid out as Q5_0's. 24 bytes. */
typedef struct block_q5_1 {
    uint16_t d, m; /* f16 */
    uint8_t qh[4];
    uint8_t qs[QK5_1 / 2];
} block_q5_1;

/* x[i] = q[i] * d. 34 bytes. */
typedef struct block_q8_0 {
    uint16_t d; /* f16 */
    int8_t qs[QK8_0];
} block_q8_0;

/* Q8_0 plus s = d * sum(q) (f16): the activation partner of Q4_1. 36 bytes. */
typedef struct block_q8_1 {
    uint16_t d, s; /* f16 */
    int8_t qs[QK8_1];
} block_q8_1;

/* 256 elements in 8 sub-blocks of 32, each with a 6-bit scale and a 6-bit min
 * packed in scales[12]: x = d * sc * q - dmin * m. Within each 64 elements the
 * first 32 are the low nibbles of qs[32 bytes], the next 32 the high ones. 144 bytes. */
typedef struct block_q4_K {
    uint16_t d, dmin; /* f16 */
    uint8_t scales[K_SCALE_SIZE];
    uint8_t qs[QK_K / 2];
} block_q4_K;

/* Q4_K with a fifth bit per element in qh (bit 2k / 2k+1 for the k-th pair of
 * sub-blocks). 176 bytes. */
typedef struct block_q5_K {
    uint16_t d, dmin; /* f16 */
    uint8_t scales[K_SCALE_SIZE];
    uint8_t qh[QK_K / 8];
    uint8_t qs[QK_K / 2];
} block_q5_K;

/* 256 elements in 16 sub-blocks of 16 with int8 scales: x = d * sc * (q - 32),
 * q 6 bits: low 4 in ql, high 2 in qh. 210 bytes. */
typedef struct block_q6_K {
    uint8_t ql[QK_K / 2];
    uint8_t qh[QK_K / 4];
    int8_t scales[QK_K / 16];
    uint16_t d; /* f16 */
} block_q6_K;

/* 256 elements in 16 sub-blocks of 16, 2-bit values: x = d * (sc & 15) * q -
 * dmin * (sc >> 4), one byte sc per sub-block. Each 128 elements read 32 bytes
 * of qs four times, shifting by 0, 2, 4, 6 (16 elements from qs[l], then 16 from
 * qs[l + 16]). 84 bytes. */
typedef struct block_q2_K {
    uint8_t scales[QK_K / 16];
    uint8_t qs[QK_K / 4];
    uint16_t d, dmin; /* f16 */
} block_q2_K;

/* 256 elements in 16 sub-blocks of 16: x = d * (sc - 32) * (q - 4 * !h), q the
 * 2 low bits in qs (Q2_K's order), h the high bit in hmask (bit k of byte l for
 * the k-th 32 elements' l-th), sc 6-bit scales packed in scales[12]. 110 bytes. */
typedef struct block_q3_K {
    uint8_t hmask[QK_K / 8];
    uint8_t qs[QK_K / 4];
    uint8_t scales[12];
    uint16_t d; /* f16 */
} block_q3_K;

/* x = d * cpu_iq4nl_values[q], q 4-bit indices in Q4_0's nibble order. 18 bytes. */
typedef struct block_iq4_nl {
    uint16_t d; /* f16 */
    uint8_t qs[QK4_NL / 2];
} block_iq4_nl;

/* 256 elements in 8 sub-blocks of 32, IQ4_NL's codebook with a 6-bit scale per
 * sub-block (low 4 bits in scales_l's nibbles, high 2 in scales_h): x = d * (ls -
 * 32) * cpu_iq4nl_values[q]. 136 bytes. */
typedef struct block_iq4_xs {
    uint16_t d; /* f16 */
    uint16_t scales_h;
    uint8_t scales_l[QK_K / 64];
    uint8_t qs[QK_K / 2];
} block_iq4_xs;

/* The 16 non-uniform levels of IQ4_NL and IQ4_XS (ggml's kvalues_iq4nl). */
extern const int8_t cpu_iq4nl_values[16];

/* The activation partner of the K-quants: f32 scale, 256 int8, and the sums of
 * each 16 of them. 292 bytes. */
typedef struct block_q8_K {
    float d;
    int8_t qs[QK_K];
    int16_t bsums[QK_K / 16];
} block_q8_K;

/* Formats that only activations use, after model_dtype's values. */
enum { CPU_DTYPE_Q8_1 = 100, CPU_DTYPE_Q8_K = 101 };

/* Elements per block (1 for F32/F16/BF16/FP8) and bytes per block of a dtype
 * (model_dtype or CPU_DTYPE_*); 0 for an unknown one. */
int cpu_dtype_block_elems(int dtype);
size_t cpu_dtype_block_bytes(int dtype);
/* Bytes of a row of n elements (n a multiple of the block size). */
size_t cpu_row_bytes(int dtype, int64_t n);
/* The activation format llama.cpp multiplies a weight dtype with. */
int cpu_vec_dot_type(model_dtype weight);

/* The eight 6-bit sub-block scales and mins of a Q4_K/Q5_K block's scales[12]
 * (ggml's get_scale_min_k4), as bytes. */
void cpu_k4_scales(const uint8_t scales[K_SCALE_SIZE], uint8_t sc[8], uint8_t m[8]);
/* The sixteen 6-bit sub-block scales of a Q3_K block's scales[12], minus 32. */
void cpu_k3_scales(const uint8_t scales[12], int8_t sc[16]);
/* The eight sub-block scales of an IQ4_XS block, minus 32. */
void cpu_iq4xs_scales(const block_iq4_xs *b, int8_t sc[8]);

float cpu_fp16_to_f32(uint16_t h);
/* round to nearest even, as F16C's vcvtps2ph, NaN too (quiet, the top 10 bits
 * of its payload kept) */
uint16_t cpu_f32_to_fp16(float f);
float cpu_bf16_to_f32(uint16_t h);
uint16_t cpu_f32_to_bf16(float f); /* round to nearest even, NaN kept quiet (ggml's) */
float cpu_fp8_e4m3_to_f32(uint8_t v);
/* OCP MX FP4 (e2m1) by its 4-bit code: sign, 2 exponent bits, 1 mantissa bit. */
extern const float cpu_e2m1_values[16];

/* Dequantize n elements (a multiple of the block size) of a row stored as dtype
 * into y[n]. For FP8_E4M3 and MXFP4 the block scales are not applied (the
 * caller's job).
 * Roofline: reads cpu_row_bytes(dtype, n), writes 4n bytes, ~2n FLOPs. */
void cpu_dequantize_row(int dtype, const void *x, float *y, int64_t n);

/* Quantize n f32 values into an activation row of dtype Q8_0, Q8_1, Q8_K, F16,
 * BF16 or F32 (a copy), or a KV cache row of Q4_0, with ggml's reference
 * rounding. Roofline: reads 4n
 * bytes, writes cpu_row_bytes(dtype, n), ~3n FLOPs (max, scale, round). n is a multiple of the
 * block size. Reference versions; cpu_quantize_row picks a SIMD one when the
 * CPU has it, with the same results. */
void cpu_quantize_row_ref(int dtype, const float *x, void *y, int64_t n);
void cpu_quantize_row(int dtype, const float *x, void *y, int64_t n);
/* The multiplier that maps a block's values to its integers, num / den (127 /
 * amax for Q8_0 and Q8_1, 1 / d for Q4_0): 0 where den is 0 or the quotient
 * overflows (den below about num / FLT_MAX: a block whose f16 scale is 0
 * anyway), so such a block quantizes as a zero block, as ggml's do when den
 * is 0. An infinite multiplier would make its values NaN or infinite, whose
 * integer conversion is undefined. */
float cpu_quant_multiplier(float num, float den);
/* The AVX2 version (quant_avx2.c: Q8_0, Q8_1, Q8_K, bit-identical to the
 * reference); returns 0, writing nothing, where the CPU or dtype has none. */
int cpu_quantize_row_avx2(int dtype, const float *x, void *y, int64_t n);

#endif
