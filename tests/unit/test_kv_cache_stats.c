/* di_engine_kv_cache_stats on SmolLM2-135M (the real model, as a host runs it):
 * the counts against ones worked out independently — a request of n tokens holds
 * ceil(n / 16) blocks, its full blocks stay in the prefix cache after it ends,
 * a prompt that starts with them finds floor((n - 1) / 16) of them, a budget of
 * 8 blocks evicts what does not fit — and the struct's invariants read from
 * another thread while requests run and are cancelled. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "deepinfer/deepinfer.h"

#define SMOL DI_ASSET_DIR "/smollm2-135m-instruct/SmolLM2-135M-Instruct.Q4_1.gguf"

/* SmolLM2-135M's KV cache entry of one token, from its config.json
 * (num_hidden_layers 30, num_key_value_heads 3, head_dim 576 / 9 = 64): keys
 * and values, f16 — 2 * 30 * 3 * 64 * 2 bytes. */
enum { SMOL_KV_BYTES_PER_TOKEN = 2 * 30 * 3 * 64 * 2, BLOCK = 16 };

static int64_t ceil_div(int64_t a, int64_t b)
{
    return (a + b - 1) / b;
}

static di_engine *make_engine(int64_t kv_blocks, int disable_prefix_cache)
{
    di_engine_config cfg;
    di_engine_config_init(&cfg);
    cfg.model_path = SMOL;
    cfg.n_threads = 2;
    /* a part of a block more, rounded away */
    cfg.kv_cache_bytes = kv_blocks ? kv_blocks * BLOCK * SMOL_KV_BYTES_PER_TOKEN + 1000 : 0;
    cfg.disable_prefix_cache = disable_prefix_cache;
    di_engine *e = NULL;
    di_error *err = NULL;
    if (di_engine_create(&cfg, &e, &err) != DI_OK)
        fail_msg("di_engine_create: %s", di_error_message(err));
    return e;
}

static di_kv_cache_stats stats_of(const di_engine *e)
{
    di_kv_cache_stats k;
    di_kv_cache_stats_init(&k);
    di_error *err = NULL;
    if (di_engine_kv_cache_stats(e, &k, &err) != DI_OK)
        fail_msg("di_engine_kv_cache_stats: %s", di_error_message(err));
    assert_int_equal(k.block_tokens, BLOCK);
    assert_int_equal(k.blocks_used + k.blocks_cached + k.blocks_free, k.blocks_total);
    assert_true(k.blocks_used >= 0 && k.blocks_cached >= 0 && k.blocks_free >= 0);
    return k;
}

/* One token request's view: the stats read in each of its callbacks. */
typedef struct watch {
    di_engine *e;
    int64_t n_prompt, max_tokens;
    int64_t n_out;          /* tokens seen so far */
    int seen_running;       /* callbacks whose stats showed the request running */
    di_kv_cache_stats done; /* read in the DONE callback */
    uint32_t cache_hit_tokens;
    di_status status;
    int n_done;
} watch;

static void on_event(void *user, const di_event *ev)
{
    watch *w = user;
    if (di_event_kind_of(ev) == DI_EVENT_TOKENS) {
        size_t n;
        (void)di_event_tokens(ev, &n);
        w->n_out += (int64_t)n;
        di_kv_cache_stats k = stats_of(w->e);
        if (k.running_requests == 0) return; /* the worker ended it already */
        assert_int_equal(k.running_requests, 1);
        /* The step that produced token n_out held n_prompt + n_out - 1 tokens
         * (the newest token's own keys come with the next step); later steps
         * more, up to the last token's step. */
        assert_in_range(k.tokens_used, w->n_prompt + w->n_out - 1, w->n_prompt + w->max_tokens - 1);
        assert_int_equal(k.blocks_used, ceil_div(k.tokens_used, BLOCK));
        w->seen_running++;
    } else if (di_event_kind_of(ev) == DI_EVENT_DONE) {
        w->done = stats_of(w->e);
        w->cache_hit_tokens = di_event_prompt_cache_hit_tokens(ev);
        w->status = di_event_status(ev);
        w->n_done++;
    }
}

