/* The prefix cache (model/kv_pool.h, the scheduler's admission):
 *   - the block manager against a reference model of what each block holds:
 *     a matched block always holds the tokens asked for, reference counts and
 *     the free count always agree with the block tables;
 *   - a hit gives logits bit-identical to a cold prefill (dense GQA cache and
 *     DeepSeek-V3's latent cache), the oracle being the same model with
 *     nothing cached;
 *   - through the engine: randomized requests sharing prefixes, concurrent,
 *     under a KV budget that forces evictions and pre-emption, with cancels,
 *     give the tokens an engine without the cache gives, and report hits;
 *   - the usage every protocol reports (SmolLM2). */
#include <jansson.h>
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
#include "model/kv_pool.h"
#include "model/model.h"

#define TINY DI_FIXTURE_DIR "/model/qwen2-tied-f16"
#define DSV3 DI_FIXTURE_DIR "/model/dsv3-qlora-bf16"
#define SMOL DI_ASSET_DIR "/smollm2-135m-instruct/SmolLM2-135M-Instruct.Q4_1.gguf"

enum { B = MODEL_KV_BLOCK };

/* Under the sanitizers (ten times slower) the randomized engine runs are a
 * fifth as long; the plain build runs them whole. */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
enum { RUN_SCALE = 5 };
#else
enum { RUN_SCALE = 1 };
#endif

static uint32_t xs(uint32_t *x)
{
    *x ^= *x << 13;
    *x ^= *x >> 17;
    *x ^= *x << 5;
    return *x;
}

/* ---- the block manager against a reference ---- */

enum { POOL_BLOCKS = 12, N_SEQ = 4, SEQ_MAX = 96, ALPHABET = 3, N_DOCS = 3 };

typedef struct ref_seq {
    backend_kv_seq s;
    int32_t toks[SEQ_MAX];
    int64_t n; /* tokens written (computed) */
} ref_seq;

/* What the test wrote into each block, and whether it is meaningful. */
static int32_t written[POOL_BLOCKS][B];

static void check_pool(const kv_pool *p, ref_seq *seqs)
{
    int32_t refs[POOL_BLOCKS] = {0};
    int held = 0;
    for (int i = 0; i < N_SEQ; i++)
        for (int32_t k = 0; k < seqs[i].s.n_blocks; k++) refs[seqs[i].s.block_table[k]]++;
    for (int b = 0; b < POOL_BLOCKS; b++) {
        assert_int_equal(refs[b], p->ref[b]);
        held += refs[b] > 0;
    }
    assert_int_equal(kv_pool_available(p), POOL_BLOCKS - held);
    assert_true(kv_pool_cached(p) <= kv_pool_available(p));
}

