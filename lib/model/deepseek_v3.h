/* The DeepSeek-V3 (and V2) forward pass on the CPU (deepseek_v3.c), behind
 * model.h: model_load hands a DeepSeek model_weights here and model_* calls
 * come through. Internal to lib/model/. */
#ifndef DI_MODEL_DEEPSEEK_V3_H
#define DI_MODEL_DEEPSEEK_V3_H

#include "model/model.h"

typedef struct dsv3 dsv3;

/* Prepare a DeepSeek model over w (borrowed: it must outlive the dsv3).
 * opt is already normalised by model_load (n_ctx, n_batch set). Errors: a
 * tensor missing or of the wrong shape (DI_ERR_MODEL_FORMAT, naming it), a
 * dtype the CPU kernels lack (DI_ERR_UNSUPPORTED), DI_ERR_OUT_OF_MEMORY,
 * DI_ERR_BACKEND. */
di_status dsv3_load(const model_weights *w, const model_options *opt, dsv3 **out, di_error **err);
void dsv3_free(dsv3 *d);
int64_t dsv3_n_past(const dsv3 *d);
void dsv3_reset(dsv3 *d);
size_t dsv3_kv_bytes_per_token(const dsv3 *d);
/* As model_forward (the arguments are already checked). */
di_status dsv3_forward(dsv3 *d, const int32_t *tokens, int64_t n_tokens, float *logits,
                       int all_logits, di_error **err);

#endif
