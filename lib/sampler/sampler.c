/* Logits processors and seeded sampling (sampler.h). */
#include "sampler/sampler.h"

#include "sampler/exp_rows.h"
#include "sampler/select.h"
#include "util/hashmap.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef sampler_candidate candidate;

struct sampler {
    sampler_params p;
    int32_t n_vocab;
    int32_t *bias_ids;
    float *bias_values;
    /* Tokens of the prompt or the output, each once: seen_ids[i] has been
     * output count[i] times; slot_of maps a token to its i. */
    di_u64_map slot_of;
    int32_t *seen_ids;
    uint32_t *count;
    int32_t n_seen, cap_seen;
    uint64_t rng[4];     /* xoshiro256** */
    grammar_matcher *gm; /* NULL: unconstrained */
    int32_t gm_after;    /* the token the grammar waits for, or -1 once it applies */
    uint32_t *mask;      /* [(n_vocab + 31) / 32] the grammar's allowed tokens */
    int gm_failed;       /* a mask could not be computed: the request must end */
};

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint64_t rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

/* xoshiro256** (Blackman and Vigna), one 64-bit output. */
static uint64_t rng_next(uint64_t *s)
{
    uint64_t r = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return r;
}

static int bad(char *msg, size_t msg_size, const char *what)
{
    if (msg && msg_size) snprintf(msg, msg_size, "%s", what);
    return 1;
}

di_status sampler_create(const sampler_params *p, int32_t n_vocab, sampler **out, char *msg,
                         size_t msg_size)
{
    if (!p || !out || n_vocab <= 0) {
        bad(msg, msg_size, "sampler_create: invalid arguments");
        return DI_ERR_INVALID_ARGUMENT;
    }
    *out = NULL;
    if (!(p->temperature >= 0.0f && p->temperature <= 100.0f))
        return bad(msg, msg_size, "temperature: expected 0 (greedy) to 100"),
               DI_ERR_INVALID_ARGUMENT;
    if (p->top_k < 0)
        return bad(msg, msg_size, "top_k: expected 0 (off) or more"), DI_ERR_INVALID_ARGUMENT;
    if (!(p->top_p > 0.0f && p->top_p <= 1.0f))
        return bad(msg, msg_size, "top_p: expected a number in (0, 1]"), DI_ERR_INVALID_ARGUMENT;
    if (!(p->min_p >= 0.0f && p->min_p <= 1.0f))
        return bad(msg, msg_size, "min_p: expected a number in [0, 1]"), DI_ERR_INVALID_ARGUMENT;
    if (!(p->repetition_penalty > 0.0f && p->repetition_penalty <= 100.0f))
        return bad(msg, msg_size, "repetition_penalty: expected a number in (0, 100]"),
               DI_ERR_INVALID_ARGUMENT;
    if (!(p->presence_penalty >= -2.0f && p->presence_penalty <= 2.0f))
        return bad(msg, msg_size, "presence_penalty: expected a number in [-2, 2]"),
               DI_ERR_INVALID_ARGUMENT;
    if (!(p->frequency_penalty >= -2.0f && p->frequency_penalty <= 2.0f))
        return bad(msg, msg_size, "frequency_penalty: expected a number in [-2, 2]"),
               DI_ERR_INVALID_ARGUMENT;
    if (p->n_bias && (!p->bias_ids || !p->bias_values))
        return bad(msg, msg_size, "logit_bias: ids and values must not be NULL"),
               DI_ERR_INVALID_ARGUMENT;
    for (size_t i = 0; i < p->n_bias; i++) {
        if (p->bias_ids[i] < 0 || p->bias_ids[i] >= n_vocab) {
            if (msg && msg_size)
                snprintf(msg, msg_size,
                         "logit_bias[%zu]: token id %d is outside the vocabulary "
                         "of %d",
                         i, (int)p->bias_ids[i], (int)n_vocab);
            return DI_ERR_INVALID_ARGUMENT;
        }
        if (!(p->bias_values[i] >= -100.0f && p->bias_values[i] <= 100.0f)) {
            if (msg && msg_size)
                snprintf(msg, msg_size, "logit_bias[%zu]: expected a bias in [-100, 100]", i);
            return DI_ERR_INVALID_ARGUMENT;
        }
    }
    sampler *s = calloc(1, sizeof *s);
    if (!s) goto oom;
    s->p = *p;
    if (s->p.temperature < SAMPLER_GREEDY_BELOW) s->p.temperature = 0.0f;
    s->n_vocab = n_vocab;
    if (di_u64_map_init(&s->slot_of, 64) != 0) goto oom;
    if (p->n_bias) {
        s->bias_ids = malloc(p->n_bias * sizeof *s->bias_ids);
        s->bias_values = malloc(p->n_bias * sizeof *s->bias_values);
        if (!s->bias_ids || !s->bias_values) goto oom;
        memcpy(s->bias_ids, p->bias_ids, p->n_bias * sizeof *s->bias_ids);
        memcpy(s->bias_values, p->bias_values, p->n_bias * sizeof *s->bias_values);
    }
    s->p.bias_ids = s->bias_ids;
    s->p.bias_values = s->bias_values;
    uint64_t x = p->seed;
    for (int i = 0; i < 4; i++) s->rng[i] = splitmix64(&x);
    *out = s;
    return DI_OK;
oom:
    sampler_free(s);
    bad(msg, msg_size, "out of memory for the sampler");
    return DI_ERR_OUT_OF_MEMORY;
}

