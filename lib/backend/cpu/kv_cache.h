/* A paged KV cache: keys and values of every layer in fixed-size blocks of
 * tokens, shared by sequences through per-sequence block tables (vLLM's
 * PagedAttention layout). A block holds, per layer, block_size tokens x
 * n_head_kv x head_dim keys and as many values, stored as f32 or f16.
 *
 * Address of token p of a sequence in layer l: block b = table[p / block_size],
 * slot p % block_size; K at k + ((l * n_blocks + b) * block_size + slot) * kv_dim.
 *
 * Which blocks a sequence holds is host bookkeeping outside the backend
 * (model/kv_pool.h); the cache only holds their memory, which attention
 * kernels read concurrently. */
#ifndef DI_BACKEND_CPU_KV_CACHE_H
#define DI_BACKEND_CPU_KV_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include "deepinfer/deepinfer.h"
#include "backend/backend.h"
#include "backend/types.h"

typedef struct cpu_kv_cache {
    model_dtype dtype;                        /* MODEL_DTYPE_F32 or MODEL_DTYPE_F16 */
    int n_layer, n_head_kv, head_dim, kv_dim; /* kv_dim = n_head_kv * head_dim */
    int block_size;                           /* tokens per block */
    int32_t n_blocks;
    size_t elem_size;
    void *k, *v;
} cpu_kv_cache;

/* The tokens of one sequence and the blocks that hold them (the interface's
 * device-neutral block table). */
typedef backend_kv_seq cpu_kv_seq;

/* Errors: DI_ERR_INVALID_ARGUMENT (dtype not F32/F16, non-positive sizes),
 * DI_ERR_OUT_OF_MEMORY. */
di_status cpu_kv_cache_init(cpu_kv_cache *c, model_dtype dtype, int n_layer, int n_head_kv,
                            int head_dim, int block_size, int32_t n_blocks);
/* A cache of one row per token and layer and no values (v is NULL): MLA's
 * latent cache, dim = kv_lora_rank + qk_rope_head_dim (the compressed c_kv
 * and the shared rope key), read through cpu_kv_k. Errors as cpu_kv_cache_init. */
di_status cpu_kv_cache_init_latent(cpu_kv_cache *c, model_dtype dtype, int n_layer, int dim,
                                   int block_size, int32_t n_blocks);
/* Bytes one token takes in the cache over all layers: n_layer * kv_dim *
 * elem_size, twice that when values are stored. */
size_t cpu_kv_cache_bytes_per_token(const cpu_kv_cache *c);
void cpu_kv_cache_free(cpu_kv_cache *c);

/* The K (or V) row [kv_dim] of token pos of the sequence in layer l. */
static inline void *cpu_kv_k(const cpu_kv_cache *c, const cpu_kv_seq *s, int l, int64_t pos)
{
    int64_t b = s->block_table[pos / c->block_size];
    int64_t slot = pos % c->block_size;
    return (char *)c->k + (size_t)(((int64_t)l * c->n_blocks + b) * c->block_size + slot) *
                              c->kv_dim * c->elem_size;
}
static inline void *cpu_kv_v(const cpu_kv_cache *c, const cpu_kv_seq *s, int l, int64_t pos)
{
    int64_t b = s->block_table[pos / c->block_size];
    int64_t slot = pos % c->block_size;
    return (char *)c->v + (size_t)(((int64_t)l * c->n_blocks + b) * c->block_size + slot) *
                              c->kv_dim * c->elem_size;
}

/* Bytes of one block over all layers: n_layer x block_size x kv_dim x
 * elem_size, twice that with values; and its copy out and in, layer by layer
 * (keys of every layer, then values). */
size_t cpu_kv_block_bytes(const cpu_kv_cache *c);
void cpu_kv_block_read(const cpu_kv_cache *c, int32_t block, void *dst);
void cpu_kv_block_write(cpu_kv_cache *c, int32_t block, const void *src);

/* Store n_tokens rows of k and v (f32 [n_tokens, kv_dim]) at positions
 * pos0.. of layer l, converting to the cache dtype (v is ignored, and may be
 * NULL, in a latent cache). The positions must be
 * reserved. Roofline: reads 8 n_tokens kv_dim bytes, writes 2 n_tokens kv_dim
 * elem_size bytes; no arithmetic beyond the conversion. */
void cpu_kv_store(cpu_kv_cache *c, const cpu_kv_seq *s, int l, int64_t pos0, int64_t n_tokens,
                  const float *k, const float *v);

#endif
