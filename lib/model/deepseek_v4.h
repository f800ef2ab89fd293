/* The DeepSeek-V4 forward pass (deepseek_v4.c), behind model.h: model_load
 * hands a DeepSeek-V4 model_weights here and the model_* calls come through.
 * Internal to lib/model/.
 *
 * Each sequence has its own cache (dsv4_seq_init): per layer a ring of the
 * sliding window's keys, the compressors' pending rows and their entries,
 * which grow with the sequence (dsv4_seq_reserve) up to n_ctx tokens' worth;
 * its blocks in the model's pool (kv_pool.h) only
 * count its tokens against the KV budget, and nothing is shared between
 * sequences (no prefix cache for V4 yet). A sequence may be truncated by at
 * most one step's tokens (a speculative step's rejected drafts): the rings
 * hold a step's worth beyond the window. */
#ifndef DI_MODEL_DEEPSEEK_V4_H
#define DI_MODEL_DEEPSEEK_V4_H

#include "backend/backend.h"
#include "model/kv_pool.h"
#include "model/model.h"

typedef struct dsv4 dsv4;
typedef struct dsv4_cache dsv4_cache;

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
 * a context of n_ctx tokens: each layer's compressed entries (a row of
 * head_dim every compress rate tokens; the CSA indexer's of index_head_dim),
 * in the cache's dtype, per token, plus the fixed part (the sliding window's
 * rows in the cache's dtype, the compressors' pending rows in f32) divided by
 * n_ctx. */
size_t dsv4_kv_bytes_per_token(const dsv4 *d);
/* A sequence's cache (from the model's reuse list, or new) and its blocks'
 * table: DI_ERR_OUT_OF_MEMORY. dsv4_seq_release gives both back (the cache
 * to the reuse list). */
di_status dsv4_seq_init(dsv4 *d, model_seq *s);
void dsv4_seq_release(dsv4 *d, model_seq *s);
/* Room in s's compressed entries for n_tokens (clamped to n_ctx), before a
 * step appends to it: DI_ERR_OUT_OF_MEMORY, the cache then unchanged. The
 * room is kept when the sequence ends (the cache is reused). */
di_status dsv4_seq_reserve(dsv4 *d, model_seq *s, int64_t n_tokens);
/* Keep s's first n_tokens (model_seq_truncate). The window and compressor
 * rings hold the rows of the last n_batch positions beyond what the next step
 * reads, so a cut more than n_batch tokens below the most the sequence
 * reached drops the whole sequence (n_past 0): the caller computes it again. */
void dsv4_seq_truncate(dsv4 *d, model_seq *s, int64_t n_tokens);
/* The pool the sequences' blocks are counted in. */
kv_pool *dsv4_pool(dsv4 *d);
/* One step over several sequences (model_forward_batch, whose checks have
 * passed): n_tokens rows in all, one logits row per item with want_logits. */
void dsv4_forward_batch(dsv4 *d, const model_batch_item *items, int n_items, int64_t n_tokens,
                        float *logits);
/* The MTP layer (deepseek_v4_mtp.c), behind model.h's model_mtp_*: its count
 * (0 or 1), the width of its hidden rows (hc_mult x n_embd: the main model's
 * streams after its last layer, model_last_hidden's rows, and the layer's
 * output streams), the last step's streams [n_rows, width] (NULL without
 * MTP), and the pool counting the MTP sequences' pairs (NULL without). */
int dsv4_mtp_layers(const dsv4 *d);
/* DeepSeek-V4.1's Engram reads the tokenizer's compressed vocabulary
 * (tokenizer.h: tok_compressed_vocab), which the caller hands over after the
 * load: dsv4_engram_needs_vocab says whether it still must (a forward before it
 * is refused); dsv4_engram_set_vocab copies old2new [n_tokens] (raw token ID ->
 * compressed ID) of n_keys compressed IDs. Errors: DI_ERR_MODEL_FORMAT (n_keys
 * is not the config's engram_compressed_vocab_size, or the table lacks
 * engram_pad_token_id), DI_ERR_OUT_OF_MEMORY. A model without Engram: DI_OK,
 * nothing kept. */
int dsv4_engram_needs_vocab(const dsv4 *d);
di_status dsv4_engram_set_vocab(dsv4 *d, const int32_t *old2new, int32_t n_tokens, int32_t n_keys,
                                di_error **err);
int64_t dsv4_mtp_hidden_width(const dsv4 *d);
const float *dsv4_last_hidden(const dsv4 *d, int64_t *n_rows);
kv_pool *dsv4_mtp_pool(dsv4 *d);
/* Whether w is an MTP GGUF (llama.cpp's convert_hf_to_gguf.py --mtp): a
 * deepseek4 file with its NextN layer and none of the main ones. */