void sampler_free(sampler *s)
{
    if (!s) return;
    free(s->bias_ids);
    free(s->bias_values);
    di_u64_map_free(&s->slot_of);
    free(s->seen_ids);
    free(s->count);
    grammar_matcher_free(s->gm);
    free(s->mask);
    free(s);
}

di_status sampler_set_grammar(sampler *s, grammar_matcher *m)
{
    return sampler_set_grammar_after(s, m, -1);
}

di_status sampler_set_grammar_after(sampler *s, grammar_matcher *m, int32_t after)
{
    if (s->gm) return DI_ERR_INVALID_ARGUMENT;
    s->gm_after = after;
    s->mask = malloc(((size_t)s->n_vocab + 31) / 32 * sizeof *s->mask);
    if (!s->mask) {
        grammar_matcher_free(m);
        return DI_ERR_OUT_OF_MEMORY;
    }
    s->gm = m;
    return DI_OK;
}

size_t sampler_scratch_count(int32_t n_vocab)
{
    return 2 * (size_t)n_vocab; /* the candidates, or sampler_select's two buffers */
}

/* The slot of token (added when new), or -1 when memory ran out. */
static int32_t slot(sampler *s, int32_t token)
{
    uint64_t v;
    if (di_u64_map_get(&s->slot_of, (uint64_t)token, &v)) return (int32_t)v;
    if (s->n_seen == s->cap_seen) {
        int32_t cap = s->cap_seen ? 2 * s->cap_seen : 64;
        int32_t *ids = realloc(s->seen_ids, (size_t)cap * sizeof *ids);
        if (!ids) return -1;
        s->seen_ids = ids;
        uint32_t *count = realloc(s->count, (size_t)cap * sizeof *count);
        if (!count) return -1;
        s->count = count;
        s->cap_seen = cap;
    }
    if (di_u64_map_put(&s->slot_of, (uint64_t)token, (uint64_t)s->n_seen) < 0) return -1;
    s->seen_ids[s->n_seen] = token;
    s->count[s->n_seen] = 0;
    return s->n_seen++;
}

int sampler_accept_prompt(sampler *s, int32_t token)
{
    if (token < 0 || token >= s->n_vocab) return 0;
    return slot(s, token) < 0 ? -1 : 0;
}

di_status sampler_grammar_error(const sampler *s, const char **why)
{
    *why = NULL;
    if (!s->gm || !s->gm_failed) return DI_OK;
    di_status st = grammar_matcher_error(s->gm, why);
    if (st != DI_OK) return st;
    *why = "the grammar does not allow the sampled token";
    return DI_ERR_OUT_OF_MEMORY;
}