static void run(di_engine *e, watch *w, const int32_t *prompt, int64_t n_prompt, int64_t max_tokens)
{
    memset(w, 0, sizeof *w);
    w->e = e;
    w->n_prompt = n_prompt;
    w->max_tokens = max_tokens;
    di_request q;
    di_request_init(&q);
    q.tokens = prompt;
    q.n_tokens = (size_t)n_prompt;
    q.max_tokens = max_tokens;
    q.ignore_eos = 1;
    q.temperature = 0;
    q.on_event = on_event;
    q.user_data = w;
    uint64_t id;
    di_error *err = NULL;
    if (di_submit(e, &q, &id, &err) != DI_OK) fail_msg("di_submit: %s", di_error_message(err));
    while (di_engine_pending(e) > 0) assert_true(di_poll(e, 1000) >= 0);
    assert_int_equal(w->n_done, 1);
    assert_int_equal(w->status, DI_OK);
    assert_int_equal(w->n_out, max_tokens);
}

static void prompt_of(int32_t *p, int64_t n, int32_t first)
{
    for (int64_t i = 0; i < n; i++) p[i] = first + (int32_t)(i * 37 % 4000);
}

static void test_counts_follow_a_request_and_its_prefix_blocks(void **state)
{
    (void)state;
    if (access(SMOL, R_OK) != 0) skip();
    di_engine *e = make_engine(0, 0);
    di_kv_cache_stats k = stats_of(e);
    /* default budget: room for 4 sequences of the context (SmolLM2: 2048 here,
     * its training context) */
    assert_int_equal(k.blocks_total, 4 * ceil_div(di_engine_context_length(e), BLOCK));
    assert_int_equal(k.blocks_free, k.blocks_total);
    assert_int_equal(k.tokens_used + k.running_requests + k.prefix_cache_queries_total +
                         k.prefix_cache_hits_total + k.blocks_evicted_total,
                     0);

    enum { N = 33, M = 24 };
    int32_t prompt[N];
    prompt_of(prompt, N, 1000);
    watch w;
    run(e, &w, prompt, N, M);
    assert_true(w.seen_running > 0);
    /* Ended: nothing held; the KV it computed (N + M - 1 tokens) stays as its
     * full blocks, for later prompts. */
    assert_int_equal(w.done.running_requests, 0);
    assert_int_equal(w.done.blocks_used, 0);
    assert_int_equal(w.done.tokens_used, 0);
    assert_int_equal(w.done.blocks_cached, (N + M - 1) / BLOCK);
    assert_int_equal(w.done.prefix_cache_queries_total, N);
    assert_int_equal(w.done.prefix_cache_hits_total, 0);

    /* The same prompt again: its leading full blocks before the last token
     * (which is always computed) are found. */
    run(e, &w, prompt, N, 1);
    assert_int_equal(w.cache_hit_tokens, (N - 1) / BLOCK * BLOCK);
    assert_int_equal(w.done.prefix_cache_queries_total, 2 * N);
    assert_int_equal(w.done.prefix_cache_hits_total, (N - 1) / BLOCK * BLOCK);
    assert_int_equal(w.done.blocks_used, 0);
    assert_int_equal(w.done.blocks_cached, (N + M - 1) / BLOCK);
    assert_int_equal(w.done.blocks_evicted_total, 0);
    assert_int_equal(di_engine_destroy(e), DI_OK);
}

static void test_a_small_budget_evicts_the_cached_blocks_it_needs(void **state)
{
    (void)state;
    if (access(SMOL, R_OK) != 0) skip();
    enum { TOTAL = 8, NA = 33, MA = 24, NB = 80, MB = 2 };
    di_engine *e = make_engine(TOTAL, 0);
    assert_int_equal(stats_of(e).blocks_total, TOTAL);
    int32_t a[NA], b[NB];
    prompt_of(a, NA, 1000);
    prompt_of(b, NB, 3000);
    watch w;
    run(e, &w, a, NA, MA);
    const int64_t cached_a = (NA + MA - 1) / BLOCK;
    assert_int_equal(w.done.blocks_cached, cached_a);
    /* B holds ceil((NB + MB - 1) / 16) blocks at its last step: the free ones
     * first, then cached ones of A's, evicted. */
    run(e, &w, b, NB, MB);
    const int64_t evicted = ceil_div(NB + MB - 1, BLOCK) - (TOTAL - cached_a);
    assert_int_equal(w.done.blocks_evicted_total, evicted);
    assert_int_equal(w.done.blocks_cached, cached_a - evicted + (NB + MB - 1) / BLOCK);
    assert_int_equal(w.done.blocks_free, TOTAL - w.done.blocks_cached);
    assert_int_equal(w.done.prefix_cache_hits_total, 0);
    assert_int_equal(di_engine_destroy(e), DI_OK);
}

