#define _GNU_SOURCE /* memmem */
/* Speculative decoding (di_engine_config.speculative_tokens, lib/engine/draft.c,
 * scheduler.c): prompt lookup proposes the right tokens; and the oracle of
 * losslessness is the engine without speculation — hundreds of randomized
 * requests (greedy, seeded sampling with top-k/top-p/min-p and penalties,
 * stop tokens, budgets, prompts that repeat themselves so drafts are
 * accepted, and prompts that don't) give token-for-token the same output
 * with speculation on, batched together, under pre-emption (a KV budget too
 * small for all of them) and with the prefix cache reusing blocks the
 * speculative steps published. The tiny Qwen2 fixture, and SmolLM2 when it
 * is fetched. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <math.h>

#include "deepinfer/deepinfer.h"
#include "engine/draft.h"

#define TINY          DI_FIXTURE_DIR "/model/qwen2-tied-f16"
#define DSV4          DI_FIXTURE_DIR "/model/dsv4-sqrtsoftplus-f32"
#define DSV3_MTP      DI_FIXTURE_DIR "/model/dsv3-mtp-f32"
#define DSV4_MTP      DI_FIXTURE_DIR "/model/dsv4-mtp-f32"
#define DSV4_GGUF     DI_FIXTURE_DIR "/model/gguf-dsv4/dsv4-gguf-bf16.gguf"
#define DSV4_GGUF_MTP DI_FIXTURE_DIR "/model/gguf-dsv4/dsv4-gguf-mtp.gguf"
#define DSV4_DSPARK   DI_FIXTURE_DIR "/model/dsv4-dspark-release"
#define DSV41_DSPARK  DI_FIXTURE_DIR "/model/dsv41-dspark-release"
#define SMOL          DI_ASSET_DIR "/smollm2-135m-instruct/SmolLM2-135M-Instruct.Q4_1.gguf"

static void test_prompt_lookup(void **state)
{
    (void)state;
    int32_t out[8];
    int g = -1;
    /* "a b c d ... a b" proposes "c d ..." (the longest n-gram wins) */
    const int32_t t1[] = {1, 2, 3, 4, 5, 9, 1, 2};
    assert_int_equal(draft_prompt_lookup(t1, 8, 1, 3, out, 3, &g), 3);
    assert_int_equal(out[0], 3);
    assert_int_equal(out[1], 4);
    assert_int_equal(out[2], 5);
    assert_int_equal(g, 2); /* "1 2" */
    /* the most recent occurrence is the one copied */
    const int32_t t2[] = {7, 1, 7, 2, 7};
    assert_int_equal(draft_prompt_lookup(t2, 5, 1, 3, out, 4, &g), 2);
    assert_int_equal(out[0], 2);
    assert_int_equal(out[1], 7);
    /* a 3-gram match beats a more recent 1-gram */
    const int32_t t3[] = {5, 6, 7, 8, 6, 4, 5, 6, 7};
    assert_int_equal(draft_prompt_lookup(t3, 9, 1, 3, out, 2, &g), 2);
    assert_int_equal(out[0], 8);
    assert_int_equal(out[1], 6);
    assert_int_equal(g, 3);
    /* no earlier occurrence, or no room */
    const int32_t t4[] = {1, 2, 3};
    assert_int_equal(draft_prompt_lookup(t4, 3, 1, 3, out, 4, &g), 0);
    assert_int_equal(draft_prompt_lookup(t1, 8, 1, 3, out, 0, &g), 0);
    assert_int_equal(draft_prompt_lookup(t1, 1, 1, 3, out, 4, &g), 0);
}

/* The prompt-lookup drafter behind the drafter interface: the drafts of
 * draft_prompt_lookup, each with the confidence of its match length, no
 * distributions, and nothing proposed where nothing matches. */
static void test_prompt_lookup_drafter(void **state)
{
    (void)state;
    drafter *d = drafter_prompt_lookup_create();
    assert_non_null(d);
    assert_string_equal(d->ops->name, "prompt-lookup");
    assert_int_equal(d->gives_q, 0);
    const int32_t t1[] = {1, 2, 3, 4, 5, 9, 1, 2}, t4[] = {1, 2, 3};
    int32_t out[2][4];
    float conf[2][4];
    void *st[2] = {NULL, NULL};
    draft_request r[2] = {
        {.tokens = t1, .n_tokens = 8, .max = 3, .state = &st[0], .out = out[0], .conf = conf[0]},
        {.tokens = t4, .n_tokens = 3, .max = 4, .state = &st[1], .out = out[1], .conf = conf[1]},
    };
    d->ops->propose(d, r, 2);
    assert_int_equal(r[0].n, 3);
    assert_int_equal(out[0][0], 3);
    assert_int_equal(out[0][2], 5);
    for (int j = 0; j < 3; j++) assert_true(conf[0][j] == 0.5f); /* a 2-token match */
    assert_int_equal(r[0].has_q, 0);
    assert_int_equal(r[1].n, 0);
    drafter_destroy(d);
    drafter_destroy(NULL);
}

/* Copying numbered lines, the last few tokens recur at every line ("8 9 7":
 * a line's end and the next line's marker) and their most recent occurrence
 * is the copy's own previous line, followed by the wrong number: the drafter
 * follows the longest match (here the copy's whole 9 tokens so far, back in
 * the source), which drafts the next line's number; the most recent 3-gram
 * drafted the line before's. Its confidence is the long-match class. And
 * draft_prompt_lookup itself: the match is bounded by max_ngram, and of
 * equally long matches the most recent is copied. */
static void test_prompt_lookup_follows_the_longest_match(void **state)
{
    (void)state;
    /* source: lines "7 <number> 8 9" numbered 1, 2, 3; then its copy so far */
    const int32_t t[] = {7, 1, 8, 9, 7, 2, 8, 9, 7, 3, 8, 9, /* copy: */ 7, 1, 8, 9, 7, 2, 8, 9, 7};
    drafter *d = drafter_prompt_lookup_create();
    assert_non_null(d);
    int32_t out[4];
    float conf[4];
    void *st = NULL;
    draft_request r = {
        .tokens = t, .n_tokens = 21, .max = 3, .state = &st, .out = out, .conf = conf};
    d->ops->propose(d, &r, 1);
    assert_int_equal(r.n, 3);
    assert_int_equal(out[0], 3); /* the source's next line: "3 8 9" */
    assert_int_equal(out[1], 8);
    assert_int_equal(out[2], 9);
    for (int j = 0; j < 3; j++) assert_int_equal(draft_class(conf[j]), 4); /* 9 tokens */
    drafter_destroy(d);

    int g = 0;
    assert_int_equal(draft_prompt_lookup(t, 21, 1, 4, out, 1, &g), 1);
    assert_int_equal(g, 4); /* bounded at 4: "2 8 9 7", only in the source */
    assert_int_equal(out[0], 3);
    /* "1 2 3" twice before the suffix: of the two full 3-token matches, the
     * most recent (followed by 5) is copied */
    const int32_t u[] = {1, 2, 3, 4, 1, 2, 3, 5, 1, 2, 3};
    assert_int_equal(draft_prompt_lookup(u, 11, 1, 3, out, 1, &g), 1);
    assert_int_equal(g, 3);
    assert_int_equal(out[0], 5);
    /* a run of one token: the longest match is bounded, the most recent */
    int32_t same[64];
    for (int i = 0; i < 64; i++) same[i] = 6;
    assert_int_equal(draft_prompt_lookup(same, 64, 1, 16, out, 4, &g), 1);
    assert_int_equal(g, 16);
    assert_int_equal(out[0], 6);
}

/* Gains of drafts kept each with probability a[i] given the one before:
 * a[i]^(j+1) for request i's (j+1)-th, rows of stride 8. */
static void gains_of(const double *a, int n, double *gain)
{
    for (int i = 0; i < n; i++) {
        double g = 1.0;
        for (int j = 0; j < 8; j++) gain[i * 8 + j] = g *= a[i];
    }
}

/* The step-time profile interpolates and extrapolates; the allocation gives
 * an idle engine (steps cost nearly the same at 1 and 16 tokens, as a
 * memory-bound decode does) long drafts, a busy one (cost in proportion to
 * tokens) none, the confident request before the unsure one, and never
 * more than the budget. */