int sampler_grammar_ended(const sampler *s)
{
    return s->gm && s->gm_after < 0 && grammar_matcher_is_terminated(s->gm);
}

int sampler_accept(sampler *s, int32_t token)
{
    if (token < 0 || token >= s->n_vocab) return 0;
    if (s->gm && s->gm_after >= 0) {
        if (token == s->gm_after) s->gm_after = -1; /* from the next token on */
    } else if (s->gm && (s->gm_failed || grammar_matcher_accept(s->gm, token) != 0)) {
        s->gm_failed = 1;
        return -1;
    }
    int32_t i = slot(s, token);
    if (i < 0) return -1;
    s->count[i]++;
    return 0;
}

/* exp(c[i].logit - max) for c[0, n), a block at a time through
 * sampler_exp_rows (glibc's exp bits, so each value is the scalar loop's),
 * written back as the candidate's float weight; returns those floats' sum in
 * order (the draw below adds the same float weights). */
enum { EXP_BLOCK = 256 };

static double weigh(candidate *c, int32_t n, float max)
{
    double e[EXP_BLOCK], sum = 0.0;
    for (int32_t i0 = 0; i0 < n; i0 += EXP_BLOCK) {
        const int32_t nb = n - i0 < EXP_BLOCK ? n - i0 : EXP_BLOCK;
        sampler_exp_candidates(c + i0, max, e, nb);
        for (int32_t j = 0; j < nb; j++) {
            c[i0 + j].logit = (float)e[j];
            sum += c[i0 + j].logit;
        }
    }
    return sum;
}

/* The same for the whole row x[0, n) into c[i] = {weight, i}: no pass to
 * build the candidates first. */
static double weigh_row(const float *x, int32_t n, float max, candidate *c)
{
    double e[EXP_BLOCK], sum = 0.0;
    for (int32_t i0 = 0; i0 < n; i0 += EXP_BLOCK) {
        const int32_t nb = n - i0 < EXP_BLOCK ? n - i0 : EXP_BLOCK;
        sampler_exp_shifted(x + i0, max, e, nb);
        for (int32_t j = 0; j < nb; j++) {
            c[i0 + j] = (candidate){(float)e[j], i0 + j};
            sum += c[i0 + j].logit;
        }
    }
    return sum;
}

/* Rows in blocks of ROW_BLOCK values (a constant count: vectorized at -O2). */
enum { ROW_BLOCK = 16 };

/* x[i] *= f over x[0, n), a NaN made -inf (never drawn; select.h takes
 * no NaN); returns the largest after it, ROW_BLOCK running maxima then
 * theirs (as row_max, in the same pass). */
static inline float scaled(float x, float f)
{
    const float y = x * f;
    return y == y ? y : -INFINITY;
}

static float scale_row(float *x, int32_t n, float f)
{
    float m[ROW_BLOCK], r = -INFINITY;
    for (int j = 0; j < ROW_BLOCK; j++) m[j] = -INFINITY;
    int32_t i = 0;
    for (; i + ROW_BLOCK <= n; i += ROW_BLOCK)
        for (int j = 0; j < ROW_BLOCK; j++) {
            x[i + j] = scaled(x[i + j], f);
            m[j] = x[i + j] > m[j] ? x[i + j] : m[j];
        }
    for (; i < n; i++) {
        x[i] = scaled(x[i], f);
        r = x[i] > r ? x[i] : r;
    }
    for (int j = 0; j < ROW_BLOCK; j++) r = m[j] > r ? m[j] : r;
    return r;
}

/* The largest of x[0, n) (NaN ignored; -inf where there is none): ROW_BLOCK
 * running maxima, then theirs. The value one running max finds, but for the
 * sign of a zero max, which no weight exp(x - max) sees. */