static void test_pool_matches_only_what_was_written(void **state)
{
    (void)state;
    kv_pool p;
    assert_int_equal(kv_pool_init(&p, POOL_BLOCKS, 42), DI_OK);
    ref_seq seqs[N_SEQ];
    for (int i = 0; i < N_SEQ; i++) {
        assert_int_equal(kv_pool_seq_init(&p, &seqs[i].s, SEQ_MAX), DI_OK);
        seqs[i].n = 0;
    }
    uint32_t x = 12345;
    int32_t docs[N_DOCS][SEQ_MAX];
    for (int d = 0; d < N_DOCS; d++)
        for (int t = 0; t < SEQ_MAX; t++) docs[d][t] = (int32_t)(xs(&x) % ALPHABET);
    int64_t matched_total = 0, n_match_calls = 0;
    for (int op = 0; op < 20000; op++) {
        ref_seq *q = &seqs[xs(&x) % N_SEQ];
        uint32_t what = xs(&x) % 8;
        if (what == 0) { /* release */
            kv_pool_seq_reset(&p, &q->s);
            q->n = 0;
        } else if (what == 1 && q->n == 0) {
            /* a new request: one of a few documents up to a random point, then
             * its own tokens, so prefixes repeat and diverge inside blocks */
            int64_t want = 1 + xs(&x) % SEQ_MAX, same = xs(&x) % (uint32_t)(want + 1);
            const int32_t *doc = docs[xs(&x) % N_DOCS];
            for (int64_t t = 0; t < want; t++)
                q->toks[t] = t < same ? doc[t] : (int32_t)(xs(&x) % ALPHABET);
            int32_t n_cached_blocks;
            int64_t probe = kv_pool_probe(&p, q->toks, want, &n_cached_blocks);
            int64_t got = kv_pool_seq_match(&p, &q->s, q->toks, want);
            assert_int_equal(got, probe);
            assert_int_equal(got % B, 0);
            assert_true(got <= want);
            assert_int_equal(q->s.n_tokens, got);
            n_match_calls++;
            matched_total += got;
            /* every matched block holds exactly these tokens */
            for (int64_t k = 0; k < got / B; k++)
                assert_memory_equal(written[q->s.block_table[k]], q->toks + k * B, B * 4);
            q->n = got;
            /* compute the rest, as far as the pool has room, then publish */
            int64_t end = got + (int64_t)(xs(&x) % (uint32_t)(want - got + 1));
            if (kv_pool_seq_reserve(&p, &q->s, end) == DI_OK) {
                for (int64_t t = got; t < end; t++)
                    written[q->s.block_table[t / B]][t % B] = q->toks[t];
                q->s.n_tokens = q->n = end;
                kv_pool_seq_publish(&p, &q->s, q->toks);
            }
        } else if (what >= 2 && q->n > 0 && q->n < SEQ_MAX) { /* grow by a few tokens */
            int64_t end = q->n + 1 + xs(&x) % 20;
            if (end > SEQ_MAX) end = SEQ_MAX;
            di_status st = kv_pool_seq_reserve(&p, &q->s, end);
            if (st == DI_OK) {
                for (int64_t t = q->n; t < end; t++) {
                    q->toks[t] = (int32_t)(xs(&x) % ALPHABET);
                    written[q->s.block_table[t / B]][t % B] = q->toks[t];
                }
                q->s.n_tokens = q->n = end;
                kv_pool_seq_publish(&p, &q->s, q->toks);
            } else {
                assert_int_equal(st, DI_ERR_OUT_OF_MEMORY);
            }
        }
        check_pool(&p, seqs);
    }
    /* the workload must have exercised hits and evictions */
    assert_true(matched_total > 100 * B);
    assert_true(p.n_evicted > 100);
    assert_int_equal(kv_pool_seq_reserve(&p, &seqs[0].s, SEQ_MAX + 1), DI_ERR_CONTEXT_LENGTH);
    for (int i = 0; i < N_SEQ; i++) kv_pool_seq_free(&p, &seqs[i].s);
    assert_int_equal(kv_pool_available(&p), POOL_BLOCKS);
    kv_pool_free(&p);
    assert_true(n_match_calls > 1000);
}

/* Eviction order: the block released longest ago goes first, and a prefix's
 * deepest block before its first one. */