static void test_confidence_scheduled_allocation(void **state)
{
    (void)state;
    draft_profile flat = {0}, linear = {0};
    assert_true(draft_profile_cost(&flat, 4) == 0);
    for (int rep = 0; rep < 3; rep++) {
        draft_profile_add(&flat, 1, 1000);
        draft_profile_add(&flat, 16, 1100);
        draft_profile_add(&linear, 1, 1000);
        draft_profile_add(&linear, 16, 16000);
    }
    assert_true(draft_profile_cost(&flat, 1) == 1000);
    assert_true(draft_profile_cost(&flat, 16) == 1100);
    assert_true(draft_profile_cost(&linear, 32) > 31000); /* beyond: in proportion */
    double mid = draft_profile_cost(&linear, 8);
    assert_true(mid > 7000 && mid < 9000);
    const int avail[2] = {8, 8};
    const double accept[2] = {0.9, 0.3};
    int k[2];
    double gain[16];
    gains_of(accept, 2, gain);
    /* idle: drafts pay while their expected gain beats the small extra cost */
    int64_t n = draft_allocate(&flat, 2, avail, gain, 8, 2, 2.0, 64, k);
    assert_true(k[0] >= 6);
    assert_true(k[0] > k[1]);
    assert_int_equal(n, k[0] + k[1]);
    /* busy: a token more costs as much as it can give: none */
    n = draft_allocate(&linear, 2, avail, gain, 8, 2, 2.0, 64, k);
    assert_int_equal(n, 0);
    /* the budget bounds it; an empty profile allows all (to measure it) */
    draft_profile none = {0};
    n = draft_allocate(&none, 2, avail, gain, 8, 2, 2.0, 5, k);
    assert_int_equal(n, 5);
    /* a stair (the CPU's: one token takes the decode path, two to four share
     * one pass over the weights): one draft does not pay, three do — the whole
     * order is weighed, not stopped at the first draft that loses */
    draft_profile stair = {0};
    for (int rep = 0; rep < 3; rep++) {
        draft_profile_add(&stair, 1, 1000);
        draft_profile_add(&stair, 2, 2000);
        draft_profile_add(&stair, 4, 2050);
        draft_profile_add(&stair, 8, 4200);
    }
    const int avail1[1] = {8};
    const double sure[1] = {0.95};
    gains_of(sure, 1, gain);
    n = draft_allocate(&stair, 1, avail1, gain, 8, 1, 1.0, 64, k);
    assert_int_equal(n, 3); /* 4 tokens: (1 + .95 + .90 + .86) / 2050 beats 1 / 1000 */
}

/* The expected gains follow the measured acceptance by run length and
 * confidence class (the oracle: the process that generated the
 * observations, whose survival curve is known exactly). A copy whose drafter
 * is right for 7 tokens and then wrong (a line number it cannot know), over
 * and over: after a run of t right predictions the next is kept exactly when
 * t < 7, so a request at run 0 keeps drafts 0..6 (gain 1) and never draft 7,
 * and one at run 5 keeps two. One rate for every draft (the pooled 7/8, as
 * the rule before it) would give 0.875^7 = 0.39 for draft 6 and 0.34 for
 * draft 7: this fails it. */
static void test_draft_gains_follow_measured_acceptance(void **state)
{
    (void)state;
    draft_accept engine = {0}, req = {0};
    const float conf3[8] = {0.65f, 0.65f, 0.65f, 0.65f, 0.65f, 0.65f, 0.65f, 0.65f};
    const int c3 = draft_class(0.65f), c1 = draft_class(0.3f);
    assert_true(c3 == 3 && c1 == 1 && draft_class(1.0f) == DRAFT_CLASSES - 1);
    assert_int_equal(draft_class(0.0f), 0);
    for (int tok = 0; tok < 2000; tok++) { /* the stream, as measure_drafts sees it */
        int t = tok % 8;
        draft_accept_add(&engine, c3, t, t < 7);
        draft_accept_add(&req, c3, t, t < 7);
    }
    double gain[8];
    draft_gains(&engine, &req, conf3, 8, 0, gain);
    for (int j = 0; j < 7; j++) assert_true(gain[j] > 0.95);
    assert_true(gain[7] < 0.05);
    draft_gains(&engine, &req, conf3, 8, 5, gain); /* drafts 0, 1 at runs 5, 6 */
    assert_true(gain[1] > 0.95 && gain[2] < 0.05);
    draft_gains(&engine, NULL, conf3, 8, 0, gain); /* a new request: the engine's */
    assert_true(gain[6] > 0.95 && gain[7] < 0.05);
    /* no statistics: the drafter's confidence, draft after draft */
    draft_accept none = {0};
    draft_gains(&none, NULL, conf3, 3, 0, gain);
    assert_true(fabs(gain[2] - 0.65 * 0.65 * 0.65) < 1e-6);
    /* the class counts: 1-token matches (0.3) never kept, 3-token ones always,
     * in the same request */
    draft_accept mixed = {0};
    for (int i = 0; i < 200; i++) {
        draft_accept_add(&mixed, c1, 0, 0);
        draft_accept_add(&mixed, c3, 0, 1);
    }
    const float one[1] = {0.3f}, three[1] = {0.65f};
    double g1, g3;
    draft_gains(&mixed, &mixed, one, 1, 0, &g1);
    draft_gains(&mixed, &mixed, three, 1, 0, &g3);
    assert_true(g1 < 0.05 && g3 > 0.95);
    /* the request's own level wins over the engine's: a request whose drafts
     * are never kept (free chat) in an engine that copies */
    draft_accept free_chat = {0};
    for (int i = 0; i < 20; i++) draft_accept_add(&free_chat, c3, 0, 0);
    draft_gains(&engine, &free_chat, conf3, 2, 0, gain);
    assert_true(gain[0] < 0.15 && gain[1] < gain[0]);
    /* the window: old counts fade, so the estimate follows a new workload */
    draft_accept w = {0};
    for (int i = 0; i < 4 * DRAFT_ACCEPT_WINDOW; i++) draft_accept_add(&w, c3, 0, 1);
    for (int i = 0; i < DRAFT_ACCEPT_WINDOW; i++) draft_accept_add(&w, c3, 0, 0);
    assert_true(w.tested[c3][0] < DRAFT_ACCEPT_WINDOW);
    draft_gains(&w, NULL, three, 1, 0, &g3);
    assert_true(g3 < 0.5);
}

/* --- speculative sampling, checked statistically ---------------------------
 * The target distribution is computed here from the model's logits (written
 * by transformers: the fixtures' sequence_logits.f32) and the sampling
 * parameters, independently of the sampler; the drafts are drawn here from a
 * distribution q of another model's logits. A chi-square test compares what
 * sampler_verify emits with the target. */

static void read_logits_row(const char *name, int row, float *out)
{
    char path[512];
    snprintf(path, sizeof path, "%s/model/%s/sequence_logits.f32", DI_FIXTURE_DIR, name);
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    assert_int_equal(fseek(f, (long)row * 512 * (long)sizeof(float), SEEK_SET), 0);
    assert_int_equal(fread(out, sizeof(float), 512, f), 512);
    fclose(f);
}

/* softmax(logits / t) over the top_k largest (ties: lower id first), then
 * min_p (tokens below min_p times the largest probability dropped),
 * renormalised: the distribution sampler.h's processors define. */
static void target_distribution(const float *logits, double t, int top_k, double min_p, double *p)
{
    int idx[512];
    for (int i = 0; i < 512; i++) idx[i] = i;
    for (int i = 1; i < 512; i++) /* insertion sort, descending logit */
        for (int j = i; j > 0 && (logits[idx[j]] > logits[idx[j - 1]] ||
                                  (logits[idx[j]] == logits[idx[j - 1]] && idx[j] < idx[j - 1]));
             j--) {
            int tmp = idx[j];
            idx[j] = idx[j - 1];
            idx[j - 1] = tmp;
        }
    int k = top_k > 0 ? top_k : 512;
    double sum = 0;
    for (int i = 0; i < 512; i++) p[i] = 0;
    for (int i = 0; i < k; i++) {
        p[idx[i]] = exp(((double)logits[idx[i]] - (double)logits[idx[0]]) / t);
        if (p[idx[i]] < min_p) p[idx[i]] = 0; /* the largest weight is 1 */
        sum += p[idx[i]];
    }
    for (int i = 0; i < 512; i++) p[i] /= sum;
}

