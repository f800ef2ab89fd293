/* The weight lookups the CPU forward passes (llama.c, deepseek_v3.c) share:
 * model_weights_require plus the check that the CPU backend can use the tensor. */
#ifndef DI_MODEL_CPU_WEIGHTS_H
#define DI_MODEL_CPU_WEIGHTS_H

#include "model/weights.h"

/* The 1-D tensor `name` of n elements (a norm or bias; f32, f16 or bf16) as a
 * new f32 array in *out, which the caller frees. DI_ERR_MODEL_FORMAT when it is
 * missing or misshapen, DI_ERR_UNSUPPORTED for another dtype,
 * DI_ERR_OUT_OF_MEMORY. */
di_status model_vector_f32(const model_weights *w, const char *name, int64_t n, float **out,
                           di_error **err);

/* The 2-D weight `name` of shape [n_out rows, n_in columns] (GGUF order ne =
 * {n_in, n_out}) in *out, borrowed from w. DI_ERR_MODEL_FORMAT when it is missing
 * or misshapen; DI_ERR_UNSUPPORTED when the CPU backend has no matrix product
 * for its dtype and row length, or it is fp8 without its block scales. */
di_status model_matrix(const model_weights *w, const char *name, int64_t n_in, int64_t n_out,
                       const model_tensor **out, di_error **err);

#endif