static void test_without_the_prefix_cache_nothing_is_cached_or_looked_up(void **state)
{
    (void)state;
    if (access(SMOL, R_OK) != 0) skip();
    di_engine *e = make_engine(0, 1);
    enum { N = 40, M = 9 };
    int32_t prompt[N];
    prompt_of(prompt, N, 500);
    watch w;
    run(e, &w, prompt, N, M);
    run(e, &w, prompt, N, M);
    assert_true(w.seen_running > 0);
    assert_int_equal(w.cache_hit_tokens, 0);
    assert_int_equal(w.done.blocks_used + w.done.blocks_cached + w.done.tokens_used, 0);
    assert_int_equal(w.done.prefix_cache_queries_total + w.done.prefix_cache_hits_total, 0);
    assert_int_equal(w.done.blocks_free, w.done.blocks_total);
    assert_int_equal(di_engine_destroy(e), DI_OK);
}

/* ---- read from another thread while requests run ---- */

typedef struct reader {
    di_engine *e;
    atomic_int stop; /* set by the test's thread, read by the reader */
    long reads;
    int64_t max_running_seen;
    const char *bad; /* the first broken invariant (cmocka asserts on this thread only) */
    di_kv_cache_stats bad_stats;
} reader;

/* What must hold of any snapshot: the states partition the blocks; each
 * running request holds ceil(its tokens / 16) blocks, so at least one, and
 * sharing a prefix only lowers the sum; the counters only grow. NULL or why not. */
static const char *broken(const di_kv_cache_stats *k, const di_kv_cache_stats *last)
{
    if (k->blocks_used + k->blocks_cached + k->blocks_free != k->blocks_total)
        return "used + cached + free != total";
    if (k->blocks_used < k->running_requests) return "a running request holds no block";
    if (k->blocks_used * BLOCK > k->tokens_used + (BLOCK - 1) * k->running_requests)
        return "more blocks than the requests' tokens need";
    if (k->running_requests == 0 && (k->blocks_used || k->tokens_used))
        return "blocks or tokens used with nothing running";
    if (k->prefix_cache_hits_total > k->prefix_cache_queries_total) return "more hits than queries";
    if (k->prefix_cache_queries_total < last->prefix_cache_queries_total ||
        k->prefix_cache_hits_total < last->prefix_cache_hits_total ||
        k->blocks_evicted_total < last->blocks_evicted_total)
        return "a counter went down";
    return NULL;
}

static void *read_loop(void *arg)
{
    reader *r = arg;
    di_kv_cache_stats last;
    di_kv_cache_stats_init(&last);
    while (!atomic_load(&r->stop) && !r->bad) {
        di_kv_cache_stats k;
        di_kv_cache_stats_init(&k);
        if (di_engine_kv_cache_stats(r->e, &k, NULL) != DI_OK) {
            r->bad = "di_engine_kv_cache_stats failed";
            break;
        }
        if ((r->bad = broken(&k, &last)) != NULL) r->bad_stats = k;
        if (k.running_requests > r->max_running_seen) r->max_running_seen = k.running_requests;
        last = k;
        r->reads++;
        nanosleep(&(struct timespec){0, 200000}, NULL); /* a core of two is the worker's */
    }
    return NULL;
}

static void on_count(void *user, const di_event *ev)
{
    if (di_event_kind_of(ev) == DI_EVENT_DONE) (*(int *)user)++;
}

