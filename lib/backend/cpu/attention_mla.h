/* Multi-head Latent Attention (DeepSeek-V2 §2.1, DeepSeek-V3 §2.1.1) over the
 * latent cache: every cached token is one f32 row [kv_lora_rank + rope] =
 * [c_kv (RMS-normed latent), k_pe (the shared, rotated rope key)].
 *
 * Per query head h with q = [q_nope (nope), q_pe (rope)] (q_pe rotated), the
 * head's key and value of cached token j are, as transformers'
 * DeepseekV3Attention.expand_kv computes them from kv_b_proj
 * (W = kv_b f32 [n_head * (nope + v), kv_lora_rank], rows of head h: nope key
 * rows then v value rows):
 *   k_jh = [W_UK_h c_j, k_pe_j],  v_jh = W_UV_h c_j
 *   out_h = sum_j softmax_j(scale * q . k_jh) v_jh,  j in [0, pos0 + t]
 *
 * cpu_mla_attention computes it absorbed (the decode-time form: W_UK_h folded
 * into the query, W_UV_h applied after the weighted sum of latents), so keys
 * and values are never expanded:
 *   q_abs = [q_nope W_UK_h, q_pe]            (kv_lora_rank + rope)
 *   o_lat = sum_j softmax_j(scale * q_abs . row_j) c_j
 *   out_h = W_UV_h o_lat
 * cpu_mla_attention_naive computes it from expanded keys and values (kv_full,
 * the caller's row_j W^T for every cached token), the reference.
 *
 * Shapes: q f32 [n_tokens, n_head, nope + rope]; kv f32 [pos0 + n_tokens,
 * kv_lora_rank + rope]; out f32 [n_tokens, n_head, v]. scratch: f32
 * [cpu_mla_scratch_floats(s, scratch_ctx, the pool's size)], owned by the caller. Tasks are
 * spread over the pool; thread-safe on distinct out/scratch.
 *
 * The absorbed forms take 16 tokens at a time: q_abs per head, then the
 * latent attention in tiles of up to 16 heads of one token with an online
 * softmax over 16-key chunks (each chunk of latents read once for the tile's
 * heads), then W_UV per head. A row's result depends on its own context alone
 * (not the tile, the block or the batch). It agrees with the naive reference
 * to float rounding (tests/unit/test_cpu_kernels.c).
 *
 * Roofline per token, n = pos0 + t + 1 keys, R = kv_lora_rank, H heads in
 * tiles of T: absorbed reads n (R + rope) f32 of latents H / T times and
 * 2 R (nope + v) f32 of W per head once per 16 tokens, H (2 n (2R + rope) +
 * 2 R (nope + v)) FLOPs; naive reads n H (nope + v) expanded values. */
#ifndef DI_BACKEND_CPU_ATTENTION_MLA_H
#define DI_BACKEND_CPU_ATTENTION_MLA_H

#include <stdint.h>

#include "backend/cpu/threadpool.h"
#include "backend/types.h"

typedef struct cpu_mla_shape {
    int n_head, nope, rope, v, kv_lora_rank;
} cpu_mla_shape;

/* Floats of scratch the forms below need for contexts up to ctx tokens on a
 * pool of n_threads threads (the pool they are given; 1 without one): a share
 * per thread, then the absorbed forms' block of 16 tokens' q_abs and o_lat. */
int64_t cpu_mla_scratch_floats(const cpu_mla_shape *s, int64_t ctx, int n_threads);

void cpu_mla_attention(cpu_threadpool *pool, const cpu_mla_shape *s, const float *q,
                       int64_t n_tokens, int64_t pos0, const float *kv, const float *kv_b,
                       float scale, float *out, float *scratch, int64_t scratch_ctx);

/* The absorbed form with W_UK and W_UV as llama.cpp's deepseek2 files store
 * them, in any dtype the matrix products take: k_b ne {nope, R, n_head} (row
 * (h, r) = W_UK_h[:, r]) and v_b ne {R, v, n_head} (row (h, i) = W_UV_h[i, :]).
 * q_abs[r] = dot(k_b row (h, r), q_nope) and out[i] = dot(v_b row (h, i), o_lat)
 * are the vec_dot products, q_nope and o_lat quantized to each weight's
 * activation type as the matrix products quantize theirs (quant.h) — so the
 * arithmetic is llama.cpp's, and a decode step reads k_b and v_b as stored
 * instead of their f32 join. use_ref: the scalar reference kernels. */
void cpu_mla_attention_split(cpu_threadpool *pool, const cpu_mla_shape *s, const float *q,
                             int64_t n_tokens, int64_t pos0, const float *kv,
                             const model_tensor *k_b, const model_tensor *v_b, float scale,
                             float *out, float *scratch, int64_t scratch_ctx, int use_ref);

/* kv_full: f32 [pos0 + n_tokens, n_head * (nope + v)], row j = c_j W^T. */
void cpu_mla_attention_naive(cpu_threadpool *pool, const cpu_mla_shape *s, const float *q,
                             int64_t n_tokens, int64_t pos0, const float *kv, const float *kv_full,
                             float scale, float *out, float *scratch, int64_t scratch_ctx);

#endif