static void test_pool_evicts_least_recently_released(void **state)
{
    (void)state;
    kv_pool p;
    assert_int_equal(kv_pool_init(&p, 4, 7), DI_OK);
    int32_t a[2 * B], c[2 * B];
    for (int i = 0; i < 2 * B; i++) {
        a[i] = i;
        c[i] = 1000 + i;
    }
    backend_kv_seq s;
    assert_int_equal(kv_pool_seq_init(&p, &s, 4 * B), DI_OK);
    assert_int_equal(kv_pool_seq_reserve(&p, &s, 2 * B), DI_OK);
    s.n_tokens = 2 * B;
    kv_pool_seq_publish(&p, &s, a);
    kv_pool_seq_reset(&p, &s); /* a's two blocks cached */
    assert_int_equal(kv_pool_cached(&p), 2);
    assert_int_equal(kv_pool_seq_reserve(&p, &s, 2 * B), DI_OK);
    s.n_tokens = 2 * B;
    kv_pool_seq_publish(&p, &s, c);
    kv_pool_seq_reset(&p, &s); /* c's too, released after a's */
    assert_int_equal(kv_pool_cached(&p), 4);
    assert_int_equal(kv_pool_probe(&p, a, 2 * B, NULL), 2 * B);
    /* one block needed: a's second (deepest, released first of a's) goes */
    assert_int_equal(kv_pool_seq_reserve(&p, &s, 1), DI_OK);
    assert_int_equal(p.n_evicted, 1);
    assert_int_equal(kv_pool_probe(&p, a, 2 * B, NULL), B);
    assert_int_equal(kv_pool_probe(&p, c, 2 * B, NULL), 2 * B);
    /* a match takes cached blocks out of the eviction order */
    backend_kv_seq t;
    assert_int_equal(kv_pool_seq_init(&p, &t, 4 * B), DI_OK);
    int32_t n_cached;
    assert_int_equal(kv_pool_probe(&p, c, 2 * B, &n_cached), 2 * B);
    assert_int_equal(n_cached, 2);
    assert_int_equal(kv_pool_seq_match(&p, &t, c, 2 * B), 2 * B);
    assert_int_equal(kv_pool_cached(&p), 1);
    assert_int_equal(kv_pool_seq_reserve(&p, &s, 2 * B), DI_OK); /* evicts a's first */
    assert_int_equal(kv_pool_probe(&p, a, 2 * B, NULL), 0);
    assert_int_equal(kv_pool_seq_reserve(&p, &s, 3 * B), DI_ERR_OUT_OF_MEMORY);
    kv_pool_seq_free(&p, &s);
    kv_pool_seq_free(&p, &t);
    kv_pool_free(&p);
    /* another fingerprint (model or cache dtype) matches nothing */
    kv_pool q, r;
    assert_int_equal(kv_pool_init(&q, 4, 8), DI_OK);
    assert_int_equal(kv_pool_init(&r, 4, 9), DI_OK);
    backend_kv_seq u;
    assert_int_equal(kv_pool_seq_init(&q, &u, 4 * B), DI_OK);
    assert_int_equal(kv_pool_seq_reserve(&q, &u, 2 * B), DI_OK);
    u.n_tokens = 2 * B;
    kv_pool_seq_publish(&q, &u, c);
    assert_int_equal(kv_pool_probe(&q, c, 2 * B, NULL), 2 * B);
    assert_int_equal(kv_pool_probe(&r, c, 2 * B, NULL), 0);
    kv_pool_seq_free(&q, &u);
    kv_pool_free(&q);
    kv_pool_free(&r);
    assert_int_equal(kv_pool_init(&q, 0, 8), DI_ERR_INVALID_ARGUMENT);
}

/* ---- a hit is bit-identical to a cold prefill ---- */

static model *load(const char *dir, int n_threads)
{
    model_options o = {0};
    o.n_threads = n_threads;
    o.kv_dtype = MODEL_DTYPE_F16;
    o.n_batch = 64;
    o.kv_n_ctx_multiple = 4;
    model *m = NULL;
    di_error *err = NULL;
    if (model_load(dir, &o, &m, &err) != DI_OK) fail_msg("%s", di_error_message(err));
    return m;
}

/* Prefill tokens[hit, n) of a sequence that matched hit tokens, in chunks of
 * `chunk`, publishing after each step; the last token's logits into out. */
static void prefill(model *m, model_seq *s, const int32_t *tokens, int64_t n, int64_t chunk,
                    float *out)
{
    for (int64_t past = model_seq_n_past(s); past < n;) {
        int64_t take = n - past < chunk ? n - past : chunk;
        assert_int_equal(model_seq_reserve(m, s, past + take), DI_OK);
        model_batch_item it = {s, tokens + past, take, past + take == n};
        assert_int_equal(model_forward_batch(m, &it, 1, out, NULL), DI_OK);
        model_seq_publish(m, s, tokens);
        past += take;
    }
}

