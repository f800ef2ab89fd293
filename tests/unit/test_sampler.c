/* lib/sampler: each processor against the property that defines it, and the
 * seeded draws against the distribution they sample. */
#include <fenv.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "sampler/exp_rows.h"
#include "sampler/sampler.h"
#include "sampler/select.h"

static sampler_params defaults(void)
{
    sampler_params p = {0};
    p.temperature = 1.0f;
    p.top_p = 1.0f;
    p.repetition_penalty = 1.0f;
    return p;
}

static sampler *make(const sampler_params *p, int32_t V)
{
    sampler *s = NULL;
    char msg[128];
    assert_int_equal(sampler_create(p, V, &s, msg, sizeof msg), DI_OK);
    return s;
}

static sampler_candidate scratch[2048];

static int32_t draw(sampler *s, const float *logits, int32_t V)
{
    float buf[64];
    memcpy(buf, logits, (size_t)V * sizeof *buf);
    assert_true(sampler_scratch_count(V) <= 2048);
    return sampler_sample(s, buf, scratch);
}

static void test_greedy_takes_the_largest_lowest_id_on_ties(void **state)
{
    (void)state;
    sampler_params p = defaults();
    p.temperature = 0.0f;
    sampler *s = make(&p, 6);
    const float l[6] = {0.5f, 3.0f, -1.0f, 3.0f, 2.9f, 0.0f};
    assert_int_equal(draw(s, l, 6), 1);
    sampler_free(s);
    /* the blocked scan against a scalar scan that passes NaN over (the
     * sampled path's NaN is -inf), on rows of every length to 600 with ties,
     * -0 and +0, NaN (first, elsewhere, everywhere), -inf and the max in the
     * tail */
    enum { N = 600 };
    uint32_t x = 3;
    for (int32_t n = 1; n <= N; n += (n < 40 ? 1 : 37)) {
        s = make(&p, n);
        for (int kind = 0; kind < 7; kind++) {
            float row[N], buf[N];
            for (int32_t i = 0; i < n; i++) {
                x = x * 1103515245u + 12345u;
                row[i] = (float)((x >> 16) % 8) - 4.0f;
                if (kind == 1) row[i] = (x >> 20) & 1 ? 0.0f : -0.0f;
                if (kind == 2 && i % 5 == 2) row[i] = NAN;
                if (kind == 3) row[i] = -INFINITY;
            }
            if (kind == 4) row[0] = NAN;
            if (kind == 5) row[n - 1] = 100.0f;
            if (kind == 6)
                for (int32_t i = 0; i < n; i++) row[i] = NAN;
            int32_t want = -1;
            for (int32_t i = 0; i < n; i++)
                if (row[i] == row[i] && (want < 0 || row[i] > row[want])) want = i;
            if (want < 0) want = 0;
            memcpy(buf, row, (size_t)n * sizeof *buf);
            assert_int_equal(sampler_sample(s, buf, scratch), want);
        }
        sampler_free(s);
    }
}

static void test_same_seed_same_tokens_other_seed_other_tokens(void **state)
{
    (void)state;
    const float l[8] = {0, 0.1f, 0.2f, 0.3f, 0.4f, 0.5f, 0.6f, 0.7f};
    sampler_params p = defaults();
    p.seed = 42;
    sampler *a = make(&p, 8), *b = make(&p, 8);
    p.seed = 43;
    sampler *c = make(&p, 8);
    int differ = 0;
    for (int i = 0; i < 200; i++) {
        int32_t x = draw(a, l, 8), y = draw(b, l, 8), z = draw(c, l, 8);
        assert_int_equal(x, y);
        differ |= x != z;
    }
    assert_true(differ);
    sampler_free(a);
    sampler_free(b);
    sampler_free(c);
}

/* Draw frequencies at temperature T follow softmax(logits / T): a chi-square
 * test with 3 degrees of freedom at p = 0.001 (critical value 16.27). */
