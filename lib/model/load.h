/* The weight lookups every architecture shares (llama.c, deepseek_v3.c): a
 * tensor by name, its shape checked against what the architecture expects,
 * made resident in the backend; and the RoPE parameters from the config.
 * (load.c also holds model_internal.h's KV budget and LM head.) */
#ifndef DI_MODEL_LOAD_H
#define DI_MODEL_LOAD_H

#include "backend/backend.h"
#include "model/weights.h"

/* The 1-D tensor `name` of n elements (a norm or bias) as f32 in the backend
 * (*out owned by it). DI_ERR_MODEL_FORMAT when it is missing or misshapen;
 * the backend's errors (DI_ERR_UNSUPPORTED for a dtype other than f32, f16,
 * bf16; DI_ERR_OUT_OF_MEMORY). */
di_status model_vector(const model_weights *w, backend *be, const char *name, int64_t n,
                       const float **out, di_error **err);
/* The 2-D weight `name` of shape [n_out rows, n_in columns] (GGUF order ne =
 * {n_in, n_out}) resident in the backend. DI_ERR_MODEL_FORMAT when it is
 * missing or misshapen; DI_ERR_UNSUPPORTED when the backend has no matrix
 * product for its dtype and row length, or it is fp8 without block scales. */
di_status model_matrix(const model_weights *w, backend *be, const char *name, int64_t n_in,
                       int64_t n_out, const backend_matrix **out, di_error **err);
/* The embedding table `name` {n_embd, n_vocab}, read row by row. Errors as
 * model_matrix (the backend must dequantize its dtype). */
di_status model_embedding(const model_weights *w, backend *be, const char *name, int64_t n_embd,
                          int64_t n_vocab, const backend_matrix **out, di_error **err);
/* The RoPE parameters of c over head_dim rotated dims; ggml_angles as
 * backend_rope_params says. */
backend_rope_params model_rope_params(const model_config *c, uint32_t head_dim, int ggml_angles);

#endif