static float row_max(const float *x, int32_t n)
{
    float m[ROW_BLOCK], r = -INFINITY;
    for (int j = 0; j < ROW_BLOCK; j++) m[j] = -INFINITY;
    int32_t i = 0;
    for (; i + ROW_BLOCK <= n; i += ROW_BLOCK)
        for (int j = 0; j < ROW_BLOCK; j++) m[j] = x[i + j] > m[j] ? x[i + j] : m[j];
    for (; i < n; i++) r = x[i] > r ? x[i] : r;
    for (int j = 0; j < ROW_BLOCK; j++) r = m[j] > r ? m[j] : r;
    return r;
}

/* Greedy's choice: the first id whose logit is the largest, NaN passed over
 * (as the sampled path makes it -inf; 0 where every value is NaN): the max
 * in blocks, then the first value equal to it. */
static int32_t row_argmax(const float *x, int32_t n)
{
    const float m = row_max(x, n);
    int32_t i = 0;
    for (; i + ROW_BLOCK <= n; i += ROW_BLOCK) {
        int any = 0;
        for (int j = 0; j < ROW_BLOCK; j++) any |= x[i + j] == m;
        if (any) break;
    }
    for (; i < n; i++)
        if (x[i] == m) return i;
    return 0; /* (every value NaN) */
}

/* The processors of sampler_sample (steps 0 to 8), on logits in place.
 * Greedy: returns the chosen id. Otherwise returns -1 with *cand the kept
 * candidates (in scratch), *n_kept their count, each one's weight
 * exp(logit - max) in its `logit` field (in descending probability order)
 * and *sum their sum. */
static int32_t process(sampler *s, float *logits, sampler_candidate *scratch, candidate **cand,
                       int32_t *n_kept, double *sum_out)
{
    const sampler_params *p = &s->p;
    const int32_t V = s->n_vocab;
    /* The grammar first: a token it does not allow stays at -inf through every
     * processor (bias and penalties keep -inf, temperature scales it, and its
     * weight exp(-inf) is 0, so it is never drawn). A mask that cannot be
     * computed (out of memory, an ambiguous grammar) fails the next
     * sampler_accept: the request ends with sampler_grammar_error's reason. */
    if (s->gm && s->gm_after < 0) {
        int32_t allowed = grammar_matcher_fill_mask(s->gm, s->mask);
        if (allowed < 0) s->gm_failed = 1;
        if (allowed > 0)
            for (int32_t i = 0; i < V; i++)
                if (!((s->mask[i >> 5] >> (i & 31)) & 1)) logits[i] = -INFINITY;
    }
    for (size_t i = 0; i < p->n_bias; i++) logits[p->bias_ids[i]] += p->bias_values[i];
    for (int32_t i = 0; i < s->n_seen; i++) {
        int32_t id = s->seen_ids[i];
        float l = logits[id];
        if (p->repetition_penalty != 1.0f)
            l = l > 0 ? l / p->repetition_penalty : l * p->repetition_penalty;
        if (s->count[i]) l -= p->frequency_penalty * (float)s->count[i] + p->presence_penalty;
        logits[id] = l;
    }
    if (p->temperature == 0.0f) {
        *cand = scratch, *n_kept = 0, *sum_out = 0.0; /* (nothing to draw from) */
        return row_argmax(logits, V);
    }
    /* temperature in place, and the largest logit after it */
    const float max = scale_row(logits, V, 1.0f / p->temperature);
    candidate *c = scratch;
    int32_t n = V;
    /* Weights exp(logit - max) (the largest is 1), summed in order: of the
     * head top_k and top_p keep (descending logit, then ascending id; found
     * without ordering the vocabulary, select.h), or of every token */
    double sum;
    if ((p->top_k > 0 && p->top_k < V) || p->top_p < 1.0f) {
        n = sampler_select(logits, V, max, p->top_k, p->top_p, scratch, scratch + V, &c);
        sum = weigh(c, n, max);
    } else {
        sum = weigh_row(logits, V, max, c);
    }
    if (p->min_p > 0.0f) {
        int32_t m = 0;
        for (int32_t i = 0; i < n; i++)
            if ((double)c[i].logit >= (double)p->min_p) c[m++] = c[i];
        n = m;
        sum = 0.0;
        for (int32_t i = 0; i < n; i++) sum += c[i].logit;
    }
    *cand = c;
    *n_kept = n;
    *sum_out = sum;
    return -1;
}