static void check_hits_bit_identical(const char *dir)
{
    model *m = load(dir, 2), *cold = load(dir, 2);
    const int32_t V = (int32_t)model_get_config(m)->n_vocab;
    enum { N = 75 };
    int32_t a[N], b[N];
    for (int i = 0; i < N; i++) {
        a[i] = (int32_t)((i * 37 + 11) % V);
        b[i] = i < 40 ? a[i] : (int32_t)((i * 53 + 5) % V); /* shares 2 blocks with a */
    }
    float *want = malloc((size_t)V * sizeof *want), *got = malloc((size_t)V * sizeof *got);
    assert_non_null(want);
    assert_non_null(got);
    /* a, computed in chunks of 20 (blocks filled across steps), then released */
    model_seq *s;
    assert_int_equal(model_seq_create(m, &s), DI_OK);
    prefill(m, s, a, N, 20, got);
    model_seq_free(m, s);
    assert_int_equal(model_kv_blocks_cached(m), N / B);
    for (int which = 0; which < 2; which++) {
        const int32_t *t = which ? b : a;
        /* the oracle: the same prompt on a model that never matches */
        model_seq *c;
        assert_int_equal(model_seq_create(cold, &c), DI_OK);
        prefill(cold, c, t, N, 64, want);
        model_seq_free(cold, c);
        model_seq *h;
        assert_int_equal(model_seq_create(m, &h), DI_OK);
        int64_t probe = model_prefix_probe(m, t, N - 1, NULL);
        int64_t hit = model_seq_match_prefix(m, h, t, N - 1);
        assert_int_equal(hit, probe);
        assert_int_equal(hit, which ? 2 * B : (N - 1) / B * B);
        prefill(m, h, t, N, 64, got);
        assert_memory_equal(got, want, (size_t)V * sizeof *got);
        model_seq_free(m, h);
    }
    free(want);
    free(got);
    model_free(m);
    model_free(cold);
}

static void test_hit_logits_bit_identical_dense(void **state)
{
    (void)state;
    check_hits_bit_identical(TINY);
}

static void test_hit_logits_bit_identical_deepseek_v3(void **state)
{
    (void)state;
    check_hits_bit_identical(DSV3);
}

/* ---- through the engine ---- */

enum { MAX_OUT = 160 };

typedef struct rec {
    int32_t toks[MAX_OUT];
    int n_toks, n_done;
    di_status status;
    uint32_t prompt_tokens, cache_hit;
    int cancel_at;
    di_engine *e;
    char response[4096];
    char last_chunk[2048];
} rec;

static void on_event(void *user, const di_event *ev)
{
    rec *r = user;
    size_t n;
    switch (di_event_kind_of(ev)) {
    case DI_EVENT_TOKENS: {
        const int32_t *t = di_event_tokens(ev, &n);
        for (size_t i = 0; i < n && r->n_toks < MAX_OUT; i++) r->toks[r->n_toks++] = t[i];
        if (r->cancel_at >= 0 && r->n_toks >= r->cancel_at)
            (void)di_cancel(r->e, di_event_request_id(ev), NULL);
        break;
    }
    case DI_EVENT_CHUNK: {
        const char *j = di_event_chunk_json(ev, &n);
        if (j && n < sizeof r->last_chunk && strstr(j, "usage")) {
            memcpy(r->last_chunk, j, n);
            r->last_chunk[n] = 0;
        }
        break;
    }
    case DI_EVENT_DONE: {
        r->n_done++;
        r->status = di_event_status(ev);
        r->prompt_tokens = di_event_prompt_tokens(ev);
        r->cache_hit = di_event_prompt_cache_hit_tokens(ev);
        const char *j = di_event_response_json(ev, &n);
        if (j && n < sizeof r->response) {
            memcpy(r->response, j, n);
            r->response[n] = 0;
        }
        break;
    }
    default: break;
    }
}

static void count_preemptions(void *user, di_log_level level, const char *message)
{
    (void)level;
    if (strstr(message, "pre-empted")) __atomic_add_fetch((int *)user, 1, __ATOMIC_RELAXED);
}

static di_engine *make_engine_log(const char *path, int max_running, int64_t kv_bytes, int disable,
                                  int *n_preempted)
{
    di_engine_config cfg;
    di_engine_config_init(&cfg);
    cfg.model_path = path;
    cfg.n_threads = 2;
    cfg.max_running = max_running;
    cfg.n_batch = 64;
    cfg.kv_cache_bytes = kv_bytes;
    cfg.disable_prefix_cache = disable;
    if (n_preempted) {
        cfg.log = count_preemptions;
        cfg.log_user = n_preempted;
    }
    di_engine *e = NULL;
    di_error *err = NULL;
    if (di_engine_create(&cfg, &e, &err) != DI_OK)
        fail_msg("di_engine_create: %s", di_error_message(err));
    return e;
}

static di_engine *make_engine(const char *path, int max_running, int64_t kv_bytes, int disable)
{
    return make_engine_log(path, max_running, kv_bytes, disable, NULL);
}

