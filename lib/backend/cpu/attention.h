/* Causal self-attention with grouped-query heads over the paged KV cache.
 *
 * For each of n_tokens query tokens at positions pos0 + t and each query head h
 * (KV head g = h / (n_head / n_head_kv)):
 *   out[t, h] = softmax_j(scale * q[t, h] . K[j, g]) V[j, g],  j in [0, pos0 + t]
 * q is f32 [n_tokens, n_head, head_dim], out is f32 [n_tokens, n_head, head_dim];
 * K and V of positions up to pos0 + n_tokens - 1 must already be stored.
 *
 * Roofline per (token, head) with n = pos0 + t + 1 keys: reads 2 n head_dim
 * elements of the cache, 4 n head_dim FLOPs. Heads of one KV group re-read
 * the same K/V from cache.
 *
 * With an f16 cache the arithmetic is llama.cpp's (non-flash attention): q is
 * rounded to f16 before the K products and the softmax probabilities to f16
 * before the V products, and the f16 products are summed in llama.cpp's order
 * (16 strided lanes, then a halving tree), so the sums are bit-identical; with
 * an f32 cache everything stays f32, and a Q8_0 or Q4_0 cache's rows are
 * dequantized exactly to f32 first (where llama.cpp's flash attention
 * multiplies q rounded to Q8_0 with the keys, deepinfer keeps q in f32: the
 * quantized cache is its only rounding). head_dim <= 256
 * (CPU_ATTENTION_MAX_HEAD_DIM).
 *
 * That is the reference path (use_ref, and CPUs without AVX2). The fast path,
 * cpu_attention_flash (attention_flash.c), is tiled with an online softmax: a
 * KV head's K/V rows are read once for all its query heads and a tile of
 * tokens, in f32, agreeing with the reference to float rounding; the keys are
 * split in segments of 256 folded in order, shared among the threads when a
 * step has few rows (flash-decoding). Where AVX-512 runs, a prefill's tiles
 * take a row-per-lane chunk step (eight tiles a task): every result is the
 * AVX2 step's bit for bit, so a row's output depends on its query, keys and
 * context length alone, never on the batch (tests/unit/test_cpu_kernels.c).
 *
 * scratch: f32 [n_threads, ctx] (ctx >= pos0 + n_tokens) for the scores of the
 * reference path, owned by the caller. Tasks are spread over the pool. */
#ifndef DI_BACKEND_CPU_ATTENTION_H
#define DI_BACKEND_CPU_ATTENTION_H

#include <stddef.h>
#include <stdint.h>

#include "backend/cpu/kv_cache.h"
#include "backend/cpu/threadpool.h"

enum { CPU_ATTENTION_MAX_HEAD_DIM = 256 };

void cpu_attention(cpu_threadpool *pool, const cpu_kv_cache *c, const cpu_kv_seq *s, int layer,
                   const float *q, int n_head, int64_t pos0, int64_t n_tokens, float scale,
                   float *out, float *scratch, int64_t scratch_ctx, int use_ref);

/* The tiled online-softmax attention (same arguments and result as
 * cpu_attention, no scratch: its tiles' workspace is the pool's per-thread
 * scratch, cpu_attention_scratch_bytes a thread, reserved here); returns 0,
 * computing nothing, where it does not apply (no AVX2, head_dim not a
 * multiple of 8, more than 16 query heads a KV head) or cannot run (no pool,
 * or no memory for the workspace: cpu_attention takes the reference path). */
int cpu_attention_flash(cpu_threadpool *pool, const cpu_kv_cache *c, const cpu_kv_seq *s, int layer,
                        const float *q, int n_head, int64_t pos0, int64_t n_tokens, float scale,
                        float *out);

/* Bytes of the pool's scratch (threadpool.h) each thread needs for
 * cpu_attention_flash at head_dim (<= CPU_ATTENTION_MAX_HEAD_DIM): its K/V
 * staging rows, K^T and the tiles' softmax states, which would not fit a
 * small stack. Thread-safe. */
size_t cpu_attention_scratch_bytes(int64_t head_dim);

/* Set (tests, benchmarks) to keep the flash path's and MLA's latent tiles on
 * their AVX2 chunk step where the AVX-512 one would run: the two give
 * bit-identical results. Not thread-safe: set it while no attention runs. */
extern int cpu_attention_avx2_only;

#endif
