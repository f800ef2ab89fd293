/* e^x in double for rows of floats, for the sampler's weights
 * exp(logit - max): glibc's exp bits, vectorized. */
#ifndef DI_SAMPLER_EXP_ROWS_H
#define DI_SAMPLER_EXP_ROWS_H

#include <stdint.h>

#include "sampler/sampler.h"

/* y[i] = exp((double)x[i]) for n values, bit for bit what glibc's exp (2.28 on;
 * its FMA variant, the one its ifunc picks where FMA and AVX2 are usable) returns: on x86-64
 * with AVX-512F 8 lanes at a time, with AVX2 and FMA 4, computing its
 * algorithm step for step (exp_rows.c); values outside 2^-54 <= |x| < 512, and
 * every value without AVX2, through libm's exp. So the sampler's weights, and
 * its draws, are the scalar loop's. Roofline: 4n bytes read, 8n written, ~ 20n
 * FLOPs. Thread-safe (its one state, the CPU's level, is found once; the
 * override below is for tests). */
void sampler_exp_rows(const float *x, double *y, int64_t n);

/* The sampler's weights from a row: y[i] = exp((double)(x[i] - max)) for n
 * values (x[i] - max rounded to float first, as the scalar loop computes it),
 * through sampler_exp_rows a stack block at a time. */
void sampler_exp_shifted(const float *x, float max, double *y, int64_t n);

/* The same from candidates' logits (sampler.h): y[i] = exp((double)(c[i].logit
 * - max)). */
void sampler_exp_candidates(const sampler_candidate *c, float max, double *y, int64_t n);

/* The scalar loop sampler_exp_rows stands for: y[i] = exp((double)x[i]). */
void sampler_exp_rows_scalar(const float *x, double *y, int64_t n);

/* The form sampler_exp_rows runs: 2 AVX-512F, 1 AVX2, 0 libm. */
int sampler_exp_rows_level(void);

/* Tests: set to 1 or 0 to run a lower form than the CPU allows; -1 (the
 * default) for the CPU's best. Not thread-safe: set it while none runs. */
extern int sampler_exp_level_override;

#endif
