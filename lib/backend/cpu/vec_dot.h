/* Dot products of one stored weight row with one quantized activation row
 * (quant.h): the inner loop of every matrix product.
 *
 * Roofline of one call over n elements: reads cpu_row_bytes(w, n) +
 * cpu_row_bytes(a, n) bytes, 2n FLOPs (multiply-adds, integer for the
 * quantized pairs). At decode the weight bytes dominate: a matrix-vector product
 * is memory-bound at (weight bytes) / (memory bandwidth).
 *
 * Each weight dtype has a scalar reference (cpu_vec_dot_ref) whose block-wise
 * arithmetic is that of ggml's reference (the integer sums per block, scaled by
 * the product of the block scales) and SIMD versions (AVX2+FMA+F16C, and
 * AVX512-VNNI for the 8-bit products) picked at run time; tests compare the two on random input.
 * Thread-safe. */
#ifndef DI_BACKEND_CPU_VEC_DOT_H
#define DI_BACKEND_CPU_VEC_DOT_H

#include <stddef.h>
#include <stdint.h>

#include "backend/cpu/quant.h"

/* *s = dot(w[0..n), a[0..n)): w a row stored as the weight dtype, a a row of
 * its cpu_vec_dot_type. n is a multiple of the block size. */
typedef void (*cpu_vec_dot_fn)(int64_t n, float *s, const void *w, const void *a);

/* The scalar reference for weight dtype `dtype`; NULL when there is none. */
cpu_vec_dot_fn cpu_vec_dot_ref(model_dtype dtype);
/* The fastest version this CPU runs (the reference when no SIMD one applies). */
cpu_vec_dot_fn cpu_vec_dot(model_dtype dtype);
/* The AVX2 version, or NULL when the CPU or the build lacks it (for tests). */
cpu_vec_dot_fn cpu_vec_dot_avx2(model_dtype dtype);
/* Its Q2_K, Q3_K, IQ4_NL and IQ4_XS part (vec_dot_avx2_lowbit.c), or NULL. */
cpu_vec_dot_fn cpu_vec_dot_avx2_lowbit(model_dtype dtype);

/* s[r] = dot(w, a_r) for four activation rows a_r = a + r * stride bytes:
 * the weight row's blocks are decoded once (prefill). Results are bit-identical
 * to four cpu_vec_dot calls. */
typedef void (*cpu_vec_dot4_fn)(int64_t n, float *s, const void *w, const void *a, size_t stride);
/* The AVX2 four-row version, or NULL (then use cpu_vec_dot per row). */
cpu_vec_dot4_fn cpu_vec_dot4_avx2(model_dtype dtype);

/* s[r * 4 + t] = dot(w_r, a_t) for two weight rows (w, w + w_stride bytes) and
 * four activation rows (a + t * stride bytes): a 2x4 register tile for
 * prefill, bit-identical to eight cpu_vec_dot calls. NULL where there is none
 * (Q4_1 with AVX512-VNNI only). */
typedef void (*cpu_vec_dot2x4_fn)(int64_t n, float *s, const void *w, size_t w_stride,
                                  const void *a, size_t stride);
cpu_vec_dot2x4_fn cpu_vec_dot2x4_vnni(model_dtype dtype);

/* s[r * 4 + t] = dot(w_r, a_t) for n_rows (4 or 1) weight rows w_r = w + r *
 * w_stride bytes and n_tok (4 or 1) f32 activation rows a_t = a + t * stride
 * bytes (F32, F16 and BF16 weights; n_rows * n_tok sums of the 16 slots
 * written): a register tile for prefill (4 x 4) and decode (4 rows x 1 token).
 * Every sum is the AVX2 one-row kernel's bit for bit, whatever the tile shape
 * (vec_dot_avx512.c says why; a NaN's payload aside). NULL where the CPU lacks
 * AVX-512F. */
typedef void (*cpu_vec_dot_tile_fn)(int64_t n, float *s, const void *w, size_t w_stride, int n_rows,
                                    const void *a, size_t stride, int n_tok);
cpu_vec_dot_tile_fn cpu_vec_dot_tile_avx512(model_dtype dtype);
/* Its one-row and four-token versions (the same arithmetic), or NULL. */
cpu_vec_dot_fn cpu_vec_dot_avx512(model_dtype dtype);
cpu_vec_dot4_fn cpu_vec_dot4_avx512(model_dtype dtype);

/* MXFP4 rows with their scales: s[r] = sum over the row's 32-value blocks b
 * of scales[b] * (codes of b . a_r's values of b), for n_rows (1 to 4)
 * activation rows a_r = a + r * stride bytes (f32). One code path for every
 * n_rows, so a token's result does not depend on how many are computed with
 * it (batch invariance); each block's products are summed in f32 and scaled
 * into a running f32 sum. cpu_vec_dot_mxfp4: the AVX2 version when the CPU
 * runs it, else the reference (which sums in another order). */
typedef void (*cpu_vec_dot_mxfp4_fn)(int64_t n, float *s, const void *w, const float *scales,
                                     const void *a, size_t stride, int n_rows);
cpu_vec_dot_mxfp4_fn cpu_vec_dot_mxfp4(void);
cpu_vec_dot_mxfp4_fn cpu_vec_dot_mxfp4_ref(void);
cpu_vec_dot_mxfp4_fn cpu_vec_dot_mxfp4_avx2(void);

/* The AVX512-VNNI versions (Q8_0, Q4_0, Q4_1; four-row: Q8_0, Q4_1),
 * bit-identical to the AVX2 ones, or NULL. (Q5_0/Q5_1 measured within a few
 * per cent of AVX2: their unpacking, not the products, is the cost.) */
cpu_vec_dot_fn cpu_vec_dot_vnni(model_dtype dtype);
cpu_vec_dot4_fn cpu_vec_dot4_vnni(model_dtype dtype);
/* The fastest four-row version this CPU runs, or NULL. */
cpu_vec_dot4_fn cpu_vec_dot4(model_dtype dtype);

/* 1 when the CPU runs AVX2, FMA and F16C; AVX512 F/VL/BW/VNNI too. */
int cpu_has_avx2(void);
int cpu_has_avx512_vnni(void);
/* 1 when the CPU runs AVX2, FMA, F16C and AVX-512F (vec_dot_avx512.c). */
int cpu_has_avx512f(void);
/* What the products take on this CPU, in words (a static string): machines
 * differ in AVX512 and AMX. cpu_kernels_describe asks for nothing (where AMX
 * is possible but not yet asked for, it says so: di_cpu_kernels);
 * cpu_kernels_name asks Linux for the AMX tile state first (matmul_amx.h),
 * for test and bench output. Thread-safe. */
const char *cpu_kernels_describe(void);
const char *cpu_kernels_name(void);

#endif
