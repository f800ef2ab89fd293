/* DeepSeek-V4's own operations on the CPU (backend.h's hc_pre, hc_post,
 * compress_pool, indexer_topk, sink_attention), as transformers 5.24's
 * modeling_deepseek_v4.py computes them (the executable reference; the V4
 * paper's sections in each comment):
 *
 *   mHC (§2.2, DeepseekV4HyperConnection): the hc residual streams of a token
 *   are mixed by pre [hc], post [hc] and comb [hc, hc] from one projection of
 *   the flattened, RMS-normalized streams; comb is projected onto the doubly
 *   stochastic matrices by Sinkhorn-Knopp (softmax over k, + eps, columns
 *   normalised, then sinkhorn_iters - 1 rounds of rows then columns, each sum
 *   + eps). The block's input is sum_j pre_j x_j; its output y becomes
 *   stream k = post_k y + sum_j comb[j, k] x_j.
 *
 *   Compressors (§2.3.1-2, DeepseekV4CSACompressor / HCACompressor / the
 *   indexer's): an entry pools a window of `rate` tokens' projections with a
 *   per-channel softmax of gate + position bias; CSA (overlap) pools two
 *   series over 2 rate slots, the previous window's first half and this
 *   window's second half.
 *
 *   Lightning indexer (§2.3.1, eq. 13-17): score = sum_h w_h ReLU(q_h . k) *
 *   head_dim^-1/2, w_h = weights_proj(x)_h * n_heads^-1/2; the top k entries
 *   a query may see (entry e covers tokens before (e + 1) rate).
 *
 *   Attention (DeepseekV4Attention with eager_attention_forward): one K = V
 *   head for every query head, a sliding window of keys plus compressed
 *   entries, and a learned sink logit per head in the softmax whose share is
 *   dropped (gpt-oss's attention sinks). The softmax here is online
 *   (FlashAttention's recurrence): one pass over the keys, the same result as
 *   the two-pass reference up to rounding.
 *
 * The caches (the window ring, the compressed entries, the indexer keys)
 * hold rows of the model's KV cache type (F32, F16, Q8_0 or Q4_0), written
 * by cpu_v4_rows_store and converted back to f32 exactly as they are read
 * (the f32 rows in place); everything else is f32.
 *
 * Rooflines: attention reads (window + entries) x head_dim values per query
 * and head, 4 FLOPs each; the indexer n_keys x n_head x head_dim MACs per
 * query; mHC (2 + hc) hc x hc n_embd MACs per token (the projection, a matrix
 * product outside) plus O(hc^2 iters); the pooling 2 rate x width exp per
 * entry. Thread-safe on distinct outputs; the scratch is the caller's. */
#ifndef DI_BACKEND_CPU_DEEPSEEK_V4_OPS_H
#define DI_BACKEND_CPU_DEEPSEEK_V4_OPS_H

#include <stddef.h>
#include <stdint.h>

#include "backend/cpu/threadpool.h"
#include "backend/types.h"

void cpu_hc_pre(const float *mix, const float *base, const float *scale, int hc, int sinkhorn_iters,
                float eps, const float *x, int64_t n_embd, int64_t n, float *collapsed, float *post,
                float *comb);
void cpu_hc_pre_shifted(const float *mix, const float *base, const float *scale, int hc,
                        int sinkhorn_iters, float eps, const float *x, int64_t n_embd, int64_t n,
                        const float *pre_in, float *collapsed, float *pre_out, float *post,
                        float *comb);
/* backend.h's hc_mean. */
void cpu_hc_mean(const float *x, int hc, int64_t n_embd, int64_t n, float *out, int64_t out_stride);
/* backend.h's engram_gate. */
void cpu_engram_gate(float *x, const float *kv, const float *wh, const float *we, int hc,
                     int64_t n_embd, int64_t n, float eps);
void cpu_hc_post(const float *x, const float *y, const float *post, const float *comb, int hc,
                 int64_t n_embd, int64_t n, float *out);
void cpu_compress_pool(const float *kv, const float *gate, int64_t ring, int64_t row_stride,
                       const float *bias, int rate, int64_t width, int overlap, int64_t e0,
                       int64_t n, float *out, int64_t out_stride);
/* DeepSeek-V4's cache rows (backend.h's v4_rows_store): n rows of src into
 * dst as dtype (F32, F16, Q8_0 or Q4_0), cpu_row_bytes(dtype, width) apart,
 * rotated as kv_cache.h's rows are (cpu_kv_rotates). */
void cpu_v4_rows_store(model_dtype dtype, void *dst, const float *src, int64_t src_stride,
                       int64_t width, int64_t n);
/* keys: rows of head_dim of dtype (cpu_v4_rows_store's), converted to f32
 * (and rotated back) as they are read. scratch: n_threads rows of
 * scratch_stride floats, at least n_keys + 1 (and with cand, n_keys + 2 +
 * n_keys / cand->block: the blocks' scores after the entries'). Its key
 * chunks and rotated query live in the pool's per-thread scratch
 * (threadpool.h), reserved here. Errors, computing nothing:
 * DI_ERR_INVALID_ARGUMENT (NULL pool, head_dim over 1024, a candidate block
 * below 1 or a scratch row too short for it), DI_ERR_OUT_OF_MEMORY (no
 * memory for the pool's scratch). */
di_status cpu_indexer_topk(cpu_threadpool *pool, const float *q, const float *w, int n_head,
                           int64_t head_dim, int64_t n, const int64_t *pos, const void *keys,
                           model_dtype dtype, int64_t n_keys, int rate, float scale, float w_scale,
                           int k, int32_t *sel, const backend_index_candidates *cand,
                           float *scratch, int64_t scratch_stride);
/* backend.h's sink_attention (last NULL: causal); win, comp: rows of head_dim
 * of dtype, as the indexer's keys. Its key chunks
 * and accumulators live in the pool's per-thread scratch, reserved here; the
 * errors are cpu_indexer_topk's. */
di_status cpu_sink_attention(cpu_threadpool *pool, const float *q, int n_head, int64_t head_dim,
                             int64_t n, const int64_t *pos, const int64_t *last, const void *win,
                             int64_t win_ring, int window, const void *comp, int64_t n_comp,
                             int rate, const int32_t *sel, int k, model_dtype dtype,
                             const float *sinks, float scale, float *out);
/* Bytes of the pool's scratch a thread that every cpu_indexer_topk and
 * cpu_sink_attention call (any head_dim and heads they take) fits in: the
 * CPU backend reserves it when created, so these never allocate there.
 * Thread-safe. */
size_t cpu_v4_scratch_bytes(void);

#endif