static uint64_t test_rng(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* A token drawn from q (inverse CDF in id order). */
static int32_t draw_q(const double *q, uint64_t *x)
{
    double u = (double)(test_rng(x) >> 11) * 0x1.0p-53, acc = 0;
    int32_t last = 0;
    for (int32_t i = 0; i < 512; i++) {
        if (q[i] <= 0) continue;
        acc += q[i];
        last = i;
        if (u < acc) return i;
    }
    return last;
}

/* Pearson's chi-square of counts[512] (n samples) against p: bins of
 * expected count below 5 are pooled; a count where p is 0 is infinite.
 * *dof gets the degrees of freedom. */
static double chi_square(const uint32_t *counts, const double *p, uint32_t n, int *dof)
{
    double stat = 0, pool_e = 0, pool_o = 0;
    int bins = 0;
    *dof = 1;
    for (int i = 0; i < 512; i++) {
        double e = p[i] * n;
        if (p[i] <= 0) {
            if (counts[i]) return INFINITY;
            continue;
        }
        if (e < 5) {
            pool_e += e;
            pool_o += counts[i];
            continue;
        }
        stat += (counts[i] - e) * (counts[i] - e) / e;
        bins++;
    }
    if (pool_e > 0) {
        stat += (pool_o - pool_e) * (pool_o - pool_e) / pool_e;
        bins++;
    }
    *dof = bins - 1;
    return stat;
}

/* The chi-square distribution's 1 - 1e-5 quantile (Wilson-Hilferty): a
 * correct sampler exceeds it once in 100,000 seeds; the seeds are fixed. */
static double chi_square_critical(int dof)
{
    double z = 4.265, h = 2.0 / (9.0 * dof), c = 1 - h + z * sqrt(h);
    return dof * c * c * c;
}

/* Target p: tiny Qwen2's logits at temperature 0.7, top-k 12, min-p 0.05;
 * drafts from q: those logits plus another model's (the untied Qwen2) at
 * temperature 1.3, top-k 24, a drafter near the target — supports that overlap only in part, so
 * drafts are kept, rejected for a p of 0, and corrected from the residual. The emitted token's
 * distribution is p (chi-square), the kept fraction is sum min(p, q) (the rule's acceptance,
 * within 4.5 standard deviations), and after a kept draft the next verified token is distributed as
 * its own target. The test has power: the drafts themselves (a rule that always accepts) fail it,
 * and so does the right acceptance with corrections drawn from p instead of the residual. Greedy
 * keeps a draft exactly when it is the argmax. */
static void test_speculative_sampling_matches_target(void **state)
{
    (void)state;
    float lp[2][512], lq[2][512], row[512];
    double p[2][512], q[2][512];
    for (int r = 0; r < 2; r++) {
        read_logits_row("qwen2-tied-f16", 20 + r, lp[r]);
        read_logits_row("qwen2-untied-f32-sharded", 30 + r, lq[r]);
        target_distribution(lp[r], 0.7, 12, 0.05, p[r]);
        for (int i = 0; i < 512; i++) lq[r][i] += lp[r][i]; /* a drafter close to the target */
        target_distribution(lq[r], 1.3, 24, 0.0, q[r]);
    }
    sampler_params sp = {.temperature = 0.7f,
                         .top_k = 12,
                         .top_p = 1.0f,
                         .min_p = 0.05f,
                         .repetition_penalty = 1.0f,
                         .seed = 424242};
    sampler *smp = NULL;
    assert_int_equal(sampler_create(&sp, 512, &smp, NULL, 0), DI_OK);
    sampler_candidate *scratch = malloc(sampler_scratch_count(512) * sizeof *scratch);
    float qf[2][512];
    for (int r = 0; r < 2; r++)
        for (int i = 0; i < 512; i++) qf[r][i] = (float)q[r][i];
    enum { N = 40000 };
    static uint32_t first[512], drafts[512], second[512];
    memset(first, 0, sizeof first);
    memset(drafts, 0, sizeof drafts);
    memset(second, 0, sizeof second);
    uint32_t kept = 0, n_second = 0;
    uint64_t x = 77;
    for (int t = 0; t < N; t++) {
        int32_t d = draw_q(q[0], &x);
        drafts[d]++;
        int ok = -1;
        memcpy(row, lp[0], sizeof row);
        int32_t tok = sampler_verify(smp, row, scratch, d, qf[0], &ok);
        assert_true(ok == 0 || ok == 1);
        assert_true(ok == (tok == d) || !ok);
        first[tok]++;
        if (!ok) continue;
        kept++;
        int32_t d2 = draw_q(q[1], &x);
        memcpy(row, lp[1], sizeof row);
        second[sampler_verify(smp, row, scratch, d2, qf[1], &ok)]++;
        n_second++;
    }
    int dof = 0;
    double stat = chi_square(first, p[0], N, &dof);
    printf("first token: chi-square %.1f, %d degrees of freedom (critical %.1f)\n", stat, dof,
           chi_square_critical(dof));
    assert_true(dof >= 3);
    assert_true(stat < chi_square_critical(dof));
    double stat2 = chi_square(second, p[1], n_second, &dof);
    printf("after a kept draft (%u): chi-square %.1f, %d degrees of freedom (critical %.1f)\n",
           n_second, stat2, dof, chi_square_critical(dof));
    assert_true(n_second > 1000);
    assert_true(stat2 < chi_square_critical(dof));
    /* the acceptance the rule promises: sum min(p, q) */
    double overlap = 0;
    for (int i = 0; i < 512; i++) overlap += p[0][i] < q[0][i] ? p[0][i] : q[0][i];
    double sd = sqrt(N * overlap * (1 - overlap));
    printf("kept %u of %d drafts, expected %.1f\n", kept, N, N * overlap);
    assert_true(overlap > 0.05 && overlap < 0.95);
    assert_true(fabs(kept - N * overlap) < 4.5 * sd);
    /* power: always accepting emits the drafts, which fail the test */
    double wrong = chi_square(drafts, p[0], N, &dof);
    printf("always accepting: chi-square %.1f\n", wrong);
    assert_true(wrong > chi_square_critical(dof));
    /* and so does the right acceptance with the correction drawn from p
     * instead of the residual (simulated here) */
    static uint32_t from_p[512];
    memset(from_p, 0, sizeof from_p);
    for (int t = 0; t < N; t++) {
        int32_t d = draw_q(q[0], &x);
        double u = (double)(test_rng(&x) >> 11) * 0x1.0p-53;
        from_p[u < p[0][d] / q[0][d] ? d : draw_q(p[0], &x)]++;
    }
    wrong = chi_square(from_p, p[0], N, &dof);
    printf("correcting from p: chi-square %.1f\n", wrong);
    assert_true(wrong > chi_square_critical(dof));
    /* greedy: kept exactly when it is the argmax, which is emitted */
    sampler *g = NULL;
    sampler_params gp = sp;
    gp.temperature = 0;
    assert_int_equal(sampler_create(&gp, 512, &g, NULL, 0), DI_OK);
    int32_t best = 0;
    for (int i = 1; i < 512; i++)
        if (lp[0][i] > lp[0][best]) best = i;
    for (int32_t d = 0; d < 512; d += 37) {
        int ok = -1;
        memcpy(row, lp[0], sizeof row);
        assert_int_equal(sampler_verify(g, row, scratch, d, qf[0], &ok), best);
        assert_int_equal(ok, d == best);
    }
    memcpy(row, lp[0], sizeof row);
    int ok = 0;
    assert_int_equal(sampler_verify(g, row, scratch, best, NULL, &ok), best);
    assert_int_equal(ok, 1);
    sampler_free(g);
    sampler_free(smp);
    free(scratch);
}

/* A point-mass draft (q NULL: prompt lookup) is the plain draw, kept when it
 * equals it: the same tokens and random stream as sampler_sample, so the
 * output equals decoding without speculation. */
static void test_point_mass_draft_is_the_plain_draw(void **state)
{
    (void)state;
    float l[512], row[512];
    read_logits_row("qwen2-tied-f16", 25, l);
    sampler_params sp = {
        .temperature = 0.9f, .top_p = 0.95f, .repetition_penalty = 1.0f, .seed = 99};
    sampler *a = NULL, *b = NULL;
    assert_int_equal(sampler_create(&sp, 512, &a, NULL, 0), DI_OK);
    assert_int_equal(sampler_create(&sp, 512, &b, NULL, 0), DI_OK);
    sampler_candidate *scratch = malloc(sampler_scratch_count(512) * sizeof *scratch);
    for (int t = 0; t < 500; t++) {
        memcpy(row, l, sizeof row);
        int32_t plain = sampler_sample(a, row, scratch);
        memcpy(row, l, sizeof row);
        int ok = -1;
        int32_t d = (int32_t)(t * 31 % 512);
        assert_int_equal(sampler_verify(b, row, scratch, d, NULL, &ok), plain);
        assert_int_equal(ok, plain == d);
    }
    sampler_free(a);
    sampler_free(b);
    free(scratch);
}

typedef struct rec {
    uint64_t id;
    int32_t toks[160];
    int n_toks, n_done;
    di_status status;
    di_finish finish;
    uint32_t completion, drafted, accepted;
} rec;

static void on_event(void *user, const di_event *ev)
{
    rec *r = user;
    if (di_event_kind_of(ev) == DI_EVENT_TOKENS) {
        size_t n;
        const int32_t *t = di_event_tokens(ev, &n);
        for (size_t i = 0; i < n && r->n_toks < 160; i++) r->toks[r->n_toks++] = t[i];
    } else if (di_event_kind_of(ev) == DI_EVENT_DONE) {
        r->n_done++;
        r->status = di_event_status(ev);
        r->finish = di_event_finish_reason(ev);
        r->completion = di_event_completion_tokens(ev);
        r->drafted = di_event_draft_tokens(ev);
        r->accepted = di_event_accepted_draft_tokens(ev);
    }
}

static int32_t kv_type;      /* the engines' kv_cache_type (0: f16, the default) */
static int64_t n_batch = 64; /* the engines' n_batch */

static di_engine *make_engine(const char *path, int n_draft, int fixed, int max_running,
                              int64_t kv_bytes)
{
    di_engine_config cfg;
    di_engine_config_init(&cfg);
    cfg.kv_cache_type = kv_type;
    cfg.model_path = path;
    cfg.n_threads = 2;
    cfg.max_running = max_running;
    cfg.n_batch = n_batch;
    cfg.kv_cache_bytes = kv_bytes;
    cfg.speculative_tokens = n_draft;
    cfg.speculative_fixed = fixed;
    di_engine *e = NULL;
    di_error *err = NULL;
    if (di_engine_create(&cfg, &e, &err) != DI_OK) fail_msg("%s", di_error_message(err));
    return e;
}

/* Prompt i: pseudo-random tokens, and for most i a span repeated (so the
 * output of a model that copies has drafts to accept). */
typedef struct spec {
    int32_t prompt[96];
    size_t n_prompt;
    int32_t stop;
    di_request req;
} spec;

static void make_spec(spec *s, int i, uint32_t vocab)
{
    uint32_t x = 2463534242u + (uint32_t)i * 7919u;
    size_t base = 4 + (size_t)(i * 11 % 30);
    for (size_t k = 0; k < base; k++) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        s->prompt[k] = (int32_t)(x % vocab);
    }
    s->n_prompt = base;
    int reps = i % 4; /* 0: no repetition */
    for (int rep = 0; rep < reps && s->n_prompt + base <= 96; rep++) {
        memcpy(s->prompt + s->n_prompt, s->prompt, base * sizeof *s->prompt);
        s->n_prompt += base;
    }
    di_request_init(&s->req);
    s->req.tokens = s->prompt;
    s->req.n_tokens = s->n_prompt;
    s->req.max_tokens = 6 + i * 7 % 40;
    s->req.seed = 1000 + i;
    s->req.temperature = i % 3 == 0 ? 0.0f : 0.5f + 0.1f * (float)(i % 5);
    s->req.top_k = i % 4 == 1 ? 20 + i : 0;
    s->req.top_p = i % 5 == 2 ? 0.9f : 1.0f;
    s->req.min_p = i % 6 == 4 ? 0.05f : 0.0f;
    s->req.repetition_penalty = i % 7 == 3 ? 1.2f : 1.0f;
    s->req.frequency_penalty = i % 8 == 5 ? 0.4f : 0.0f;
    s->stop = s->prompt[i % base];
    if (i % 9 == 6) { /* a stop token the copy reaches */
        s->req.stop_tokens = &s->stop;
        s->req.n_stop_tokens = 1;
    }
    s->req.on_event = on_event;
}

