/* Drafters for speculative decoding (scheduler.c verifies what they propose).
 *
 * A drafter guesses the tokens that follow a request's tokens; the target
 * model then computes all of them in one step and keeps what the
 * speculative-sampling rule keeps (sampler_verify). The drafters behind the
 * one interface below:
 *   - prompt lookup (n-gram matching over the request's own prompt and
 *     output, for any model: what llama.cpp calls lookup decoding and vLLM
 *     "ngram" speculation): agents and editors copy long spans of their
 *     context into their output, which is where it pays;
 *   - a draft model sharing the tokenizer (draft_model.c): a small model run
 *     ahead, greedily or sampling with the request's temperature and top-k /
 *     top-p / min-p, which hands the verifier its distribution q;
 *   - DeepSeek-V3's MTP (NextN) module (draft_mtp.c): the target's own
 *     extra layer, drafting from the target's hidden states, which it sees
 *     after every step (observe). */
#ifndef DI_ENGINE_DRAFT_H
#define DI_ENGINE_DRAFT_H

#include <stdint.h>

#include "model/model.h"
#include "sampler/sampler.h"

/* Prompt lookup: the longest suffix of tokens[0, n) of length in [min_ngram,
 * max_ngram] that also occurs earlier in tokens (of equally long ones, the
 * most recent earlier occurrence), and the tokens that followed that
 * occurrence, at most max of them, into out; *ngram (when not NULL) gets the
 * matched length, the drafter's confidence. Returns how many were proposed
 * (0: no match). One pass back over the earlier places of the last token,
 * each extended backwards: O(n) plus max_ngram per such place, O(n *
 * max_ngram) at worst (a run of one token). */
int draft_prompt_lookup(const int32_t *tokens, int64_t n, int min_ngram, int max_ngram,
                        int32_t *out, int max, int *ngram);

/* One decoding request, as the scheduler hands it to a drafter each step. */
typedef struct draft_request {
    /* in */
    const int32_t *tokens; /* the request's prompt and output so far, [n_tokens] */
    int64_t n_tokens;
    int max;            /* drafts wanted at most (>= 1) */
    const sampler *smp; /* the request's sampler: its parameters (temperature...) */
    void **state;       /* the drafter's state for this request; NULL the first time */
    /* out */
    int32_t *out; /* [max] the drafts, in order */
    float *conf;  /* [max] each draft's confidence: the drafter's probability that
                     it is kept given the drafts before it were */
    float *q;     /* [max, n_vocab], or NULL when the drafter gives no
                     distributions: row j the distribution out[j] was drawn from */
    int has_q;    /* set to 1 when the rows of q were written (a sampled draft) */
    int n;        /* drafts proposed, in [0, max] */
} draft_request;

typedef struct drafter drafter;

/* One item of a target step, as the scheduler shows it to a drafter that
 * drafts from the target's hidden states (observe): the item's rows are
 * rows [row0, row0 + n_kept) of the step's final normed hidden states
 * (model_last_hidden), the target's positions pos0, pos0 + 1, ... (its
 * sequence's n_past before the step); only the rows the request kept (a
 * prompt chunk's, and a verified item's up to its last accepted draft) are
 * shown, and next[t] is the request's token after row t (the prompt's next
 * token, a kept draft, or the token sampled from the row). */
typedef struct draft_observation {
    void **state; /* the request's drafter state, as in draft_request */
    const sampler *smp;
    int64_t pos0;
    int64_t row0;
    int64_t n_kept;
    const int32_t *next; /* [n_kept] */
} draft_observation;

/* A drafter's operations. propose fills each of reqs[0, n) (n_tokens >= 1)
 * with its drafts: deterministic for the same tokens and state, and never
 * failing (a drafter that cannot draft, out of memory or of KV room, proposes
 * none). observe (NULL for drafters that do not need it) is called after
 * every target step that computed rows, before any of its requests is
 * released, with the step's hidden states [n_rows, n_embd] (the MTP layer's
 * input, model_last_hidden; DSpark's features, model_dspark_features, for a
 * model without MTP) and one
 * observation per item that kept rows. release frees a request's state (the
 * request ended or was pre-empted). destroy frees the drafter. Run on the
 * scheduler's worker thread only. */