static void test_draws_follow_the_softmax(void **state)
{
    (void)state;
    const float l[4] = {1.0f, 0.0f, -0.5f, 2.0f};
    const float T = 0.7f;
    sampler_params p = defaults();
    p.temperature = T;
    p.seed = 7;
    sampler *s = make(&p, 4);
    enum { N = 40000 };
    int count[4] = {0};
    for (int i = 0; i < N; i++) count[draw(s, l, 4)]++;
    double z = 0, prob[4];
    for (int i = 0; i < 4; i++) z += exp(l[i] / T);
    double chi = 0;
    for (int i = 0; i < 4; i++) {
        prob[i] = exp(l[i] / T) / z;
        double e = prob[i] * N;
        chi += (count[i] - e) * (count[i] - e) / e;
    }
    assert_true(chi < 16.27);
    sampler_free(s);
}

/* The draw over a vocabulary of 10,000 (the weights computed 256 at a time,
 * sampler_exp_rows' blocks): tokens in the first block, a middle one, at a
 * block's edge (1,024), just before the last (8,191) and the last id, drawn as
 * the softmax says (chi-square, 5 categories, p 0.001: 18.47); the -inf ones
 * never; sampler_sample_dist's probabilities the softmax's to float rounding
 * and summing to 1. */
static void test_draws_over_a_large_vocabulary_follow_the_softmax(void **state)
{
    (void)state;
    enum { V = 10000, N = 30000, K = 5 };
    static float row[V], buf[V], probs[V];
    static sampler_candidate sc[2 * V];
    const int32_t ids[K] = {5, 3000, 1024, 8191, 9999};
    const float lg[K] = {2.0f, 1.5f, 1.0f, 0.5f, 1.2f};
    for (int i = 0; i < V; i++) row[i] = i % 3 == 0 ? -INFINITY : -30.0f;
    for (int j = 0; j < K; j++) row[ids[j]] = lg[j];
    sampler_params p = defaults();
    p.seed = 11;
    sampler *s = make(&p, V);
    assert_true(sampler_scratch_count(V) <= 2 * V);
    int count[K + 1] = {0};
    for (int t = 0; t < N; t++) {
        memcpy(buf, row, sizeof buf);
        int32_t x = sampler_sample_dist(s, buf, sc, t == 0 ? probs : NULL);
        assert_true(row[x] != -INFINITY);
        int j = 0;
        while (j < K && ids[j] != x) j++;
        count[j]++;
    }
    double z = 0, chi = 0, total = 0;
    for (int i = 0; i < V; i++) z += exp((double)row[i]);
    for (int i = 0; i < V; i++) total += probs[i];
    assert_true(fabs(total - 1.0) < 1e-5);
    for (int j = 0; j < K; j++) {
        const double e = exp((double)lg[j]) / z * N;
        assert_true(fabs(probs[ids[j]] - exp((double)lg[j]) / z) < 1e-6);
        chi += (count[j] - e) * (count[j] - e) / e;
    }
    assert_true(count[K] < 5); /* the rest: about 6,666 weights of e^-30 each */
    assert_true(chi < 18.47);
    sampler_free(s);
}

static void test_top_k_keeps_the_k_largest(void **state)
{
    (void)state;
    const float l[6] = {5.0f, 4.9f, 4.8f, 0.0f, 4.7f, -3.0f};
    sampler_params p = defaults();
    p.top_k = 2;
    p.seed = 1;
    sampler *s = make(&p, 6);
    int seen[6] = {0};
    for (int i = 0; i < 2000; i++) seen[draw(s, l, 6)]++;
    assert_true(seen[0] > 0 && seen[1] > 0);
    assert_int_equal(seen[2] + seen[3] + seen[4] + seen[5], 0);
    sampler_free(s);
}

static void test_top_p_keeps_the_smallest_prefix_reaching_p(void **state)
{
    (void)state;
    /* probabilities 0.5, 0.25, 0.125, 0.125 (logits are log-probabilities) */
    const float l[4] = {logf(0.5f), logf(0.25f), logf(0.125f), logf(0.125f)};
    sampler_params p = defaults();
    p.top_p = 0.7f; /* 0.5 < 0.7 <= 0.75: tokens 0 and 1 */
    p.seed = 3;
    sampler *s = make(&p, 4);
    int seen[4] = {0};
    for (int i = 0; i < 3000; i++) seen[draw(s, l, 4)]++;
    assert_true(seen[0] > 0 && seen[1] > 0);
    assert_int_equal(seen[2] + seen[3], 0);
    sampler_free(s);
}