static void run_all(di_engine *e, spec *specs, rec *recs, int n)
{
    for (int i = 0; i < n; i++) {
        memset(&recs[i], 0, sizeof recs[i]);
        specs[i].req.user_data = &recs[i];
        di_error *err = NULL;
        if (di_submit(e, &specs[i].req, &recs[i].id, &err) != DI_OK)
            fail_msg("submit %d: %s", i, di_error_message(err));
    }
    for (int k = 0; k < 200000 && di_engine_pending_count(e) > 0; k++)
        assert_true(di_poll(e, 50) >= 0);
    assert_int_equal(di_engine_pending_count(e), 0);
}

static int first_difference(const rec *a, const rec *b)
{
    int d = 0;
    while (d < a->n_toks && d < b->n_toks && a->toks[d] == b->toks[d]) d++;
    return d;
}

/* Engines with and without speculation agree on every request's tokens. */
static void check_lossless(const char *path, int n, int max_running, int64_t kv_bytes, int n_draft,
                           int fixed)
{
    di_engine *plain = make_engine(path, 0, 0, max_running, kv_bytes);
    di_engine *spec_e = make_engine(path, n_draft, fixed, max_running, kv_bytes);
    uint32_t vocab = (uint32_t)di_engine_vocab_size(plain);
    spec *specs = calloc((size_t)n, sizeof *specs);
    rec *a = calloc((size_t)n, sizeof *a), *b = calloc((size_t)n, sizeof *b);
    assert_non_null(specs);
    for (int i = 0; i < n; i++) make_spec(&specs[i], i, vocab);
    run_all(plain, specs, a, n);
    run_all(spec_e, specs, b, n);
    uint64_t drafted = 0, accepted = 0;
    for (int i = 0; i < n; i++) {
        assert_int_equal(a[i].n_done, 1);
        assert_int_equal(b[i].n_done, 1);
        assert_int_equal(a[i].status, DI_OK);
        assert_int_equal(b[i].status, DI_OK);
        if (a[i].n_toks != b[i].n_toks || memcmp(a[i].toks, b[i].toks, sizeof a[i].toks) != 0)
            fail_msg("%s request %d: %d tokens without speculation, %d with (first difference "
                     "at %d)",
                     path, i, a[i].n_toks, b[i].n_toks, first_difference(&a[i], &b[i]));
        assert_int_equal(a[i].finish, b[i].finish);
        assert_int_equal(a[i].completion, b[i].completion);
        assert_int_equal(a[i].drafted, 0);
        assert_true(b[i].accepted <= b[i].drafted);
        drafted += b[i].drafted;
        accepted += b[i].accepted;
    }
    printf("%s (%s): %d requests, %llu draft tokens verified, %llu kept\n", path,
           fixed ? "every proposal" : "confidence-scheduled", n, (unsigned long long)drafted,
           (unsigned long long)accepted);
    if (fixed) { /* every proposal verified: drafts kept on these prompts (the scheduled
                    engine may verify none on a CPU where longer steps cost more) */
        assert_true(drafted > 0);
        assert_true(accepted > 0);
    }
    /* the prefix cache holds blocks speculative steps published: a second
     * round (hits on every prompt) still agrees */
    run_all(spec_e, specs, b, n);
    for (int i = 0; i < n; i++) {
        assert_int_equal(a[i].n_toks, b[i].n_toks);
        assert_memory_equal(a[i].toks, b[i].toks, sizeof a[i].toks);
    }
    free(specs);
    free(a);
    free(b);
    assert_int_equal(di_engine_destroy(plain), DI_OK);
    assert_int_equal(di_engine_destroy(spec_e), DI_OK);
}

/* The sanitizer builds run a fifth of the requests. */
static int scale(void)
{
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
    return 5;
#else
    return 1;
#endif
}

static void test_lossless_tiny(void **state)
{
    (void)state;
    check_lossless(TINY, 120 / scale(), 8, 0, 4, 1);
    check_lossless(TINY, 40 / scale(), 8, 0, 4, 0);
}

static void test_lossless_under_preemption(void **state)
{
    (void)state;
    /* 24 blocks of 16 tokens for 8 requests of up to ~130: pre-emption */
    check_lossless(TINY, 40 / scale(), 8, 24 * 2048, 6, 1);
}

/* The model's KV bytes per token (di_engine_model_info's kv_bytes_per_token),
 * to size a budget that pre-empts. */
static int64_t kv_bytes_per_token(const char *path)
{
    di_engine *e = make_engine(path, 0, 0, 8, 0);
    const char *info = di_engine_model_info(e, NULL), *at = strstr(info, "\"kv_bytes_per_token\":");
    assert_non_null(at);
    int64_t per_token = strtoll(at + strlen("\"kv_bytes_per_token\":"), NULL, 10);
    assert_true(per_token > 0);
    assert_int_equal(di_engine_destroy(e), DI_OK);
    return per_token;
}

/* DeepSeek-V4: a rejected draft truncates the sequence's window and
 * compressor rings and its compressed entries (deepseek_v4.h), up to 64
 * drafts a step, one request at a time and under pre-emption (a budget of 24
 * blocks of 16 tokens at this model's per-token cost). */
static void test_lossless_deepseek_v4(void **state)
{
    (void)state;
    check_lossless(DSV4, 40 / scale(), 8, 0, 4, 1);
    check_lossless(DSV4, 40 / scale(), 8, 0, 4, 0);
    check_lossless(DSV4, 16, 1, 0, 64, 1);
    int64_t per_token = kv_bytes_per_token(DSV4);
    check_lossless(DSV4, 16, 8, 24 * 16 * per_token, 64, 1);
    /* DeepSeek-V4.1: a rejected draft cuts entries of ratio 2 and 1 and the
     * keys made from them, under pre-emption too */
    const char *v41 = DI_FIXTURE_DIR "/model/dsv41-f32";
    /* (40 requests under the sanitizers too: fewer keep no draft on this fixture) */
    check_lossless(v41, 40, 8, 0, 4, 1);
    check_lossless(v41, 40, 8, 24 * 16 * kv_bytes_per_token(v41), 64, 1);
    /* Engram: a rejected draft's compressed IDs leave the n-grams */
    check_lossless(DI_FIXTURE_DIR "/model/dsv41-engram-f32", 40, 8, 0, 4, 1);
}

static void test_lossless_smollm2(void **state)
{
    (void)state;
    if (access(SMOL, R_OK) != 0) skip();
    check_lossless(SMOL, 16 / scale(), 8, 0, 5, 1);
}

static di_engine *make_draft_engine(const char *path, const char *draft_path, int n_draft,
                                    int fixed, int max_running)
{
    di_engine_config cfg;
    di_engine_config_init(&cfg);
    cfg.model_path = path;
    cfg.n_threads = 2;
    cfg.max_running = max_running;
    cfg.n_batch = n_batch;
    cfg.speculative_tokens = n_draft;
    cfg.speculative_fixed = fixed;
    cfg.draft = DI_DRAFT_MODEL;
    cfg.draft_model_path = draft_path;
    di_engine *e = NULL;
    di_error *err = NULL;
    if (di_engine_create(&cfg, &e, &err) != DI_OK) fail_msg("%s", di_error_message(err));
    return e;
}

