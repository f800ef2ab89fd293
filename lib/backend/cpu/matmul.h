/* Matrix products with a stored weight: y[t, o] = sum_i W[o, i] * x[t, i].
 *
 * W is a model_tensor with ne = {n_in, n_out} (ggml order: a row of n_in
 * elements per output), used straight from its blocks; x is f32 [n_tokens,
 * n_in], y is f32 [n_tokens, n_out]. The activations are first quantized into
 * the weight's cpu_vec_dot_type (as llama.cpp does), then the output rows are
 * split across the pool's threads in tiles of (rows x tokens), each tile
 * keeping its weight rows in L1 while it walks the tokens.
 *
 * Roofline: reads cpu_row_bytes(W) * n_out once (plus the quantized
 * activations, re-read per row tile from cache), writes 4 * n_tokens * n_out
 * bytes; 2 * n_in * n_out * n_tokens FLOPs. Decode (n_tokens = 1) is
 * memory-bound on the weight bytes; prefill is compute-bound.
 *
 * The scratch buffer (cpu_matmul_scratch_bytes) holds the quantized
 * activations; the caller owns it and allocates it once, so nothing is
 * allocated per token. Not thread-safe on one scratch buffer. */
#ifndef DI_BACKEND_CPU_MATMUL_H
#define DI_BACKEND_CPU_MATMUL_H

#include <stddef.h>
#include <stdint.h>

#include "backend/cpu/threadpool.h"
#include "backend/types.h"

/* Bytes of scratch cpu_matmul needs for n_tokens rows of n_in activations
 * multiplied by a weight of dtype. */
size_t cpu_matmul_scratch_bytes(model_dtype dtype, int64_t n_in, int64_t n_tokens);

/* 1 when cpu_matmul handles this dtype and row length (n_in a multiple of the
 * dtype's block size). */
int cpu_matmul_supported(model_dtype dtype, int64_t n_in);

/* y = x W^T (+ bias when not NULL: f32 [n_out]). use_ref = 1 takes the scalar
 * reference dot products (for tests). */
void cpu_matmul(cpu_threadpool *pool, const model_tensor *w, const float *bias, const float *x,
                int64_t n_tokens, float *y, void *scratch, int use_ref);

/* Several products of the same activations in one parallel loop (Q, K, V;
 * gate and up): y[p] = x w[p]^T (+ bias[p] when bias and bias[p] are not NULL).
 * Every w[p] has the same n_in and cpu_vec_dot_type (cpu_matmul_can_share), so
 * x is quantized once. n <= CPU_MATMUL_MAX_PARTS. Scratch as for cpu_matmul,
 * sized (cpu_matmul_scratch_bytes) for every part's dtype: the largest.
 * packed[p], when packed and packed[p] are not NULL, is w[p]'s interleaved copy
 * (cpu_pack, matmul_packed.h), which the product then reads instead: its
 * results are the scalar reference's, bit for bit, for any n_tokens. */
enum { CPU_MATMUL_MAX_PARTS = 4 };
void cpu_matmul_multi(cpu_threadpool *pool, int n, const model_tensor *const *w,
                      const void *const *packed, const float *const *bias, const float *x,
                      int64_t n_tokens, float *const *y, void *scratch, int use_ref);
int cpu_matmul_can_share(const model_tensor *a, const model_tensor *b);

#endif