typedef struct drafter_ops {
    const char *name; /* "prompt-lookup", "draft-model", "mtp" */
    void (*propose)(drafter *d, draft_request *reqs, int n);
    void (*observe)(drafter *d, const draft_observation *obs, int n, const float *hidden);
    void (*release)(drafter *d, void *state);
    void (*destroy)(drafter *d);
} drafter_ops;

struct drafter {
    const drafter_ops *ops;
    int gives_q; /* 1: may hand distributions (the scheduler then allocates q rows) */
};

/* The prompt-lookup drafter (draft_prompt_lookup with n-grams of
 * DRAFT_LOOKUP_MAX_NGRAM down to 1 tokens: the longest match, so a copy
 * follows its source past a place where the last few tokens recur, such as
 * a numbered line's number). Every draft's confidence is a prior from the
 * match length: 0.3, 0.5, 0.65, 0.85 for 1-, 2-, 3-to-7- and
 * DRAFT_LOOKUP_LONG-or-more-token matches (confidence classes 1 to 4). NULL
 * when out of memory. */
enum { DRAFT_LOOKUP_MAX_NGRAM = 16, DRAFT_LOOKUP_LONG = 8 };
drafter *drafter_prompt_lookup_create(void);

/* The draft-model drafter (draft_model.c) over model m (taken: freed with
 * the drafter, or here on failure), for up to max_running requests at once.
 * Its drafts are its greedy choice at temperature 0 (a point-mass draft,
 * confidence its probability) and a sample of its distribution after the
 * request's temperature, top-k, top-p and min-p otherwise (q handed to the
 * verifier). Errors: DI_ERR_OUT_OF_MEMORY. */
di_status drafter_model_create(model *m, int max_running, drafter **out);

/* The MTP drafter (draft_mtp.c) over the target model m itself (borrowed: it
 * must outlive the drafter; it is run on the same thread as the target's
 * steps), for up to max_running requests at once. Each request has an MTP
 * sequence that observe keeps caught up with the target's kept tokens; its
 * first draft is the MTP module's prediction from the target's hidden state
 * of the token before the last and the last token, the next ones chain the
 * module's own output. Drafts at temperature 0 are its argmax (confidence
 * its probability), otherwise samples of q as the draft model's.
 * Errors: DI_ERR_UNSUPPORTED (m has no MTP layer), DI_ERR_OUT_OF_MEMORY. */
di_status drafter_mtp_create(model *m, int max_running, drafter **out);

/* The DSpark drafter (draft_dspark.c) over the target model m itself
 * (borrowed, as the MTP drafter's), for up to max_running requests at once:
 * DeepSeek-V4's DSpark head drafts up to its block of tokens per request in
 * one pass, from the target's features of every token but the last (observe
 * reads model_dspark_features) and the last token as the block's anchor. At
 * temperature 0 the Markov chain's argmaxes (confidence the confidence
 * head's), otherwise samples of q as the draft model's. Errors:
 * DI_ERR_UNSUPPORTED (m has no DSpark head), DI_ERR_INVALID_ARGUMENT
 * (model_n_batch below the block: a block runs in one pass),
 * DI_ERR_OUT_OF_MEMORY. */
di_status drafter_dspark_create(model *m, int max_running, drafter **out);

/* The sampler a drafter draws a request's drafts with: NULL (*out) at
 * temperature 0, else one with the request's temperature, top-k, top-p and
 * min-p (not penalties, bias or grammar: q may be any distribution) and a
 * seed of the request's seed and the drafter's salt. DI_ERR_OUT_OF_MEMORY. */
di_status draft_sampler_create(const sampler *request, int32_t n_vocab, uint64_t salt,
                               sampler **out);

/* Request r's draft for the token at `position` from its logits row
 * (modified): at temperature 0 (smp NULL) the argmax, its confidence its
 * softmax probability; otherwise a sample of smp's distribution, written to
 * q [n_vocab], confidence q[x], its random number from smp's seed and the
 * position alone (sampler_reseed) — so a position's draft does not depend on
 * the drafts drawn before it (a pre-empted request's drafter starts over and
 * draws the same). scratch: sampler_scratch_count(n_vocab) candidates. */
int32_t draft_pick(float *row, int32_t n_vocab, sampler *smp, sampler_candidate *scratch, float *q,
                   float *conf, int64_t position);

/* A drafter's destroy; NULL is a no-op. */
void drafter_destroy(drafter *d);