/* A draft model: greedy requests (with penalties on some when `penalties`,
 * stop tokens, budgets) give token for token the plain engine's output,
 * batched; a model drafting for itself without penalties has its drafts kept
 * (its logits are the model's whatever the batch; the draft ignores
 * penalties, so they reject some), another model's are rejected often and the
 * output is still the same. Returns the kept fraction (and sets
 * kept_per_token). */
/* check_draft_model_greedy's last run: drafts kept per output token. */
static double kept_per_token;

static double check_draft_model_greedy(const char *path, const char *draft_path, int n, int fixed,
                                       int penalties, int n_draft)
{
    di_engine *plain = make_engine(path, 0, 0, 8, 0);
    di_engine *spec_e = make_draft_engine(path, draft_path, n_draft, fixed, 8);
    uint32_t vocab = (uint32_t)di_engine_vocab_size(plain);
    spec *specs = calloc((size_t)n, sizeof *specs);
    rec *a = calloc((size_t)n, sizeof *a), *b = calloc((size_t)n, sizeof *b);
    assert_non_null(specs);
    for (int i = 0; i < n; i++) {
        make_spec(&specs[i], i, vocab);
        specs[i].req.temperature = 0;
        if (!penalties) {
            specs[i].req.repetition_penalty = 1;
            specs[i].req.frequency_penalty = 0;
        }
    }
    run_all(plain, specs, a, n);
    run_all(spec_e, specs, b, n);
    uint64_t drafted = 0, accepted = 0, tokens = 0;
    for (int i = 0; i < n; i++) {
        assert_int_equal(b[i].n_done, 1);
        assert_int_equal(b[i].status, DI_OK);
        if (a[i].n_toks != b[i].n_toks || memcmp(a[i].toks, b[i].toks, sizeof a[i].toks) != 0)
            fail_msg("%s drafted by %s, request %d: %d tokens without speculation, %d with "
                     "(first difference at %d)",
                     path, draft_path, i, a[i].n_toks, b[i].n_toks, first_difference(&a[i], &b[i]));
        assert_int_equal(a[i].finish, b[i].finish);
        assert_true(b[i].accepted <= b[i].drafted);
        drafted += b[i].drafted;
        accepted += b[i].accepted;
        tokens += (uint64_t)b[i].n_toks;
    }
    kept_per_token = tokens ? (double)accepted / (double)tokens : 0;
    printf("%s drafted by %s (%s): %d greedy requests, %llu draft tokens verified, %llu kept\n",
           path, draft_path, fixed ? "every proposal" : "confidence-scheduled", n,
           (unsigned long long)drafted, (unsigned long long)accepted);
    free(specs);
    free(a);
    free(b);
    assert_int_equal(di_engine_destroy(plain), DI_OK);
    assert_int_equal(di_engine_destroy(spec_e), DI_OK);
    if (fixed) assert_true(drafted > 0);
    return drafted ? (double)accepted / (double)drafted : 0;
}

static void test_draft_model_greedy_tiny(void **state)
{
    (void)state;
    double self = check_draft_model_greedy(TINY, TINY, 60 / scale(), 1, 0, 4);
    assert_true(self > 0.9);
    check_draft_model_greedy(TINY, TINY, 30 / scale(), 1, 1, 4);
    check_draft_model_greedy(TINY, DI_FIXTURE_DIR "/model/qwen2-untied-f32-sharded", 60 / scale(),
                             1, 1, 4);
    check_draft_model_greedy(TINY, DI_FIXTURE_DIR "/model/llama-gqa-f16", 30 / scale(), 0, 1, 4);
}

/* More drafts asked than a step holds (speculative_tokens >= n_batch): each
 * request's proposals are capped at n_batch - 1, so a fixed plan (all of a
 * request's drafts or none) still verifies them: a model drafting for itself
 * always proposes all it may, and its drafts are verified and kept, one
 * request at a time and several. (Uncapped, 8 drafts and the request's own
 * token never fit a step of 8: drafts were verified only near a request's
 * end, where its max_tokens capped them.) Prompt lookup too. */
static void test_drafts_beyond_the_step_are_capped(void **state)
{
    (void)state;
    n_batch = 8;
    for (int n_draft = 8; n_draft <= 30; n_draft += 22) {
        /* each step keeps its 7 drafts but the last ones of a request:
         * most output tokens are kept drafts (uncapped: 0.22) */
        assert_true(check_draft_model_greedy(TINY, TINY, 12 / scale(), 1, 0, n_draft) > 0.9);
        assert_true(kept_per_token > 0.6);
    }
    check_lossless(TINY, 24 / scale(), 4, 0, 12, 1);
    n_batch = 64;
}

static void test_draft_model_greedy_smollm2(void **state)
{
    (void)state;
#if defined(__SANITIZE_THREAD__) /* minutes there; the tiny models cover the threads */
    skip();
#endif
    if (access(SMOL, R_OK) != 0) skip();
    double self = check_draft_model_greedy(SMOL, SMOL, 12 / scale(), 1, 0, 4);
    assert_true(self > 0.9);
}

/* The target distribution of the second output token of `prompt` (its
 * marginal over the first): sum over a of p0(a) p1(. | a), each from the
 * model's logits (di_model_eval) and the sampling parameters. */
static void second_token_target(const char *path, const int32_t *prompt, size_t n_prompt, double t,
                                int top_k, double *p1)
{
    di_model *m = NULL;
    di_error *err = NULL;
    if (di_model_load(path, NULL, &m, &err) != DI_OK) fail_msg("%s", di_error_message(err));
    float logits[512];
    double p0[512], pa[512];
    assert_int_equal(di_model_eval(m, prompt, n_prompt, logits, 0, NULL), DI_OK);
    logits[2] -= 100; /* the requests' logit_bias: the end-of-sequence token out */
    target_distribution(logits, t, top_k, 0, p0);
    for (int i = 0; i < 512; i++) p1[i] = 0;
    for (int32_t a = 0; a < 512; a++) {
        if (p0[a] <= 0) continue;
        int32_t seq[64];
        memcpy(seq, prompt, n_prompt * sizeof *seq);
        seq[n_prompt] = a;
        di_model_reset(m);
        assert_int_equal(di_model_eval(m, seq, n_prompt + 1, logits, 0, NULL), DI_OK);
        logits[2] -= 100;
        target_distribution(logits, t, top_k, 0, pa);
        for (int i = 0; i < 512; i++) p1[i] += p0[a] * pa[i];
    }
    di_model_free(m);
}

/* Sampling with a draft model (another tiny model: q differs from p) through
 * the engine: the second output token — the first verified against a
 * sampled draft — is distributed as the target computed from the model's
 * logits (chi-square), drafts are kept and rejected, and a request's tokens
 * are the same run alone as batched with 15 others (its seed fixes them). */
static void test_draft_model_sampling_matches_target(void **state)
{
    (void)state;
    const int32_t prompt[] = {17, 301, 45, 99, 7, 260, 388, 12};
    const double t = 1.0;
    const int top_k = 0;          /* the whole vocabulary: about half the drafts kept */
    static const int32_t eos = 2; /* the tiny models' end of sequence */
    static const float ban = -100;
    double p1[512];
    second_token_target(TINY, prompt, 8, t, top_k, p1);
    di_engine *e =
        make_draft_engine(TINY, DI_FIXTURE_DIR "/model/qwen2-untied-f32-sharded", 2, 0, 16);
    const int n = 3000 / scale();
    spec *specs = calloc((size_t)n, sizeof *specs);
    rec *r = calloc((size_t)n, sizeof *r);
    assert_non_null(specs);
    for (int i = 0; i < n; i++) {
        memcpy(specs[i].prompt, prompt, sizeof prompt);
        di_request_init(&specs[i].req);
        specs[i].req.tokens = specs[i].prompt;
        specs[i].req.n_tokens = 8;
        specs[i].req.max_tokens = 3;
        specs[i].req.temperature = (float)t;
        specs[i].req.top_k = top_k;
        specs[i].req.seed = 5000 + (uint64_t)i;
        specs[i].req.logit_bias_ids = &eos;
        specs[i].req.logit_bias_values = &ban;
        specs[i].req.n_logit_bias = 1;
        specs[i].req.on_event = on_event;
    }
    run_all(e, specs, r, n);
    static uint32_t second[512];
    memset(second, 0, sizeof second);
    uint64_t drafted = 0, accepted = 0;
    for (int i = 0; i < n; i++) {
        assert_int_equal(r[i].status, DI_OK);
        assert_int_equal(r[i].n_toks, 3);
        second[r[i].toks[1]]++;
        drafted += r[i].drafted;
        accepted += r[i].accepted;
    }
    int dof = 0;
    double stat = chi_square(second, p1, (uint32_t)n, &dof);
    printf("draft model, second token: chi-square %.1f, %d degrees of freedom (critical %.1f); "
           "%llu drafts, %llu kept\n",
           stat, dof, chi_square_critical(dof), (unsigned long long)drafted,
           (unsigned long long)accepted);
    assert_true(dof >= 3);
    assert_true(stat < chi_square_critical(dof));
    assert_true(drafted >= (uint64_t)n); /* each request's second token was drafted */
    assert_true(accepted > 0 && accepted < drafted);
    /* the same seeds alone, or batched with other neighbours, give the same
     * tokens */
    for (int i = 0; i < 8; i++) {
        rec alone;
        run_all(e, &specs[i], &alone, 1);
        assert_int_equal(alone.n_toks, r[i].n_toks);
        assert_memory_equal(alone.toks, r[i].toks, sizeof alone.toks[0] * 3);
    }
    rec *again = calloc(200, sizeof *again);
    run_all(e, specs + 101, again, 200 / scale());
    for (int i = 0; i < 200 / scale(); i++)
        assert_memory_equal(again[i].toks, r[101 + i].toks, sizeof again[i].toks[0] * 3);
    free(again);
    free(specs);
    free(r);
    assert_int_equal(di_engine_destroy(e), DI_OK);
}