static void poll_until_idle(di_engine *e)
{
    for (int i = 0; i < 1000000 && di_engine_pending(e) > 0; i++) assert_true(di_poll(e, 50) >= 0);
    assert_int_equal(di_engine_pending(e), 0);
}

/* Request i of a family of prompts: one of 6 shared prefixes (8 to 90 tokens,
 * so hits fall inside and across blocks) and a random suffix, some with no
 * suffix at all; greedy or seeded sampling. */
typedef struct spec {
    int32_t prompt[160];
    di_request req;
} spec;

static void make_spec(spec *s, int i, uint32_t vocab)
{
    static const int prefix_len[6] = {8, 16, 33, 47, 64, 90};
    uint32_t f = (uint32_t)i % 6, x = 99991u + (uint32_t)i * 7919u, y = 5u + f * 104729u;
    int n = prefix_len[f];
    for (int k = 0; k < n; k++) s->prompt[k] = (int32_t)(xs(&y) % vocab);
    int suffix = i % 7 == 0 ? 0 : (int)(xs(&x) % 40);
    for (int k = 0; k < suffix; k++) s->prompt[n + k] = (int32_t)(xs(&x) % vocab);
    di_request_init(&s->req);
    s->req.tokens = s->prompt;
    s->req.n_tokens = (size_t)(n + suffix);
    s->req.max_tokens = i % 5 == 3 ? 40 : 2 + i % 9;
    s->req.seed = 500 + (uint64_t)i;
    s->req.temperature = i % 3 == 0 ? 0.0f : 0.8f;
    s->req.top_k = i % 4 == 1 ? 0 : 30;
    s->req.on_event = on_event;
}

/* n requests in waves of `wave`, each wave submitted at once: every request's
 * tokens equal the same request's without the prefix cache (an engine with
 * it off; batch invariance makes concurrency irrelevant there). Requests
 * i % 11 == 5 are cancelled after their first token in both engines. */