static void test_min_p_drops_tokens_below_the_fraction_of_the_largest(void **state)
{
    (void)state;
    const float l[3] = {logf(0.6f), logf(0.3f), logf(0.1f)};
    sampler_params p = defaults();
    p.min_p = 0.3f; /* 0.1 / 0.6 < 0.3 <= 0.3 / 0.6 */
    p.seed = 5;
    sampler *s = make(&p, 3);
    int seen[3] = {0};
    for (int i = 0; i < 3000; i++) seen[draw(s, l, 3)]++;
    assert_true(seen[0] > 0 && seen[1] > 0);
    assert_int_equal(seen[2], 0);
    sampler_free(s);
}

static void test_logit_bias_moves_the_greedy_choice(void **state)
{
    (void)state;
    const float l[4] = {1.0f, 2.0f, 0.0f, 0.5f};
    const int32_t ids[1] = {2};
    const float vals[1] = {2.5f};
    sampler_params p = defaults();
    p.temperature = 0.0f;
    p.bias_ids = ids;
    p.bias_values = vals;
    p.n_bias = 1;
    sampler *s = make(&p, 4);
    assert_int_equal(draw(s, l, 4), 2);
    sampler_free(s);
}

/* transformers' RepetitionPenaltyLogitsProcessor: positive logits divided,
 * negative multiplied; OpenAI's presence and frequency penalties subtract. */
static void test_penalties_follow_their_definitions(void **state)
{
    (void)state;
    sampler_params p = defaults();
    p.repetition_penalty = 2.0f;
    p.presence_penalty = 0.5f;
    p.frequency_penalty = 0.25f;
    p.temperature = 0.0f;
    sampler *s = make(&p, 4);
    assert_int_equal(sampler_accept_prompt(s, 0), 0);
    assert_int_equal(sampler_accept(s, 1), 0);
    assert_int_equal(sampler_accept(s, 1), 0);
    assert_int_equal(sampler_accept_prompt(s, 3), 0);
    float l[4] = {4.0f, -1.0f, 1.0f, 3.0f};
    sampler_sample(s, l, scratch);
    assert_true(l[0] == 2.0f);                     /* prompt: repetition only */
    assert_true(l[1] == -2.0f - 0.5f - 2 * 0.25f); /* output twice: all three */
    assert_true(l[2] == 1.0f);                     /* unseen */
    assert_true(l[3] == 1.5f);
    sampler_free(s);
}

typedef struct ref_cand {
    float logit;
    int32_t id;
} ref_cand;