static void test_readers_on_another_thread_see_consistent_counts(void **state)
{
    (void)state;
    if (access(SMOL, R_OK) != 0) skip();
    di_engine *e = make_engine(24, 0); /* tight: pre-emption and eviction happen */
    reader rd = {.e = e};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, read_loop, &rd), 0);
    enum { N_REQ = 6 };
    int32_t prompts[N_REQ][48];
    uint64_t ids[N_REQ];
    int done = 0;
    for (int i = 0; i < N_REQ; i++) {
        /* requests 0-2 share a 32-token prefix */
        prompt_of(prompts[i], 48, i < 3 ? 100 : 100 + 977 * i);
        for (int j = 32; j < 48; j++) prompts[i][j] = 2000 + 31 * i + j;
        di_request q;
        di_request_init(&q);
        q.tokens = prompts[i];
        q.n_tokens = 48;
        q.max_tokens = 20 + 10 * i;
        q.ignore_eos = 1;
        q.temperature = 0;
        q.on_event = on_count;
        q.user_data = &done;
        assert_int_equal(di_submit(e, &q, &ids[i], NULL), DI_OK);
    }
    (void)di_poll(e, 100);
    di_status st = di_cancel(e, ids[N_REQ - 1], NULL);
    assert_true(st == DI_OK || st == DI_ERR_INVALID_STATE);
    while (di_engine_pending(e) > 0) assert_true(di_poll(e, 1000) >= 0);
    atomic_store(&rd.stop, 1);
    assert_int_equal(pthread_join(t, NULL), 0);
    if (rd.bad)
        fail_msg("%s: used %lld cached %lld free %lld total %lld tokens %lld running %lld", rd.bad,
                 (long long)rd.bad_stats.blocks_used, (long long)rd.bad_stats.blocks_cached,
                 (long long)rd.bad_stats.blocks_free, (long long)rd.bad_stats.blocks_total,
                 (long long)rd.bad_stats.tokens_used, (long long)rd.bad_stats.running_requests);
    assert_int_equal(done, N_REQ);
    assert_true(rd.reads > 0);
    assert_true(rd.max_running_seen >= 1);
    di_kv_cache_stats k = stats_of(e);
    assert_int_equal(k.running_requests + k.blocks_used + k.tokens_used, 0);
    assert_true(k.prefix_cache_queries_total >=
                N_REQ * 48 - 48); /* the cancelled one may not start */
    assert_int_equal(di_engine_destroy(e), DI_OK);
}

/* ---- the struct and bad arguments ---- */

/* A host built against a later header: one more field, which this library does
 * not know and leaves as the host set it. */
typedef struct stats_v2 {
    di_kv_cache_stats v1;
    int64_t later_field;
} stats_v2;

static void test_struct_size_and_bad_arguments(void **state)
{
    (void)state;
    if (access(SMOL, R_OK) != 0) skip();
    di_engine *e = make_engine(0, 0);
    di_kv_cache_stats k;
    di_kv_cache_stats_init(&k);
    assert_int_equal(k.struct_size, sizeof k);
    assert_int_equal(k.blocks_total, 0);
    di_kv_cache_stats_init_size(NULL, sizeof k); /* a no-op */
    (di_kv_cache_stats_init)(NULL);              /* so is the exported function */

    di_error *err = NULL;
    assert_int_equal(di_engine_kv_cache_stats(NULL, &k, &err), DI_ERR_INVALID_ARGUMENT);
    assert_string_equal(di_error_message(err), "engine: NULL");
    di_error_free(err);
    err = NULL;
    assert_int_equal(di_engine_kv_cache_stats(e, NULL, &err), DI_ERR_INVALID_ARGUMENT);
    assert_string_equal(di_error_message(err), "stats: NULL");
    di_error_free(err);
    err = NULL;
    /* an uninitialised struct_size: refused, nothing written */
    memset(&k, 0, sizeof k);
    k.struct_size = sizeof(size_t) + 8;
    k.blocks_used = -7;
    assert_int_equal(di_engine_kv_cache_stats(e, &k, &err), DI_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(di_error_message(err), "stats->struct_size: 16 is smaller"));
    assert_int_equal(k.blocks_used, -7);
    di_error_free(err);
    assert_int_equal(di_engine_kv_cache_stats(e, &k, NULL), DI_ERR_INVALID_ARGUMENT);

    stats_v2 v2;
    memset(&v2, 0, sizeof v2);
    v2.v1.struct_size = sizeof v2;
    v2.later_field = 12345;
    assert_int_equal(di_engine_kv_cache_stats(e, &v2.v1, NULL), DI_OK);
    assert_int_equal(v2.v1.struct_size, sizeof v2);
    assert_int_equal(v2.later_field, 12345);
    assert_int_equal(v2.v1.block_tokens, BLOCK);
    assert_true(v2.v1.blocks_total > 0);
    assert_int_equal(v2.v1.blocks_free, v2.v1.blocks_total);
    assert_int_equal(di_engine_destroy(e), DI_OK);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_counts_follow_a_request_and_its_prefix_blocks),
        cmocka_unit_test(test_a_small_budget_evicts_the_cached_blocks_it_needs),
        cmocka_unit_test(test_without_the_prefix_cache_nothing_is_cached_or_looked_up),
        cmocka_unit_test(test_readers_on_another_thread_see_consistent_counts),
        cmocka_unit_test(test_struct_size_and_bad_arguments),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