static void check_engine_against_no_cache(const char *path, int n, int wave, int64_t kv_bytes,
                                          uint32_t vocab)
{
    spec *specs = calloc((size_t)n, sizeof *specs);
    rec *want = calloc((size_t)n, sizeof *want), *got = calloc((size_t)n, sizeof *got);
    assert_non_null(specs);
    assert_non_null(want);
    assert_non_null(got);
    int n_preempted = 0;
    di_engine *off = make_engine(path, 8, kv_bytes, 1),
              *on = make_engine_log(path, 8, kv_bytes, 0, &n_preempted);
    int64_t hits = 0, prompt = 0;
    for (int w = 0; w < n; w += wave) {
        int end = w + wave < n ? w + wave : n;
        for (int pass = 0; pass < 2; pass++) {
            di_engine *e = pass ? on : off;
            rec *r = pass ? got : want;
            for (int i = w; i < end; i++) {
                if (!pass) make_spec(&specs[i], i, vocab);
                r[i].cancel_at = i % 11 == 5 ? 1 : -1;
                r[i].e = e;
                specs[i].req.user_data = &r[i];
                uint64_t id;
                assert_int_equal(di_submit(e, &specs[i].req, &id, NULL), DI_OK);
            }
            poll_until_idle(e);
        }
        for (int i = w; i < end; i++) {
            assert_int_equal(want[i].n_done, 1);
            assert_int_equal(got[i].n_done, 1);
            assert_int_equal(want[i].cache_hit, 0);
            assert_int_equal(got[i].cache_hit % B, 0);
            assert_true(got[i].cache_hit < got[i].prompt_tokens);
            hits += got[i].cache_hit;
            prompt += got[i].prompt_tokens;
            /* a cancel from the callback may lose the race with the end */
            assert_true(got[i].status == DI_OK || got[i].status == DI_ERR_CANCELLED);
            assert_true(want[i].status == DI_OK || want[i].status == DI_ERR_CANCELLED);
            if (i % 11 != 5) assert_int_equal(got[i].status, DI_OK);
            int n_same = got[i].n_toks < want[i].n_toks ? got[i].n_toks : want[i].n_toks;
            if (got[i].status == DI_OK && want[i].status == DI_OK)
                assert_int_equal(got[i].n_toks, want[i].n_toks);
            assert_memory_equal(got[i].toks, want[i].toks, (size_t)n_same * 4);
        }
    }
    /* Then waves that pre-empt as soon as two of their requests overlap (the
     * waves above pre-empt only when several do, which a slow submitter under
     * a sanitizer on a loaded machine may not see): 8 requests of 100 prompt
     * tokens and 150 more each, 16 blocks a request of the 28, submitted at
     * once, each running 150 decode steps; equal to the engine without the
     * cache, as above. Again, up to 6 waves, until one has pre-empted (a
     * submitter slower than a request's 150 steps each time). */
    enum { PRESS = 8, PRESS_OUT = 150 };
    for (int wave_n = 0; wave_n < 6 && __atomic_load_n(&n_preempted, __ATOMIC_RELAXED) == 0;
         wave_n++) {
        spec press[PRESS];
        rec pw[PRESS] = {0}, pg[PRESS] = {0};
        for (int pass = 0; pass < 2; pass++) {
            di_engine *e = pass ? on : off;
            for (int i = 0; i < PRESS; i++) {
                make_spec(&press[i], 6 * i + 5, vocab); /* the 90-token family */
                uint32_t x = 7u + (uint32_t)(i + PRESS * wave_n);
                for (int k = 90; k < 100; k++) press[i].prompt[k] = (int32_t)(xs(&x) % vocab);
                press[i].req.n_tokens = 100;
                press[i].req.max_tokens = PRESS_OUT;
                press[i].req.ignore_eos = 1;
                rec *r = pass ? &pg[i] : &pw[i];
                r->cancel_at = -1;
                r->e = e;
                press[i].req.user_data = r;
                assert_int_equal(di_submit(e, &press[i].req, &(uint64_t){0}, NULL), DI_OK);
            }
            poll_until_idle(e);
        }
        for (int i = 0; i < PRESS; i++) {
            assert_int_equal(pw[i].status, DI_OK);
            assert_int_equal(pg[i].status, DI_OK);
            assert_int_equal(pg[i].n_toks, PRESS_OUT);
            assert_int_equal(pw[i].n_toks, PRESS_OUT);
            assert_memory_equal(pg[i].toks, pw[i].toks, PRESS_OUT * sizeof(int32_t));
        }
    }
    print_message("prefix cache: %d requests, %lld of %lld prompt tokens from the cache, %d "
                  "pre-emptions\n",
                  n, (long long)hits, (long long)prompt, n_preempted);
    assert_true(hits * 8 > prompt); /* the families share most of their prompts */
    assert_true(__atomic_load_n(&n_preempted, __ATOMIC_RELAXED) > 0);
    assert_int_equal(di_engine_destroy(on), DI_OK);
    assert_int_equal(di_engine_destroy(off), DI_OK);
    free(specs);
    free(want);
    free(got);
}

/* 2,000 requests on the dense model: one block is 2 (K, V) x 2 layers x 16
 * dims x 16 tokens x 2 bytes; 28 blocks for 8 running requests of up to 169
 * tokens force evictions and pre-emption. */
static void test_engine_shared_prefixes_equal_no_cache(void **state)
{
    (void)state;
    check_engine_against_no_cache(TINY, 2000 / RUN_SCALE, 24, 28 * 2048, 512);
}

/* DeepSeek-V3's latent cache (one block 3 layers x 40 x 16 tokens x 2 bytes). */
static void test_engine_deepseek_shared_prefixes_equal_no_cache(void **state)
{
    (void)state;
    check_engine_against_no_cache(DSV3, 300 / RUN_SCALE, 24, 28 * 3 * 40 * 16 * 2, 512);
}

/* A request's blocks stay reusable after it is cancelled; the hit count of a
 * repeated prompt is its whole blocks short of the last token. */
