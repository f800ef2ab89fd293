/* Drafters for speculative decoding (scheduler.c verifies what they propose).
 *
 * A drafter guesses the tokens that follow a request's tokens; the target
 * model then computes all of them in one step and keeps the longest prefix it
 * would have produced itself. Today's drafter is prompt lookup (n-gram
 * matching over the request's own prompt and output, for any model: what
 * llama.cpp calls lookup decoding and vLLM "ngram" speculation): agents and
 * editors copy long spans of their context into their output, which is where
 * it pays. The interface takes the request's tokens only, so a model drafter
 * (DeepSeek-V3's MTP module, a small same-tokenizer model) fits behind it. */
#ifndef DI_ENGINE_DRAFT_H
#define DI_ENGINE_DRAFT_H

#include <stdint.h>

/* Prompt lookup: the longest suffix of tokens[0, n) of length in [min_ngram,
 * max_ngram] that also occurs earlier in tokens (its most recent earlier
 * occurrence), and the tokens that followed that occurrence, at most max of
 * them, into out; *ngram (when not NULL) gets the matched length, the
 * drafter's confidence. Returns how many were proposed (0: no match). O(n *
 * max_ngram) per call. */
int draft_prompt_lookup(const int32_t *tokens, int64_t n, int min_ngram, int max_ngram,
                        int32_t *out, int max, int *ngram);

/* A step's cost as the engine measures it: wall time against the tokens a
 * step computes, kept current by every step (an exponential moving average
 * per power-of-two bucket of the token count), interpolated between the
 * buckets measured and extrapolated in proportion to the tokens outside
 * them. */
enum { DRAFT_PROFILE_BUCKETS = 18 };
typedef struct draft_profile {
    double ns[DRAFT_PROFILE_BUCKETS], tokens[DRAFT_PROFILE_BUCKETS]; /* averages */
    int seen[DRAFT_PROFILE_BUCKETS];
} draft_profile;

void draft_profile_add(draft_profile *p, int64_t n_tokens, double ns);
/* The expected wall time of a step of n_tokens (> 0); 0 when nothing was
 * measured yet. */
double draft_profile_cost(const draft_profile *p, int64_t n_tokens);

/* Confidence-scheduled verification (the idea of DeepSeek's DSpark): how
 * many of its proposed drafts each of n requests verifies this step. Request
 * i has avail[i] drafts and accept[i], the probability that each next draft
 * is kept given the one before was (its running acceptance rate, or a prior
 * from its match length), so its j-th draft adds accept[i]^j expected
 * tokens. The drafts are ordered by expected gain (largest first), and the
 * prefix of that order within `budget` with the highest expected tokens per
 * unit of time (decoders' tokens, base_work the other work of the step, plus
 * the drafts' expected gain, over the profile's cost of base_tokens plus the
 * drafts) is verified — the whole order is weighed, since step cost is not
 * convex in tokens. So a busy engine, whose steps cost more per
 * token, verifies fewer speculative tokens, and an idle one more. An empty
 * profile allows every draft (its steps then measure it). k[i] gets the
 * counts; returns their sum. */
int64_t draft_allocate(const draft_profile *p, int n, const int *avail, const double *accept,
                       int64_t base_tokens, double base_work, int64_t budget, int *k);

#endif
