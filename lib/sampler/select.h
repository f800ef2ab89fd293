/* top_k and top_p's selection: the head of the candidates' order (descending
 * logit, then ascending id) that they keep, found without ordering the
 * vocabulary. */
#ifndef DI_SAMPLER_SELECT_H
#define DI_SAMPLER_SELECT_H

#include <stdint.h>

#include "sampler/sampler.h"

/* The candidates top_k (0 or >= n: no limit) and top_p (1: no limit) keep
 * from c[0, n) (logits after temperature, max their largest), in the order:
 * the first top_k, then of those the shortest head whose weights
 * exp(logit - max), summed in order, reach top_p times their total (with no
 * top_k, the total of all n, summed in id order, c's). The kept head is what a
 * full sort of c would give, element for element (tests/unit/test_sampler.c
 * checks it against qsort), and every weight is libm's exp bits, so the result
 * does not depend on the search below.
 *
 * The search: one pass gives each candidate a bucket by its distance below
 * max (sixteenths of a logit, 64 logits deep, the rest in one last bucket; a
 * higher logit never has a later bucket) and each bucket its count or weight;
 * the buckets up to the one where top_k's count or (with a margin of 1e-9 for
 * the summation order) top_p's weight is reached hold a head of the order,
 * which is gathered and sorted (LSD radix on the logit's bits, stable, so ties
 * keep ascending ids; insertion below 33). Should the head fall short of
 * top_p's sum it is taken again with every bucket. Cost O(n + kept) and one
 * exp a candidate, against a heap's O(n + kept log n).
 *
 * buf and tmp: n candidates each, apart from c (c is only read). Returns the
 * count kept (at least 1 where n >= 1); *kept points at them, in buf or tmp.
 * Not thread-safe over the same buffers; otherwise reentrant. */
int32_t sampler_select(const sampler_candidate *c, int32_t n, float max, int32_t top_k, float top_p,
                       sampler_candidate *buf, sampler_candidate *tmp, sampler_candidate **kept);

/* The margin above (tests: set it below 0 to make the buckets' head fall
 * short, so the second gathering runs; not thread-safe: set it while none
 * runs). */
extern double sampler_select_margin;

#endif
