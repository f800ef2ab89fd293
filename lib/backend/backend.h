/* The backend interface: what an architecture (lib/model/<arch>.c) needs from a
 * device, and nothing about how the device does it. The CPU backend
 * (backend/cpu/backend_cpu.c) implements it with the kernels of backend/cpu/;
 * a CUDA backend implements the same table. Architecture code says what to
 * compute through these calls only (CI checks that lib/model/ includes nothing
 * of backend/cpu/).
 *
 * The line is drawn where ggml-backend draws its buffer/tensor line and vLLM
 * its attention-backend line, but eagerly and in plain C: each call runs one
 * operation now, in call order, on memory the backend owns.
 *   - Weights are resident in the backend's memory in their stored formats
 *     (backend_matrix: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K,
 *     Q6_K, IQ4_NL, IQ4_XS, FP8-E4M3 with block scales); norms and biases as f32 vectors.
 *   - Activations are f32 buffers from backend_alloc (device memory: an
 *     architecture never reads or writes them itself; it may offset them).
 *   - The KV cache is paged (vLLM's PagedAttention layout): the backend holds
 *     the blocks' memory, a backend_kv_seq the block table of one sequence;
 *     which block holds what (allocation, sharing, the prefix cache) is host
 *     bookkeeping, the same on every device (model/kv_pool.h).
 *   - Token ids, positions and the chosen experts are host arrays.
 *
 * Ownership: everything a backend hands out (buffers, vectors, matrices, rope
 * tables, caches) belongs to it and is freed by backend_free; block tables are the
 * caller's. Thread-safety: one thread drives a backend at
 * a time (the model's); the backend may run each operation on threads of its
 * own. Errors: the creating calls return di_status with a message naming the
 * tensor; the operations cannot fail (their arguments are checked at load). */
#ifndef DI_BACKEND_BACKEND_H
#define DI_BACKEND_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "backend/types.h"
#include "deepinfer/deepinfer.h"

typedef struct backend backend;
/* A weight [n_out rows, n_in columns] (model_tensor ne = {n_in, n_out}) resident
 * in the backend in its stored format. */
typedef struct backend_matrix backend_matrix;
/* A rotary-embedding table (backend_rope_params). */
typedef struct backend_rope backend_rope;
/* A paged KV cache: keys and values per layer (GQA) or one latent row per
 * token and layer (MLA). */
typedef struct backend_kv backend_kv;
/* The routed experts of one MoE layer. */
typedef struct backend_moe backend_moe;

/* The blocks of one sequence in a paged cache and the tokens stored there. */
typedef struct backend_kv_seq {
    int32_t *block_table; /* n_blocks_max entries, owned */
    int32_t n_blocks;     /* blocks held */
    int32_t n_blocks_max;
    int64_t n_tokens; /* tokens stored */
    int32_t n_keyed;  /* leading blocks with a content key (the prefix cache) */
} backend_kv_seq;

typedef struct backend_options {
    int n_threads;    /* >= 1 */
    int use_ref;      /* 1: the scalar reference kernels (tests) */
    int64_t max_rows; /* most activation rows one operation takes (n_batch) */
    int64_t max_ctx;  /* most tokens one attention reads (n_ctx) */
    int device;       /* a di_device; 0 counts as DI_DEVICE_CPU */
} backend_options;

/* The shape of Multi-head Latent Attention (attention_mla.h has the math). */
typedef struct backend_mla_shape {
    int n_head, nope, rope, v, kv_lora_rank;
} backend_mla_shape;

/* The table every backend fills. Shapes: rows are contiguous unless a stride (in
 * floats) is given. */