static int ref_cmp(const void *a, const void *b)
{
    const ref_cand *x = a, *y = b;
    if (x->logit != y->logit) return x->logit > y->logit ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

/* top_k then top_p as their definitions read, with a full sort (the reference
 * the sampler's heap must agree with): the set of ids that may be drawn. */
static int32_t ref_keep(const float *l, int32_t V, float T, int32_t k, float top_p, uint8_t *keep)
{
    ref_cand *c = malloc((size_t)V * sizeof *c);
    assert_non_null(c);
    for (int32_t i = 0; i < V; i++) c[i] = (ref_cand){l[i] / T, i};
    qsort(c, (size_t)V, sizeof *c, ref_cmp);
    int32_t n = k > 0 && k < V ? k : V;
    double total = 0, acc = 0;
    for (int32_t i = 0; i < n; i++) total += exp((double)(c[i].logit - c[0].logit));
    int32_t m = n;
    for (int32_t i = 0; i < n && top_p < 1.0f; i++) {
        acc += exp((double)(c[i].logit - c[0].logit));
        if (acc >= (double)top_p * total) {
            m = i + 1;
            break;
        }
    }
    memset(keep, 0, (size_t)V);
    for (int32_t i = 0; i < m; i++) keep[c[i].id] = 1;
    free(c);
    return m;
}

static void test_top_k_top_p_agree_with_a_full_sort(void **state)
{
    (void)state;
    enum { V = 1000 };
    float l[V];
    uint8_t keep[V];
    uint32_t x = 99;
    for (int i = 0; i < V; i++) {
        x = x * 1103515245u + 12345u;
        l[i] = (float)((x >> 16) % 64) / 8.0f; /* many ties */
    }
    const int32_t ks[3] = {0, 5, 40};
    const float ps[3] = {1.0f, 0.5f, 0.9f};
    for (int a = 0; a < 3; a++)
        for (int b = 0; b < 3; b++) {
            if (ks[a] == 0 && ps[b] == 1.0f) continue;
            int32_t m = ref_keep(l, V, 0.8f, ks[a], ps[b], keep);
            sampler_params p = defaults();
            p.temperature = 0.8f;
            p.top_k = ks[a];
            p.top_p = ps[b];
            p.seed = (uint64_t)(a * 3 + b);
            sampler *s = make(&p, V);
            float buf[V];
            int seen_kept = 0;
            uint8_t seen[V] = {0};
            for (int i = 0; i < 3000; i++) {
                memcpy(buf, l, sizeof buf);
                int32_t t = sampler_sample(s, buf, scratch);
                assert_true(keep[t]);
                seen_kept += !seen[t];
                seen[t] = 1;
            }
            assert_true(seen_kept == m || m > 40); /* small kept sets are all drawn */
            sampler_free(s);
        }
}

/* sampler_select against its definition with a full sort (qsort, the
 * order descending logit then ascending id): the same candidates, in the same
 * order, for top_k (its heap to 256, the buckets above and for a row whose
 * values rise with the id), top_p (its total in select.h's order) and both,
 * over rows with ties, -0 beside +0, -inf, values far below the max (the last
 * bucket), a flat row, a peaked one, a constant one, a rising one, one with
 * +inf (a NaN total) and one all -inf, of 1 to 20,000 candidates (insertion
 * and radix sorts, the scans' tails); and with the buckets' margin at -0.5,
 * so their head falls short of top_p and is gathered again. */
static void ref_head(const float *x, int32_t n, float max, int32_t k, float top_p,
                     sampler_candidate *sorted, int32_t *m_out)
{
    ref_cand *r = malloc((size_t)n * sizeof *r);
    assert_non_null(r);
    double part[8] = {0}; /* select.h's total: 8 partial sums in id order, in pairs */
    for (int32_t i = 0; i < n; i++) {
        r[i] = (ref_cand){x[i] == 0.0f ? 0.0f : x[i], i};
        part[i % 8] += exp((double)(x[i] - max));
    }
    double total =
        ((part[0] + part[1]) + (part[2] + part[3])) + ((part[4] + part[5]) + (part[6] + part[7]));
    qsort(r, (size_t)n, sizeof *r, ref_cmp);
    const int with_k = k > 0 && k < n;
    int32_t m = n;
    if (with_k) {
        m = k;
        total = 0.0;
        for (int32_t i = 0; i < k; i++) total += exp((double)(r[i].logit - max));
    }
    if (top_p < 1.0f) {
        const double thr = (double)top_p * total;
        double acc = 0.0;
        for (int32_t i = 0; i < m; i++) {
            acc += exp((double)(r[i].logit - max));
            /* (a NaN total: top_p alone stops at the first, after top_k never) */
            if (with_k ? acc >= thr : !(acc < thr)) {
                m = i + 1;
                break;
            }
        }
    }
    for (int32_t i = 0; i < m; i++) sorted[i] = (sampler_candidate){r[i].logit, r[i].id};
    *m_out = m;
    free(r);
}

enum { ROW_KINDS = 8 };

static float row_value(int kind, int32_t i, uint32_t *x)
{
    *x = *x * 1103515245u + 12345u;
    const float u = (float)(*x >> 8) / 16777216.0f; /* [0, 1) */
    switch (kind) {
    case 0: return (float)((*x >> 16) % 64) / 8.0f; /* many ties */
    case 1: return 20.0f * u - 10.0f;               /* flat */
    case 2:                                         /* peaked: a few far above the rest */
        return (i % 997 == 3 ? 25.0f : 0.0f) + 6.0f * (u - 0.5f) * (u - 0.5f) * (u < 0.5f ? -1 : 1);
    case 3: /* -0, +0, -inf, and far below the max */
        return i % 7 == 0 ? -0.0f : i % 7 == 1 ? 0.0f : i % 7 == 2 ? -INFINITY : -300.0f * u;
    case 4: return 1.5f;                          /* constant */
    case 5: return (float)i * 0.001f;             /* rising: every value enters a heap */
    case 6: return i % 5 == 1 ? INFINITY : 4 * u; /* +inf: a NaN total */
    default: return -INFINITY;                    /* nothing finite */
    }
}

static void test_select_keeps_what_a_full_sort_keeps(void **state)
{
    (void)state;
    enum { NMAX = 20000 };
    float *x = malloc(NMAX * sizeof *x);
    sampler_candidate *buf = malloc(NMAX * sizeof *buf), *tmp = malloc(NMAX * sizeof *tmp),
                      *want = malloc(NMAX * sizeof *want);
    assert_true(x && buf && tmp && want);
    const int32_t sizes[6] = {1, 2, 15, 17, 700, NMAX};
    const int32_t ks[7] = {0, 1, 40, 256, 257, 1500, -1}; /* -1: n - 1 */
    const float ps[5] = {1.0f, 0.5f, 0.9f, 0.999f, 0.99999f};
    const double margins[2] = {1e-9, -0.5};
    int checked = 0;
    for (int kind = 0; kind < ROW_KINDS; kind++)
        for (int si = 0; si < 6; si++) {
            const int32_t n = sizes[si];
            uint32_t seed = 7u + (uint32_t)kind;
            float max = -INFINITY;
            for (int32_t i = 0; i < n; i++) {
                x[i] = row_value(kind, i, &seed);
                if (x[i] > max) max = x[i];
            }
            for (int a = 0; a < 7; a++)
                for (int b = 0; b < 5; b++)
                    for (int mg = 0; mg < (ps[b] < 1.0f ? 2 : 1); mg++) {
                        const int32_t k = ks[a] < 0 ? n - 1 : ks[a];
                        if ((k == 0 || k >= n) && ps[b] == 1.0f) continue; /* (no limit) */
                        int32_t m_want;
                        ref_head(x, n, max, k, ps[b], want, &m_want);
                        sampler_select_margin = margins[mg];
                        sampler_candidate *got = NULL;
                        const int32_t m = sampler_select(x, n, max, k, ps[b], buf, tmp, &got);
                        sampler_select_margin = 1e-9;
                        assert_int_equal(m, m_want);
                        for (int32_t i = 0; i < m; i++) {
                            assert_int_equal(got[i].id, want[i].id);
                            assert_true(memcmp(&got[i].logit, &want[i].logit, sizeof(float)) == 0 ||
                                        got[i].logit == 0.0f); /* (-0 and +0 tie) */
                        }
                        checked++;
                    }
        }
    print_message("[ select: %d rows x parameters against a full sort ]\n", checked);
    free(x), free(buf), free(tmp), free(want);
}

/* A NaN (from a logit of 0 times 1 / T, or one given) is never drawn, and a
 * temperature below SAMPLER_GREEDY_BELOW is greedy: no NaN reaches the
 * search (review: a NaN among the first ids stuck in the heap). */
static void test_nan_is_never_drawn_and_tiny_temperatures_are_greedy(void **state)
{
    (void)state;
    enum { N = 40 };
    float row[N], buf[N];
    for (int i = 0; i < N; i++) row[i] = (float)(i % 5);
    row[0] = NAN;
    const int32_t ks[3] = {0, 2, 3};
    for (int a = 0; a < 3; a++) {
        sampler_params p = defaults();
        p.top_k = ks[a];
        p.top_p = ks[a] == 0 ? 0.5f : 1.0f;
        p.seed = 9;
        sampler *s = make(&p, N);
        for (int t = 0; t < 200; t++) {
            memcpy(buf, row, sizeof buf);
            int32_t x = sampler_sample(s, buf, scratch);
            assert_true(x > 0 && x % 5 == 4); /* the 4s only: NaN is -inf */
        }
        sampler_free(s);
    }
    { /* temperature alone (no top_k, top_p): NaN never drawn either */
        sampler_params p = defaults();
        p.seed = 3;
        sampler *s = make(&p, N);
        for (int t = 0; t < 200; t++) {
            memcpy(buf, row, sizeof buf);
            assert_true(sampler_sample(s, buf, scratch) != 0);
        }
        sampler_free(s);
    }
    /* the threshold: below it greedy, at it sampled */
    const float temps[3] = {1e-40f, 9.99e-6f, 1e-5f};
    for (int i = 0; i < 3; i++) {
        sampler_params p = defaults();
        p.temperature = temps[i];
        sampler *s = make(&p, N);
        assert_true((sampler_get_params(s)->temperature == 0.0f) == (i < 2));
        sampler_free(s);
    }
    sampler_params p = defaults();
    p.temperature = 1e-40f; /* 1 / T overflows: a logit 0 would be NaN */
    sampler *s = make(&p, N);
    for (int i = 0; i < N; i++) row[i] = i == 7 ? 2.0f : i == 3 ? 0.0f : -1.0f;
    memcpy(buf, row, sizeof buf);
    assert_int_equal(sampler_sample(s, buf, scratch), 7);
    sampler_free(s);
}

static void test_bad_parameters_name_the_field(void **state)
{
    (void)state;
    sampler *s = NULL;
    char msg[128];
    sampler_params p = defaults();
    p.top_p = 0.0f;
    assert_int_equal(sampler_create(&p, 4, &s, msg, sizeof msg), DI_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(msg, "top_p"));
    p = defaults();
    p.temperature = -1.0f;
    assert_int_equal(sampler_create(&p, 4, &s, msg, sizeof msg), DI_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(msg, "temperature"));
    p = defaults();
    p.temperature = NAN;
    assert_int_equal(sampler_create(&p, 4, &s, msg, sizeof msg), DI_ERR_INVALID_ARGUMENT);
    const int32_t ids[1] = {4};
    const float vals[1] = {1.0f};
    p = defaults();
    p.bias_ids = ids;
    p.bias_values = vals;
    p.n_bias = 1;
    assert_int_equal(sampler_create(&p, 4, &s, msg, sizeof msg), DI_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(msg, "logit_bias[0]"));
    assert_null(s);
}

/* sampler_exp_rows against libm's exp, bit for bit where that is glibc's
 * (2.28 on: the function it reproduces), each form this CPU runs, over every
 * 1,021st float of the 2^32 and the edges (0, denormals, 2^-54 and 512 where
 * glibc's common path begins and ends, its overflow and underflow, +-inf,
 * NaN), rows of every length to 11 (the vector loop and the tail). A whole
 * sweep of the 2^32 floats, run once by hand, found none apart. */
static int exp_agrees(int exact, double got, double want)
{
    if (isnan(want)) return isnan(got);
    if (exact) return memcmp(&got, &want, sizeof want) == 0;
    if (isinf(want) || isinf(got) || isnan(got)) return got == want;
    return fabs(got - want) <= fabs(nextafter(want, INFINITY) - want);
}

static void test_exp_rows_are_libm_exp(void **state)
{
    (void)state;
#if defined(__GLIBC__) && (__GLIBC__ > 2 || __GLIBC_MINOR__ >= 28)
    const int exact = 1;
#else
    const int exact = 0;
#endif
    enum { B = 4096 };
    static float x[B];
    static double y[B];
    const float edges[] = {0.0f,     -0.0f,     0x1p-149f,        -0x1p-149f,
                           0x1p-54f, -0x1p-54f, 0x1.fffffep-55f,  0x1.000002p-54f,
                           512.0f,   -512.0f,   0x1.fffffep8f,    -0x1.fffffep8f,
                           709.7f,   709.8f,    -745.1f,          -745.2f,
                           -1000.0f, INFINITY,  -INFINITY,        NAN,
                           -0.5f,    1.0f,      -0x1.fffffep-55f, -0x1.000002p-54f};
    const int top = sampler_exp_rows_level();
    for (int level = top; level >= 0; level--) {
        sampler_exp_level_override = level;
        print_message("[ exp rows: %s, checked %s ]\n",
                      level == 2   ? "AVX-512F"
                      : level == 1 ? "AVX2+FMA"
                                   : "libm exp",
                      exact ? "bit for bit against glibc's exp" : "within 1 ulp of exp");
        uint64_t next = 0;
        while (next < (1ull << 32)) {
            int n = 0;
            if (next == 0)
                for (; n < (int)(sizeof edges / sizeof *edges); n++) x[n] = edges[n];
            for (; n < B && next < (1ull << 32); n++, next += 1021) {
                uint32_t b = (uint32_t)next;
                memcpy(&x[n], &b, sizeof b);
            }
            sampler_exp_rows(x, y, n);
            for (int i = 0; i < n; i++)
                if (!exp_agrees(exact, y[i], exp((double)x[i])))
                    fail_msg("exp(%a): %a, libm %a", (double)x[i], y[i], exp((double)x[i]));
        }
        /* no floating-point exception glibc's exp does not raise: +-inf and
         * NaN in a vector group raise no FE_INVALID */
        const float sx[8] = {INFINITY, -INFINITY, NAN, 1.0f, -1.0f, 2.0f, 0.5f, -0.5f};
        double sy[8];
        feclearexcept(FE_ALL_EXCEPT);
        sampler_exp_rows(sx, sy, 8);
        assert_false(fetestexcept(FE_INVALID));
        assert_true(isinf(sy[0]) && sy[1] == 0.0 && isnan(sy[2]));
        for (int len = 1; len <= 11; len++) {
            for (int i = 0; i < len; i++) x[i] = -3.0f + 0.61f * (float)i;
            sampler_exp_rows(x, y, len);
            for (int i = 0; i < len; i++) assert_true(exp_agrees(exact, y[i], exp((double)x[i])));
        }
    }
    sampler_exp_level_override = -1;
}

/* A draw's weights go through sampler_exp_rows: every form gives the same
 * tokens and every step's distribution, bit for bit (temperature alone: the
 * weights over the whole vocabulary; top_p: its total too). */
static void test_draws_do_not_depend_on_the_exp_form(void **state)
{
    (void)state;
    enum { V = 600, STEPS = 40 };
    static float logits[V], buf[V], probs[3][STEPS][V];
    static sampler_candidate sc[4096];
    assert_true(sampler_scratch_count(V) <= 4096);
    for (int i = 0; i < V; i++)
        logits[i] = (float)((i * 7919) % 997) / 97.0f - (i % 13 == 0 ? 40.0f : 0.0f);
    logits[17] = -INFINITY; /* a masked token */
    for (int mode = 0; mode < 2; mode++) {
        int32_t tok[3][STEPS];
        for (int level = 2; level >= 0; level--) {
            sampler_exp_level_override = level;
            sampler_params p = defaults();
            p.seed = 7;
            p.temperature = 0.8f;
            if (mode) p.top_p = 0.9f;
            sampler *s = make(&p, V);
            for (int t = 0; t < STEPS; t++) {
                memcpy(buf, logits, sizeof buf);
                buf[t % V] += 3.0f;
                tok[level][t] = sampler_sample_dist(s, buf, sc, probs[level][t]);
            }
            sampler_free(s);
        }
        sampler_exp_level_override = -1;
        for (int level = 0; level < 2; level++) {
            assert_memory_equal(tok[level], tok[2], sizeof tok[2]);
            assert_memory_equal(probs[level], probs[2], sizeof probs[2]);
        }
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_greedy_takes_the_largest_lowest_id_on_ties),
        cmocka_unit_test(test_same_seed_same_tokens_other_seed_other_tokens),
        cmocka_unit_test(test_draws_follow_the_softmax),
        cmocka_unit_test(test_draws_over_a_large_vocabulary_follow_the_softmax),
        cmocka_unit_test(test_top_k_keeps_the_k_largest),
        cmocka_unit_test(test_top_p_keeps_the_smallest_prefix_reaching_p),
        cmocka_unit_test(test_min_p_drops_tokens_below_the_fraction_of_the_largest),
        cmocka_unit_test(test_logit_bias_moves_the_greedy_choice),
        cmocka_unit_test(test_penalties_follow_their_definitions),
        cmocka_unit_test(test_top_k_top_p_agree_with_a_full_sort),
        cmocka_unit_test(test_select_keeps_what_a_full_sort_keeps),
        cmocka_unit_test(test_nan_is_never_drawn_and_tiny_temperatures_are_greedy),
        cmocka_unit_test(test_bad_parameters_name_the_field),
        cmocka_unit_test(test_exp_rows_are_libm_exp),
        cmocka_unit_test(test_draws_do_not_depend_on_the_exp_form),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
