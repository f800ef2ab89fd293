/* Prompt-lookup drafting, the drafter interface and the verification
 * schedule (draft.h). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/draft.h"

int draft_prompt_lookup(const int32_t *tokens, int64_t n, int min_ngram, int max_ngram,
                        int32_t *out, int max, int *ngram)
{
    if (ngram) *ngram = 0;
    if (max <= 0 || min_ngram < 1 || max_ngram < min_ngram || n < 2) return 0;
    /* Every earlier place of the last token ends a candidate; each is
     * extended backwards against the suffix, up to max_ngram tokens. Scanning
     * from the most recent, a candidate replaces the best only when strictly
     * longer, so equals go to the most recent (what the output copies now),
     * and a full-length one ends the scan. */
    const int32_t last = tokens[n - 1];
    int64_t end = -1;
    int len = 0;
    for (int64_t e = n - 2; e >= 0 && len < max_ngram; e--) {
        if (tokens[e] != last) continue;
        int64_t room = e + 1 < max_ngram ? e + 1 : max_ngram;
        int l = 1;
        while (l < room && tokens[e - l] == tokens[n - 1 - l]) l++;
        if (l > len) len = l, end = e;
    }
    if (len < min_ngram) return 0;
    int64_t from = end + 1, avail = n - from;
    int k = avail < max ? (int)avail : max;
    memcpy(out, tokens + from, (size_t)k * sizeof *out);
    if (ngram) *ngram = len;
    return k;
}

/* The prompt-lookup drafter's confidence in each draft of a match of len
 * tokens: a prior of its kept fraction, in the confidence class of its
 * length (draft_class: 1-, 2-, 3-to-7- and 8-or-more-token matches are
 * classes 1, 2, 3 and 4), which the engine's measured acceptance then
 * replaces (draft_gains). */
static float lookup_confidence(int len)
{
    if (len >= DRAFT_LOOKUP_LONG) return 0.85f;
    static const float prior[4] = {0, 0.3f, 0.5f, 0.65f};
    return prior[len < 3 ? len : 3];
}

static void lookup_propose(drafter *d, draft_request *reqs, int n)
{
    (void)d;
    for (int i = 0; i < n; i++) {
        draft_request *r = &reqs[i];
        int len = 0;
        r->has_q = 0;
        r->n = draft_prompt_lookup(r->tokens, r->n_tokens, 1, DRAFT_LOOKUP_MAX_NGRAM, r->out,
                                   r->max, &len);
        for (int j = 0; j < r->n; j++) r->conf[j] = lookup_confidence(len);
    }
}

static void lookup_release(drafter *d, void *state)
{
    (void)d;
    (void)state; /* stateless */
}

static void lookup_destroy(drafter *d)
{
    free(d);
}

static const drafter_ops lookup_ops = {"prompt-lookup", lookup_propose, NULL, lookup_release,
                                       lookup_destroy};

drafter *drafter_prompt_lookup_create(void)
{
    drafter *d = calloc(1, sizeof *d);
    if (d) d->ops = &lookup_ops;
    return d;
}

void drafter_destroy(drafter *d)
{
    if (d) d->ops->destroy(d);
}

di_status draft_sampler_create(const sampler *request, int32_t n_vocab, uint64_t salt,
                               sampler **out)
{
    *out = NULL;
    const sampler_params *rp = sampler_get_params(request);
    if (!(rp->temperature > 0.0f)) return DI_OK;
    sampler_params p = {.temperature = rp->temperature,
                        .top_k = rp->top_k,
                        .top_p = rp->top_p,
                        .min_p = rp->min_p,
                        .repetition_penalty = 1.0f,
                        .seed = rp->seed ^ salt};
    return sampler_create(&p, n_vocab, out, NULL, 0);
}

int32_t draft_pick(float *row, int32_t n_vocab, sampler *smp, sampler_candidate *scratch, float *q,
                   float *conf, int64_t position)
{
    if (smp) {
        sampler_reseed(smp, sampler_get_params(smp)->seed ^
                                ((uint64_t)position + 1) * 0x9e3779b97f4a7c15ull);
        int32_t x = sampler_sample_dist(smp, row, scratch, q);
        *conf = q[x];
        return x;
    }
    int32_t x = 0;
    for (int32_t i = 1; i < n_vocab; i++)
        if (row[i] > row[x]) x = i;
    double sum = 0;
    for (int32_t i = 0; i < n_vocab; i++) sum += exp((double)(row[i] - row[x]));
    *conf = (float)(1.0 / sum);
    return x;
}

static int bucket_of(int64_t n)
{
    if (n <= DRAFT_PROFILE_EXACT) return (int)n - 1;
    int b = DRAFT_PROFILE_EXACT; /* (32, 64], (64, 128], ... */
    while (b + 1 < DRAFT_PROFILE_BUCKETS && ((int64_t)DRAFT_PROFILE_EXACT << (b - 31)) < n) b++;
    return b;
}

void draft_profile_add(draft_profile *p, int64_t n_tokens, double ns)
{
    if (n_tokens <= 0 || !(ns > 0)) return;
    int b = bucket_of(n_tokens);
    const double keep = 0.8; /* the last few steps dominate: the profile follows the load */
    if (!p->seen[b]) {
        p->ns[b] = ns;
        p->tokens[b] = (double)n_tokens;
        p->seen[b] = 1;
        return;
    }
    p->ns[b] = keep * p->ns[b] + (1 - keep) * ns;
    p->tokens[b] = keep * p->tokens[b] + (1 - keep) * (double)n_tokens;
}

