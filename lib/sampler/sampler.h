/* The sampler: one request's logits row to its next token.
 *
 * The processors run in the order vLLM and transformers' generate apply them:
 *   0. grammar      logits[id] = -inf for a token the grammar does not allow (grammar.h)
 *   1. logit_bias       logits[id] += bias                (OpenAI logit_bias)
 *   2. repetition       a seen token's logit is divided by the penalty when positive and
 *                       multiplied when negative, over prompt and output tokens
 *                       (transformers' RepetitionPenaltyLogitsProcessor, CTRL paper)
 *   3. frequency and    logits[id] -= frequency * count(id) + presence * (count(id) > 0),
 *      presence         over output tokens only (OpenAI's penalties, as vLLM applies them)
 *   4. temperature 0    greedy: the largest logit (NaN passed over), the lowest id on
 *                       a tie — stop here (a temperature below SAMPLER_GREEDY_BELOW is 0)
 *   5. temperature      logits *= 1 / temperature (a NaN made -inf: never drawn)
 *   6. top_k            keep the k largest (ties broken by lower id; select.h)
 *   7. top_p            keep the smallest prefix of the sorted tokens whose
 *                       probability reaches top_p (at least one)
 *   8. min_p            drop tokens whose probability is below min_p × the largest
 *   9. draw             one uniform double from the request's own RNG, inverse CDF
 *                       over the kept tokens in descending probability order
 *
 * Batch invariance: a sampler holds everything its draws depend on — its own
 * RNG (xoshiro256**, seeded through splitmix64) and its token counts — and reads
 * nothing but its request's logits row, so the same seed and logits give the
 * same tokens whatever else runs in the batch. Not thread-safe: one sampler per
 * request, used by one thread at a time. */
#ifndef DI_SAMPLER_SAMPLER_H
#define DI_SAMPLER_SAMPLER_H

#include <stddef.h>
#include <stdint.h>

#include "deepinfer/deepinfer.h"
#include "sampler/grammar.h"

typedef struct sampler_params {
    float temperature;        /* >= 0; below SAMPLER_GREEDY_BELOW: greedy */
    int32_t top_k;            /* >= 0; 0: off */
    float top_p;              /* (0, 1]; 1: off */
    float min_p;              /* [0, 1]; 0: off */
    float repetition_penalty; /* > 0; 1: off */
    float presence_penalty;   /* [-2, 2]; 0: off */
    float frequency_penalty;  /* [-2, 2]; 0: off */
    uint64_t seed;
    const int32_t *bias_ids; /* n_bias token ids (copied) */
    const float *bias_values;
    size_t n_bias;
} sampler_params;

/* Temperatures below this are greedy, as vLLM's _SAMPLING_EPS makes them:
 * 1 / T would scale logits past float's range (a logit 0 times 1 / T = inf is
 * NaN), and the draw at such a T is the greedy choice but for exact ties.
 * sampler_create stores 0 for them. */
#define SAMPLER_GREEDY_BELOW 1e-5f

typedef struct sampler sampler;

/* Scratch for sampler_sample: sampler_scratch_count(n_vocab) candidates, owned
 * by the caller and shared by every sampler one thread runs (the engine's
 * worker has one), so a sampler itself holds only O(distinct tokens seen). */
typedef struct sampler_candidate {
    float logit;
    int32_t id;
} sampler_candidate;
size_t sampler_scratch_count(int32_t n_vocab);

/* A sampler for a vocabulary of n_vocab tokens. The parameters are checked
 * (msg receives a sentence naming the field on DI_ERR_INVALID_ARGUMENT).
 * Errors: DI_ERR_INVALID_ARGUMENT, DI_ERR_OUT_OF_MEMORY. */
di_status sampler_create(const sampler_params *p, int32_t n_vocab, sampler **out, char *msg,
                         size_t msg_size);
void sampler_free(sampler *s);

/* Constrain the sampler with a grammar matcher (taken: freed with the
 * sampler). Before every other processor, sampler_sample sets the logit of
 * each token the matcher does not allow to -infinity; sampler_accept advances
 * it. Errors: DI_ERR_INVALID_ARGUMENT (a matcher already set), or
 * DI_ERR_OUT_OF_MEMORY (m is freed). */
