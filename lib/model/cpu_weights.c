/* Weight lookups for the CPU forward passes; see cpu_weights.h. */
#include "model/cpu_weights.h"

#include <stdlib.h>

#include "api/error.h"
#include "backend/cpu/matmul.h"
#include "backend/cpu/quant.h"

di_status model_vector_f32(const model_weights *w, const char *name, int64_t n, float **out,
                           di_error **err)
{
    const model_tensor *t;
    int64_t ne[1] = {n};
    di_status st = model_weights_require(w, name, 1, ne, &t, err);
    if (st != DI_OK) return st;
    if (t->dtype != MODEL_DTYPE_F32 && t->dtype != MODEL_DTYPE_F16 && t->dtype != MODEL_DTYPE_BF16)
        return di_error_setf(err, DI_ERR_UNSUPPORTED, "%s: a norm or bias must be f32, f16 or bf16",
                             name);
    *out = malloc((size_t)n * sizeof(float));
    if (!*out) return di_error_setf(err, DI_ERR_OUT_OF_MEMORY, "out of memory loading %s", name);
    cpu_dequantize_row((int)t->dtype, t->data, *out, n);
    return DI_OK;
}

di_status model_matrix(const model_weights *w, const char *name, int64_t n_in, int64_t n_out,
                       const model_tensor **out, di_error **err)
{
    int64_t ne[2] = {n_in, n_out};
    di_status st = model_weights_require(w, name, 2, ne, out, err);
    if (st != DI_OK) return st;
    if (!cpu_matmul_supported((*out)->dtype, n_in) ||
        ((*out)->dtype == MODEL_DTYPE_FP8_E4M3 && !(*out)->scale))
        return di_error_setf(err, DI_ERR_UNSUPPORTED,
                             "%s: the CPU backend has no matrix product for its dtype (%d) with "
                             "rows of %lld elements",
                             name, (int)(*out)->dtype, (long long)n_in);
    return DI_OK;
}
