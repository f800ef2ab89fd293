/* A loaded model ready to run: weights (model_weights), its backend, a
 * paged KV cache shared by any number of sequences, and the scratch buffers of
 * the forward pass, allocated once at load so nothing is allocated per token.
 *
 * model_forward appends tokens to the model's own default sequence (the one
 * di_model_* uses): a batch of tokens is a prefill (run in chunks of at most
 * n_batch tokens), one token a decode step reusing the cached keys and values.
 * model_forward_batch runs one step over several sequences at once (the
 * engine's continuous batching): every sequence's new tokens are stacked into
 * one [n_tokens, ...] activation matrix so each weight is read once per step,
 * and attention runs per sequence over its own block table (vLLM's
 * PagedAttention layout, backend/backend.h). DeepSeek-V3 and V2
 * (deepseek_v3.c: MLA over a latent paged cache, DeepSeekMoE with the step's
 * tokens grouped by routed expert) batch the same way. Every operation runs
 * on the model's backend (backend/backend.h: the CPU today).
 *
 * Batch invariance: every operation but attention and the MoE is row-wise
 * (RMSNorm, the matrix products with per-row activation quantization, RoPE,
 * SiLU), attention reads only its own sequence, and a token's experts are
 * added in expert order whatever other rows an expert's product holds, so a
 * sequence's logits are bit-identical
 * whatever else is in the batch and however its prompt was chunked
 * (tests/unit/test_model_batch.c checks it).
 *
 * Architectures: dense Llama and Qwen2 (llama.c), DeepSeek-V3/V2, DeepSeek-V4
 * (deepseek_v4.c: each sequence has its own window and compressed caches; its
 * blocks only count tokens, and the prefix cache and its tiers are not
 * available: model_seq_publish does nothing, model_kv_set_hooks is
 * DI_ERR_UNSUPPORTED, model_kv_block_bytes 0). A model is used by one thread
 * at a time (the forward pass itself runs on the backend's threads); the weights
 * are shared read-only. */
#ifndef DI_MODEL_MODEL_H
#define DI_MODEL_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "deepinfer/deepinfer.h"
#include "model/weights.h"

typedef struct model model;

typedef struct model_options {
    int n_threads;        /* >= 1 */
    int64_t n_ctx;        /* tokens the sequence may hold; 0: min(n_ctx_train, 4096) */
    int64_t n_batch;      /* tokens per prefill chunk; 0: 256 */
    model_dtype kv_dtype; /* MODEL_DTYPE_F16 (llama.cpp's default), _F32, _Q8_0 or _Q4_0 */
    int use_ref;          /* 1: scalar reference kernels, single thread (tests) */
    int device;           /* a di_device the backend runs on; 0: DI_DEVICE_CPU */
    /* KV cache blocks (of MODEL_KV_BLOCK tokens) shared by all sequences; 0: as
     * many as kv_bytes holds when it is > 0, else kv_n_ctx_multiple (0 counts as
     * 1) sequences of n_ctx tokens. Fewer than one block is DI_ERR_INVALID_ARGUMENT. */
    int32_t n_kv_blocks;
    int64_t kv_bytes;
    int32_t kv_n_ctx_multiple;
    /* DeepSeek (MLA) only: 1 expands every cached latent into per-head keys and
     * values (transformers' expand_kv) instead of the absorbed form; the
     * reference the absorbed path is tested against. The cache is the same. */
    int mla_naive;
    /* Called after each layer's weights are checked, with the fraction done in
     * [0, 1]; a non-zero return cancels the load (DI_ERR_CANCELLED). May be NULL. */
    int (*progress)(void *user, float fraction);
    void *progress_user;
} model_options;

/* Tokens per KV cache block. */
enum { MODEL_KV_BLOCK = 16 };

/* The cache dtype of a di_kv_cache_type (the public kv_cache_type field)
 * into *out; DI_ERR_INVALID_ARGUMENT naming the field for an unknown one. */
di_status model_kv_dtype_of(int32_t type, model_dtype *out, di_error **err);
/* The cache dtype's name as kv_cache_type's users write it ("f16", "f32",
 * "q8_0", "q4_0"; "?" for another dtype). */
const char *model_kv_dtype_name(model_dtype dtype);