int dsv4_weights_mtp_only(const model_weights *w);
/* Attach llama.cpp's MTP GGUF of this model (convert_hf_to_gguf.py --mtp),
 * opened as w: its MTP layer becomes the model's, w owned by the model from
 * then on. Errors (w not taken, the model unchanged): DI_ERR_UNSUPPORTED (the
 * model has an MTP layer already), DI_ERR_MODEL_FORMAT (a config field that
 * is not the model's, or a tensor missing or misshapen: named, path in the
 * message), DI_ERR_OUT_OF_MEMORY. */
di_status dsv4_mtp_attach(dsv4 *d, model_weights *w, const char *path, di_error **err);
/* An MTP sequence's cache (the layer's window ring) and its pairs' table:
 * DI_ERR_OUT_OF_MEMORY; released to a reuse list. Truncation as
 * dsv4_seq_truncate's (a cut deeper than n_batch drops it all). */
di_status dsv4_mtp_seq_init(dsv4 *d, model_seq *s);
void dsv4_mtp_seq_release(dsv4 *d, model_seq *s);
void dsv4_mtp_seq_truncate(dsv4 *d, model_seq *s, int64_t n_tokens);
/* model_mtp_forward_batch, its checks passed (n rows in all, <= n_batch). */
void dsv4_mtp_forward_batch(dsv4 *d, const model_mtp_item *items, int n_items, int64_t n,
                            const float *hidden, float *logits, float *hidden_out);
/* model_mtp_logits: n rows of output streams into logits [n, n_vocab]. */
void dsv4_mtp_logits(dsv4 *d, const float *hidden, int64_t n, float *logits);
/* model_mtp_forward on the model's own MTP sequence (pair k: token k + 1 at
 * position k + 1), every row's logits: DI_ERR_UNSUPPORTED without MTP,
 * DI_ERR_CONTEXT_LENGTH past n_ctx. */
di_status dsv4_mtp_forward(dsv4 *d, const int32_t *tokens, int64_t n_tokens, const float *hidden,
                           float *logits, di_error **err);
/* DeepSeek-V4's DSpark draft head (deepseek_v4_dspark.c), behind model.h's
 * model_dspark_*: the block size (0 without DSpark), the features' width
 * (n_dspark_target x n_embd), the last forward step's features [n_rows,
 * width] (NULL without), the pool counting the DSpark sequences' tokens
 * (NULL without), a DSpark sequence's cache (every stage's window ring;
 * released to a reuse list; truncation as dsv4_seq_truncate's), and the
 * checked operations: inject appends n rows of features at s's length, draft
 * runs one block per sequence (total rows any; n_items x block may pass
 * n_batch: run in passes) at each sequence's length, not appending. */
int dsv4_dspark_block(const dsv4 *d);
int64_t dsv4_dspark_feature_width(const dsv4 *d);
const float *dsv4_dspark_features(const dsv4 *d, int64_t *n_rows);
kv_pool *dsv4_dspark_pool(dsv4 *d);
di_status dsv4_dspark_seq_init(dsv4 *d, model_seq *s);
void dsv4_dspark_seq_release(dsv4 *d, model_seq *s);
void dsv4_dspark_seq_truncate(dsv4 *d, model_seq *s, int64_t n_tokens);
void dsv4_dspark_inject(dsv4 *d, model_seq *s, const float *features, int64_t n);
void dsv4_dspark_draft(dsv4 *d, model_seq *const *seqs, const int32_t *anchors, int n_items,
                       float *logits, float *confidence, int32_t *drafts);
/* llama.cpp's DSpark GGUF (convert_hf_to_gguf.py --dspark: architecture
 * dflash, the stages and head alone): dsv4_weights_dspark_only says whether
 * w is one; dsv4_dspark_attach makes its head the model's (w owned by the
 * model from then on). Errors (w not taken): DI_ERR_UNSUPPORTED (the model
 * has an MTP layer or a DSpark head already), DI_ERR_MODEL_FORMAT (a config
 * field that is not the model's, a tensor missing or misshapen: named, path
 * in the message), DI_ERR_OUT_OF_MEMORY. */
int dsv4_weights_dspark_only(const model_weights *w);
di_status dsv4_dspark_attach(dsv4 *d, model_weights *w, const char *path, di_error **err);
/* As model_forward (the arguments are already checked). */
di_status dsv4_forward(dsv4 *d, const int32_t *tokens, int64_t n_tokens, float *logits,
                       int all_logits, di_error **err);

#endif