/* A step's cost as the engine measures it: wall time against the tokens a
 * step computes, kept current by every step (an exponential moving average
 * per bucket of the token count: one per count up to DRAFT_PROFILE_EXACT,
 * where a step's cost is a stair of kernel passes a bucket average would
 * smooth away, then one per power of two), interpolated between the
 * buckets measured and extrapolated in proportion to the tokens outside
 * them. */
enum { DRAFT_PROFILE_EXACT = 32, DRAFT_PROFILE_BUCKETS = DRAFT_PROFILE_EXACT + 13 };
typedef struct draft_profile {
    double ns[DRAFT_PROFILE_BUCKETS], tokens[DRAFT_PROFILE_BUCKETS]; /* averages */
    int seen[DRAFT_PROFILE_BUCKETS];
} draft_profile;

void draft_profile_add(draft_profile *p, int64_t n_tokens, double ns);
/* The expected wall time of a step of n_tokens (> 0); 0 when nothing was
 * measured yet. */
double draft_profile_cost(const draft_profile *p, int64_t n_tokens);

/* Acceptance statistics of draft tokens, measured online, per confidence
 * class (the drafter's confidence in fifths: prompt lookup's 1-, 2-, 3-to-7-
 * and 8-or-more-token matches fall in classes 1, 2, 3 and 4) and per run: how many tokens
 * in a row the drafter had predicted right before the draft (its match has
 * been copying for that long). For each (class, run) cell: how many drafts
 * were compared with the token the request emitted there, and how many
 * equalled it — the conditional acceptance at that run length, a hazard
 * curve rather than one rate for every draft: a copy that has been right for
 * twenty tokens is likelier to go on than a fresh match. Runs from
 * DRAFT_RUNS - 1 up share the last cell. A cell that reaches
 * DRAFT_ACCEPT_WINDOW comparisons halves both counts, so the statistics
 * follow the workload. */
enum { DRAFT_CLASSES = 5, DRAFT_RUNS = 32, DRAFT_ACCEPT_WINDOW = 256, DRAFT_ACCEPT_PRIOR = 2 };
typedef struct draft_accept {
    float kept[DRAFT_CLASSES][DRAFT_RUNS], tested[DRAFT_CLASSES][DRAFT_RUNS];
} draft_accept;

/* The confidence class of a draft of confidence conf in [0, 1]. */
int draft_class(float conf);
/* Record that a draft of class cls after a run of `run` right predictions
 * was compared: kept 1 or 0. */
void draft_accept_add(draft_accept *a, int cls, int64_t run, int kept);
/* The expected tokens each of a request's n drafts adds (gain[j]: the
 * probability that drafts 0..j are all kept) when the drafter has been right
 * `run` tokens in a row before draft 0 (draft j then follows a run of
 * run + j), from the drafts' confidences conf[j] and the measured
 * statistics: the engine's (all requests) and the request's own (NULL:
 * none). The conditional acceptance of class c after a run of t is
 * estimated level by level, each with DRAFT_ACCEPT_PRIOR pseudo-counts of
 * the level above: the engine's from the drafter's confidence at t = 0 and
 * from its own estimate at t - 1 beyond it; the request's from the engine's
 * at t = 0, and beyond it from its own at t - 1 times the engine's ratio of
 * t to t - 1 (the request's level, the engine's shape). Deterministic: no
 * timing. */
void draft_gains(const draft_accept *engine, const draft_accept *req, const float *conf, int n,
                 int64_t run, double *gain);

/* Confidence-scheduled verification (the idea of DeepSeek's DSpark): how
 * many of its proposed drafts each of n requests verifies this step. Request
 * i has avail[i] drafts; gain[i * stride + j] is the expected tokens its
 * (j+1)-th draft adds — the probability that it and every draft before it
 * are kept (draft_gains), non-increasing in j. The drafts are ordered by
 * expected gain (largest first), and the prefix of that order within `budget` with the highest
 * expected tokens per unit of time (decoders' tokens, base_work the other work of the step, plus
 * the drafts' expected gain, over the profile's cost of base_tokens plus the
 * drafts) is verified — the whole order is weighed, since step cost is not
 * convex in tokens. So a busy engine, whose steps cost more per
 * token, verifies fewer speculative tokens, and an idle one more. An empty
 * profile allows every draft (its steps then measure it). k[i] gets the
 * counts; returns their sum. */
int64_t draft_allocate(const draft_profile *p, int n, const int *avail, const double *gain,
                       int stride, int64_t base_tokens, double base_work, int64_t budget, int *k);

#endif