/* Open `path` (.gguf or a Hugging Face directory) and prepare it to run.
 * Errors: those of model_weights_open; DI_ERR_UNSUPPORTED (an architecture other
 * than Llama/Qwen2, a weight dtype or row length the CPU kernels do not take:
 * the message names the tensor); DI_ERR_INVALID_ARGUMENT (bad options);
 * DI_ERR_OUT_OF_MEMORY; DI_ERR_BACKEND (threads). */
di_status model_load(const char *path, const model_options *opt, model **out, di_error **err);
void model_free(model *m);

const model_config *model_get_config(const model *m);
/* The weights the model runs (owned by it; read-only). */
const model_weights *model_get_weights(const model *m);
int64_t model_n_ctx(const model *m);
/* Tokens held by the sequence (the position of the next token). */
int64_t model_n_past(const model *m);
/* Forget the sequence (its KV cache blocks are freed). */
void model_reset(model *m);
/* Bytes of KV cache one token takes, over all layers, in the cache's dtype:
 * 2 * n_layer * n_head_kv * head_dim * elem for Llama/Qwen2 (keys and values),
 * n_layer * (kv_lora_rank + qk_rope_head_dim) * elem for DeepSeek's MLA. */
size_t model_kv_bytes_per_token(const model *m);
/* DeepSeek-V3's MTP (NextN) module, for speculative decoding later
 * (deepseek_v3.h): its count (0 or 1), the main model's final normed hidden
 * rows of its last forward chunk (the module's input), and one run of the
 * module. model_mtp_forward: DI_ERR_UNSUPPORTED for a model without MTP; it
 * checks token ids as model_forward does. */
int model_mtp_layers(const model *m);
/* DeepSeek-V4.1's Engram (deepseek_v4.h: dsv4_engram_set_vocab): whether the
 * model still needs the tokenizer's compressed vocabulary before a forward
 * (0 for every other model), and handing it over. */
int model_engram_needs_vocab(const model *m);
di_status model_set_engram_vocab(model *m, const int32_t *old2new, int32_t n_tokens, int32_t n_keys,
                                 di_error **err);
/* llama.cpp's MTP GGUF of a DeepSeek-V4 model (convert_hf_to_gguf.py --mtp:
 * the NextN layer alone, a draft file beside the model's GGUF).
 * model_file_is_mtp: whether path is one (0 for anything else, unreadable
 * files included). model_attach_mtp: its layer becomes m's MTP layer (the
 * file stays mapped until model_free). Errors (m unchanged):
 * DI_ERR_UNSUPPORTED (m is not DeepSeek-V4, has an MTP layer already, or the
 * file is not an MTP GGUF), DI_ERR_MODEL_FORMAT (a config field or tensor
 * that does not fit m: named), the file's I/O and format errors. */
int model_file_is_mtp(const char *path);
di_status model_attach_mtp(model *m, const char *path, di_error **err);
/* The width of the MTP layer's hidden rows (model_last_hidden's, and
 * model_mtp_forward_batch's hidden and hidden_out): n_embd for DeepSeek-V3's
 * final normed rows, hc_mult x n_embd for DeepSeek-V4's streams after the
 * last layer (deepseek_v4.h). */
int64_t model_mtp_hidden_width(const model *m);
const float *model_last_hidden(const model *m, int64_t *n_rows);
di_status model_mtp_forward(model *m, const int32_t *tokens, int64_t n_tokens, const float *hidden,
                            float *logits, di_error **err);

/* Append tokens[0, n_tokens) to the sequence and run the forward pass. When
 * logits is not NULL it receives f32 logits: [n_tokens, n_vocab] row-major with
 * all_logits = 1, else [n_vocab] of the last token.
 * Errors (the sequence is then unchanged): DI_ERR_INVALID_ARGUMENT (n_tokens 0;
 * a token id outside [0, n_vocab): the message gives its index and value),
 * DI_ERR_CONTEXT_LENGTH (n_past + n_tokens > n_ctx). */
di_status model_forward(model *m, const int32_t *tokens, int64_t n_tokens, float *logits,
                        int all_logits, di_error **err);

/* --- several sequences sharing the weights and the KV cache --- */

