/* top_k and top_p's selection: the head of the candidates' order (descending
 * logit, then ascending id) that they keep, found without ordering the
 * vocabulary. */
#ifndef DI_SAMPLER_SELECT_H
#define DI_SAMPLER_SELECT_H

#include <stdint.h>

#include "sampler/sampler.h"

/* The candidates top_k (0 or >= n: no limit) and top_p (1: no limit) keep
 * of x[0, n) (the logits after temperature, in id order, no NaN: the sampler
 * makes a NaN -inf; max their largest), in the order: the first top_k, then of
 * those the shortest head whose weights exp(logit - max), summed in order,
 * reach top_p times their total (a +inf max makes that total NaN: top_p alone
 * keeps the first, top_k with top_p all k, as the heap before them did). With
 * no top_k the total is the weights of all n in 8 partial sums (weight i to
 * sum i % 8, in id order) added in pairs, ((0 + 1) + (2 + 3)) + ((4 + 5) +
 * (6 + 7)): the same on every CPU, as every weight is libm's exp bits
 * (exp_rows.h). The kept head is what a full sort gives, element for element
 * (tests/unit/test_sampler.c checks it against qsort), so the result does not
 * depend on the search below.
 *
 * The search. top_k up to 256: one scan in id order keeping a heap of the k
 * best so far (16 values compared with its worst at a time; about k ln(n/k)
 * enter a row in no order), then a heapsort of the k; a row that lets in more
 * than n / 16 + k (values rising with the id: O(n log k)) goes to the
 * buckets. top_p, larger top_k and those rows: one pass gives each value a
 * bucket by its distance below max (sixteenths of a logit, 64 logits deep,
 * the rest in one last bucket; a higher logit never has a later bucket) and
 * each bucket its count or weight; the buckets up to the one where top_k's
 * count or (with a margin for the summation order) top_p's weight is reached
 * hold a head of the order, which is gathered and sorted (LSD radix on the
 * logit's bits, stable, so ties keep ascending ids; insertion below 33).
 * Should the head fall short of top_p's sum it is taken again with every
 * bucket. Two or three passes over x and, for top_p, one exp a value, then the
 * head's sort: O(n + kept log kept) but for the heap's rows of the budget.
 *
 * buf and tmp: n candidates each, apart from x (x is only read). Returns the
 * count kept (at least 1 where n >= 1); *kept points at them, in buf or tmp.
 * Not thread-safe over the same buffers; otherwise reentrant. */
int32_t sampler_select(const float *x, int32_t n, float max, int32_t top_k, float top_p,
                       sampler_candidate *buf, sampler_candidate *tmp, sampler_candidate **kept);

/* The margin on top_p's weight, 1e-9 (tests: set it below 0 to make the buckets' head fall
 * short, so the second gathering runs; not thread-safe: set it while none
 * runs). */
extern double sampler_select_margin;

#endif
