/* A paged KV cache: keys and values of every layer in fixed-size blocks of
 * tokens, shared by sequences through per-sequence block tables (vLLM's
 * PagedAttention layout). A block holds, per layer, block_size tokens x
 * n_head_kv x head_dim keys and as many values, stored as f32 or f16, or in
 * ggml's Q8_0 or Q4_0 blocks of 32 (llama.cpp's --cache-type-k/v q8_0, q4_0:
 * each head's slice of a row is whole blocks, head_dim a multiple of 32).
 *
 * A Q8_0 or Q4_0 cache whose rows are whole groups of 64 values (head_dim,
 * or an MLA latent row, a multiple of 64) is rotated: every group of 64
 * values is multiplied by the orthonormal Hadamard matrix H (Sylvester's,
 * divided by 8; symmetric, so H H = I) before it is quantized. The rotation
 * spreads a few large channels over the group, so the block scales fit the
 * rest better (QuaRot, arXiv 2404.00456; llama.cpp rotates its quantized
 * caches the same way, gated the same way). Scores are unchanged, as q H .
 * k H = q . k: attention rotates q and, as the output is a sum of rotated
 * values, rotates the output back (cpu_attention); a latent cache's rows are
 * rotated back when read.
 *
 * Address of token p of a sequence in layer l: block b = table[p / block_size],
 * slot p % block_size; K at k + ((b * n_layer + l) * block_size + slot) *
 * row_bytes, head g's slice head_bytes * g further. A block keeps its layers
 * together ([block][layer][slot][row]): a sequence's first tokens touch one
 * stretch of memory, not one per layer (on 2 MiB pages, huge_pages.h, a
 * layer-major pool committed 2 MiB per layer and pool at the first token).
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
    model_dtype dtype;                        /* MODEL_DTYPE_F32, _F16, _Q8_0 or _Q4_0 */
    int n_layer, n_head_kv, head_dim, kv_dim; /* kv_dim = n_head_kv * head_dim */
    int block_size;                           /* tokens per block */
    int32_t n_blocks;
    size_t row_bytes;  /* one token's K (or V) row of kv_dim values, as stored */
    size_t head_bytes; /* one head's head_dim values of it */
    int rotated;       /* stored rotated by H in groups of 64 (above) */
    size_t bytes;      /* of k, and of v: huge-page backed (huge_pages.h) */
    void *k, *v;
} cpu_kv_cache;

/* The tokens of one sequence and the blocks that hold them (the interface's
 * device-neutral block table). */
typedef backend_kv_seq cpu_kv_seq;

/* Errors: DI_ERR_INVALID_ARGUMENT (dtype not F32/F16/Q8_0/Q4_0, non-positive
 * sizes, a Q8_0/Q4_0 head_dim not a multiple of 32), DI_ERR_OUT_OF_MEMORY (also
 * when n_head_kv x head_dim exceeds an int or a pool's bytes a size_t). */
di_status cpu_kv_cache_init(cpu_kv_cache *c, model_dtype dtype, int n_layer, int n_head_kv,
                            int head_dim, int block_size, int32_t n_blocks);
/* A cache of one row per token and layer and no values (v is NULL): MLA's
 * latent cache, dim = kv_lora_rank + qk_rope_head_dim (the compressed c_kv
 * and the shared rope key), read through cpu_kv_k. Errors as cpu_kv_cache_init. */
di_status cpu_kv_cache_init_latent(cpu_kv_cache *c, model_dtype dtype, int n_layer, int dim,
                                   int block_size, int32_t n_blocks);
/* x[0, n) = H x in groups of 64 (n a multiple of 64): the cache's rotation,
 * its own inverse. A fast Walsh-Hadamard transform: 6 n adds, n multiplies. */
void cpu_kv_rotate(float *x, int64_t n);

/* Whether a cache of dtype stores its rows of n values rotated (above): Q8_0
 * or Q4_0, and n a multiple of 64. */
int cpu_kv_rotates(model_dtype dtype, int64_t n);
/* One row of n f32 values into dst as dtype (F32, F16, Q8_0 or Q4_0; n whole
 * blocks), rotated first in groups of 64 when rotated (n then a multiple of
 * 64). Roofline: reads 4n bytes, writes cpu_row_bytes(dtype, n). */
void cpu_kv_store_row(model_dtype dtype, int rotated, const float *x, void *dst, int64_t n);

/* Bytes one token takes in the cache over all layers: n_layer * row_bytes,
 * twice that when values are stored. */
size_t cpu_kv_cache_bytes_per_token(const cpu_kv_cache *c);
void cpu_kv_cache_free(cpu_kv_cache *c);

/* Byte offset of layer l's rows of block b in the K or V pool (above). */
static inline size_t cpu_kv_block_offset(const cpu_kv_cache *c, int l, int64_t b)
{
    return ((size_t)b * (size_t)c->n_layer + (size_t)l) * (size_t)c->block_size * c->row_bytes;
}

/* The K (or V) row [kv_dim] of token pos of the sequence in layer l. */
static inline void *cpu_kv_k(const cpu_kv_cache *c, const cpu_kv_seq *s, int l, int64_t pos)
{
    return (char *)c->k + cpu_kv_block_offset(c, l, s->block_table[pos / c->block_size]) +
           (size_t)(pos % c->block_size) * c->row_bytes;
}
static inline void *cpu_kv_v(const cpu_kv_cache *c, const cpu_kv_seq *s, int l, int64_t pos)
{
    return (char *)c->v + cpu_kv_block_offset(c, l, s->block_table[pos / c->block_size]) +
           (size_t)(pos % c->block_size) * c->row_bytes;
}

/* Bytes of one block over all layers: n_layer x block_size x row_bytes,
 * twice that with values; and its copy out and in, layer by layer
 * (keys of every layer, then values). */
size_t cpu_kv_block_bytes(const cpu_kv_cache *c);
void cpu_kv_block_read(const cpu_kv_cache *c, int32_t block, void *dst);
void cpu_kv_block_write(cpu_kv_cache *c, int32_t block, const void *src);

/* Store n_tokens rows of k and v (f32 [n_tokens, kv_dim]) at positions
 * pos0.. of layer l, converting to the cache dtype, rotated first when the
 * cache is (v is ignored, and may be NULL, in a latent cache). The positions must be
 * reserved. Roofline: reads 8 n_tokens kv_dim bytes, writes 2 n_tokens
 * row_bytes; no arithmetic beyond the conversion (and the block scales). */
void cpu_kv_store(cpu_kv_cache *c, const cpu_kv_seq *s, int l, int64_t pos0, int64_t n_tokens,
                  const float *k, const float *v);

#endif