/* One sequence: its KV block table and token count. Owned by the caller of
 * model_seq_create; freed with model_seq_free before the model. */
typedef struct model_seq model_seq;

/* A new empty sequence that may grow to model_n_ctx tokens.
 * Errors: DI_ERR_OUT_OF_MEMORY. */
di_status model_seq_create(model *m, model_seq **out);
void model_seq_free(model *m, model_seq *s);
/* Tokens whose keys and values the sequence holds. */
int64_t model_seq_n_past(const model_seq *s);
/* Drop the sequence's tokens and give its blocks back to the cache. */
void model_seq_reset(model *m, model_seq *s);
/* Hold blocks for n_tokens tokens in total (more than n_past: the positions
 * the next steps fill). Errors: DI_ERR_CONTEXT_LENGTH (over model_n_ctx),
 * DI_ERR_OUT_OF_MEMORY (no free block: the cache budget is spent); the
 * sequence keeps what it held. */
di_status model_seq_reserve(model *m, model_seq *s, int64_t n_tokens);
/* Forget the sequence's tokens past its first n_tokens (kv_pool_seq_truncate:
 * the rejected draft tokens of a speculative step). Blocks already published
 * to the prefix cache are never cut into. A DeepSeek-V4 sequence cut more than
 * model_n_batch tokens below the most it held is dropped whole (its rings no
 * longer hold the rows; model_seq_n_past then reads 0). */
void model_seq_truncate(model *m, model_seq *s, int64_t n_tokens);
/* The prefix cache (model/kv_pool.h). model_prefix_probe: tokens of the
 * longest run of leading full blocks of tokens[0, n_tokens) whose keys and
 * values the cache holds (a multiple of MODEL_KV_BLOCK), *n_cached_blocks
 * (may be NULL) how many of those blocks no sequence holds now (taking them
 * spends free blocks); changes nothing. model_seq_match_prefix: an empty
 * sequence takes those blocks and holds their tokens as computed; returns
 * them. model_seq_publish: after a step, key the sequence's full blocks
 * (tokens: at least its n_past tokens) so later sequences match them. */
int64_t model_prefix_probe(const model *m, const int32_t *tokens, int64_t n_tokens,
                           int32_t *n_cached_blocks);
int64_t model_seq_match_prefix(model *m, model_seq *s, const int32_t *tokens, int64_t n_tokens);
/* Fork: the empty sequence dst shares src's full blocks within its first
 * n_tokens tokens (kv_pool_seq_fork: refcounted, nothing copied or computed)
 * and holds their tokens as computed; returns them. 0 for DeepSeek-V4, whose
 * caches are each sequence's own (dst then computes its tokens itself). */
int64_t model_seq_fork(model *m, model_seq *dst, const model_seq *src, int64_t n_tokens);
void model_seq_publish(model *m, model_seq *s, const int32_t *tokens);
/* The prefix cache's host and disk tiers (lib/engine/kv_tiers.h) move whole
 * blocks: model_kv_fingerprint_of the seed of the model's block keys (the
 * weights, configuration, cache dtype); model_prefix_keys the keys of the
 * first n_blocks full blocks of tokens; model_prefix_has whether a key is kept
 * here; model_kv_block_bytes a block's size on the host; model_kv_adopt a
 * block for restored contents (data, model_kv_block_bytes bytes) kept under
 * key as cached — 0, or -1 when no block can be taken or the key is kept
 * already; model_kv_set_hooks the functions called with a block's key and
 * contents (on the host) when a cached block's room is about to be reused
 * (evicted) and when a block has just been keyed (published); NULL: none.
 * Errors: DI_ERR_OUT_OF_MEMORY (no staging buffer; no hooks then). The
 * hooks run on the thread driving the model and must not call into it. */
uint64_t model_kv_fingerprint_of(const model *m);
/* model_kv_fingerprint_of mixed with every byte of the weights
 * (model_weights_content_digest: reads them all once), for blocks kept where
 * another model could find them (the disk tier). */