/* --- DeepSeek-V3's and V4's MTP layers as the drafter (lib/engine/draft_mtp.c) --- */

typedef struct log_rec {
    int mtp;       /* the engine said the MTP module (or the DSpark head) drafts */
    int preempted; /* requests it said it pre-empted */
} log_rec;

static void on_log(void *user, di_log_level level, const char *message)
{
    (void)level;
    if (strstr(message, "MTP module drafts") || strstr(message, "DSpark head drafts"))
        ((log_rec *)user)->mtp = 1;
    if (strstr(message, "pre-empted")) ((log_rec *)user)->preempted++;
}

static di_engine *make_mtp_engine(const char *path, const char *mtp_gguf, int32_t draft,
                                  int n_draft, int fixed, int max_running, int64_t kv_bytes,
                                  log_rec *log)
{
    di_engine_config cfg;
    di_engine_config_init(&cfg);
    cfg.kv_cache_type = kv_type;
    cfg.model_path = path;
    cfg.draft_model_path = mtp_gguf; /* llama.cpp's MTP GGUF of the model, or NULL */
    cfg.n_threads = 2;
    cfg.max_running = max_running;
    cfg.n_batch = 64;
    cfg.kv_cache_bytes = kv_bytes;
    cfg.speculative_tokens = n_draft;
    cfg.speculative_fixed = fixed;
    cfg.draft = draft;
    cfg.log = on_log;
    cfg.log_user = log;
    di_engine *e = NULL;
    di_error *err = NULL;
    if (di_engine_create(&cfg, &e, &err) != DI_OK) fail_msg("%s", di_error_message(err));
    return e;
}

/* Submit every spec, cancelling request i (when cancel_every > 0 and i %
 * cancel_every == 1) after a few polls, then run them all to their end. */
static void run_with_cancels(di_engine *e, spec *specs, rec *recs, int n, int cancel_every)
{
    for (int i = 0; i < n; i++) {
        memset(&recs[i], 0, sizeof recs[i]);
        specs[i].req.user_data = &recs[i];
        di_error *err = NULL;
        if (di_submit(e, &specs[i].req, &recs[i].id, &err) != DI_OK)
            fail_msg("submit %d: %s", i, di_error_message(err));
    }
    for (int k = 0; k < 200000 && di_engine_pending_count(e) > 0; k++) {
        assert_true(di_poll(e, 50) >= 0);
        if (cancel_every > 0 && k == 3)
            for (int i = 1; i < n; i += cancel_every) (void)di_cancel(e, recs[i].id, NULL);
    }
    assert_int_equal(di_engine_pending_count(e), 0);
}

/* Greedy requests (penalties, stop tokens and budgets mixed in) with the MTP
 * module drafting give token for token the engine's output without
 * speculation, batched and pre-empted; requests cancelled mid-way end with a
 * prefix of it. Returns the drafts verified (and their kept count). */
static uint64_t check_mtp_greedy(const char *path, const char *mtp_gguf, int32_t draft, int n,
                                 int max_running, int64_t kv_bytes, int n_draft, int fixed,
                                 int cancel_every, uint64_t *kept)
{
    log_rec log = {0};
    di_engine *plain = make_engine(path, 0, 0, max_running, kv_bytes);
    di_engine *spec_e =
        make_mtp_engine(path, mtp_gguf, draft, n_draft, fixed, max_running, kv_bytes, &log);
    assert_int_equal(log.mtp, 1);
    uint32_t vocab = (uint32_t)di_engine_vocab_size(plain);
    spec *specs = calloc((size_t)n, sizeof *specs);
    rec *a = calloc((size_t)n, sizeof *a), *b = calloc((size_t)n, sizeof *b);
    assert_non_null(specs);
    for (int i = 0; i < n; i++) {
        make_spec(&specs[i], i, vocab);
        specs[i].req.temperature = 0;
    }
    run_all(plain, specs, a, n);
    run_with_cancels(spec_e, specs, b, n, cancel_every);
    uint64_t drafted = 0, accepted = 0;
    int cancelled = 0;
    for (int i = 0; i < n; i++) {
        assert_int_equal(b[i].n_done, 1);
        assert_true(b[i].accepted <= b[i].drafted);
        drafted += b[i].drafted;
        accepted += b[i].accepted;
        if (b[i].status == DI_ERR_CANCELLED) {
            cancelled++;
            assert_true(b[i].n_toks <= a[i].n_toks);
            assert_memory_equal(a[i].toks, b[i].toks, (size_t)b[i].n_toks * sizeof *b[i].toks);
            continue;
        }
        assert_int_equal(b[i].status, DI_OK);
        if (a[i].n_toks != b[i].n_toks || memcmp(a[i].toks, b[i].toks, sizeof a[i].toks) != 0)
            fail_msg("MTP drafting, request %d: %d tokens without speculation, %d with (first "
                     "difference at %d)",
                     i, a[i].n_toks, b[i].n_toks, first_difference(&a[i], &b[i]));
        assert_int_equal(a[i].finish, b[i].finish);
        assert_int_equal(a[i].completion, b[i].completion);
    }
    printf("%s, MTP drafting (%s, %d running, KV budget %lld bytes): %d greedy requests (%d "
           "cancelled), %llu draft tokens verified, %llu kept\n",
           path, fixed ? "every proposal" : "confidence-scheduled", max_running,
           (long long)kv_bytes, n, cancelled, (unsigned long long)drafted,
           (unsigned long long)accepted);
    /* a second round on prefix-cache hits (the MTP sequences then start
     * where the target computes) agrees too */
    run_all(spec_e, specs, b, n);
    for (int i = 0; i < n; i++) {
        assert_int_equal(b[i].status, DI_OK);
        assert_int_equal(a[i].n_toks, b[i].n_toks);
        assert_memory_equal(a[i].toks, b[i].toks, sizeof a[i].toks);
    }
    free(specs);
    free(a);
    free(b);
    assert_int_equal(di_engine_destroy(plain), DI_OK);
    assert_int_equal(di_engine_destroy(spec_e), DI_OK);
    if (kept) *kept = accepted;
    return drafted;
}

/* The MTP drafter on the model at path: greedy requests verifying every
 * proposal (up to 4 chained drafts a step; one in five cancelled), with auto
 * (which must pick it) confidence-scheduled, and under pre-emption (24 blocks
 * of 16 tokens for 8 requests, up to 6 drafts; one in seven cancelled). */
static void check_mtp_lossless(const char *path, const char *mtp_gguf, int n_fixed, int n_auto,
                               int n_preempt)
{
    uint64_t kept = 0;
    uint64_t drafted =
        check_mtp_greedy(path, mtp_gguf, DI_DRAFT_MTP, n_fixed, 8, 0, 4, 1, 5, &kept);
    assert_true(drafted > 0);
    check_mtp_greedy(path, mtp_gguf, DI_DRAFT_AUTO, n_auto, 8, 0, 4, 0, 0, NULL);
    drafted = check_mtp_greedy(path, mtp_gguf, DI_DRAFT_MTP, n_preempt, 8,
                               24 * 16 * kv_bytes_per_token(path), 6, 1, 7, NULL);
    assert_true(drafted > 0);
}

static void test_mtp_lossless_greedy(void **state)
{
    (void)state;
    check_mtp_lossless(DSV3_MTP, NULL, 120 / scale(), 40 / scale(), 40 / scale());
}

/* DeepSeek-V4's MTP layer drafting (its hidden rows the mHC streams; its
 * sequences' window rings cut back as the main caches are): token for token
 * the engine's greedy output, batched, cancelled, under a KV budget that
 * pre-empts, and picked by auto. */
static void test_v4_mtp_lossless_greedy(void **state)
{
    (void)state;
    check_mtp_lossless(DSV4_MTP, NULL, 60 / scale(), 24 / scale(), 24 / scale());
    /* llama.cpp's files: the model's GGUF, and its MTP GGUF as the draft */
    check_mtp_lossless(DSV4_GGUF, DSV4_GGUF_MTP, 24 / scale(), 16 / scale(), 16 / scale());
}

/* DeepSeek-V4's DSpark head drafting blocks (its sequences' keys from the
 * target's features, the block's keys overwritten by the next observation):
 * token for token the engine's greedy output, batched, cancelled, under a KV
 * budget that pre-empts, and picked by auto; from the release folder and from
 * llama.cpp's two GGUFs; DeepSeek-V4.1's from its release folder. */
