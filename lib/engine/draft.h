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
 * them, into out. Returns how many were proposed (0: no match). O(n *
 * max_ngram) per call. */
int draft_prompt_lookup(const int32_t *tokens, int64_t n, int min_ngram, int max_ngram,
                        int32_t *out, int max);

#endif