uint64_t model_kv_disk_fingerprint(const model *m);
void model_prefix_keys(const model *m, const int32_t *tokens, int64_t n_blocks, uint64_t *keys);
int model_prefix_has(const model *m, uint64_t key);
size_t model_kv_block_bytes(const model *m);
int model_kv_adopt(model *m, uint64_t key, const void *data);
typedef void (*model_kv_hook)(void *user, uint64_t key, const void *data);
di_status model_kv_set_hooks(model *m, model_kv_hook evicted, model_kv_hook published, void *user);
/* Blocks of the cache in all, and free now (free or cached: a reservation can
 * take them). */
int32_t model_kv_blocks_total(const model *m);
int32_t model_kv_blocks_free(const model *m);
/* Blocks held by no sequence that keep a computed prefix (evicted, oldest
 * released first, when a reservation finds no free block), and the evictions
 * so far. */
int32_t model_kv_blocks_cached(const model *m);
int64_t model_kv_blocks_evicted(const model *m);
/* Blocks a sequence of n_tokens tokens holds. */
int32_t model_kv_blocks_for(int64_t n_tokens);
/* Tokens one step of model_forward_batch takes at most (n_batch). */
int64_t model_n_batch(const model *m);

/* One sequence's part of a step: tokens[0, n_tokens) appended at its n_past;
 * want_logits 1: the logits of the last token are written. */
typedef struct model_batch_item {
    model_seq *seq;
    const int32_t *tokens;
    int64_t n_tokens;
    /* Logit rows of the item's last want_logits tokens, in [0, n_tokens]: 1
     * for the next token after a decode step or a prompt's last chunk, more to
     * verify draft tokens (speculative decoding). */
    int want_logits;
} model_batch_item;

/* Run one forward step over n_items sequences (each at most once). The total of
 * n_tokens must be in [1, model_n_batch], and every sequence must have blocks
 * reserved for n_past + n_tokens (model_seq_reserve). logits receives
 * want_logits rows [n_vocab] per item (its last tokens'), in item order. Token ids are checked.
 * Errors (nothing is changed): DI_ERR_INVALID_ARGUMENT (a bad id — the message
 * names the item and index —, an empty item, too many tokens, a sequence
 * without reserved room). */
di_status model_forward_batch(model *m, const model_batch_item *items, int n_items, float *logits,
                              di_error **err);

/* The MTP module over many sequences at once (the MTP drafter,
 * lib/engine/draft_mtp.c). An MTP sequence is a model_seq in the MTP layer's
 * own paged latent cache (model_mtp_seq_create; the model_seq_n_past of one
 * counts its entries); entry k of it is the module's step over one
 * (hidden, token) pair: the main model's (or a chained step's) hidden state
 * of token i and the embedding of token i + 1, at RoPE position i + 1, whose
 * logits draft token i + 2 (DeepSeek-V3 §2.2). Rollback is block-table
 * truncation (model_mtp_seq_truncate; a DeepSeek-V4 MTP sequence cut more than
 * model_n_batch pairs below the most it held is dropped whole, as
 * model_seq_truncate says). Errors: DI_ERR_UNSUPPORTED (no MTP
 * layer), DI_ERR_OUT_OF_MEMORY; reserve as model_seq_reserve. */
di_status model_mtp_seq_create(model *m, model_seq **out);
void model_mtp_seq_free(model *m, model_seq *s);
void model_mtp_seq_reset(model *m, model_seq *s);
di_status model_mtp_seq_reserve(model *m, model_seq *s, int64_t n_tokens);
void model_mtp_seq_truncate(model *m, model_seq *s, int64_t n_tokens);

/* One MTP sequence's part of model_mtp_forward_batch: n_tokens pairs
 * appended at its n_past, tokens[t] the token of pair t at RoPE position
 * pos0 + t (in [1, model_n_ctx]); want 1: the last pair's logits and output
 * are written. */
typedef struct model_mtp_item {
    model_seq *seq;
    const int32_t *tokens;
    int64_t n_tokens;
    int64_t pos0;
    int want;
} model_mtp_item;

/* Run the MTP module over n_items MTP sequences at once, hidden the pairs'
 * hidden states, f32 [n_tokens in all, n_embd], stacked in item order (the
 * main model's final normed rows, model_last_hidden, or a chained step's
 * output). For each item with want, in item order: logits (may be NULL) gets
 * its last pair's row [n_vocab] and hidden_out (may be NULL) its last pair's
 * output [n_embd] (the decoder layer's, before shared_head's norm: the hidden
 * input of the next chained step, as vLLM's DeepSeekMTP and llama.cpp's
 * NextN drafting chain). The total of n_tokens must be in [1, n_batch], and
 * every sequence must have reserved room. Errors (nothing changed):
 * DI_ERR_UNSUPPORTED (no MTP), DI_ERR_INVALID_ARGUMENT (bad token ids,
 * positions, sizes or reservations; the message names the item). */