/* One uniform double in [0, 1) from the request's RNG. */
static double uniform(sampler *s)
{
    return (double)(rng_next(s->rng) >> 11) * 0x1.0p-53;
}

/* Inverse CDF over c[0, n) (weights in `logit`) at u * sum. */
static int32_t draw(const candidate *c, int32_t n, double u, double sum)
{
    double target = u * sum, acc = 0.0;
    for (int32_t i = 0; i < n; i++) {
        acc += c[i].logit;
        if (target < acc) return c[i].id;
    }
    return c[n - 1].id;
}

int32_t sampler_sample_dist(sampler *s, float *logits, sampler_candidate *scratch, float *probs)
{
    candidate *c = NULL;
    int32_t n = 0;
    double sum = 0;
    int32_t best = process(s, logits, scratch, &c, &n, &sum);
    if (probs) {
        memset(probs, 0, (size_t)s->n_vocab * sizeof *probs);
        if (best >= 0)
            probs[best] = 1.0f;
        else
            for (int32_t i = 0; i < n; i++) probs[c[i].id] = (float)((double)c[i].logit / sum);
    }
    if (best >= 0) return best;
    return draw(c, n, uniform(s), sum);
}

int32_t sampler_sample(sampler *s, float *logits, sampler_candidate *scratch)
{
    return sampler_sample_dist(s, logits, scratch, NULL);
}

int32_t sampler_verify(sampler *s, float *logits, sampler_candidate *scratch, int32_t draft,
                       const float *q, int *accepted)
{
    candidate *c = NULL;
    int32_t n = 0;
    double sum = 0;
    int32_t best = process(s, logits, scratch, &c, &n, &sum);
    if (best >= 0) { /* p is a point mass: p(x)/q(x) >= 1 at best, 0 elsewhere */
        *accepted = best == draft;
        return best;
    }
    double u = uniform(s);
    double qx = q && draft >= 0 && draft < s->n_vocab ? (double)q[draft] : 0.0;
    if (!q || !(qx > 0.0)) { /* a point-mass draft: the plain draw, kept when it is the draft */
        int32_t tok = draw(c, n, u, sum);
        *accepted = tok == draft;
        return tok;
    }
    double px = 0.0;
    for (int32_t i = 0; i < n; i++)
        if (c[i].id == draft) {
            px = (double)c[i].logit / sum;
            break;
        }
    double a = px / qx;
    if (u < a) { /* accepted with probability min(1, p(x)/q(x)) */
        *accepted = 1;
        return draft;
    }
    *accepted = 0;
    /* Rejected: u is uniform on [a, 1), so (u - a) / (1 - a) is a fresh
     * uniform for the residual max(0, p - q), normalised. Outside the kept
     * candidates p is 0, so the residual lives on them. */
    double v = (u - a) / (1.0 - a), rsum = 0.0;
    for (int32_t i = 0; i < n; i++) {
        double r = (double)c[i].logit / sum - (double)q[c[i].id];
        rsum += r > 0 ? r : 0;
    }
    if (!(rsum > 0)) return draw(c, n, v, sum); /* p == q up to rounding: p itself */
    double target = v * rsum, acc = 0.0;
    int32_t last = c[0].id;
    for (int32_t i = 0; i < n; i++) {
        double r = (double)c[i].logit / sum - (double)q[c[i].id];
        if (!(r > 0)) continue;
        acc += r;
        last = c[i].id;
        if (target < acc) return c[i].id;
    }
    return last;
}

void sampler_reseed(sampler *s, uint64_t seed)
{
    uint64_t x = seed;
    for (int i = 0; i < 4; i++) s->rng[i] = splitmix64(&x);
}

const sampler_params *sampler_get_params(const sampler *s)
{
    return &s->p;
}
