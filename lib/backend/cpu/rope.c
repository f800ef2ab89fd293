/* Rotary position embeddings (ops.h). Frequencies follow transformers'
 * modeling_rope_utils (default, linear, llama3, yarn); the rotation pairs follow
 * llama.cpp's rope modes NORM and NEOX. */
#include <math.h>
#include <stddef.h>

#include "backend/cpu/ops.h"

static const double PI = 3.14159265358979323846;

/* YaRN: the dimension at which num_rotations full turns fit in orig_ctx. */
static double yarn_correction_dim(double num_rotations, int dim, double base, double orig_ctx)
{
    return (double)dim * log(orig_ctx / (num_rotations * 2.0 * PI)) / (2.0 * log(base));
}

static double yarn_get_mscale(double scale, double m)
{
    return scale <= 1.0 ? 1.0 : 0.1 * m * log(scale) + 1.0;
}

di_status cpu_rope_init(cpu_rope *r, const backend_rope_params *c)
{
    int d = (int)c->head_dim;
    if (d <= 0 || d > 1024 || d % 2) return DI_ERR_UNSUPPORTED;
    r->head_dim = d;
    r->style = c->rope_style;
    r->mscale = 1.0f;
    r->ggml_angles = c->ggml_angles;
    r->freq_factors = NULL;
    r->theta_scale = powf(c->rope_theta > 0 ? c->rope_theta : 10000.0f, -2.0f / (float)d);
    r->freq_scale = c->rope_scaling == MODEL_ROPE_SCALING_LINEAR && c->rope_factor > 0
                        ? 1.0f / c->rope_factor
                        : 1.0f;
    double base = c->rope_theta > 0 ? c->rope_theta : 10000.0;
    double factor = c->rope_factor > 0 ? c->rope_factor : 1.0;
    double orig = c->rope_orig_ctx ? (double)c->rope_orig_ctx : (double)c->n_ctx_train;
    double low = 0, high = 0;
    if (c->rope_scaling == MODEL_ROPE_SCALING_YARN) {
        double bf = c->yarn_beta_fast > 0 ? c->yarn_beta_fast : 32.0;
        double bs = c->yarn_beta_slow > 0 ? c->yarn_beta_slow : 1.0;
        low = yarn_correction_dim(bf, d, base, orig);
        high = yarn_correction_dim(bs, d, base, orig);
        if (c->yarn_truncate) {
            low = floor(low);
            high = ceil(high);
        }
        if (low < 0) low = 0;
        if (high > d - 1) high = d - 1;
        if (low == high) high += 0.001;
        /* the loader resolves the attention factor (config.json, mscale rules, or
         * the GGUF's attn_factor); 0 from an older loader: derive it */
        if (c->yarn_attn_factor > 0)
            r->mscale = c->yarn_attn_factor;
        else if (c->yarn_mscale > 0 && c->yarn_mscale_all_dim > 0)
            r->mscale = (float)(yarn_get_mscale(factor, c->yarn_mscale) /
                                yarn_get_mscale(factor, c->yarn_mscale_all_dim));
        else
            r->mscale = (float)yarn_get_mscale(factor, 1.0);
    }
    for (int i = 0; i < d / 2; i++) {
        /* as transformers: 1 / base^(2i/d) in float32 */
        float f = (float)(1.0 / pow(base, (double)(2 * i) / (double)d));
        switch (c->rope_scaling) {
        case MODEL_ROPE_SCALING_LINEAR: f = (float)(f / factor); break;
        case MODEL_ROPE_SCALING_LLAMA3: {
            double lf = c->llama3_low_freq_factor > 0 ? c->llama3_low_freq_factor : 1.0;
            double hf = c->llama3_high_freq_factor > 0 ? c->llama3_high_freq_factor : 4.0;
            double low_wavelen = orig / lf, high_wavelen = orig / hf;
            double wavelen = 2.0 * PI / f;
            if (wavelen > low_wavelen) {
                f = (float)(f / factor);
            } else if (wavelen >= high_wavelen) {
                double smooth = (orig / wavelen - lf) / (hf - lf);
                f = (float)((1.0 - smooth) * f / factor + smooth * f);
            }
            break;
        }
        case MODEL_ROPE_SCALING_YARN: {
            double ramp = ((double)i - low) / (high - low);
            ramp = ramp < 0 ? 0 : ramp > 1 ? 1 : ramp;
            double extrap = 1.0 - ramp;
            f = (float)(f / factor * (1.0 - extrap) + f * extrap);
            break;
        }
        case MODEL_ROPE_SCALING_NONE:
        default: break;
        }
        r->inv_freq[i] = f;
    }
    return DI_OK;
}

void cpu_rope_apply(const cpu_rope *r, float *x, int n_heads, int64_t pos)
{
    int d = r->head_dim, half = d / 2;
    float cs[512], sn[512];
    if (r->ggml_angles) {
        float theta = (float)pos;
        for (int i = 0; i < half; i++) {
            float a = (r->freq_factors ? theta / r->freq_factors[i] : theta) * r->freq_scale;
            cs[i] = cosf(a);
            sn[i] = sinf(a);
            theta *= r->theta_scale;
        }
    } else {
        for (int i = 0; i < half; i++) {
            float a = (float)pos * r->inv_freq[i];
            if (r->freq_factors) a = (float)pos * (r->inv_freq[i] / r->freq_factors[i]);
            cs[i] = cosf(a) * r->mscale;
            sn[i] = sinf(a) * r->mscale;
        }
    }
    for (int h = 0; h < n_heads; h++) {
        float *v = x + (int64_t)h * d;
        if (r->style == MODEL_ROPE_NEOX) {
            for (int i = 0; i < half; i++) {
                float a = v[i], b = v[i + half];
                v[i] = a * cs[i] - b * sn[i];
                v[i + half] = a * sn[i] + b * cs[i];
            }
        } else {
            for (ptrdiff_t i = 0; i < half; i++) {
                float a = v[2 * i], b = v[2 * i + 1];
                v[2 * i] = a * cs[i] - b * sn[i];
                v[2 * i + 1] = a * sn[i] + b * cs[i];
            }
        }
    }
}
