/* Interleaved-row ("packed") weights for the matrix products: eight output
 * rows stored block by block, so one vector load holds the same four
 * elements of all eight rows and one vpdpbusd (or vpmaddubsw + vpmaddwd)
 * adds four products to each row's sum. A decode step reads every weight byte
 * once with a third of the instructions of a row-at-a-time dot product, and a
 * step of a few tokens (speculative verification, small batches) decodes each
 * weight block once for all of them. llama.cpp's "repack" buffers follow the
 * same idea (ggml-cpu/repack.cpp); the layout here is ours.
 *
 * Layout of a group of rows [8g, 8g + 8) for each block b of 32 elements, in
 * block order (cpu_pack_bytes equals the stored bytes for these):
 *   Q8_0: d[8] (f16), then 8 chunks of 32 bytes: chunk c holds elements
 *         4c..4c+3 of rows 0..7 (4 bytes a row), each byte q ^ 0x80 (unsigned);
 *   Q4_0: d[8] (f16), then 4 chunks of 32 bytes: chunk k holds stored bytes
 *         qs[4k..4k+3] of rows 0..7 (low nibbles: elements 4k..4k+3, high:
 *         16+4k..16+4k+3);
 *   Q4_1: d[8], m[8] (f16), then the nibbles as Q4_0;
 *   Q5_0/Q5_1: Q4_0's/Q4_1's, then 32 bytes of fifth bits;
 *   IQ4_NL: Q4_0's, the nibbles indexing the codebook.
 * and for each block of 256 (matmul_packed.c's pack_k_block): the scales of
 * the 8 rows (f16 d, dmin) and their sub-block scales and mins unpacked to
 * bytes, then the quants: Q4_K/Q5_K/IQ4_XS in 32 vectors of nibbles (Q5_K's
 * fifth bits after each sub-block's), Q6_K in nibbles with the high two bits
 * after each sub-block, Q2_K/Q3_K in 2-bit planes (Q3_K's high bits after each
 * pair of sub-blocks): one ascending stream, a few per cent over the stored
 * bytes where scales were unpacked.
 *
 * Arithmetic: each (row, token) sum is the scalar reference's
 * (cpu_vec_dot_ref): the exact integer sum of a block, times the product of
 * the two block scales, added in block order without fused multiply-adds. So
 * results are bit-identical to the reference, whatever the number of tokens
 * (batch invariance), and closer to exact than the lane-wise sums of the
 * row-at-a-time SIMD kernels.
 *
 * Where AVX512-VNNI runs, prefill's passes take two groups at once in 512-bit
 * vectors (cpu_packed16_kernel below): the same lane arithmetic, so the same
 * bits, with half the instructions a row.
 *
 * Roofline of one product: reads the packed bytes once per token tile (from
 * memory once; from L1 for the further tiles of a prefill), 2 * n_in * n_out *
 * n_tokens integer operations. Decode is held to the memory bandwidth: the
 * passes prefetch the weight stream 2 KiB ahead and split a token's block sum
 * into two chains when one or two tokens go through (matmul_packed_pass.inc).
 * Thread-safe (no state). */
#ifndef DI_BACKEND_CPU_MATMUL_PACKED_H
#define DI_BACKEND_CPU_MATMUL_PACKED_H

#include <stddef.h>
#include <stdint.h>

#include "backend/types.h"

enum { CPU_PACK_ROWS = 8, CPU_PACK16_ROWS = 16 };

/* 1 when w can be packed and this CPU runs a packed kernel for it: Q8_0,
 * Q4_0/1, Q5_0/1, Q2_K..Q6_K, IQ4_NL, IQ4_XS; n_out a multiple of
 * CPU_PACK_ROWS, n_in of whole blocks, AVX2. */
int cpu_pack_supported(const model_tensor *w);
/* Bytes of the packed copy of w. */
size_t cpu_pack_bytes(const model_tensor *w);
/* Write the packed copy of w (cpu_pack_supported) into dst[cpu_pack_bytes]. */
void cpu_pack(const model_tensor *w, void *dst);

/* Per-token side data the packed kernels read beside the quantized
 * activations: for each block, its scale as f32, the Q8_1 sum term s as f32
 * and the integer sum of its quants. Bytes for n_tokens rows of n_in. */
size_t cpu_pack_info_bytes(int64_t n_in, int64_t n_tokens);
/* Fill one token's side data (cpu_pack_info_bytes(n_in, 1) bytes at info)
 * from its quantized row act_row of act_type (Q8_0 or Q8_1). */
void cpu_pack_info(int act_type, const void *act_row, int64_t n_in, void *info);

/* y[t * y_stride + r] = sum over the n_in elements of packed row group `w`
 * (rows r = 0..7) times token t's activation row (act + t * act_row bytes,
 * side data info + t * info_row bytes), for t < n_tok. */
typedef void (*cpu_packed_fn)(int64_t n_in, const void *w, const char *act, size_t act_row,
                              const char *info, size_t info_row, int64_t n_tok, float *y,
                              int64_t y_stride);
/* The packed kernel for dtype on this CPU (AVX512-VNNI or AVX2), or NULL. */
cpu_packed_fn cpu_packed_kernel(model_dtype dtype);
/* The same over 16 rows: the packed groups at w (rows 0..7, lanes 0-7 of
 * its 512-bit vectors) and w + group_bytes (rows 8..15), y[t * y_stride + r]
 * for r < 16: each (row, token) the 8-row kernel's bit for bit, with half the
 * instructions a row (one activation broadcast serves 16 rows). Prefill's
 * kernel where AVX512-VNNI runs; decode keeps the 8-row kernels (one or two
 * tokens through the 16-row pass read 0.73-0.87x on a Zen 5, bench/README.md). */
typedef void (*cpu_packed16_fn)(int64_t n_in, const void *w, size_t group_bytes, const char *act,
                                size_t act_row, const char *info, size_t info_row, int64_t n_tok,
                                float *y, int64_t y_stride);
/* The 16-row kernel for dtype where AVX512-VNNI runs, else NULL. */
cpu_packed16_fn cpu_packed16_kernel(model_dtype dtype);
/* The AVX2 kernel even where VNNI runs, or NULL (for tests). */
cpu_packed_fn cpu_packed_kernel_avx2(model_dtype dtype);
/* Bytes of one packed group of 8 rows of n_in elements. */
size_t cpu_pack_group_bytes(model_dtype dtype, int64_t n_in);

#endif