di_status sampler_set_grammar(sampler *s, grammar_matcher *m);
/* The same, but the grammar applies only after the output token `after` (a
 * reasoning model's </think>: the answer is constrained, its reasoning is
 * not); `after` itself is not fed to the matcher. */
di_status sampler_set_grammar_after(sampler *s, grammar_matcher *m, int32_t after);

/* Count a prompt token (repetition penalty only) or an output token (all
 * penalties, and the grammar's state). Returns 0, or -1 when memory ran out
 * or the grammar does not allow the token (the count is not taken). */
int sampler_accept_prompt(sampler *s, int32_t token);
int sampler_accept(sampler *s, int32_t token);
/* After sampler_accept failed: DI_ERR_INVALID_REQUEST with *why the grammar's
 * reason (an ambiguous grammar: more than 4096 parses at once), or
 * DI_ERR_OUT_OF_MEMORY; DI_OK (*why NULL) when the grammar did not fail.
 * *why is static text. */
di_status sampler_grammar_error(const sampler *s, const char **why);
/* 1 once the request's grammar accepted its end token: nothing may follow,
 * so the request stops even when end tokens do not stop it (ignore_eos). */
int sampler_grammar_ended(const sampler *s);

/* Choose the next token from logits [n_vocab] (modified in place: the row
 * comes back after steps 0-3, and after step 5 where the temperature is not
 * 0; callers that need the raw row copy it first), with
 * `scratch` as sampler_scratch_count says. Does not accept it: the caller calls
 * sampler_accept with what it keeps. */
int32_t sampler_sample(sampler *s, float *logits, sampler_candidate *scratch);

/* sampler_sample, and when probs is not NULL the distribution it drew from,
 * probs[n_vocab]: the kept tokens' probabilities after every processor (0 for
 * the rest; greedy: 1 on the chosen token). The same token and random draw as
 * sampler_sample. A drafter that samples uses it to hand the verifier q. */
int32_t sampler_sample_dist(sampler *s, float *logits, sampler_candidate *scratch, float *probs);

/* Speculative sampling (Leviathan et al. 2023, "Fast Inference from
 * Transformers via Speculative Decoding", algorithm 1; Chen et al. 2023):
 * verify the draft token `draft` against the target distribution p that
 * sampler_sample would draw from these logits (modified in place), and return
 * the token to emit; *accepted gets 1 when it is the draft. q is the
 * drafter's distribution over the vocabulary [n_vocab] that `draft` was drawn
 * from (q[draft] > 0), or NULL for a point-mass draft (a deterministic
 * drafter: prompt lookup, greedy drafting).
 *   - q given: the draft is kept with probability min(1, p(x)/q(x)); on
 *     rejection the token is drawn from the residual max(0, p - q),
 *     normalised. The emitted token is distributed as p whatever q is.
 *   - NULL: the plain draw of sampler_sample (the same random number), kept
 *     when it equals the draft — with q a point mass the rule above accepts
 *     with probability p(x) and its residual is p without x, which is what
 *     this draws; and the output equals decoding without speculation.
 *   - greedy: p is a point mass on the chosen token: kept when it is the draft.
 * Each call takes exactly one random number from the request's RNG (none when
 * greedy), like sampler_sample: the rejected case reuses it, rescaled, for the
 * residual draw — so the seeded stream advances one number per emitted token,
 * drafted or not. Does not accept the token (sampler_accept). */
int32_t sampler_verify(sampler *s, float *logits, sampler_candidate *scratch, int32_t draft,
                       const float *q, int *accepted);

/* Restart the sampler's RNG from seed, as sampler_create seeds it (its
 * token counts and grammar stay): a drafter draws each draft position's
 * sample from its own seed this way (draft.h: draft_pick). */
void sampler_reseed(sampler *s, uint64_t seed);

/* The parameters the sampler was created with (bias arrays owned by it), a
 * temperature below SAMPLER_GREEDY_BELOW stored as 0 (greedy). */
const sampler_params *sampler_get_params(const sampler *s);

#endif