di_status model_mtp_forward_batch(model *m, const model_mtp_item *items, int n_items,
                                  const float *hidden, float *logits, float *hidden_out,
                                  di_error **err);
/* DeepSeek-V4's DSpark draft head (DeepSeek-V4-Flash-DSpark, as llama.cpp's
 * dflash graph runs it; deepseek_v4_dspark.c says what it computes), for
 * block speculative decoding. model_dspark_block: the draft block's tokens
 * (dspark_block_size; 0: the model has no DSpark head). The target's
 * features: model_dspark_features gives the last forward step's rows [n_rows,
 * model_dspark_feature_width] (one per row of the step, in its order; valid
 * until the next forward; NULL without DSpark). A DSpark sequence
 * (model_dspark_seq_create; model_seq_n_past counts its tokens) holds one key
 * per stage and token: model_dspark_inject appends n target tokens' features
 * (the rows of positions n_past ..; any n); model_dspark_draft drafts one
 * block per sequence at its n_past (the anchor there, the noise tokens after
 * it; the sequence does not grow: the next inject overwrites the block's
 * keys), writing logits [n_items x block, n_vocab] (the Markov head's biased
 * logits, block-major), confidence [n_items x block] (the confidence head's
 * acceptance probabilities) and drafts [n_items x block] (the Markov chain's
 * argmaxes). model_dspark_reserve holds the room a block at s's n_past
 * needs (what model_dspark_draft checks for each sequence: a drafter
 * leaves out the sequences without it). Errors (nothing changed):
 * DI_ERR_UNSUPPORTED (no DSpark head), DI_ERR_INVALID_ARGUMENT (NULL, n or
 * n_items < 1, an anchor outside the vocabulary, model_n_batch below the
 * block), DI_ERR_CONTEXT_LENGTH (past model_n_ctx), DI_ERR_OUT_OF_MEMORY (the
 * pool's blocks spent). Not thread-safe (the model's). */
int model_dspark_block(const model *m);
/* llama.cpp's DSpark GGUF of a DeepSeek-V4 model (convert_hf_to_gguf.py
 * --dspark: architecture dflash, the head alone, a draft file beside the
 * model's GGUF). model_file_is_dspark: whether path is one (0 for anything
 * else, unreadable files included). model_attach_dspark: its head becomes
 * m's (the file stays mapped until model_free). Errors (m unchanged but for
 * the memory a failed load keeps): DI_ERR_UNSUPPORTED (m is not DeepSeek-V4,
 * has an MTP layer or DSpark head already, or the file is not a DSpark
 * GGUF), DI_ERR_MODEL_FORMAT (a config field or tensor that does not fit m:
 * named), the file's I/O and format errors. */
int model_file_is_dspark(const char *path);
di_status model_attach_dspark(model *m, const char *path, di_error **err);
int64_t model_dspark_feature_width(const model *m);
const float *model_dspark_features(const model *m, int64_t *n_rows);
di_status model_dspark_seq_create(model *m, model_seq **out);
void model_dspark_seq_free(model *m, model_seq *s);
void model_dspark_seq_truncate(model *m, model_seq *s, int64_t n_tokens);
di_status model_dspark_reserve(model *m, model_seq *s, di_error **err);
di_status model_dspark_inject(model *m, model_seq *s, const float *features, int64_t n,
                              di_error **err);
di_status model_dspark_draft(model *m, model_seq *const *seqs, const int32_t *anchors, int n_items,
                             float *logits, float *confidence, int32_t *drafts, di_error **err);

/* shared_head over n rows of MTP outputs (model_mtp_forward_batch's
 * hidden_out): logits [n, n_vocab]. DI_ERR_UNSUPPORTED without MTP. */
di_status model_mtp_logits(model *m, const float *hidden, int64_t n, float *logits, di_error **err);

#endif