static void test_cancelled_request_leaves_its_blocks(void **state)
{
    (void)state;
    di_engine *e = make_engine(TINY, 4, 0, 0);
    int32_t p[100];
    for (int i = 0; i < 100; i++) p[i] = (i * 7 + 3) % 512;
    di_request q;
    di_request_init(&q);
    q.tokens = p;
    q.n_tokens = 100;
    q.max_tokens = 150; /* a long output: the cancel from its first token lands first */
    q.ignore_eos = 1;
    q.on_event = on_event;
    rec r1 = {0}, r2 = {0}, r3 = {0};
    r1.cancel_at = 1;
    r1.e = e;
    q.user_data = &r1;
    assert_int_equal(di_submit(e, &q, &(uint64_t){0}, NULL), DI_OK);
    poll_until_idle(e);
    /* on a loaded machine the output may end first: the blocks stay either way */
    assert_true(r1.status == DI_ERR_CANCELLED || r1.status == DI_OK);
    assert_int_equal(r1.cache_hit, 0);
    r2.cancel_at = -1;
    q.user_data = &r2;
    assert_int_equal(di_submit(e, &q, &(uint64_t){0}, NULL), DI_OK);
    poll_until_idle(e);
    assert_int_equal(r2.status, DI_OK);
    assert_int_equal(r2.cache_hit, 96);
    /* an exact multiple of the block: the last block is computed again */
    q.n_tokens = 96;
    r3.cancel_at = -1;
    q.user_data = &r3;
    assert_int_equal(di_submit(e, &q, &(uint64_t){0}, NULL), DI_OK);
    poll_until_idle(e);
    assert_int_equal(r3.cache_hit, 80);
    assert_int_equal(di_engine_destroy(e), DI_OK);
}

static void test_config_errors(void **state)
{
    (void)state;
    di_engine_config cfg;
    di_engine_config_init(&cfg);
    cfg.model_path = TINY;
    cfg.disable_prefix_cache = 2;
    di_engine *e = NULL;
    di_error *err = NULL;
    assert_int_equal(di_engine_create(&cfg, &e, &err), DI_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(di_error_message(err), "disable_prefix_cache"));
    di_error_free(err);
    err = NULL;
    cfg.disable_prefix_cache = 0;
    cfg.reserved = 1;
    assert_int_equal(di_engine_create(&cfg, &e, &err), DI_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(di_error_message(err), "reserved"));
    di_error_free(err);
    /* a host built against the release before these fields still works */
    err = NULL;
    cfg.reserved = 0;
    cfg.struct_size = DI_STRUCT_SIZE_UNTIL(di_engine_config, progress_user);
    assert_int_equal(di_engine_create(&cfg, &e, &err), DI_OK);
    assert_int_equal(di_engine_destroy(e), DI_OK);
}

/* ---- the usage each protocol reports (SmolLM2) ---- */

static json_t *usage_of(const char *json, const char *key)
{
    json_error_t jerr;
    json_t *root = json_loads(json, 0, &jerr);
    if (!root) fail_msg("not JSON (%s): %s", jerr.text, json);
    json_t *u = json_object_get(root, key);
    if (!u) { /* Responses: the response object inside the completed event */
        json_t *resp = json_object_get(root, "response");
        if (resp) u = json_object_get(resp, key);
    }
    if (!u) fail_msg("no %s in %s", key, json);
    json_incref(u);
    json_decref(root);
    return u;
}

static json_int_t at(json_t *obj, const char *a, const char *b)
{
    json_t *v = json_object_get(obj, a);
    if (b) v = json_object_get(v, b);
    if (!json_is_integer(v)) fail_msg("no integer %s.%s", a, b ? b : "");
    return json_integer_value(v);
}

static void run_body(di_engine *e, di_protocol protocol, const char *body, rec *r)
{
    memset(r, 0, sizeof *r);
    r->cancel_at = -1;
    di_request q;
    di_request_init(&q);
    q.protocol = protocol;
    q.json = body;
    q.json_len = strlen(body);
    q.on_event = on_event;
    q.user_data = r;
    di_error *err = NULL;
    if (di_submit(e, &q, &(uint64_t){0}, &err) != DI_OK) fail_msg("%s", di_error_message(err));
    poll_until_idle(e);
    assert_int_equal(r->n_done, 1);
    assert_int_equal(r->status, DI_OK);
}