typedef struct backend_ops {
    const char *name;
    void (*free)(backend *be);
    /* --- memory --- */
    /* n f32 of activation memory, uninitialised; NULL when out of memory. */
    float *(*alloc)(backend *be, int64_t n);
    /* p (NULL, or memory of this backend's alloc / realloc) resized to n f32,
     * its first min(old, n) kept; NULL when out of memory or p is not the
     * backend's, p then untouched. For caches that grow with their sequence. */
    float *(*realloc)(backend *be, float *p, int64_t n);
    /* A 1-D f32/f16/bf16 tensor (a norm, a bias, a router bias) as f32. */
    di_status (*vector)(backend *be, const model_tensor *t, const float **out, di_error **err);
    /* A 2-D weight; DI_ERR_UNSUPPORTED when the backend has no product for its
     * dtype and row length (or fp8 lacks block scales). */
    di_status (*matrix)(backend *be, const model_tensor *t, const backend_matrix **out,
                        di_error **err);
    /* An embedding table (ne = {n_in, n_rows}) read row by row by embed: any
     * stored dtype the backend dequantizes. DI_ERR_UNSUPPORTED otherwise. */
    di_status (*embedding)(backend *be, const model_tensor *t, const backend_matrix **out,
                           di_error **err);
    /* The whole weight dequantized, f32 [n_out, n_in] (fp8 times its scales). */
    di_status (*matrix_f32)(backend *be, const backend_matrix *w, const float **out,
                            di_error **err);
    /* MLA's kv_b from llama.cpp's split form (newer deepseek2 GGUFs): k_b, ne
     * {nope, kv_lora_rank, n_head} (per head W_UK transposed), and v_b, ne
     * {kv_lora_rank, v, n_head}, any stored dtype the backend dequantizes,
     * joined into the f32 [n_head (nope + v), kv_lora_rank] weight (each head's
     * nope key rows, then its v value rows, as transformers' kv_b_proj) and the
     * same as an F32 matrix (mla_attention's kv_b and kv_b_w). */
    di_status (*mla_kv_b_join)(backend *be, const model_tensor *k_b, const model_tensor *v_b,
                               const float **kv_b, const backend_matrix **kv_b_w, di_error **err);
    di_status (*rope_create)(backend *be, const backend_rope_params *p, const backend_rope **out,
                             di_error **err);
    /* n_expert experts of one layer, each gate and up [n_ff, n_embd] and down
     * [n_embd, n_ff] (arrays copied; the matrices from matrix); swiglu_limit >
     * 0 clips each expert's SwiGLU as silu_mul_clamp (DeepSeek-V4), 0 none. */
    di_status (*moe_create)(backend *be, int32_t n_expert, const backend_matrix *const *gate,
                            const backend_matrix *const *up, const backend_matrix *const *down,
                            float swiglu_limit, const backend_moe **out, di_error **err);
    /* --- operations --- */
    /* x[t * x_stride, +n_in) = row tokens[t] of the embedding table (n_in wide). */
    void (*embed)(backend *be, const backend_matrix *table, const int32_t *tokens, int64_t n,
                  float *x, int64_t x_stride);
    /* y[t] = x[t] / sqrt(mean(x[t]^2) + eps) * w for n_rows rows of n (y may be x);
     * w NULL: unweighted (DeepSeek-V4's UnweightedRMSNorm). */
    void (*rmsnorm)(backend *be, const float *x, int64_t x_stride, const float *w, float *y,
                    int64_t y_stride, int64_t n_rows, int64_t n, float eps);
    /* y[p] = x w[p]^T (+ bias[p]) for n_parts weights of the same n_in, x f32
     * [n_rows, n_in], y[p] f32 [n_rows, n_out(p)]; bias and bias[p] may be NULL.
     * n_parts <= 4. */
    void (*matmul)(backend *be, int n_parts, const backend_matrix *const *w,
                   const float *const *bias, const float *x, int64_t n_rows, float *const *y);
    /* x[i] += y[i] */
    void (*add)(backend *be, float *x, const float *y, int64_t n);
    /* gate[i] = silu(gate[i]) * up[i] */
    void (*silu_mul)(backend *be, float *gate, const float *up, int64_t n);
    /* Rotate, in place, n_heads heads of each of n_rows rows (head h of row t at
     * x + t * row_stride + h * head_stride, head_dim wide) by position pos[t]. */
    void (*rope)(backend *be, const backend_rope *r, float *x, int64_t n_rows, int64_t row_stride,
                 int n_heads, int64_t head_stride, const int64_t *pos);
    /* --- the KV cache --- */
    /* n_blocks blocks of block_size tokens; dtype f32 or f16. GQA: n_head_kv x
     * head_dim keys and values per token and layer. Latent (MLA, mla != NULL):
     * one row of kv_lora_rank + rope per token and layer; mla_naive 1 makes room
     * for the expanded reference form. */
    di_status (*kv_create)(backend *be, model_dtype dtype, int n_layer, int n_head_kv, int head_dim,
                           int block_size, int32_t n_blocks, const backend_mla_shape *mla,
                           int mla_naive, backend_kv **out, di_error **err);
    size_t (*kv_bytes_per_token)(const backend_kv *kv);
    int32_t (*kv_blocks_total)(const backend_kv *kv);
    /* Bytes one block holds over all layers (keys and values, or latent rows),
     * and a copy of them to host memory dst / from host memory src (the
     * prefix cache's host and disk tiers); the layout is the backend's own,
     * the same for every cache made with the same arguments. */
    size_t (*kv_block_bytes)(const backend_kv *kv);
    void (*kv_block_read)(backend *be, const backend_kv *kv, int32_t block, void *dst);
    void (*kv_block_write)(backend *be, backend_kv *kv, int32_t block, const void *src);
    /* Store rows k, v (f32 [n, kv width]; v NULL for a latent cache) at slots
     * pos0.. of layer l; the slots are reserved. */
    void (*kv_store)(backend *be, backend_kv *kv, const backend_kv_seq *s, int l, int64_t pos0,
                     int64_t n, const float *k, const float *v);
    /* Causal GQA attention (attention.h): q f32 [n, n_head, head_dim] at
     * positions pos0.., out likewise; keys up to pos0 + n - 1 stored. */
    void (*attention)(backend *be, const backend_kv *kv, const backend_kv_seq *s, int l,
                      const float *q, int n_head, int64_t pos0, int64_t n, float scale, float *out);
    /* Causal MLA over the latent cache (attention_mla.h): q f32 [n, n_head,
     * nope + rope] (q_pe rotated), kv_b the f32 [n_head (nope + v), R] weight
     * (absorbed form) and kv_b_w the same weight as stored (naive form, when
     * the cache was made with mla_naive), out f32 [n, n_head, v]. */
    void (*mla_attention)(backend *be, const backend_kv *kv, const backend_kv_seq *s, int l,
                          const float *q, int64_t pos0, int64_t n, const float *kv_b,
                          const backend_matrix *kv_b_w, float scale, float *out);
    /* --- mixture of experts --- */
    /* Route n tokens from router logits f32 [n, n_expert] (bias: the
     * correction bias [n_expert] for NOAUX_TC, else NULL): sel and weight,
     * host arrays [n, n_expert_used] (sel read, not written, for HASH). */
    void (*moe_route)(backend *be, const backend_route_params *p, const float *bias,
                      const float *logits, int64_t n, int32_t *sel, float *weight);
    /* The routed experts of a batch: out[t] (+)= sum_i weight[t, i] *
     * Expert_{sel[t, i]}(x[t]) over i < n_expert_used (k),
     * Expert_e(x) = (SiLU(x gate[e]) * (x up[e])) down[e],
     * x and out f32 [n, n_embd], each active expert's weights read once over the
     * tokens that chose it, experts added in index order. accumulate 0 writes
     * out, 1 adds to it. */
    void (*moe_experts)(backend *be, const backend_moe *moe, const float *x, int64_t n,
                        const int32_t *sel, const float *weight, int32_t k, float *out,
                        int accumulate);
    /* --- DeepSeek-V4 (deepseek_v4.c; the math is spelled out in
     * backend/cpu/deepseek_v4_ops.h) --- */
    /* dst[t * dst_stride, +width) = src[t * src_stride, +width) for n rows
     * (regions do not overlap). */
    void (*copy_rows)(backend *be, float *dst, int64_t dst_stride, const float *src,
                      int64_t src_stride, int64_t width, int64_t n);
    /* The SwiGLU with DeepSeek-V4's clip: gate[i] = SiLU(min(gate[i], limit)) *
     * clamp(up[i], -limit, limit) (limit <= 0: silu_mul). */
    void (*silu_mul_clamp)(backend *be, float *gate, const float *up, int64_t n, float limit);
    /* mHC's mappings from mix f32 [n, n_mix] (the streams' projection, fn ·
     * RMSNorm(flatten(x))) and the collapse of x f32 [n, hc, n_embd]:
     * pre = sigmoid(mix[:hc] * scale[0] + base[:hc]) + eps, collapsed[t] =
     * sum_j pre_j x[t, j]; with post != NULL (n_mix = (2 + hc) hc) also post =
     * 2 sigmoid(mix[hc:2hc] * scale[1] + base[hc:2hc]) [n, hc] and comb =
     * Sinkhorn_iters(softmax_rows(mix[2hc:] * scale[2] + base[2hc:]) + eps)
     * [n, hc, hc]; with post NULL (the final head, n_mix = hc) pre only. */
    void (*hc_pre)(backend *be, const float *mix, const float *base, const float *scale, int hc,
                   int sinkhorn_iters, float eps, const float *x, int64_t n_embd, int64_t n,
                   float *collapsed, float *post, float *comb);
    /* DeepSeek-V4.1's shifted mHC (docs/deepseek-v41.md): a block's input is
     * the streams mixed by the pre mix the previous block computed,
     * collapsed[t] = sum_j pre_in[t, j] x[t, j] (pre_in NULL: stream 0, the
     * first block's); with mix != NULL the block's own mappings from mix as
     * hc_pre computes them: pre_out [n, hc] (for the next block), post [n, hc]
     * and comb [n, hc, hc]. pre_out may be pre_in (read first). */
    void (*hc_pre_shifted)(backend *be, const float *mix, const float *base, const float *scale,
                           int hc, int sinkhorn_iters, float eps, const float *x, int64_t n_embd,
                           int64_t n, const float *pre_in, float *collapsed, float *pre_out,
                           float *post, float *comb);
    /* mHC's expansion: out[t, k] = post[t, k] y[t] + sum_j comb[t, j, k] x[t, j]
     * for x, out f32 [n, hc, n_embd] (out != x), y [n, n_embd]. */
    void (*hc_post)(backend *be, const float *x, const float *y, const float *post,
                    const float *comb, int hc, int64_t n_embd, int64_t n, float *out);
    /* DeepSeek-V4.1's Engram gate (tile-kernels engram_gate_ref), in place on
     * the streams x f32 [n, hc, n_embd] with kv f32 [n, hc + 1, n_embd] (a key
     * per stream, then the value) and norm weights wh, we [hc, n_embd]:
     * x[t, j] += sigmoid(signed_sqrt(d)) kv[t, hc] where d = <x[t, j] wh[j],
     * kv[t, j] we[j]> rstd(x[t, j]) rstd(kv[t, j]) / sqrt(n_embd), rstd(v) =
     * 1 / sqrt(mean(v^2) + eps), signed_sqrt(d) = sign(d) sqrt(max(|d|, 1e-6)). */
    void (*engram_gate)(backend *be, float *x, const float *kv, const float *wh, const float *we,
                        int hc, int64_t n_embd, int64_t n, float eps);
    /* The mean of the mHC streams (llama.cpp's deepseek4 build_hc_mean, what
     * DeepSeek-V4's DSpark reads of the target): out[t] = (x[t, 0] + x[t, 1] +
     * ... + x[t, hc - 1]) * (1 / hc), summed in that order, for x f32 [n, hc,
     * n_embd]; out rows out_stride floats apart. */
    void (*hc_mean)(backend *be, const float *x, int hc, int64_t n_embd, int64_t n, float *out,
                    int64_t out_stride);
    /* A compressor's entries e0 .. e0 + n - 1 (DeepSeek-V4 §2.3): entry e pools
     * the projections of tokens [e rate, (e + 1) rate) held in the rings kv and
     * gate (token p at row p % ring, row_stride floats apart): out[e, c] =
     * sum_j softmax_j(gate[j, c] + bias[j, c]) kv[j, c] over c < width. overlap
     * 1 (CSA): each row holds 2 width values; the slots are the previous
     * window's first halves (bias rows' first halves) then this window's second
     * halves, the previous window of entry 0 weighing nothing. bias NULL: none
     * (DeepSeek-V4.1's). out f32 [n, width] (out_stride floats apart). */
    void (*compress_pool)(backend *be, const float *kv, const float *gate, int64_t ring,
                          int64_t row_stride, const float *bias, int rate, int64_t width,
                          int overlap, int64_t e0, int64_t n, float *out, int64_t out_stride);
    /* DeepSeek-V4's caches (the window rings, the compressed entries, the
     * indexer keys) hold rows in the model's KV cache dtype: F32, F16, or Q8_0
     * / Q4_0 blocks of 32 (width a multiple of 32), model_kv_row_bytes(dtype,
     * width) bytes a row; the compressors' rings are F32 rows. This stores n
     * rows of src (f32, width wide, src_stride floats apart) at dst, converted
     * (F32 copied as it is); quantized rows of a multiple of 64 values are
     * stored Hadamard-rotated in groups of 64 (as the paged caches,
     * lib/backend/cpu/kv_cache.h), which indexer_topk and sink_attention undo. */
    void (*v4_rows_store)(backend *be, model_dtype dtype, void *dst, const float *src,
                          int64_t src_stride, int64_t width, int64_t n);
    /* The lightning indexer (DeepSeek-V4 §2.3.1): for query row t at position
     * pos[t], score[s] = sum_h w[t, h] w_scale * ReLU(q[t, h] . keys[s]) * scale
     * over the entries s < min(n_keys, (pos[t] + 1) / rate); sel[t * k, +k] (host)
     * = the k best (the lower index first among equals), -1 where fewer. q f32
     * [n, n_head, head_dim], w [n, n_head], keys [n_keys] rows of head_dim
     * (v4_rows_store's, of kv_dtype). cand (NULL: none): DeepSeek-V4.1's
     * candidate blocks, made (cand->out) or kept to (cand->in). */
    void (*indexer_topk)(backend *be, const float *q, const float *w, int n_head, int64_t head_dim,
                         int64_t n, const int64_t *pos, const void *keys, model_dtype kv_dtype,
                         int64_t n_keys, int rate, float scale, float w_scale, int k, int32_t *sel,
                         const backend_index_candidates *cand);
    /* Attention with one shared K = V head and a learned sink per head
     * (DeepSeek-V4's, as gpt-oss's): query row t (position pos[t]) of q f32
     * [n, n_head, head_dim] reads the window ring's rows of positions
     * (pos - window, last[t]] (position p at row p % win_ring of win; last
     * NULL: pos[t], causal; DSpark's blocks see their later rows too) and
     * compressed entries (rows of comp): with sel (host [n, k]) the listed ones
     * (-1 skipped), else entries e < min(n_comp, (pos + 1) / rate) (none when
     * comp is NULL); softmax over the scaled scores and sinks[h], the sink's
     * share dropped. win and comp hold rows of head_dim (v4_rows_store's, of
     * kv_dtype). out f32 [n, n_head, head_dim], not overlapping q. */
    void (*sink_attention)(backend *be, const float *q, int n_head, int64_t head_dim, int64_t n,
                           const int64_t *pos, const int64_t *last, const void *win,
                           int64_t win_ring, int window, const void *comp, int64_t n_comp, int rate,
                           const int32_t *sel, int k, model_dtype kv_dtype, const float *sinks,
                           float scale, float *out);
} backend_ops;

/* Every backend starts with this. */
struct backend {
    const backend_ops *ops;
};

/* The backend for these options: the CPU (built in), or CUDA (the module
 * libdeepinfer-cuda.so, loaded on first use: backend/module.h). Errors:
 * DI_ERR_INVALID_ARGUMENT (an unknown device), DI_ERR_OUT_OF_MEMORY,
 * DI_ERR_BACKEND (threads; a CUDA call failing), DI_ERR_UNSUPPORTED (CUDA asked
 * for where it cannot run: the message names why). */
di_status backend_create(const backend_options *opt, backend **out, di_error **err);

static inline void backend_free(backend *be)
{
    if (be) be->ops->free(be);
}
static inline const char *backend_name(const backend *be)
{
    return be->ops->name;
}

#endif
