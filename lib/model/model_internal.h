/* What the architectures of lib/model/ share beyond model.h: a sequence's
 * state, and the KV cache block budget from the options. */
#ifndef DI_MODEL_MODEL_INTERNAL_H
#define DI_MODEL_MODEL_INTERNAL_H

#include "backend/backend.h"
#include "model/kv_pool.h"
#include "model/model.h"

/* One sequence: its block table in the model's paged cache (backend.h); a
 * DeepSeek-V4 model's sequences also have their layers' caches (deepseek_v4.h;
 * NULL otherwise). */
struct model_seq {
    backend_kv_seq kv;
    struct dsv4_cache *v4;
};

/* The number of KV cache blocks the options ask for (model_options:
 * n_kv_blocks, else kv_bytes / block_bytes, else kv_n_ctx_multiple sequences of
 * n_ctx), block_bytes the bytes one block of MODEL_KV_BLOCK tokens takes over
 * all layers. DI_ERR_INVALID_ARGUMENT when kv_bytes holds no block or more than
 * 2^31. */
di_status model_kv_block_count(const model_options *opt, int64_t block_bytes, int32_t *out,
                               di_error **err);

/* Bytes of one KV cache row of n values in the cache's dtype (F32, F16, or
 * Q8_0 and Q4_0 blocks of 32), and the check a cache of rows of dims values
 * per head makes at load: DI_ERR_UNSUPPORTED, naming kv_cache_type, the dtype
 * and the dimension (`what`), for a Q8_0/Q4_0 cache whose head_dim is not a
 * multiple of 32. */
int64_t model_kv_row_bytes(model_dtype dtype, int64_t n);
di_status model_kv_dtype_check(model_dtype dtype, int64_t dims, const char *what, di_error **err);

/* The seed of the prefix cache's block keys (model/kv_pool.h): XXH3-64 of
 * what decides the bytes a token's cache entry holds — the weights
 * (model_weights_digest), the configuration and the cache dtype, the
 * reference-kernel and MLA-form switches, the block size. */
uint64_t model_kv_fingerprint(const model_weights *w, const model_options *opt);

/* One step of an architecture over items (model_forward_batch's contract):
 * n rows in all; logits as model_logits writes them. */
typedef void (*model_step_fn)(void *arch, const model_batch_item *items, int n_items, int64_t n,
                              float *logits, int all_logits);

/* model_forward for an architecture: tokens appended to seq in chunks of at
 * most opt->n_batch, each one step; logits as model_forward says. Errors (seq
 * unchanged): DI_ERR_CONTEXT_LENGTH past opt->n_ctx or the pool's blocks. */
di_status model_forward_chunked(kv_pool *pool, model_seq *seq, const model_options *opt,
                                uint32_t n_vocab, const int32_t *tokens, int64_t n_tokens,
                                float *logits, int all_logits, model_step_fn step, void *arch,
                                di_error **err);

/* The LM head of a step over items (n rows of x, n_embd wide, stacked in item
 * order): logits = RMSNorm(x) * output_norm  output^T, for every row when
 * all_logits, else one row per item with want_logits (its last), in item
 * order. h: scratch [n, n_embd] in the backend. */
void model_logits(backend *be, const backend_matrix *output, const float *output_norm, float eps,
                  int64_t n_embd, const float *x, float *h, const model_batch_item *items,
                  int n_items, int64_t n, float *logits, int all_logits);

#endif
