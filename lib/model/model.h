/* A loaded model ready to run: weights (model_weights), a CPU thread pool, a
 * paged KV cache holding one sequence, and the scratch buffers of the forward
 * pass, allocated once at load so nothing is allocated per token.
 *
 * model_forward appends tokens to the sequence: a batch of tokens is a prefill
 * (run in chunks of at most n_batch tokens), one token a decode step reusing
 * the cached keys and values. Architectures: dense Llama and Qwen2 (llama.c),
 * DeepSeek-V3 and V2 (deepseek_v3.c: MLA with a latent cache, DeepSeekMoE).
 *
 * A model is used by one thread at a time (the forward pass itself runs on the
 * model's pool); the weights are shared read-only. */
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
    model_dtype kv_dtype; /* MODEL_DTYPE_F16 (llama.cpp's default) or MODEL_DTYPE_F32 */
    int use_ref;          /* 1: scalar reference kernels, single thread (tests) */
    /* DeepSeek (MLA) only: 1 expands every cached latent into per-head keys and
     * values (transformers' expand_kv) instead of the absorbed form; the
     * reference the absorbed path is tested against. The cache is the same. */
    int mla_naive;
} model_options;

/* Open `path` (.gguf or a Hugging Face directory) and prepare it to run.
 * Errors: those of model_weights_open; DI_ERR_UNSUPPORTED (a weight dtype or row length the CPU
 * kernels do not take: the message names the tensor); DI_ERR_INVALID_ARGUMENT (bad options);
 * DI_ERR_OUT_OF_MEMORY; DI_ERR_BACKEND (threads). */
di_status model_load(const char *path, const model_options *opt, model **out, di_error **err);
void model_free(model *m);

const model_config *model_get_config(const model *m);
int64_t model_n_ctx(const model *m);
/* Tokens held by the sequence (the position of the next token). */
int64_t model_n_past(const model *m);
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
const float *model_last_hidden(const model *m, int64_t *n_rows);
di_status model_mtp_forward(model *m, const int32_t *tokens, int64_t n_tokens, const float *hidden,
                            float *logits, di_error **err);
/* Forget the sequence (its KV cache blocks are freed). */
void model_reset(model *m);

/* Append tokens[0, n_tokens) to the sequence and run the forward pass. When
 * logits is not NULL it receives f32 logits: [n_tokens, n_vocab] row-major with
 * all_logits = 1, else [n_vocab] of the last token.
 * Errors (the sequence is then unchanged): DI_ERR_INVALID_ARGUMENT (n_tokens 0;
 * a token id outside [0, n_vocab): the message gives its index and value),
 * DI_ERR_CONTEXT_LENGTH (n_past + n_tokens > n_ctx). */
di_status model_forward(model *m, const int32_t *tokens, int64_t n_tokens, float *logits,
                        int all_logits, di_error **err);

#endif
