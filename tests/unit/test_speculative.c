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

#include "deepinfer/deepinfer.h"
#include "engine/draft.h"

#define TINY DI_FIXTURE_DIR "/model/qwen2-tied-f16"
#define SMOL DI_ASSET_DIR "/smollm2-135m-instruct/SmolLM2-135M-Instruct.Q4_1.gguf"

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

static di_engine *make_engine(const char *path, int n_draft, int fixed, int max_running,
                              int64_t kv_bytes)
{
    di_engine_config cfg;
    di_engine_config_init(&cfg);
    cfg.model_path = path;
    cfg.n_threads = 2;
    cfg.max_running = max_running;
    cfg.n_batch = 64;
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

static void test_lossless_smollm2(void **state)
{
    (void)state;
    if (access(SMOL, R_OK) != 0) skip();
    check_lossless(SMOL, 16 / scale(), 8, 0, 5, 1);
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_prompt_lookup),
        cmocka_unit_test(test_prompt_lookup_drafter),
        cmocka_unit_test(test_confidence_scheduled_allocation),
        cmocka_unit_test(test_lossless_tiny),
        cmocka_unit_test(test_lossless_under_preemption),
        cmocka_unit_test(test_lossless_smollm2),
        cmocka_unit_test(test_config_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
