/* Softmax and the SiLU-gated MLP activation (ops.h). */
#include <math.h>

#include "backend/cpu/ops.h"

void cpu_softmax(float *x, int64_t n)
{
    float max = -INFINITY;
    for (int64_t i = 0; i < n; i++) max = x[i] > max ? x[i] : max;
    double sum = 0;
    for (int64_t i = 0; i < n; i++) {
        x[i] = expf(x[i] - max);
        sum += x[i];
    }
    float inv = (float)(1.0 / sum);
    for (int64_t i = 0; i < n; i++) x[i] *= inv;
}

void cpu_silu_mul(float *gate, const float *up, int64_t n)
{
    for (int64_t i = 0; i < n; i++) gate[i] = gate[i] / (1.0f + expf(-gate[i])) * up[i];
}

void cpu_silu_mul_clamp(float *gate, const float *up, int64_t n, float limit)
{
    for (int64_t i = 0; i < n; i++) {
        float g = gate[i] < limit ? gate[i] : limit;
        float u = up[i] < -limit ? -limit : up[i] > limit ? limit : up[i];
        gate[i] = g / (1.0f + expf(-g)) * u;
    }
}
