/* The element-wise and row-wise kernels of a transformer layer on f32
 * activations: RMSNorm, RoPE, softmax, SiLU-gated MLP activation. Each is a
 * plain loop the compiler vectorises (the scalar code is the reference); each
 * states its roofline. All are thread-safe (no state). */
#ifndef DI_BACKEND_CPU_OPS_H
#define DI_BACKEND_CPU_OPS_H

#include <stdint.h>

#include "backend/types.h"
#include "deepinfer/deepinfer.h"

/* y[t] = x[t] / sqrt(mean(x[t]^2) + eps) * w, for n_tokens rows of n floats
 * (y may equal x; w NULL: unweighted). The mean of squares is accumulated in double, as ggml's
 * rms_norm (squares in f32, summed in double). Roofline: 8n bytes read + 4n written per row, 4n
 * FLOPs. */
void cpu_rmsnorm(const float *x, const float *w, float *y, int64_t n_tokens, int64_t n, float eps);

/* Rotary position embedding tables for one model: inverse frequencies per
 * rotated pair and the attention scaling YaRN applies to cos/sin. */
typedef struct cpu_rope {
    int head_dim;
    model_rope_style style;
    float inv_freq[512]; /* head_dim / 2 entries */
    float mscale;        /* multiplies cos and sin (YaRN's attention factor; 1 otherwise) */
    /* 1: angles as ggml computes them (pos * s^i by repeated f32 multiplication,
     * s = base^(-2/d), times 1/factor for linear scaling), for GGUF models run
     * against llama.cpp; 0: pos * inv_freq[i] (transformers). Only NONE and
     * LINEAR scaling have a ggml form here; others use inv_freq. */
    int ggml_angles;
    float theta_scale, freq_scale;
    /* GGUF "rope_freqs.weight" (Llama 3 GGUFs carry their frequency scaling
     * as this tensor): angle i is divided by freq_factors[i]; NULL: none.
     * Borrowed, [head_dim / 2] f32. */
    const float *freq_factors;
} cpu_rope;

/* Fill r from the config's rope fields: theta^(-2i/d), divided by the factor
 * (linear), blended per frequency band (llama3, as transformers'
 * _compute_llama3_parameters), or YaRN's ramp between interpolation and
 * extrapolation with its mscale (transformers' _compute_yarn_parameters).
 * Returns DI_ERR_UNSUPPORTED for head_dim > 1024 or odd. */
di_status cpu_rope_init(cpu_rope *r, const backend_rope_params *c);

/* Rotate, in place, n_heads heads of head_dim floats (contiguous, [n_heads,
 * head_dim]) of one token at position pos. NORM pairs (x[2i], x[2i+1]), NEOX
 * pairs (x[i], x[i + d/2]). Roofline: 8 * n_heads * head_dim bytes moved,
 * 3 FLOPs per element plus d/2 sin/cos. */
void cpu_rope_apply(const cpu_rope *r, float *x, int n_heads, int64_t pos);

/* In place softmax of n floats (max-subtracted, sum in double). Roofline: 4n
 * bytes read twice and written twice, n exp + 3n FLOPs. */
void cpu_softmax(float *x, int64_t n);

/* y[i] = e^x[i] for n floats (x and y may be the same row): glibc's expf
 * bits (since 2.27; its FMA variant, the one its ifunc picks where AVX2 runs),
 * computed eight lanes at a time in double with AVX-512F, or AVX2 and FMA,
 * whatever the C library; libm's expf without AVX2. Roofline: 4n bytes read,
 * 4n written, ~ 15n FLOPs (double). */
void cpu_exp_rows(const float *x, float *y, int64_t n);

/* Set (tests, benchmarks) to keep cpu_exp_rows and the SiLU on their AVX2
 * form where the AVX-512 one would run: the two give the same bits. Not
 * thread-safe: set it while neither runs. */
extern int cpu_exp_avx2_only;

/* gate[i] = silu(gate[i]) * up[i], silu(x) = x / (1 + e^-x), for n floats,
 * as gate / (1 + expf(-gate)) * up computes it with glibc's expf (2.27 on, its
 * FMA variant): with AVX2 eight at a time, e^-x by cpu_exp_rows' arithmetic,
 * the last n % 8 through the same vector step, so an element's bits do not
 * depend on n or on where its row starts, nor on the C library; without AVX2,
 * that formula with libm's expf. Roofline: 8n bytes read, 4n written, ~ 5n
 * FLOPs + n exp. */
void cpu_silu_mul(float *gate, const float *up, int64_t n);

/* DeepSeek-V4's clipped SwiGLU (transformers' DeepseekV4MLP / Experts):
 * gate[i] = silu(min(gate[i], limit)) * clamp(up[i], -limit, limit), limit >
 * 0 (a NaN gate as the limit, a NaN up NaN), the arithmetic and its AVX2 form
 * as cpu_silu_mul's. Roofline as cpu_silu_mul's. */
void cpu_silu_mul_clamp(float *gate, const float *up, int64_t n, float limit);

#endif
