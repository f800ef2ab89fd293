/* The DeepSeek-V4 forward pass (deepseek_v4.c), behind model.h: model_load
 * hands a DeepSeek-V4 model_weights here and the model's default sequence
 * runs through it. Internal to lib/model/.
 *
 * So far one sequence: the cache of each layer (the sliding window's keys,
 * the compressors' pending rows and entries, the indexer's keys) lives in
 * buffers of the model for its default sequence; the engine's batched,
 * paged sequences (model_seq_*, model_forward_batch) are DI_ERR_UNSUPPORTED
 * for V4 (docs/deepseek-v4.md). */
#ifndef DI_MODEL_DEEPSEEK_V4_H
#define DI_MODEL_DEEPSEEK_V4_H

#include "backend/backend.h"
#include "model/model.h"

typedef struct dsv4 dsv4;

/* Prepare a DeepSeek-V4 model over w (borrowed: it must outlive the dsv4);
 * opt is already normalised by model_load. Errors: a tensor missing or of the
 * wrong shape (DI_ERR_MODEL_FORMAT, naming it), a tid2eid entry that is not an
 * expert (DI_ERR_MODEL_FORMAT), a dtype or split the CPU kernels lack
 * (DI_ERR_UNSUPPORTED, naming the tensor), DI_ERR_OUT_OF_MEMORY. */
di_status dsv4_load(const model_weights *w, const model_options *opt, backend *be, dsv4 **out,
                    di_error **err);
void dsv4_free(dsv4 *d);
int64_t dsv4_n_past(const dsv4 *d);
void dsv4_reset(dsv4 *d);
/* Bytes the cache keeps per token of context, over all layers, averaged over
 * a context of n_ctx tokens: each layer's compressed entries (head_dim f32
 * every compress rate tokens; the CSA indexer's index_head_dim) per token,
 * plus the fixed part (the sliding window's keys, the compressors' pending
 * rows) divided by n_ctx. */
size_t dsv4_kv_bytes_per_token(const dsv4 *d);
/* As model_forward (the arguments are already checked). */
di_status dsv4_forward(dsv4 *d, const int32_t *tokens, int64_t n_tokens, float *logits,
                       int all_logits, di_error **err);

#endif
