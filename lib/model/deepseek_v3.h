/* The DeepSeek-V3 (and V2) forward pass on the CPU (deepseek_v3.c), behind
 * model.h: model_load hands a DeepSeek model_weights here and model_* calls
 * come through. Internal to lib/model/. */
#ifndef DI_MODEL_DEEPSEEK_V3_H
#define DI_MODEL_DEEPSEEK_V3_H

#include "backend/backend.h"
#include "model/kv_pool.h"
#include "model/model.h"

typedef struct dsv3 dsv3;

/* Prepare a DeepSeek model over w (borrowed: it must outlive the dsv3).
 * opt is already normalised by model_load (n_ctx, n_batch set). Errors: a
 * tensor missing or of the wrong shape (DI_ERR_MODEL_FORMAT, naming it), a
 * dtype the CPU kernels lack (DI_ERR_UNSUPPORTED), DI_ERR_OUT_OF_MEMORY,
 * DI_ERR_BACKEND. */
di_status dsv3_load(const model_weights *w, const model_options *opt, backend *be, dsv3 **out,
                    di_error **err);
void dsv3_free(dsv3 *d);
int64_t dsv3_n_past(const dsv3 *d);
void dsv3_reset(dsv3 *d);
size_t dsv3_kv_bytes_per_token(const dsv3 *d);
/* The latent paged cache every sequence of the model lives in. */
backend_kv *dsv3_kv(const dsv3 *d);
/* Which of its blocks hold what. */
kv_pool *dsv3_pool(dsv3 *d);
/* One step over several sequences (model_forward_batch, whose checks have
 * passed): n_tokens rows in all, one logits row per item with want_logits. */
void dsv3_forward_batch(dsv3 *d, const model_batch_item *items, int n_items, int64_t n_tokens,
                        float *logits);
/* As model_forward (the arguments are already checked). */
di_status dsv3_forward(dsv3 *d, const int32_t *tokens, int64_t n_tokens, float *logits,
                       int all_logits, di_error **err);

/* The MTP (NextN) module (DeepSeek-V3 §2.2; transformers' MtpLayer), for
 * speculative decoding: 1 when the checkpoint has one (num_nextn_predict_layers
 * and its tensors), else 0. */
int dsv3_mtp_layers(const dsv3 *d);
/* The final normed hidden states (the LM head's input) of the last chunk the
 * main model ran: *n_rows rows of n_embd floats, the last *n_rows tokens of the
 * last dsv3_forward call (all of them when it ran at most n_batch). Borrowed;
 * valid until the next forward call. NULL and 0 without MTP. */
const float *dsv3_last_hidden(const dsv3 *d, int64_t *n_rows);
/* Run the MTP module on n_tokens tokens, each token i + 1 of the sequence with
 * hidden[t] = the main model's final normed hidden state of token i (f32
 * [n_tokens, n_embd]); appends to the module's own latent cache (entry k is
 * token k + 1 at RoPE position k + 1) and writes logits [n_tokens, n_vocab]
 * (drafts of token i + 2) when logits is not NULL. Errors: DI_ERR_UNSUPPORTED
 * (no MTP layer), DI_ERR_CONTEXT_LENGTH. Reset with dsv3_reset. */
di_status dsv3_mtp_forward(dsv3 *d, const int32_t *tokens, int64_t n_tokens, const float *hidden,
                           float *logits, di_error **err);

/* The MTP layer's paged cache, where the MTP drafter's sequences live
 * (model_mtp_seq_create); NULL without MTP. */
kv_pool *dsv3_mtp_pool(dsv3 *d);
/* model_mtp_forward_batch, its checks passed: n rows in all (<= n_batch),
 * hidden [n, n_embd] stacked in item order. */
void dsv3_mtp_forward_batch(dsv3 *d, const model_mtp_item *items, int n_items, int64_t n,
                            const float *hidden, float *logits, float *hidden_out);
/* shared_head over n rows of MTP outputs: logits [n, n_vocab] =
 * RMSNorm(hidden) * shared_head.norm  shared_head.head^T. */
void dsv3_mtp_logits(dsv3 *d, const float *hidden, int64_t n, float *logits);

#endif