static void test_dspark_lossless_greedy(void **state)
{
    (void)state;
    check_mtp_lossless(DSV4_DSPARK, NULL, 60 / scale(), 24 / scale(), 24 / scale());
    /* llama.cpp's files: the target's GGUF, and its DSpark GGUF as the draft */
    check_mtp_lossless(DI_FIXTURE_DIR "/model/gguf-dsv4/dsv4-dspark-target.gguf",
                       DI_FIXTURE_DIR "/model/gguf-dsv4/dsv4-dspark.gguf", 24 / scale(),
                       16 / scale(), 16 / scale());
    /* DeepSeek-V4.1's head (its features the target layers' attention input) */
    check_mtp_lossless(DSV41_DSPARK, NULL, 24 / scale(), 16 / scale(), 16 / scale());
}

/* A request at the end of the context cannot fit a DSpark block: it drafts
 * nothing, the others draft as before — a seeded sampling request gives the
 * same tokens beside it as alone (the breakers' reproducer: the whole step's
 * drafting used to stop). */
static void test_dspark_context_edge_keeps_seeded_output(void **state)
{
    (void)state;
    spec specs[2];
    make_spec(&specs[0], 0, 512);
    make_spec(&specs[1], 1, 512);
    for (int k = 0; k < 50; k++) specs[0].prompt[k] = (int32_t)(7 + 13 * k) % 512;
    specs[0].n_prompt = 50;
    specs[0].req.n_tokens = 50;
    specs[0].req.max_tokens = 14; /* greedy, to the context's 64 */
    specs[0].req.temperature = 0;
    specs[1].n_prompt = specs[1].req.n_tokens = 8;
    specs[1].req.max_tokens = 40;
    specs[1].req.temperature = 0.8f;
    specs[1].req.seed = 1001;
    rec both[2], alone;
    for (int round = 0; round < 2; round++) {
        di_engine_config cfg;
        di_engine_config_init(&cfg);
        cfg.model_path = DSV4_DSPARK;
        cfg.n_threads = 2;
        cfg.n_ctx = 64;
        cfg.n_batch = 64;
        cfg.max_running = 8;
        cfg.speculative_tokens = 4;
        cfg.speculative_fixed = 1;
        cfg.draft = DI_DRAFT_MTP;
        di_engine *e = NULL;
        di_error *err = NULL;
        if (di_engine_create(&cfg, &e, &err) != DI_OK) fail_msg("%s", di_error_message(err));
        if (round == 0)
            run_all(e, specs, both, 2);
        else
            run_all(e, &specs[1], &alone, 1);
        assert_int_equal(di_engine_destroy(e), DI_OK);
    }
    assert_int_equal(both[0].status, DI_OK);
    assert_int_equal(both[1].status, DI_OK);
    if (alone.n_toks != both[1].n_toks || memcmp(alone.toks, both[1].toks, sizeof alone.toks))
        fail_msg("seeded request: %d tokens alone, %d beside a request at the context's end "
                 "(first difference at %d)",
                 alone.n_toks, both[1].n_toks, first_difference(&alone, &both[1]));
    assert_true(alone.drafted > 0);
    printf("%s: a seeded request beside one at the context's end: the same %d tokens as alone "
           "(%u drafted, %u kept)\n",
           DSV4_DSPARK, alone.n_toks, alone.drafted, alone.accepted);
}

/* The same with the GGUF's caches in Q8_0 and Q4_0 (the indexer keys' rows of
 * 64 rotated): MTP drafting and prompt lookup give the greedy output,
 * batched, cancelled and pre-empted (the breakers' test). */
static void test_v4_quantized_caches_lossless(void **state)
{
    (void)state;
    static const int32_t types[] = {DI_KV_CACHE_Q8_0, DI_KV_CACHE_Q4_0};
    for (int i = 0; i < 2; i++) {
        kv_type = types[i];
        check_mtp_lossless(DSV4_GGUF, DSV4_GGUF_MTP, 24 / scale(), 16 / scale(), 16 / scale());
        check_lossless(DSV4_GGUF, 16, 8, 0, 8, 1);
        int64_t per_token = kv_bytes_per_token(DSV4_GGUF);
        check_lossless(DSV4_GGUF, 16, 8, 24 * 16 * per_token, 16, 1);
    }
    kv_type = 0;
}

/* Sampling requests with the MTP module's (or the DSpark head's) sampled
 * drafts (q handed to the verifier): every request gets drafts verified, and
 * the same seeds give the same tokens batched 8 at a time and run one at a
 * time — with kv_bytes, the batched engine under a KV budget that pre-empts
 * (the breakers' reproducer: a recomputed request's drafter started over and
 * its next position was a plain draw, so its tokens changed). */
static void check_sampling_deterministic(const char *path, int64_t kv_bytes)
{
    const int n = 32 / scale();
    log_rec log = {0}, log1 = {0};
    di_engine *batched = make_mtp_engine(path, NULL, DI_DRAFT_MTP, 4, 1, 8, kv_bytes, &log);
    di_engine *alone = make_mtp_engine(path, NULL, DI_DRAFT_MTP, 4, 1, 1, 0, &log1);
    uint32_t vocab = (uint32_t)di_engine_vocab_size(batched);
    spec *specs = calloc((size_t)n, sizeof *specs);
    rec *a = calloc((size_t)n, sizeof *a), *b = calloc((size_t)n, sizeof *b);
    assert_non_null(specs);
    for (int i = 0; i < n; i++) {
        make_spec(&specs[i], i, vocab);
        specs[i].req.temperature = 0.6f + 0.1f * (float)(i % 5);
    }
    run_all(batched, specs, a, n);
    run_all(alone, specs, b, n);
    uint64_t drafted = 0, accepted = 0;
    for (int i = 0; i < n; i++) {
        assert_int_equal(a[i].status, DI_OK);
        assert_int_equal(b[i].status, DI_OK);
        if (a[i].n_toks != b[i].n_toks || memcmp(a[i].toks, b[i].toks, sizeof a[i].toks) != 0)
            fail_msg("seed %llu: %d tokens batched, %d alone (first difference at %d)",
                     (unsigned long long)specs[i].req.seed, a[i].n_toks, b[i].n_toks,
                     first_difference(&a[i], &b[i]));
        if (!kv_bytes) { /* (a recompute verifies the drafts it redraws again) */
            assert_int_equal(a[i].drafted, b[i].drafted);
            assert_int_equal(a[i].accepted, b[i].accepted);
        }
        assert_true(a[i].accepted <= a[i].drafted);
        if (a[i].completion > 1) assert_true(a[i].drafted > 0);
        drafted += a[i].drafted;
        accepted += a[i].accepted;
    }
    if (kv_bytes) assert_true(log.preempted > 0);
    printf("%s, sampled drafts: %d requests, the same batched%s and alone, %llu draft tokens "
           "verified, %llu kept\n",
           path, n, kv_bytes ? " (pre-empting)" : "", (unsigned long long)drafted,
           (unsigned long long)accepted);
    free(specs);
    free(a);
    free(b);
    assert_int_equal(di_engine_destroy(batched), DI_OK);
    assert_int_equal(di_engine_destroy(alone), DI_OK);
}

static void test_mtp_sampling_is_deterministic(void **state)
{
    (void)state;
    check_sampling_deterministic(DSV3_MTP, 0);
    check_sampling_deterministic(DSV4_DSPARK, 0);
    /* under pre-emption (12 blocks of 16 tokens for 8 requests) */
    check_sampling_deterministic(DSV4_DSPARK, 12 * 16 * kv_bytes_per_token(DSV4_DSPARK));
    check_sampling_deterministic(DSV41_DSPARK, 12 * 16 * kv_bytes_per_token(DSV41_DSPARK));
    check_sampling_deterministic(DSV4_MTP, 12 * 16 * kv_bytes_per_token(DSV4_MTP));
    check_sampling_deterministic(DSV3_MTP, 12 * 16 * kv_bytes_per_token(DSV3_MTP));
}

static void test_config_errors(void **state)
{
    (void)state;
    di_engine_config cfg;
    di_engine_config_init(&cfg);
    cfg.model_path = TINY;
    di_engine *e = NULL;
    di_error *err = NULL;
    const int32_t bad[] = {-1, 65};
    for (int i = 0; i < 2; i++) {
        cfg.speculative_tokens = bad[i];
        assert_int_equal(di_engine_create(&cfg, &e, &err), DI_ERR_INVALID_ARGUMENT);
        assert_non_null(strstr(di_error_message(err), "speculative_tokens"));
        di_error_free(err);
        err = NULL;
    }
    cfg.speculative_tokens = 2;
    cfg.speculative_fixed = 2;
    assert_int_equal(di_engine_create(&cfg, &e, &err), DI_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(di_error_message(err), "speculative_fixed"));
    di_error_free(err);
    assert_int_equal(di_event_draft_tokens(NULL), 0);
    assert_int_equal(di_event_accepted_draft_tokens(NULL), 0);
}

static void expect_config_error(const di_engine_config *cfg, di_status want, const char *text)
{
    di_engine *e = NULL;
    di_error *err = NULL;
    di_status st = di_engine_create(cfg, &e, &err);
    if (st != want) fail_msg("expected status %d (\"%s\"), got %d", (int)want, text, (int)st);
    if (!strstr(di_error_message(err), text))
        fail_msg("expected \"%s\" in \"%s\"", text, di_error_message(err));
    assert_null(e);
    di_error_free(err);
}