double draft_profile_cost(const draft_profile *p, int64_t n_tokens)
{
    double x = (double)n_tokens;
    int lo = -1, hi = -1; /* the measured buckets around x */
    for (int b = 0; b < DRAFT_PROFILE_BUCKETS; b++) {
        if (!p->seen[b]) continue;
        if (p->tokens[b] <= x) lo = b;
        if (p->tokens[b] >= x && hi < 0) hi = b;
    }
    if (lo < 0 && hi < 0) return 0;
    /* Outside the measurements, in proportion to the tokens: below them that
     * makes small steps look cheap, so drafts look dear until measured (the
     * safe side: unmeasured speculation is not assumed to pay) */
    if (lo < 0) return p->ns[hi] * x / p->tokens[hi];
    if (hi < 0) return p->ns[lo] * x / p->tokens[lo];
    if (lo == hi || p->tokens[hi] == p->tokens[lo]) return p->ns[lo];
    double f = (x - p->tokens[lo]) / (p->tokens[hi] - p->tokens[lo]);
    return p->ns[lo] + f * (p->ns[hi] - p->ns[lo]);
}

/* The next draft of the greedy order: the request whose next draft adds the
 * most expected tokens (the first of equals), or -1; *gain gets it. */
static int next_draft(int n, const int *avail, const double *gains, int stride, const int *k,
                      double *gain)
{
    int best = -1;
    for (int i = 0; i < n; i++) {
        if (k[i] >= avail[i]) continue;
        double g = gains[(size_t)i * (size_t)stride + (size_t)k[i]];
        if (best < 0 || g > *gain) best = i, *gain = g;
    }
    return best;
}

int64_t draft_allocate(const draft_profile *p, int n, const int *avail, const double *gains,
                       int stride, int64_t base_tokens, double base_work, int64_t budget, int *k)
{
    for (int i = 0; i < n; i++) k[i] = 0;
    int measured = draft_profile_cost(p, 1) > 0;
    /* Walk the whole greedy order (as the budget allows) and keep the prefix
     * of highest expected tokens per unit of time: a step's cost is not
     * convex in its tokens (one token takes the decode path, a few more share
     * one pass over the weights), so stopping at the first draft that does not
     * pay would miss the ones after it that do. */
    int64_t total = 0, best_total = 0;
    double work = base_work, best_rate = measured ? work / draft_profile_cost(p, base_tokens) : 0;
    for (;;) {
        double gain = 0;
        int i = next_draft(n, avail, gains, stride, k, &gain);
        if (i < 0 || total + 1 > budget) break;
        k[i]++;
        total++;
        work += gain;
        if (!measured) {
            best_total = total;
            continue;
        }
        double rate = work / draft_profile_cost(p, base_tokens + total);
        if (rate > best_rate) best_rate = rate, best_total = total;
    }
    /* replay the order up to the best prefix */
    for (int i = 0; i < n; i++) k[i] = 0;
    for (int64_t t = 0; t < best_total; t++) {
        double gain = 0;
        k[next_draft(n, avail, gains, stride, k, &gain)]++;
    }
    return best_total;
}

int draft_class(float conf)
{
    if (!(conf > 0)) return 0; /* NaN too */
    int c = (int)(conf * DRAFT_CLASSES);
    return c < DRAFT_CLASSES ? c : DRAFT_CLASSES - 1;
}

void draft_accept_add(draft_accept *a, int cls, int64_t run, int kept)
{
    if (cls < 0 || cls >= DRAFT_CLASSES || run < 0) return;
    int t = run < DRAFT_RUNS ? (int)run : DRAFT_RUNS - 1;
    a->kept[cls][t] += kept ? 1.0f : 0.0f;
    a->tested[cls][t] += 1.0f;
    if (a->tested[cls][t] >= DRAFT_ACCEPT_WINDOW) {
        a->kept[cls][t] *= 0.5f;
        a->tested[cls][t] *= 0.5f;
    }
}

/* a's estimate of cell (cls, t): its counts plus DRAFT_ACCEPT_PRIOR
 * pseudo-counts of p; p where a is NULL. */
static double posterior(const draft_accept *a, int cls, int t, double p)
{
    if (!a) return p;
    return ((double)a->kept[cls][t] + DRAFT_ACCEPT_PRIOR * p) /
           ((double)a->tested[cls][t] + DRAFT_ACCEPT_PRIOR);
}

void draft_gains(const draft_accept *engine, const draft_accept *req, const float *conf, int n,
                 int64_t run, double *gain)
{
    double g = 1.0;
    if (run < 0) run = 0;
    for (int j = 0; j < n; j++) {
        int c = draft_class(conf[j]);
        double p = conf[j] > 0 ? (conf[j] < 1 ? (double)conf[j] : 1.0) : 0.0;
        int64_t at = run + j;
        int last = at < DRAFT_RUNS ? (int)at : DRAFT_RUNS - 1;
        /* walk the runs up to this draft's, each estimate the prior of the
         * next; past DRAFT_RUNS - 1 the last cell */
        double e = 0, r = 0;
        for (int t = 0; t <= last; t++) {
            double e_prev = e;
            e = posterior(engine, c, t, t == 0 ? p : e);
            double prior = t == 0 ? e : (e_prev > 0 ? r * e / e_prev : e);
            r = posterior(req, c, t, prior < 1 ? prior : 1.0);
        }
        g *= r;
        gain[j] = g;
    }
}
