/* RMSNorm (ops.h), as ggml_rms_norm followed by the weight multiply. */
#include <math.h>

#include "backend/cpu/ops.h"

void cpu_rmsnorm(const float *x, const float *w, float *y, int64_t n_tokens, int64_t n, float eps)
{
    for (int64_t t = 0; t < n_tokens; t++) {
        const float *xr = x + t * n;
        float *yr = y + t * n;
        double sum = 0;
        for (int64_t i = 0; i < n; i++) sum += (double)(xr[i] * xr[i]); /* as ggml */
        float scale = 1.0f / sqrtf((float)(sum / (double)n) + eps);
        if (w)
            for (int64_t i = 0; i < n; i++) yr[i] = xr[i] * scale * w[i];
        else
            for (int64_t i = 0; i < n; i++) yr[i] = xr[i] * scale;
    }
}