static void test_protocol_usage_reports_hits(void **state)
{
    (void)state;
    if (access(SMOL, R_OK) != 0) skip();
    di_engine *e = make_engine(SMOL, 4, 0, 0);
    const char *sys = "You are a careful assistant. Answer in one short sentence. The user is "
                      "planning a trip and wants practical advice about trains, hotels and food.";
    char chat[1024], msgs[1024], resp[1024];
    snprintf(chat, sizeof chat,
             "{\"model\":\"m\",\"max_tokens\":4,\"temperature\":0,\"messages\":[{\"role\":"
             "\"system\",\"content\":\"%s\"},{\"role\":\"user\",\"content\":\"Hi\"}]}",
             sys);
    rec a, b;
    run_body(e, DI_PROTOCOL_CHAT, chat, &a);
    run_body(e, DI_PROTOCOL_CHAT, chat, &b);
    assert_int_equal(a.cache_hit, 0);
    assert_true(b.cache_hit > 0);
    assert_int_equal(b.cache_hit, (b.prompt_tokens - 1) / B * B);
    json_t *u = usage_of(b.response, "usage");
    assert_int_equal(at(u, "prompt_tokens", NULL), b.prompt_tokens);
    assert_int_equal(at(u, "prompt_cache_hit_tokens", NULL), b.cache_hit);
    assert_int_equal(at(u, "prompt_cache_miss_tokens", NULL), b.prompt_tokens - b.cache_hit);
    assert_int_equal(at(u, "prompt_tokens_details", "cached_tokens"), b.cache_hit);
    json_decref(u);
    /* streaming: the usage chunk carries the same counts */
    char stream[1100];
    snprintf(stream, sizeof stream,
             "%.*s,\"stream\":true,\"stream_options\":{\"include_usage\":true}}",
             (int)strlen(chat) - 1, chat);
    run_body(e, DI_PROTOCOL_CHAT, stream, &b);
    u = usage_of(b.last_chunk, "usage");
    assert_int_equal(at(u, "prompt_cache_hit_tokens", NULL), b.cache_hit);
    assert_true(b.cache_hit > 0);
    json_decref(u);
    /* Anthropic Messages: cache_read_input_tokens, input_tokens the rest */
    snprintf(msgs, sizeof msgs,
             "{\"model\":\"m\",\"max_tokens\":4,\"temperature\":0,\"system\":\"%s\","
             "\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}]}",
             sys);
    run_body(e, DI_PROTOCOL_MESSAGES, msgs, &b);
    assert_true(b.cache_hit > 0);
    u = usage_of(b.response, "usage");
    assert_int_equal(at(u, "cache_read_input_tokens", NULL), b.cache_hit);
    assert_int_equal(at(u, "input_tokens", NULL), b.prompt_tokens - b.cache_hit);
    json_decref(u);
    /* Responses: input_tokens_details.cached_tokens */
    snprintf(resp, sizeof resp,
             "{\"model\":\"m\",\"max_output_tokens\":4,\"temperature\":0,\"instructions\":\"%s\","
             "\"input\":\"Hi\"}",
             sys);
    run_body(e, DI_PROTOCOL_RESPONSES, resp, &b);
    assert_true(b.cache_hit > 0);
    u = usage_of(b.response, "usage");
    assert_int_equal(at(u, "input_tokens_details", "cached_tokens"), b.cache_hit);
    json_decref(u);
    assert_int_equal(di_engine_destroy(e), DI_OK);
    /* off: no hits */
    e = make_engine(SMOL, 4, 0, 1);
    run_body(e, DI_PROTOCOL_CHAT, chat, &a);
    run_body(e, DI_PROTOCOL_CHAT, chat, &b);
    assert_int_equal(b.cache_hit, 0);
    u = usage_of(b.response, "usage");
    assert_int_equal(at(u, "prompt_cache_hit_tokens", NULL), 0);
    json_decref(u);
    assert_int_equal(di_engine_destroy(e), DI_OK);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pool_matches_only_what_was_written),
        cmocka_unit_test(test_pool_evicts_least_recently_released),
        cmocka_unit_test(test_hit_logits_bit_identical_dense),
        cmocka_unit_test(test_hit_logits_bit_identical_deepseek_v3),
        cmocka_unit_test(test_cancelled_request_leaves_its_blocks),
        cmocka_unit_test(test_config_errors),
        cmocka_unit_test(test_engine_shared_prefixes_equal_no_cache),
        cmocka_unit_test(test_engine_deepseek_shared_prefixes_equal_no_cache),
        cmocka_unit_test(test_protocol_usage_reports_hits),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