/* The drafter's fields: each bad value or combination is refused, naming
 * the field; a draft model of another vocabulary or tokenizer too. */
static void test_draft_config_errors(void **state)
{
    (void)state;
    di_engine_config cfg;
    di_engine_config_init(&cfg);
    cfg.model_path = TINY;
    cfg.speculative_tokens = 4;
    cfg.draft = 4;
    expect_config_error(&cfg, DI_ERR_INVALID_ARGUMENT, "draft: unknown drafter 4");
    /* the MTP drafter: the model must have an MTP layer, and it takes no
     * draft model */
    cfg.draft = DI_DRAFT_MTP;
    expect_config_error(&cfg, DI_ERR_UNSUPPORTED, "draft: DI_DRAFT_MTP, but the model has no MTP");
    cfg.model_path = DI_FIXTURE_DIR "/model/dsv3-fp8"; /* DeepSeek-V3 without MTP */
    expect_config_error(&cfg, DI_ERR_UNSUPPORTED, "no MTP (NextN) layer");
    cfg.speculative_tokens = 0; /* asked for, even with speculation off */
    expect_config_error(&cfg, DI_ERR_UNSUPPORTED, "no MTP (NextN) layer");
    cfg.speculative_tokens = 4;
    cfg.model_path = DSV3_MTP;
    cfg.draft_model_path = DSV3_MTP; /* not llama.cpp's MTP GGUF */
    expect_config_error(&cfg, DI_ERR_INVALID_ARGUMENT, "is not an MTP or DSpark GGUF");
    cfg.draft_model_path = NULL;
    /* DSpark: a block must fit one step (n_batch), and a DSpark model takes no
     * MTP GGUF; with speculation off a small n_batch loads */
    cfg.model_path = DSV4_DSPARK;
    cfg.n_batch = 3;
    expect_config_error(&cfg, DI_ERR_INVALID_ARGUMENT,
                        "n_batch 3 is below the model's DSpark block");
    cfg.speculative_tokens = 0;
    di_engine *small = NULL;
    assert_int_equal(di_engine_create(&cfg, &small, NULL), DI_OK);
    assert_int_equal(di_engine_destroy(small), DI_OK);
    cfg.speculative_tokens = 4;
    cfg.n_batch = 0;
    cfg.draft_model_path = DSV4_GGUF_MTP;
    expect_config_error(&cfg, DI_ERR_UNSUPPORTED, "has a DSpark head, whose stages take");
    cfg.draft_model_path = NULL;
    cfg.model_path = TINY;
    cfg.draft = -1;
    expect_config_error(&cfg, DI_ERR_INVALID_ARGUMENT, "draft: unknown drafter -1");
    cfg.draft = DI_DRAFT_AUTO;
    cfg.reserved_draft = 1;
    expect_config_error(&cfg, DI_ERR_INVALID_ARGUMENT, "reserved_draft: must be 0");
    cfg.reserved_draft = 0;
    cfg.kv_cache_type = 9;
    expect_config_error(&cfg, DI_ERR_INVALID_ARGUMENT, "kv_cache_type: unknown type 9");
    cfg.kv_cache_type = DI_KV_CACHE_F16;
    cfg.reserved_kv = 1;
    expect_config_error(&cfg, DI_ERR_INVALID_ARGUMENT, "reserved_kv: must be 0");
    cfg.reserved_kv = 0;
    cfg.draft_model_path = "";
    expect_config_error(&cfg, DI_ERR_INVALID_ARGUMENT, "draft_model_path: expected a model");
    cfg.draft_model_path = NULL;
    cfg.draft = DI_DRAFT_MODEL;
    expect_config_error(&cfg, DI_ERR_INVALID_ARGUMENT,
                        "draft: DI_DRAFT_MODEL needs draft_model_path");
    cfg.draft = DI_DRAFT_PROMPT_LOOKUP;
    cfg.draft_model_path = TINY;
    expect_config_error(&cfg, DI_ERR_INVALID_ARGUMENT,
                        "draft_model_path: set, but draft is DI_DRAFT_PROMPT_LOOKUP");
    cfg.draft = DI_DRAFT_AUTO;
    cfg.speculative_tokens = 0;
    expect_config_error(&cfg, DI_ERR_INVALID_ARGUMENT,
                        "draft_model_path: set, but speculative_tokens is 0");
    cfg.speculative_tokens = 4;
    cfg.draft_model_path = DI_FIXTURE_DIR "/model/no-such-model";
    di_engine *e = NULL;
    di_error *err = NULL;
    assert_int_not_equal(di_engine_create(&cfg, &e, &err), DI_OK);
    assert_non_null(strstr(di_error_message(err), "draft_model_path: "));
    di_error_free(err);
    /* DI_DRAFT_AUTO with a draft model: it drafts */
    cfg.draft_model_path = TINY;
    err = NULL;
    assert_int_equal(di_engine_create(&cfg, &e, &err), DI_OK);
    assert_int_equal(di_engine_destroy(e), DI_OK);
    if (access(SMOL, R_OK) != 0) return;
    /* another vocabulary */
    cfg.draft_model_path = SMOL;
    expect_config_error(&cfg, DI_ERR_INVALID_ARGUMENT,
                        "draft_model_path: the draft model's vocabulary has 49152 tokens, the "
                        "model's 512");
    /* the same size, another token: SmolLM2 with <|im_start|> spelled
     * <|im_stArt|> (an added token: no merge makes it) */
    FILE *f = fopen(SMOL, "rb");
    assert_non_null(f);
    assert_int_equal(fseek(f, 0, SEEK_END), 0);
    long size = ftell(f);
    rewind(f);
    unsigned char *buf = malloc((size_t)size);
    assert_non_null(buf);
    assert_int_equal(fread(buf, 1, (size_t)size, f), (size_t)size);
    fclose(f);
    const char tok[] = "\x0c\0\0\0\0\0\0\0<|im_start|>";
    unsigned char *at = memmem(buf, (size_t)size, tok, sizeof tok - 1);
    assert_non_null(at);
    at[8 + 7] = 'A';
    char path[] = "/tmp/di_draft_tokXXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, buf, (size_t)size), size);
    close(fd);
    free(buf);
    cfg.model_path = SMOL;
    cfg.draft_model_path = path;
    expect_config_error(&cfg, DI_ERR_INVALID_ARGUMENT,
                        "draft_model_path: token 1 is \"<|im_stArt|>\" in the draft model's "
                        "tokenizer and \"<|im_start|>\" in the model's");
    /* a vocabulary that does not load is an error, not skipped: a merge
     * whose token is missing (" Paris" spelled " PARIS") */
    f = fopen(path, "r+b");
    assert_non_null(f);
    const unsigned char paris[] = {7, 0, 0, 0, 0, 0, 0, 0, 0xc4, 0xa0, 'P', 'a', 'r', 'i', 's'};
    buf = malloc((size_t)size);
    assert_non_null(buf);
    assert_int_equal(fread(buf, 1, (size_t)size, f), (size_t)size);
    at = memmem(buf, (size_t)size, paris, sizeof paris);
    assert_non_null(at);
    at[11] = 'A'; /* "ĠPAris" */
    at = memmem(buf, (size_t)size, "<|im_stArt|>", 12);
    assert_non_null(at);
    at[7] = 'a'; /* the added token back */
    rewind(f);
    assert_int_equal(fwrite(buf, 1, (size_t)size, f), (size_t)size);
    fclose(f);
    free(buf);
    expect_config_error(&cfg, DI_ERR_MODEL_FORMAT, "draft_model_path: its tokenizer: ");
    unlink(path);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_prompt_lookup),
        cmocka_unit_test(test_prompt_lookup_drafter),
        cmocka_unit_test(test_prompt_lookup_follows_the_longest_match),
        cmocka_unit_test(test_confidence_scheduled_allocation),
        cmocka_unit_test(test_draft_gains_follow_measured_acceptance),
        cmocka_unit_test(test_speculative_sampling_matches_target),
        cmocka_unit_test(test_point_mass_draft_is_the_plain_draw),
        cmocka_unit_test(test_lossless_tiny),
        cmocka_unit_test(test_drafts_beyond_the_step_are_capped),
        cmocka_unit_test(test_lossless_under_preemption),
        cmocka_unit_test(test_lossless_deepseek_v4),
        cmocka_unit_test(test_lossless_smollm2),
        cmocka_unit_test(test_draft_model_greedy_tiny),
        cmocka_unit_test(test_draft_model_greedy_smollm2),
        cmocka_unit_test(test_draft_model_sampling_matches_target),
        cmocka_unit_test(test_mtp_lossless_greedy),
        cmocka_unit_test(test_v4_mtp_lossless_greedy),
        cmocka_unit_test(test_dspark_lossless_greedy),
        cmocka_unit_test(test_dspark_context_edge_keeps_seeded_output),
        cmocka_unit_test(test_v4_quantized_caches_lossless),
        cmocka_unit_test(test_mtp_sampling_is_deterministic),
        cmocka_unit_test(test_config_errors),
        cmocka_unit_test(test_draft_config_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
