/* The engine through the public API, as a host uses it: tokens against the
 * transformers oracle, concurrency with random cancels against the same
 * requests run alone, pre-emption, protocol requests through the codec and
 * di_stream, and misuse. */
#include <jansson.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "deepinfer/deepinfer.h"
#include "vocab_models.h"

#define TINY DI_FIXTURE_DIR "/model/qwen2-tied-f16"
/* DeepSeek-V3 (MLA, q LoRA, sigmoid-routed MoE after a dense layer; vocab 512):
 * one latent KV cache block is 3 layers x (32 + 8) x 16 tokens x 2 bytes. */
#define DSV3 DI_FIXTURE_DIR "/model/dsv3-qlora-bf16"
#define DSV4 DI_FIXTURE_DIR "/model/dsv4-sqrtsoftplus-f32"
enum { DSV3_BLOCK_BYTES = 3 * 40 * 16 * 2 };

enum { MAX_OUT = 256 };

/* What one request's callback saw. */
typedef struct rec {
    uint64_t id;
    int32_t toks[MAX_OUT];
    int n_toks;
    int n_done, after_done;
    di_status status;
    di_finish finish;
    uint32_t completion_tokens;
    int cancel_at; /* cancel from the callback once this many tokens came; -1: never */
    char text[8192];
    size_t text_len;
    char reasoning[8192];
    size_t reasoning_len;
    int n_chunks;
    char first_sse[512], last_sse[512], finish_text[32];
    int has_response;
} rec;

typedef struct ctx {
    di_engine *e;
    rec *recs;
    int n_recs;
} ctx;

static ctx g; /* the engine the callbacks cancel on */

static void on_event(void *user, const di_event *ev)
{
    rec *r = user;
    if (r->n_done) r->after_done++;
    size_t n;
    switch (di_event_kind_of(ev)) {
    case DI_EVENT_TOKENS: {
        const int32_t *t = di_event_tokens(ev, &n);
        for (size_t i = 0; i < n && r->n_toks < MAX_OUT; i++) r->toks[r->n_toks++] = t[i];
        if (r->cancel_at >= 0 && r->n_toks >= r->cancel_at) {
            di_status st = di_cancel(g.e, di_event_request_id(ev), NULL);
            assert_true(st == DI_OK || st == DI_ERR_INVALID_STATE);
        }
        break;
    }
    case DI_EVENT_TEXT: {
        const char *t = di_event_text(ev, &n);
        if (r->text_len + n < sizeof r->text) {
            memcpy(r->text + r->text_len, t, n);
            r->text_len += n;
        }
        break;
    }
    case DI_EVENT_REASONING: {
        const char *t = di_event_text(ev, &n);
        if (r->reasoning_len + n < sizeof r->reasoning) {
            memcpy(r->reasoning + r->reasoning_len, t, n);
            r->reasoning_len += n;
        }
        break;
    }
    case DI_EVENT_CHUNK: {
        const char *sse = di_event_chunk_sse(ev, &n);
        assert_non_null(sse);
        if (r->n_chunks++ == 0) snprintf(r->first_sse, sizeof r->first_sse, "%s", sse);
        snprintf(r->last_sse, sizeof r->last_sse, "%s", sse);
        break;
    }
    case DI_EVENT_DONE:
        r->n_done++;
        r->status = di_event_status(ev);
        r->finish = di_event_finish_reason(ev);
        r->completion_tokens = di_event_completion_tokens(ev);
        if (di_event_finish_text(ev))
            snprintf(r->finish_text, sizeof r->finish_text, "%s", di_event_finish_text(ev));
        r->has_response = di_event_response_json(ev, NULL) != NULL;
        break;
    default: break;
    }
}

static di_engine *make_engine(const char *path, int max_running, int64_t kv_bytes, di_log_fn log,
                              void *log_user)
{
    di_engine_config cfg;
    di_engine_config_init(&cfg);
    cfg.model_path = path;
    cfg.n_threads = 2;
    cfg.max_running = max_running;
    cfg.n_batch = 64;
    cfg.kv_cache_bytes = kv_bytes;
    cfg.log = log;
    cfg.log_user = log_user;
    di_engine *e = NULL;
    di_error *err = NULL;
    di_status st = di_engine_create(&cfg, &e, &err);
    if (st != DI_OK) fail_msg("di_engine_create: %s", di_error_message(err));
    return e;
}

static void poll_until_idle(di_engine *e)
{
    for (int i = 0; i < 100000 && di_engine_pending(e) > 0; i++) assert_true(di_poll(e, 50) >= 0);
    assert_int_equal(di_engine_pending(e), 0);
}

/* A request: prompt i of a fixed pseudo-random family, sampling settings varied by i. */
typedef struct spec {
    int32_t prompt[64];
    size_t n_prompt;
    di_request req;
} spec;

static void make_spec(spec *s, int i, uint32_t vocab)
{
    uint32_t x = 2463534242u + (uint32_t)i * 7919u;
    s->n_prompt = 3 + (size_t)(i * 13 % 50);
    for (size_t k = 0; k < s->n_prompt; k++) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        s->prompt[k] = (int32_t)(x % vocab);
    }
    di_request_init(&s->req);
    s->req.tokens = s->prompt;
    s->req.n_tokens = s->n_prompt;
    s->req.max_tokens = 8 + i * 7 % 40;
    s->req.seed = 1000 + i;
    s->req.temperature = i % 4 == 0 ? 0.0f : 0.6f + 0.1f * (float)(i % 5);
    s->req.top_k = i % 3 == 0 ? 0 : 20 + i;
    s->req.top_p = i % 2 ? 0.9f : 1.0f;
    s->req.min_p = i % 5 == 1 ? 0.05f : 0.0f;
    s->req.repetition_penalty = i % 6 == 2 ? 1.3f : 1.0f;
    s->req.frequency_penalty = i % 7 == 3 ? 0.5f : 0.0f;
    s->req.on_event = on_event;
}

static void run_alone(di_engine *e, spec *s, rec *r)
{
    memset(r, 0, sizeof *r);
    r->cancel_at = -1;
    s->req.user_data = r;
    di_error *err = NULL;
    if (di_submit(e, &s->req, &r->id, &err) != DI_OK) fail_msg("%s", di_error_message(err));
    poll_until_idle(e);
    assert_int_equal(r->n_done, 1);
    assert_int_equal(r->status, DI_OK);
}

static void test_greedy_tokens_equal_transformers(void **state)
{
    (void)state;
    json_error_t jerr;
    json_t *ref = json_load_file(TINY "/reference.json", 0, &jerr);
    assert_non_null(ref);
    json_t *jp = json_object_get(ref, "prompt"), *jg = json_object_get(ref, "greedy");
    int32_t prompt[64], greedy[64];
    size_t np = json_array_size(jp), ng = json_array_size(jg);
    for (size_t i = 0; i < np; i++) prompt[i] = (int32_t)json_integer_value(json_array_get(jp, i));
    for (size_t i = 0; i < ng; i++) greedy[i] = (int32_t)json_integer_value(json_array_get(jg, i));
    json_decref(ref);
    di_engine *e = make_engine(TINY, 4, 0, NULL, NULL);
    g.e = e;
    rec r = {0};
    r.cancel_at = -1;
    di_request q;
    di_request_init(&q);
    q.tokens = prompt;
    q.n_tokens = np;
    q.temperature = 0.0f;
    q.max_tokens = (int64_t)ng;
    q.ignore_eos = 1;
    q.on_event = on_event;
    q.user_data = &r;
    assert_int_equal(di_submit(e, &q, &r.id, NULL), DI_OK);
    assert_true(r.id > 0);
    poll_until_idle(e);
    assert_int_equal(r.n_done, 1);
    assert_int_equal(r.after_done, 0);
    assert_int_equal(r.status, DI_OK);
    assert_int_equal(r.finish, DI_FINISH_LENGTH);
    assert_int_equal(r.completion_tokens, ng);
    assert_int_equal(r.n_toks, (int)ng);
    assert_memory_equal(r.toks, greedy, ng * sizeof *greedy);
    assert_int_equal(di_engine_destroy(e), DI_OK);
}

static void expect_submit_error(di_engine *e, const di_request *q, di_status want, const char *msg);

/* What a logprobs request's callback saw: each token, its log probability and
 * its alternatives. */
typedef struct lp_rec {
    int32_t toks[64];
    float lp[64];
    int32_t top_ids[64][20];
    float top[64][20];
    size_t n_top[64];
    int n, n_done, bad_shape;
    uint32_t drafts;
    di_status status;
    char *response; /* a protocol request's complete response (malloc'd) */
} lp_rec;

static void on_lp_event(void *user, const di_event *ev)
{
    lp_rec *r = user;
    if (di_event_kind_of(ev) == DI_EVENT_DONE) {
        r->n_done++;
        r->status = di_event_status(ev);
        r->drafts = di_event_draft_tokens(ev);
        if (di_event_response_json(ev, NULL))
            r->response = strdup(di_event_response_json(ev, NULL));
        return;
    }
    if (di_event_kind_of(ev) != DI_EVENT_TOKENS) {
        /* no other event carries them */
        r->bad_shape |=
            di_event_logprobs(ev, NULL) != NULL || di_event_top_logprobs(ev, 0, NULL, NULL) != 0;
        return;
    }
    size_t n, n_lp;
    const int32_t *t = di_event_tokens(ev, &n);
    const float *lp = di_event_logprobs(ev, &n_lp);
    if (!lp || n_lp != n) {
        r->bad_shape = 1;
        return;
    }
    for (size_t i = 0; i < n && r->n < 64; i++, r->n++) {
        const int32_t *ids;
        const float *vals;
        r->toks[r->n] = t[i];
        r->lp[r->n] = lp[i];
        r->n_top[r->n] = di_event_top_logprobs(ev, i, &ids, &vals);
        if (r->n_top[r->n] > 20) r->bad_shape = 1;
        for (size_t k = 0; k < r->n_top[r->n] && k < 20; k++) {
            r->top_ids[r->n][k] = ids[k];
            r->top[r->n][k] = vals[k];
        }
    }
    const int32_t *ids = (const int32_t *)1;
    r->bad_shape |= di_event_top_logprobs(ev, n, &ids, NULL) != 0 || ids != NULL;
}

/* log-softmax of row `row` of a [rows, n_vocab] float32 file, in double. */
static void log_softmax_row(const float *logits, int n_vocab, int row, double *out)
{
    const float *x = logits + (size_t)row * (size_t)n_vocab;
    double mx = x[0], sum = 0;
    for (int v = 1; v < n_vocab; v++) mx = x[v] > mx ? x[v] : mx;
    for (int v = 0; v < n_vocab; v++) sum += exp((double)x[v] - mx);
    for (int v = 0; v < n_vocab; v++) out[v] = (double)x[v] - mx - log(sum);
}

/* The log probabilities a token request reports are the log-softmax of the
 * model's raw logits: the oracle is transformers' logits of the whole greedy
 * sequence (sequence_logits.f32), log-softmaxed here in double. Greedy with
 * top_logprobs 20, with speculative decoding (rows verified in one pass), and
 * a seeded draw that logit_bias forces onto an unlikely token — whose log
 * probability stays the model's own. */
static void test_token_logprobs_equal_transformers_log_softmax(void **state)
{
    (void)state;
    json_error_t jerr;
    json_t *ref = json_load_file(TINY "/reference.json", 0, &jerr);
    assert_non_null(ref);
    json_t *jp = json_object_get(ref, "prompt"), *jg = json_object_get(ref, "greedy");
    int32_t prompt[64], greedy[64];
    size_t np = json_array_size(jp), ng = json_array_size(jg);
    for (size_t i = 0; i < np; i++) prompt[i] = (int32_t)json_integer_value(json_array_get(jp, i));
    for (size_t i = 0; i < ng; i++) greedy[i] = (int32_t)json_integer_value(json_array_get(jg, i));
    int n_vocab =
        (int)json_integer_value(json_array_get(json_object_get(ref, "sequence_logits_shape"), 1));
    int rows =
        (int)json_integer_value(json_array_get(json_object_get(ref, "sequence_logits_shape"), 0));
    json_decref(ref);
    assert_int_equal(rows, (int)(np + ng));
    float *logits = malloc((size_t)rows * (size_t)n_vocab * sizeof *logits);
    double *want = malloc((size_t)n_vocab * sizeof *want);
    assert_non_null(logits);
    assert_non_null(want);
    FILE *f = fopen(TINY "/sequence_logits.f32", "rb");
    assert_non_null(f);
    assert_int_equal(fread(logits, sizeof *logits, (size_t)rows * (size_t)n_vocab, f),
                     (size_t)rows * (size_t)n_vocab);
    fclose(f);
    double worst = 0;
    for (int speculative = 0; speculative < 2; speculative++) {
        di_engine_config cfg;
        di_engine_config_init(&cfg);
        cfg.model_path = TINY;
        cfg.n_threads = 2;
        cfg.speculative_tokens = speculative ? 4 : 0;
        cfg.speculative_fixed = speculative;
        di_engine *e = NULL;
        assert_int_equal(di_engine_create(&cfg, &e, NULL), DI_OK);
        lp_rec *r = calloc(1, sizeof *r);
        assert_non_null(r);
        di_request q;
        di_request_init(&q);
        q.tokens = prompt;
        q.n_tokens = np;
        q.temperature = 0.0f;
        q.max_tokens = (int64_t)ng;
        q.ignore_eos = 1;
        q.logprobs = 1;
        q.top_logprobs = 20;
        q.on_event = on_lp_event;
        q.user_data = r;
        uint64_t id;
        assert_int_equal(di_submit(e, &q, &id, NULL), DI_OK);
        poll_until_idle(e);
        assert_int_equal(r->n_done, 1);
        assert_int_equal(r->status, DI_OK);
        assert_false(r->bad_shape);
        assert_int_equal(r->n, (int)ng);
        assert_memory_equal(r->toks, greedy, ng * sizeof *greedy);
        assert_true(speculative ? r->drafts > 0 : r->drafts == 0);
        for (size_t k = 0; k < ng; k++) {
            log_softmax_row(logits, n_vocab, (int)(np - 1 + k), want);
            double d = fabs(r->lp[k] - want[greedy[k]]);
            worst = d > worst ? d : worst;
            assert_true(r->lp[k] <= 0.0f);
            assert_int_equal(r->n_top[k], 20);
            /* the alternatives: each the oracle's value, in order, and none
             * left out that the oracle ranks above the last one listed */
            for (size_t t = 0; t < 20; t++) {
                d = fabs(r->top[k][t] - want[r->top_ids[k][t]]);
                worst = d > worst ? d : worst;
                if (t) assert_true(r->top[k][t] <= r->top[k][t - 1]);
            }
            int above = 0;
            for (int v = 0; v < n_vocab; v++) above += want[v] > r->top[k][19] + 1e-3;
            assert_true(above <= 19);
            /* greedy: the token is the first alternative */
            assert_int_equal(r->top_ids[k][0], greedy[k]);
        }
        free(r);
        /* a draw forced by logit_bias onto an unlikely token keeps the
         * model's probability; the sampling settings change nothing */
        log_softmax_row(logits, n_vocab, (int)np - 1, want);
        int32_t unlikely = 0;
        for (int v = 0; v < n_vocab; v++) unlikely = want[v] < want[unlikely] ? v : unlikely;
        float bias = 100.0f;
        r = calloc(1, sizeof *r);
        assert_non_null(r);
        di_request_init(&q);
        q.tokens = prompt;
        q.n_tokens = np;
        q.temperature = 0.7f;
        q.top_k = 3;
        q.seed = 7;
        q.logit_bias_ids = &unlikely;
        q.logit_bias_values = &bias;
        q.n_logit_bias = 1;
        q.max_tokens = 1;
        q.logprobs = 1;
        q.on_event = on_lp_event;
        q.user_data = r;
        assert_int_equal(di_submit(e, &q, &id, NULL), DI_OK);
        poll_until_idle(e);
        assert_int_equal(r->status, DI_OK);
        assert_false(r->bad_shape);
        assert_int_equal(r->n, 1);
        assert_int_equal(r->toks[0], unlikely);
        assert_int_equal(r->n_top[0], 0);
        double d = fabs(r->lp[0] - want[unlikely]);
        worst = d > worst ? d : worst;
        free(r);
        /* errors name the field */
        static const struct {
            int32_t logprobs, top;
            int protocol;
            const char *msg;
        } bad[] = {
            {2, 0, 0, "logprobs: expected 0 or 1"},
            {1, 21, 0, "top_logprobs: must be in [0, 20]"},
            {1, -1, 0, "top_logprobs: must be in [0, 20]"},
            {0, 3, 0, "top_logprobs: requires logprobs 1"},
            {1, 0, 1, "logprobs: token requests only"},
        };
        for (size_t b = 0; b < sizeof bad / sizeof bad[0]; b++) {
            di_request_init(&q);
            q.on_event = on_lp_event;
            if (bad[b].protocol) {
                q.protocol = DI_PROTOCOL_CHAT;
                q.json = "{}";
                q.json_len = 2;
            } else {
                q.tokens = prompt;
                q.n_tokens = np;
            }
            q.logprobs = bad[b].logprobs;
            q.top_logprobs = bad[b].top;
            expect_submit_error(e, &q, DI_ERR_INVALID_ARGUMENT, bad[b].msg);
        }
        assert_int_equal(di_engine_destroy(e), DI_OK);
    }
    print_message("token logprobs: max |deepinfer - transformers log-softmax| = %.3g\n", worst);
    assert_true(worst < 2e-3);
    free(logits);
    free(want);
}

/* Cancels from another thread while the host polls. */
typedef struct canceller {
    di_engine *e;
    uint64_t ids[64];
    int n;
} canceller;

static void *cancel_thread(void *arg)
{
    canceller *c = arg;
    for (int i = 0; i < c->n; i++) {
        nanosleep(&(struct timespec){0, 2000000L * (i % 4)}, NULL);
        di_status st = di_cancel(c->e, c->ids[i], NULL);
        if (st != DI_OK && st != DI_ERR_INVALID_STATE) abort();
    }
    return NULL;
}

static void check_against_alone(const rec *got, const rec *alone)
{
    assert_int_equal(got->n_done, 1);
    assert_int_equal(got->after_done, 0);
    if (got->status == DI_OK) {
        assert_int_equal(got->n_toks, alone->n_toks);
        assert_int_equal(got->finish, alone->finish);
    } else {
        assert_int_equal(got->status, DI_ERR_CANCELLED);
        assert_true(got->n_toks <= alone->n_toks);
    }
    assert_memory_equal(got->toks, alone->toks, (size_t)got->n_toks * sizeof *got->toks);
}

static void concurrent_run(const char *path, int n_req, int max_running, int64_t kv_bytes,
                           int with_cancels, int64_t long_outputs, di_log_fn log, void *log_user)
{
    spec *specs = calloc((size_t)n_req, sizeof *specs);
    rec *alone = calloc((size_t)n_req, sizeof *alone), *got = calloc((size_t)n_req, sizeof *got);
    assert_non_null(specs);
    assert_non_null(alone);
    assert_non_null(got);
    di_engine *e = make_engine(path, max_running, kv_bytes, log, log_user);
    g.e = e;
    for (int i = 0; i < n_req; i++) {
        make_spec(&specs[i], i, (uint32_t)di_engine_vocab_size(e));
        if (long_outputs) {
            specs[i].req.max_tokens = long_outputs;
            specs[i].req.ignore_eos = 1;
        }
        run_alone(e, &specs[i], &alone[i]);
    }
    canceller c = {e, {0}, 0};
    int accepted[64] = {0}; /* the cancels right after submit that landed */
    assert_true(n_req <= 64);
    for (int i = 0; i < n_req; i++) {
        got[i].cancel_at = with_cancels && i % 5 == 1 ? 1 + i % 7 : -1;
        specs[i].req.user_data = &got[i];
        assert_int_equal(di_submit(e, &specs[i].req, &got[i].id, NULL), DI_OK);
        if (with_cancels && i % 5 == 2) {
            /* a short request can finish before this thread runs again (a
             * loaded machine): then the cancel finds it done */
            di_status cst = di_cancel(e, got[i].id, NULL);
            assert_true(cst == DI_OK || cst == DI_ERR_INVALID_STATE);
            accepted[i] = cst == DI_OK;
        }
        if (with_cancels && i % 5 == 3) c.ids[c.n++] = got[i].id;
    }
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, cancel_thread, &c), 0);
    poll_until_idle(e);
    pthread_join(th, NULL);
    for (int i = 0; i < n_req; i++) {
        check_against_alone(&got[i], &alone[i]);
        if (accepted[i]) assert_int_equal(got[i].status, DI_ERR_CANCELLED);
        if (!with_cancels || i % 5 == 0 || i % 5 == 4) assert_int_equal(got[i].status, DI_OK);
    }
    assert_int_equal(di_engine_destroy(e), DI_OK);
    free(specs);
    free(alone);
    free(got);
}

static void test_concurrent_requests_with_random_cancels_equal_alone(void **state)
{
    (void)state;
    concurrent_run(TINY, 24, 8, 0, 1, 0, NULL, NULL);
}

/* The same for DeepSeek-V3 through the engine's batched step: the latent paged
 * cache, chunked prefill beside decodes, the MoE over the step's tokens. */
static void test_deepseek_concurrent_requests_with_random_cancels_equal_alone(void **state)
{
    (void)state;
    concurrent_run(DSV3, 16, 8, 0, 1, 0, NULL, NULL);
}

/* DeepSeek-V4: every sequence's window and compressed caches, the indexer and
 * the hash layers per row, chunked prefill beside decodes. */
static void test_deepseek_v4_concurrent_requests_with_random_cancels_equal_alone(void **state)
{
    (void)state;
    concurrent_run(DSV4, 16, 8, 0, 1, 0, NULL, NULL);
    /* DeepSeek-V4.1: entries, keys and top-k shared across layers, YOCO, per row */
    concurrent_run(DI_FIXTURE_DIR "/model/dsv41-fp8-mxfp4-release", 16, 8, 0, 1, 0, NULL, NULL);
    /* Engram (the folder's tokenizer.json gives its compressed vocabulary): each
     * row's n-grams from its own sequence's earlier tokens */
    concurrent_run(DI_FIXTURE_DIR "/model/dsv41-engram-f32", 16, 8, 0, 1, 0, NULL, NULL);
}

/* Random cancels, three times: which requests are cancelled, and when — at once,
 * from their callback after a random number of tokens, or from another thread
 * after a random delay — is drawn from a seeded generator. Every request gets
 * exactly one terminal event, and its tokens are the ones it gives alone (all
 * of them when it finished, a prefix when it was cancelled). */
typedef struct random_canceller {
    di_engine *e;
    uint64_t ids[48];
    long delay_us[48];
    int n;
} random_canceller;

static void *random_cancel_thread(void *arg)
{
    random_canceller *c = arg;
    for (int i = 0; i < c->n; i++) {
        nanosleep(&(struct timespec){0, c->delay_us[i] * 1000L}, NULL);
        di_status st = di_cancel(c->e, c->ids[i], NULL);
        if (st != DI_OK && st != DI_ERR_INVALID_STATE) abort();
    }
    return NULL;
}

static void test_random_cancels_many_requests(void **state)
{
    (void)state;
    enum { N = 40 };
    spec *specs = calloc(N, sizeof *specs);
    rec *alone = calloc(N, sizeof *alone), *got = calloc(N, sizeof *got);
    assert_non_null(specs);
    assert_non_null(alone);
    assert_non_null(got);
    di_engine *e = make_engine(TINY, 12, 40 * 2048, NULL, NULL); /* pre-emption too */
    g.e = e;
    for (int i = 0; i < N; i++) {
        make_spec(&specs[i], 100 + i, 512);
        run_alone(e, &specs[i], &alone[i]);
    }
    for (uint32_t round = 0; round < 3; round++) {
        uint32_t x = 0x9e3779b9u * (round + 1);
#define NEXT() (x ^= x << 13, x ^= x >> 17, x ^= x << 5, x)
        random_canceller c = {e, {0}, {0}, 0};
        for (int i = 0; i < N; i++) {
            memset(&got[i], 0, sizeof got[i]);
            uint32_t how = NEXT() % 4;
            got[i].cancel_at = how == 1 ? (int)(NEXT() % 20) : -1;
            specs[i].req.user_data = &got[i];
            assert_int_equal(di_submit(e, &specs[i].req, &got[i].id, NULL), DI_OK);
            if (how == 2) {
                /* a short request can finish before this thread runs again (a
                 * loaded machine): then the cancel finds it done */
                di_status cst = di_cancel(e, got[i].id, NULL);
                assert_true(cst == DI_OK || cst == DI_ERR_INVALID_STATE);
            }
            if (how == 3) {
                c.ids[c.n] = got[i].id;
                c.delay_us[c.n++] = (long)(NEXT() % 3000);
            }
        }
#undef NEXT
        pthread_t th;
        assert_int_equal(pthread_create(&th, NULL, random_cancel_thread, &c), 0);
        poll_until_idle(e);
        pthread_join(th, NULL);
        for (int i = 0; i < N; i++) check_against_alone(&got[i], &alone[i]);
    }
    assert_int_equal(di_engine_destroy(e), DI_OK);
    free(specs);
    free(alone);
    free(got);
}

static void count_preemptions(void *user, di_log_level level, const char *message)
{
    (void)level;
    if (strstr(message, "pre-empted")) __atomic_add_fetch((int *)user, 1, __ATOMIC_RELAXED);
}

/* A KV cache budget of 24 blocks (384 tokens) for 12 requests of up to 132
 * tokens each, 8 at a time: requests are pre-empted and recomputed, and still
 * give the tokens they give alone. */
static void test_preempted_requests_give_the_same_tokens(void **state)
{
    (void)state;
    int n_pre = 0;
    /* one block: 2 (K, V) x 2 layers x 16 dims x 16 tokens x 2 bytes (f16) */
    concurrent_run(TINY, 12, 8, 24 * 2048, 0, 80, count_preemptions, &n_pre);
    assert_true(__atomic_load_n(&n_pre, __ATOMIC_RELAXED) > 0);
}

/* DeepSeek-V3 with a latent cache budget of 24 blocks: pre-empted and
 * recomputed requests give the tokens they give alone. */
static void test_deepseek_preempted_requests_give_the_same_tokens(void **state)
{
    (void)state;
    int n_pre = 0;
    concurrent_run(DSV3, 12, 8, 24 * DSV3_BLOCK_BYTES, 0, 80, count_preemptions, &n_pre);
    assert_true(__atomic_load_n(&n_pre, __ATOMIC_RELAXED) > 0);
}

/* DeepSeek-V4 with a budget of 24 blocks (384 tokens) for 12 requests of up
 * to 132 tokens, 8 at a time: pre-empted requests start their caches again
 * and give the tokens they give alone. */
static void test_deepseek_v4_preempted_requests_give_the_same_tokens(void **state)
{
    (void)state;
    /* the per-token cost of this engine's caches (its n_batch sizes their rings) */
    di_engine *e = make_engine(DSV4, 8, 0, NULL, NULL);
    const char *info = di_engine_model_info(e, NULL), *at = strstr(info, "\"kv_bytes_per_token\":");
    assert_non_null(at);
    int64_t per_token = strtoll(at + strlen("\"kv_bytes_per_token\":"), NULL, 10);
    assert_true(per_token > 0);
    assert_int_equal(di_engine_destroy(e), DI_OK);
    int n_pre = 0;
    concurrent_run(DSV4, 12, 8, 24 * 16 * per_token, 0, 80, count_preemptions, &n_pre);
    assert_true(__atomic_load_n(&n_pre, __ATOMIC_RELAXED) > 0);
}

/* Submitting from several threads while the host polls. */
typedef struct submitter {
    di_engine *e;
    spec specs[6];
    rec recs[6];
    int base;
} submitter;

static void *submit_thread(void *arg)
{
    submitter *s = arg;
    for (int i = 0; i < 6; i++) {
        make_spec(&s->specs[i], s->base + i, 512);
        s->recs[i].cancel_at = -1;
        s->specs[i].req.user_data = &s->recs[i];
        uint64_t id;
        if (di_submit(s->e, &s->specs[i].req, &id, NULL) != DI_OK) abort();
    }
    return NULL;
}

static void test_submit_from_threads_each_request_one_terminal_event(void **state)
{
    (void)state;
    di_engine *e = make_engine(TINY, 16, 0, NULL, NULL);
    g.e = e;
    submitter *s = calloc(3, sizeof *s);
    assert_non_null(s);
    pthread_t th[3];
    for (int t = 0; t < 3; t++) {
        s[t].e = e;
        s[t].base = t * 6;
        assert_int_equal(pthread_create(&th[t], NULL, submit_thread, &s[t]), 0);
    }
    for (int t = 0; t < 3; t++) pthread_join(th[t], NULL);
    poll_until_idle(e);
    for (int t = 0; t < 3; t++)
        for (int i = 0; i < 6; i++) {
            assert_int_equal(s[t].recs[i].n_done, 1);
            assert_int_equal(s[t].recs[i].after_done, 0);
            assert_int_equal(s[t].recs[i].status, DI_OK);
        }
    assert_int_equal(di_engine_destroy(e), DI_OK);
    free(s);
}

/* ---- misuse ---- */

typedef struct reenter {
    di_engine *e;
    int64_t poll_result;
    di_status destroy_result, submit_result, cancel_result;
    uint64_t child;
    rec child_rec;
    int32_t prompt[3];
    int n_done;
} reenter;

static void on_event_reenter(void *user, const di_event *ev)
{
    reenter *x = user;
    if (di_event_kind_of(ev) != DI_EVENT_DONE) return;
    x->n_done++;
    x->poll_result = di_poll(x->e, 0);
    x->destroy_result = di_engine_destroy(x->e);
    x->cancel_result = di_cancel(x->e, di_event_request_id(ev), NULL);
    di_request q;
    di_request_init(&q);
    q.tokens = x->prompt;
    q.n_tokens = 3;
    q.max_tokens = 2;
    q.on_event = on_event;
    x->child_rec.cancel_at = -1;
    q.user_data = &x->child_rec;
    x->submit_result = di_submit(x->e, &q, &x->child, NULL);
}

static void test_callbacks_may_submit_and_cancel_but_not_poll_or_destroy(void **state)
{
    (void)state;
    di_engine *e = make_engine(TINY, 4, 0, NULL, NULL);
    reenter x = {e, 0, 0, 0, 0, 0, {0}, {5, 6, 7}, 0};
    di_request q;
    di_request_init(&q);
    q.tokens = x.prompt;
    q.n_tokens = 3;
    q.max_tokens = 3;
    q.on_event = on_event_reenter;
    q.user_data = &x;
    uint64_t id;
    assert_int_equal(di_submit(e, &q, &id, NULL), DI_OK);
    poll_until_idle(e);
    assert_int_equal(x.n_done, 1);
    assert_int_equal(x.poll_result, -(int64_t)DI_ERR_INVALID_STATE);
    assert_int_equal(x.destroy_result, DI_ERR_INVALID_STATE);
    assert_int_equal(x.cancel_result, DI_ERR_INVALID_STATE); /* it has finished */
    assert_int_equal(x.submit_result, DI_OK);
    assert_int_equal(x.child_rec.n_done, 1);
    assert_int_equal(x.child_rec.status, DI_OK);
    assert_int_equal(di_engine_destroy(e), DI_OK);
}

/* The context ends a request: the tiny model's context is 256 tokens, so a
 * 250-token prompt has room for 6 output tokens, then finishes by length. */
static void test_context_limit_ends_with_length(void **state)
{
    (void)state;
    di_engine *e = make_engine(TINY, 4, 0, NULL, NULL);
    g.e = e;
    int32_t prompt[250];
    for (int i = 0; i < 250; i++) prompt[i] = (int32_t)(i * 37 % 500 + 3);
    rec r = {0};
    r.cancel_at = -1;
    di_request q;
    di_request_init(&q);
    q.tokens = prompt;
    q.n_tokens = 250;
    q.ignore_eos = 1;
    q.on_event = on_event;
    q.user_data = &r;
    assert_int_equal(di_submit(e, &q, &r.id, NULL), DI_OK);
    assert_int_equal(di_poll(e, -1) >= 0, 1);
    poll_until_idle(e);
    assert_int_equal(r.n_done, 1);
    assert_int_equal(r.status, DI_OK);
    assert_int_equal(r.finish, DI_FINISH_LENGTH);
    assert_int_equal(r.completion_tokens, 6);
    assert_int_equal(r.n_toks, 6);
    /* nothing pending: an endless poll returns at once */
    assert_int_equal(di_poll(e, -1), 0);
    assert_int_equal(di_engine_destroy(e), DI_OK);
}

static void expect_submit_error(di_engine *e, const di_request *q, di_status want, const char *msg);

/* A KV cache budget of 4 blocks (64 tokens): a request that outgrows it even
 * alone ends with DI_ERR_CONTEXT_LENGTH after the tokens that fit. */
static void test_request_outgrowing_the_kv_budget_ends_with_a_clear_status(void **state)
{
    (void)state;
    di_engine *e = make_engine(TINY, 4, 4 * 2048, NULL, NULL);
    g.e = e;
    int32_t prompt[10] = {5, 6, 7, 8, 9, 10, 11, 12, 13, 14};
    rec r = {0};
    r.cancel_at = -1;
    di_request q;
    di_request_init(&q);
    q.tokens = prompt;
    q.n_tokens = 10;
    q.max_tokens = 200;
    q.ignore_eos = 1;
    q.on_event = on_event;
    q.user_data = &r;
    assert_int_equal(di_submit(e, &q, &r.id, NULL), DI_OK);
    poll_until_idle(e);
    assert_int_equal(r.n_done, 1);
    assert_int_equal(r.status, DI_ERR_CONTEXT_LENGTH);
    assert_int_equal(r.n_toks, 64 - 10 + 1); /* the last sampled token needs no block */
    /* A prompt that cannot fit at all is refused at submit. */
    int32_t big[70] = {0};
    q.tokens = big;
    q.n_tokens = 70;
    expect_submit_error(e, &q, DI_ERR_CONTEXT_LENGTH, "KV cache");
    assert_int_equal(di_engine_destroy(e), DI_OK);
}

static void test_cancel_statuses(void **state)
{
    (void)state;
    di_engine *e = make_engine(TINY, 4, 0, NULL, NULL);
    g.e = e;
    di_error *err = NULL;
    assert_int_equal(di_cancel(e, 12345, &err), DI_ERR_NOT_FOUND);
    assert_non_null(strstr(di_error_message(err), "12345"));
    di_error_free(err);
    err = NULL;
    assert_int_equal(di_cancel(e, 0, NULL), DI_ERR_NOT_FOUND);
    assert_int_equal(di_cancel(NULL, 1, NULL), DI_ERR_INVALID_ARGUMENT);
    spec s;
    make_spec(&s, 3, 512);
    s.req.max_tokens = 200;
    s.req.ignore_eos = 1;
    rec r;
    uint64_t id;
    /* The tiny model can finish all 200 tokens before this thread cancels (a
     * loaded machine): then the cancel is refused and the run is whole. The
     * cancel must land in a few tries. */
    int landed = 0;
    for (int attempt = 0; attempt < 20 && !landed; attempt++) {
        memset(&r, 0, sizeof r);
        r.cancel_at = -1;
        s.req.user_data = &r;
        assert_int_equal(di_submit(e, &s.req, &id, NULL), DI_OK);
        di_status st = di_cancel(e, id, NULL);
        assert_true(st == DI_OK || st == DI_ERR_INVALID_STATE);
        landed = st == DI_OK;
        /* already being cancelled: DI_OK, or DI_ERR_INVALID_STATE once the
         * worker has ended it (its terminal event queued) */
        di_status again = di_cancel(e, id, NULL);
        assert_true(again == DI_OK || again == DI_ERR_INVALID_STATE);
        if (!landed) assert_int_equal(again, DI_ERR_INVALID_STATE);
        poll_until_idle(e);
        assert_int_equal(r.n_done, 1);
        assert_int_equal(r.status, landed ? DI_ERR_CANCELLED : DI_OK);
        if (!landed) assert_int_equal(r.n_toks, 200);
    }
    assert_true(landed);
    assert_int_equal(di_cancel(e, id, &err), DI_ERR_INVALID_STATE);
    assert_non_null(strstr(di_error_message(err), "already finished"));
    di_error_free(err);
    assert_int_equal(di_poll(e, 0), 0);
    assert_int_equal(di_poll(e, -2), -(int64_t)DI_ERR_INVALID_ARGUMENT);
    assert_int_equal(di_poll(NULL, 0), -(int64_t)DI_ERR_INVALID_ARGUMENT);
    assert_int_equal(di_engine_destroy(e), DI_OK);
    assert_int_equal(di_engine_destroy(NULL), DI_OK);
}

static void expect_submit_error(di_engine *e, const di_request *q, di_status want, const char *msg)
{
    di_error *err = NULL;
    uint64_t id = 99;
    assert_int_equal(di_submit(e, q, &id, &err), want);
    assert_int_equal(id, 0);
    if (msg && !strstr(di_error_message(err), msg))
        fail_msg("message \"%s\" lacks \"%s\"", di_error_message(err), msg);
    di_error_free(err);
}

static void test_invalid_requests_are_rejected_at_once(void **state)
{
    (void)state;
    di_engine *e = make_engine(TINY, 4, 0, NULL, NULL);
    int32_t prompt[300] = {1, 2, 600};
    rec r = {0};
    di_request q;
    di_request_init(&q);
    q.tokens = prompt;
    q.n_tokens = 3;
    q.on_event = on_event;
    q.user_data = &r;
    expect_submit_error(e, &q, DI_ERR_INVALID_ARGUMENT, "tokens[2]");
    prompt[2] = 3;
    di_request b = q;
    b.on_event = NULL;
    expect_submit_error(e, &b, DI_ERR_INVALID_ARGUMENT, "on_event");
    b = q;
    b.n_tokens = 0;
    expect_submit_error(e, &b, DI_ERR_INVALID_ARGUMENT, "tokens");
    b = q;
    b.temperature = -0.5f;
    expect_submit_error(e, &b, DI_ERR_INVALID_ARGUMENT, "temperature");
    b = q;
    b.top_p = 1.5f;
    expect_submit_error(e, &b, DI_ERR_INVALID_ARGUMENT, "top_p");
    b = q;
    b.seed = -7;
    expect_submit_error(e, &b, DI_ERR_INVALID_ARGUMENT, "seed");
    b = q;
    b.struct_size = 8;
    expect_submit_error(e, &b, DI_ERR_INVALID_ARGUMENT, NULL);
    b = q;
    b.n_tokens = 256; /* the tiny model's context is 256 */
    expect_submit_error(e, &b, DI_ERR_CONTEXT_LENGTH, "256");
    b = q;
    b.protocol = DI_PROTOCOL_CHAT;
    b.json = "{}";
    b.json_len = 2;
    expect_submit_error(e, &b, DI_ERR_INVALID_ARGUMENT, "tokens: a protocol request");
    b.tokens = NULL;
    b.n_tokens = 0;
    expect_submit_error(e, &b, DI_ERR_UNSUPPORTED, "token IDs");
    b.ignore_eos = 1; /* nothing set is ignored */
    expect_submit_error(e, &b, DI_ERR_INVALID_ARGUMENT, "ignore_eos: token requests only");
    b = q;
    b.json = "{}";
    b.json_len = 2;
    expect_submit_error(e, &b, DI_ERR_INVALID_ARGUMENT, "json: a token request");
    b = q;
    b.protocol = 9;
    expect_submit_error(e, &b, DI_ERR_INVALID_ARGUMENT, "protocol");
    expect_submit_error(NULL, &q, DI_ERR_INVALID_ARGUMENT, NULL);
    assert_int_equal(di_engine_pending(e), 0);
    /* a caller built against the first release (no constraint fields) is served:
     * the fields it lacks keep their defaults (the Python binding's struct was
     * refused when the check took the newest size) */
    b = q;
    b.struct_size = DI_STRUCT_SIZE_UNTIL(di_request, user_data);
    b.max_tokens = 2;
    r.cancel_at = -1;
    uint64_t id = 0;
    assert_int_equal(di_submit(e, &b, &id, NULL), DI_OK);
    poll_until_idle(e);
    assert_int_equal(r.n_done, 1);
    assert_int_equal(r.status, DI_OK);
    assert_true(r.n_toks >= 1);
    assert_int_equal(di_engine_destroy(e), DI_OK);
}

typedef struct progress {
    int calls, cancel_at;
    float last;
    int decreasing;
} progress;

static int on_progress(void *user, float fraction)
{
    progress *p = user;
    if (fraction < p->last) p->decreasing = 1;
    p->last = fraction;
    return ++p->calls == p->cancel_at;
}

static void check_load_progress(const char *path)
{
    di_engine_config cfg;
    di_engine_config_init(&cfg);
    cfg.model_path = path;
    cfg.n_threads = 1;
    cfg.progress = on_progress;
    progress p = {0, -1, 0.0f, 0};
    cfg.progress_user = &p;
    di_engine *e = NULL;
    assert_int_equal(di_engine_create(&cfg, &e, NULL), DI_OK);
    assert_true(p.calls >= 3); /* 0, once per layer, 1 */
    assert_true(p.last == 1.0f);
    assert_false(p.decreasing);
    assert_int_equal(di_engine_destroy(e), DI_OK);
    progress q = {0, 2, 0.0f, 0};
    cfg.progress_user = &q;
    di_error *err = NULL;
    e = NULL;
    assert_int_equal(di_engine_create(&cfg, &e, &err), DI_ERR_CANCELLED);
    assert_null(e);
    di_error_free(err);
}

/* Dense and DeepSeek models alike (DeepSeek reported only 0 and 1, and could
 * not be cancelled, the breaker found). */
static void test_load_progress_reaches_one_and_can_cancel(void **state)
{
    (void)state;
    check_load_progress(TINY);
    check_load_progress(DSV3);
}

static void test_engine_config_errors_name_the_field(void **state)
{
    (void)state;
    di_engine_config cfg;
    di_engine_config_init(&cfg);
    di_engine *e = NULL;
    di_error *err = NULL;
    assert_int_equal(di_engine_create(&cfg, &e, &err), DI_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(di_error_message(err), "model_path"));
    di_error_free(err);
    err = NULL;
    cfg.model_path = TINY;
    cfg.device = DI_DEVICE_CUDA; /* without its module (tests/cuda covers the rest) */
    setenv("DI_CUDA_MODULE", "/nonexistent/libdeepinfer-cuda.so", 1);
    assert_int_equal(di_engine_create(&cfg, &e, &err), DI_ERR_UNSUPPORTED);
    assert_non_null(strstr(di_error_message(err), "module not found at /nonexistent/"));
    /* a path past PATH_MAX was cut to its first 4095 bytes, which named
     * another file (here the folder "/"): refused whole, naming the variable */
    char *long_path = malloc(4200);
    assert_non_null(long_path);
    memset(long_path, '/', 4150);
    strcpy(long_path + 4150, "usr/lib/libdeepinfer-cuda.so");
    setenv("DI_CUDA_MODULE", long_path, 1);
    free(long_path);
    di_error_free(err);
    err = NULL;
    assert_int_equal(di_engine_create(&cfg, &e, &err), DI_ERR_UNSUPPORTED);
    assert_non_null(strstr(di_error_message(err), "DI_CUDA_MODULE is 4178 bytes, longer than"));
    /* a symlink loop is not "not found": the reason is named */
    char dir[] = "/tmp/di_cuda_loopXXXXXX", a[64], b[64];
    assert_non_null(mkdtemp(dir));
    snprintf(a, sizeof a, "%s/a.so", dir);
    snprintf(b, sizeof b, "%s/b.so", dir);
    assert_int_equal(symlink(b, a), 0);
    assert_int_equal(symlink(a, b), 0);
    setenv("DI_CUDA_MODULE", a, 1);
    di_error_free(err);
    err = NULL;
    assert_int_equal(di_engine_create(&cfg, &e, &err), DI_ERR_UNSUPPORTED);
    assert_non_null(strstr(di_error_message(err), "cannot load module"));
    assert_non_null(strstr(di_error_message(err), "symbolic links"));
    unlink(a);
    unlink(b);
    rmdir(dir);
    unsetenv("DI_CUDA_MODULE");
    di_error_free(err);
    err = NULL;
    cfg.device = DI_DEVICE_CPU;
    cfg.max_running = 1000;
    assert_int_equal(di_engine_create(&cfg, &e, &err), DI_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(di_error_message(err), "max_running"));
    di_error_free(err);
    err = NULL;
    cfg.max_running = 0;
    cfg.model_path = TINY "/nonexistent";
    assert_true(di_engine_create(&cfg, &e, &err) != DI_OK);
    di_error_free(err);
    err = NULL;
    cfg.model_path = TINY;
    cfg.encoding = DI_ENCODING_R1; /* the tiny model has no tokenizer */
    assert_int_equal(di_engine_create(&cfg, &e, &err), DI_ERR_UNSUPPORTED);
    assert_non_null(strstr(di_error_message(err), "tokenizer"));
    di_error_free(err);
    assert_null(e);
}

/* Destroying with requests in flight: every one still gets its terminal event,
 * delivered by di_engine_destroy; submits from those callbacks are refused. (A
 * request can end before: its terminal event comes through di_poll, when the
 * worker ran ahead of this thread on a loaded machine.) */
typedef struct destroy_rec {
    rec r;
    int done_in_destroy;
    di_status submit_in_destroy;
} destroy_rec;

static di_engine *destroy_engine;
static int destroying; /* this thread is inside di_engine_destroy */

static void on_event_destroy(void *user, const di_event *ev)
{
    destroy_rec *d = user;
    on_event(&d->r, ev);
    if (di_event_kind_of(ev) == DI_EVENT_DONE && destroying) {
        d->done_in_destroy = 1;
        int32_t t[2] = {1, 2};
        di_request q;
        di_request_init(&q);
        q.tokens = t;
        q.n_tokens = 2;
        q.on_event = on_event;
        uint64_t id;
        d->submit_in_destroy = di_submit(destroy_engine, &q, &id, NULL);
    }
}

static void test_destroy_delivers_every_terminal_event(void **state)
{
    (void)state;
    di_engine *e = make_engine(TINY, 2, 0, NULL, NULL);
    destroy_engine = e;
    destroy_rec d[6];
    memset(d, 0, sizeof d);
    spec s[6];
    for (int i = 0; i < 6; i++) {
        make_spec(&s[i], i, 512);
        s[i].req.max_tokens = 150;
        s[i].req.ignore_eos = 1;
        s[i].req.on_event = on_event_destroy;
        s[i].req.user_data = &d[i];
        d[i].r.cancel_at = -1;
        uint64_t id;
        assert_int_equal(di_submit(e, &s[i].req, &id, NULL), DI_OK);
    }
    assert_true(di_poll(e, 20) >= 0);
    destroying = 1;
    assert_int_equal(di_engine_destroy(e), DI_OK);
    destroying = 0;
    for (int i = 0; i < 6; i++) {
        assert_int_equal(d[i].r.n_done, 1);
        assert_int_equal(d[i].r.after_done, 0);
        if (d[i].done_in_destroy)
            assert_int_equal(d[i].submit_in_destroy, DI_ERR_INVALID_STATE);
        else
            assert_int_equal(d[i].r.status, DI_OK);
    }
}

/* ---- a protocol request, end to end ---- */

/* Monotonic seconds, for the bounds of condition waits. */
static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

typedef struct poller {
    di_engine *e;
    int64_t result;
} poller;

static void *waiting_poller(void *arg)
{
    poller *p = arg;
    /* a probe of the other thread can hold the poller slot a moment: retry */
    double until = now_s() + 10;
    do p->result = di_poll(p->e, 60000); /* woken by the request submitted below */
    while (p->result == -(int64_t)DI_ERR_INVALID_STATE && now_s() < until);
    return NULL;
}

/* The smallest input of a use-after-free a breaker found: a thread waiting in
 * di_poll did not count as polling, so destroy (and a second poller) got in.
 * (It waited 200 ms for the other thread to be waiting, and that one waited
 * 1 s: a loaded machine ran neither in time. Now both wait on conditions.) */
static void test_a_waiting_poller_excludes_destroy_and_other_pollers(void **state)
{
    (void)state;
    di_engine *e = make_engine(TINY, 2, 0, NULL, NULL);
    g.e = e;
    poller p = {e, 0};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, waiting_poller, &p), 0);
    /* a second poller is refused once the other thread waits inside di_poll */
    double until = now_s() + 10;
    int64_t got;
    while ((got = di_poll(e, 0)) != -(int64_t)DI_ERR_INVALID_STATE) {
        assert_int_equal(got, 0);
        if (now_s() > until) fail_msg("the other thread never waited in di_poll in 10 s");
        nanosleep(&(struct timespec){0, 1000000L}, NULL);
    }
    /* it waits for events, and none can come before the submit below */
    assert_int_equal(di_engine_destroy(e), DI_ERR_INVALID_STATE);
    int32_t prompt[3] = {5, 6, 7};
    rec r = {0};
    r.cancel_at = -1;
    di_request q;
    di_request_init(&q);
    q.tokens = prompt;
    q.n_tokens = 3;
    q.max_tokens = 2;
    q.on_event = on_event;
    q.user_data = &r;
    assert_int_equal(di_submit(e, &q, &r.id, NULL), DI_OK);
    assert_int_equal(pthread_join(th, NULL), 0);
    assert_true(p.result >= 1); /* the request's first events, delivered there */
    poll_until_idle(e);
    assert_int_equal(r.n_done, 1);
    assert_int_equal(r.status, DI_OK);
    assert_int_equal(di_engine_destroy(e), DI_OK);
}

static void test_chat_request_streams_protocol_chunks(void **state)
{
    (void)state;
    const char *tok = DI_ASSET_DIR "/r1-distill-qwen-7b/model_part_0000.gguf";
    if (access(tok, R_OK) != 0) skip();
    char dir[] = "/tmp/di_test_engine_XXXXXX";
    assert_non_null(mkdtemp(dir));
    char model_dir[600];
    snprintf(model_dir, sizeof model_dir, "%s/model", dir);
    write_big_vocab_model(model_dir);
    di_engine_config cfg;
    di_engine_config_init(&cfg);
    cfg.model_path = model_dir;
    cfg.tokenizer_path = tok; /* encoding 0: found from the R1 GGUF's pre-tokenizer */
    cfg.n_threads = 2;
    di_engine *e = NULL;
    di_error *err = NULL;
    if (di_engine_create(&cfg, &e, &err) != DI_OK) fail_msg("%s", di_error_message(err));
    assert_int_equal(di_engine_encoding(e), DI_ENCODING_R1);
    g.e = e;
    const char *body = "{\"model\":\"deepseek-r1\",\"stream\":true,\"max_tokens\":12,"
                       "\"messages\":[{\"role\":\"user\",\"content\":\"Hello!\"}]}";
    rec r = {0};
    r.cancel_at = -1;
    di_request q;
    di_request_init(&q);
    q.protocol = DI_PROTOCOL_CHAT;
    q.json = body;
    q.json_len = strlen(body);
    q.seed = 5;
    q.on_event = on_event;
    q.user_data = &r;
    if (di_submit(e, &q, &r.id, &err) != DI_OK) fail_msg("%s", di_error_message(err));
    /* A malformed body is refused at once, naming the problem. */
    q.json = "{\"messages\": 3}";
    q.json_len = strlen(q.json);
    uint64_t bad;
    assert_int_equal(di_submit(e, &q, &bad, &err), DI_ERR_INVALID_REQUEST);
    assert_non_null(strstr(di_error_message(err), "messages"));
    di_error_free(err);
    err = NULL;
    /* The body's sampling fields are checked (the template reads only messages;
     * the engine reads them). */
    q.json = "{\"model\":\"x\",\"temperature\":5,\"messages\":[{\"role\":\"user\","
             "\"content\":\"hi\"}]}";
    q.json_len = strlen(q.json);
    assert_int_equal(di_submit(e, &q, &bad, &err), DI_ERR_INVALID_REQUEST);
    assert_non_null(strstr(di_error_message(err), "temperature"));
    di_error_free(err);
    err = NULL;
    /* The R1 chat template takes Chat Completions only. */
    q.protocol = DI_PROTOCOL_MESSAGES;
    q.json = "{\"model\":\"x\",\"max_tokens\":5,\"messages\":[{\"role\":\"user\","
             "\"content\":\"hi\"}]}";
    q.json_len = strlen(q.json);
    assert_int_equal(di_submit(e, &q, &bad, &err), DI_ERR_UNSUPPORTED);
    di_error_free(err);
    poll_until_idle(e);
    assert_int_equal(r.n_done, 1);
    assert_int_equal(r.after_done, 0);
    assert_int_equal(r.status, DI_OK);
    assert_true(r.n_toks >= 1 && r.n_toks <= 12); /* the body's max_tokens */
    /* temperature 0 in the body: greedy, so another seed gives the same tokens */
    const char *greedy = "{\"model\":\"deepseek-r1\",\"max_tokens\":6,\"temperature\":0,"
                         "\"messages\":[{\"role\":\"user\",\"content\":\"Hello!\"}]}";
    rec g1 = {0}, g2 = {0};
    g1.cancel_at = g2.cancel_at = -1;
    q.protocol = DI_PROTOCOL_CHAT;
    q.json = greedy;
    q.json_len = strlen(greedy);
    q.user_data = &g1;
    q.seed = 1;
    assert_int_equal(di_submit(e, &q, &g1.id, NULL), DI_OK);
    q.user_data = &g2;
    q.seed = 2;
    assert_int_equal(di_submit(e, &q, &g2.id, NULL), DI_OK);
    poll_until_idle(e);
    assert_int_equal(g1.status, DI_OK);
    assert_int_equal(g1.n_toks, g2.n_toks);
    assert_true(g1.n_toks <= 6);
    assert_memory_equal(g1.toks, g2.toks, (size_t)g1.n_toks * sizeof *g1.toks);
    assert_true(r.n_chunks >= 3);
    /* Chat: a role chunk first, "data: [DONE]" last (docs/stream.md). */
    assert_non_null(strstr(r.first_sse, "\"role\":\"assistant\""));
    assert_string_equal(r.last_sse, "data: [DONE]\n\n");
    assert_true(r.finish_text[0] != 0);
    assert_true(r.has_response);
    /* R1 output starts as reasoning. */
    if (r.finish == DI_FINISH_LENGTH) assert_true(r.reasoning_len > 0 || r.text_len > 0);
    assert_int_equal(di_engine_destroy(e), DI_OK);
    /* Without GGUF metadata, DeepSeek's chat tokens in the tokenizer decide. */
    const char *v3 = DI_ASSET_DIR "/deepseek-v3/tokenizer.json";
    if (access(v3, R_OK) == 0) {
        cfg.tokenizer_path = v3;
        assert_int_equal(di_engine_create(&cfg, &e, NULL), DI_OK);
        assert_int_equal(di_engine_encoding(e), DI_ENCODING_R1); /* Qwen2 weights */
        assert_int_equal(di_engine_destroy(e), DI_OK);
    }
    remove_hf_model(model_dir);
    rmdir(dir);
}

/* A token request's grammar, where it must end the request: with ignore_eos
 * the regex's end still ends it (finish stop, the text exactly the regex's),
 * while a request beside it runs to max_tokens; a grammar of many copies of a
 * repetition that can match nothing is refused at di_submit. (The matcher's
 * stack limit: test_grammar.c, test_ambiguous_grammar_stops_the_matcher.) */
static void test_token_request_grammar_ends(void **state)
{
    (void)state;
    const char *tok = DI_ASSET_DIR "/r1-distill-qwen-7b/model_part_0000.gguf";
    if (access(tok, R_OK) != 0) skip();
    char dir[] = "/tmp/di_test_engine_XXXXXX";
    assert_non_null(mkdtemp(dir));
    char model_dir[600];
    snprintf(model_dir, sizeof model_dir, "%s/model", dir);
    write_big_vocab_model(model_dir);
    di_engine_config cfg;
    di_engine_config_init(&cfg);
    cfg.model_path = model_dir;
    cfg.tokenizer_path = tok;
    cfg.n_threads = 2;
    di_engine *e = NULL;
    di_error *err = NULL;
    if (di_engine_create(&cfg, &e, &err) != DI_OK) fail_msg("%s", di_error_message(err));
    g.e = e;
    static const int32_t prompt[] = {1, 2, 3};
    rec r[2];
    memset(r, 0, sizeof r);
    di_request q[2];
    for (int k = 0; k < 2; k++) {
        di_request_init(&q[k]);
        q[k].tokens = prompt;
        q[k].n_tokens = 3;
        q[k].temperature = 0;
        q[k].on_event = on_event;
        q[k].user_data = &r[k];
        r[k].cancel_at = -1;
    }
    q[0].regex = "abc";
    q[0].ignore_eos = 1;
    q[0].max_tokens = 20;
    q[1].max_tokens = 30;
    for (int k = 0; k < 2; k++)
        if (di_submit(e, &q[k], &r[k].id, &err) != DI_OK) fail_msg("%s", di_error_message(err));
    poll_until_idle(e);
    assert_int_equal(r[0].status, DI_OK);
    assert_int_equal(r[0].finish, DI_FINISH_STOP);
    char *out = NULL;
    size_t out_len = 0;
    assert_int_equal(di_tokenizer_decode(di_engine_tokenizer(e), r[0].toks, (size_t)r[0].n_toks - 1,
                                         0, &out, &out_len, NULL),
                     DI_OK);
    assert_string_equal(out, "abc");
    di_text_free(out);
    assert_int_equal(r[1].status, DI_OK);
    assert_int_equal(r[1].n_toks, 30);
    /* a grammar refused when compiled: 1000 copies of a repetition that can
     * match nothing */
    di_request bad;
    di_request_init(&bad);
    bad.tokens = prompt;
    bad.n_tokens = 3;
    bad.on_event = on_event;
    bad.grammar = "root ::= (\"a\"{0,1000}){0,1000}\n";
    uint64_t id;
    assert_int_equal(di_submit(e, &bad, &id, &err), DI_ERR_INVALID_REQUEST);
    assert_non_null(strstr(di_error_message(err), "repetition {0,1000} of something that can "
                                                  "match nothing"));
    di_error_free(err);
    assert_int_equal(di_engine_destroy(e), DI_OK);
    remove_hf_model(model_dir);
    rmdir(dir);
}

/* Chat response_format on a reasoning model: the reasoning is free, the answer
 * after </think> is constrained (and so is a forced call of a strict tool). logit_bias makes
 * </think> the first token (a random model would reason for ever); then the regex must hold
 * exactly, and its end forces the end token. Also the errors of a constraint at di_submit: the
 * body's field named. */
static void test_chat_response_format_constrains_the_answer(void **state)
{
    (void)state;
    const char *tok = DI_ASSET_DIR "/r1-distill-qwen-7b/model_part_0000.gguf";
    if (access(tok, R_OK) != 0) skip();
    char dir[] = "/tmp/di_test_engine_XXXXXX";
    assert_non_null(mkdtemp(dir));
    char model_dir[600];
    snprintf(model_dir, sizeof model_dir, "%s/model", dir);
    write_big_vocab_model(model_dir);
    di_tokenizer *t = NULL;
    assert_int_equal(di_tokenizer_load(tok, &t, NULL), DI_OK);
    int32_t think_end;
    assert_int_equal(di_tokenizer_token_id(t, "</think>", 8, &think_end), DI_OK);
    di_tokenizer_free(t);
    di_engine_config cfg;
    di_engine_config_init(&cfg);
    cfg.model_path = model_dir;
    cfg.tokenizer_path = tok;
    cfg.n_threads = 2;
    di_engine *e = NULL;
    di_error *err = NULL;
    if (di_engine_create(&cfg, &e, &err) != DI_OK) fail_msg("%s", di_error_message(err));
    g.e = e;
    char body[1024];
    di_request q;
    di_request_init(&q);
    q.protocol = DI_PROTOCOL_CHAT;
    q.on_event = on_event;
    rec r[3];
    memset(r, 0, sizeof r);
    for (int k = 0; k < 3; k++) {
        r[k].cancel_at = -1;
        snprintf(body, sizeof body,
                 "{\"model\":\"r1\",\"max_tokens\":40,\"temperature\":1,\"seed\":%d,"
                 "\"logit_bias\":{\"%d\":100},\"messages\":[{\"role\":\"user\",\"content\":"
                 "\"A number?\"}],\"response_format\":{\"type\":\"regex\",\"regex\":"
                 "\"[0-9]{3}(-x)?\"}}",
                 k, (int)think_end);
        q.json = body;
        q.json_len = strlen(body);
        q.user_data = &r[k];
        if (di_submit(e, &q, &r[k].id, &err) != DI_OK) fail_msg("%s", di_error_message(err));
    }
    poll_until_idle(e);
    for (int k = 0; k < 3; k++) {
        assert_int_equal(r[k].status, DI_OK);
        assert_int_equal(r[k].toks[0], think_end);
        assert_int_equal(r[k].finish, DI_FINISH_STOP);
        r[k].text[r[k].text_len] = 0;
        size_t digits = strspn(r[k].text, "0123456789");
        if (!(digits == 3 && (r[k].text[3] == 0 || strcmp(r[k].text + 3, "-x") == 0)))
            fail_msg("answer %d: \"%s\" does not match [0-9]{3}(-x)?", k, r[k].text);
    }
    /* a strict tool with tool_choice required: after the free reasoning the
     * output is the call, in the R1 template's tool-call tokens */
    {
        snprintf(body, sizeof body,
                 "{\"model\":\"r1\",\"max_tokens\":24,\"temperature\":1,\"seed\":5,"
                 "\"logit_bias\":{\"%d\":100},\"messages\":[{\"role\":\"user\",\"content\":"
                 "\"Pick.\"}],\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"pick\","
                 "\"strict\":true,\"parameters\":{\"type\":\"object\",\"properties\":{\"n\":{"
                 "\"type\":\"integer\"}},\"required\":[\"n\"],\"additionalProperties\":false}}}],"
                 "\"tool_choice\":\"required\"}",
                 (int)think_end);
        rec rt;
        memset(&rt, 0, sizeof rt);
        rt.cancel_at = -1;
        q.json = body;
        q.json_len = strlen(body);
        q.user_data = &rt;
        if (di_submit(e, &q, &rt.id, &err) != DI_OK) fail_msg("%s", di_error_message(err));
        poll_until_idle(e);
        assert_int_equal(rt.status, DI_OK);
        assert_int_equal(rt.toks[0], think_end);
        /* (this vocabulary spells the marker in pieces) */
        char *out = NULL;
        size_t out_len = 0;
        assert_int_equal(di_tokenizer_decode(di_engine_tokenizer(e), rt.toks + 1,
                                             (size_t)rt.n_toks - 1, 0, &out, &out_len, NULL),
                         DI_OK);
        static const char marker[] = "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function";
        size_t blanks = strspn(out, "\n"), rest = strlen(out + blanks);
        if (blanks > 2 || rest < 4 ||
            strncmp(out + blanks, marker, rest < sizeof marker - 1 ? rest : sizeof marker - 1) != 0)
            fail_msg("not a call after </think>: \"%s\"", out);
        di_text_free(out);
        if (rt.text_len) fail_msg("answer text \"%.*s\"", (int)rt.text_len, rt.text);
    }
    /* a schema the compiler cannot take: the body's field and the keyword */
    q.json = "{\"model\":\"r1\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],"
             "\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"x\","
             "\"schema\":{\"type\":\"string\",\"format\":\"hostname\"}}}}";
    q.json_len = strlen(q.json);
    uint64_t bad;
    assert_int_equal(di_submit(e, &q, &bad, &err), DI_ERR_INVALID_REQUEST);
    assert_non_null(strstr(di_error_message(err), "response_format.json_schema.schema"));
    assert_non_null(strstr(di_error_message(err), "hostname"));
    di_error_free(err);
    err = NULL;
    q.json = "{\"model\":\"r1\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],"
             "\"response_format\":{\"type\":\"regex\",\"regex\":\"a(b\"}}";
    q.json_len = strlen(q.json);
    assert_int_equal(di_submit(e, &q, &bad, &err), DI_ERR_INVALID_REQUEST);
    assert_non_null(strstr(di_error_message(err), "response_format.regex at offset"));
    di_error_free(err);
    assert_int_equal(di_engine_pending(e), 0);
    assert_int_equal(di_engine_destroy(e), DI_OK);
    remove_hf_model(model_dir);
    rmdir(dir);
}

/* An event loop sleeps on di_engine_event_fd instead of in di_poll: epoll
 * wakes exactly when events are queued (never with nothing to deliver), di_poll
 * (engine, 0) then delivers them, and when every request is done the descriptor
 * is quiet. Every request still gets its tokens and one DONE. */
static void test_event_fd_wakes_an_epoll_loop(void **state)
{
    (void)state;
    di_engine *e = make_engine(TINY, 4, 0, NULL, NULL);
    g.e = e;
    assert_int_equal(di_engine_event_fd(NULL), -(int)DI_ERR_INVALID_ARGUMENT);
    int fd = di_engine_event_fd(e);
    assert_true(fd >= 0);
    assert_int_equal(di_engine_event_fd(e), fd); /* the same one */
    struct pollfd pfd = {.fd = fd, .events = POLLIN};
    assert_int_equal(poll(&pfd, 1, 0), 0); /* nothing queued yet */
    int ep = epoll_create1(EPOLL_CLOEXEC);
    assert_true(ep >= 0);
    struct epoll_event ev = {.events = EPOLLIN};
    assert_int_equal(epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev), 0);
    enum { N = 3 };
    rec r[N];
    memset(r, 0, sizeof r);
    int32_t prompts[N][4];
    for (int k = 0; k < N; k++) {
        for (int i = 0; i < 4; i++) prompts[k][i] = 5 + 7 * k + i;
        r[k].cancel_at = -1;
        di_request q;
        di_request_init(&q);
        q.tokens = prompts[k];
        q.n_tokens = 4;
        q.max_tokens = 8 + 4 * k;
        q.temperature = 0.0f;
        q.ignore_eos = 1;
        q.on_event = on_event;
        q.user_data = &r[k];
        assert_int_equal(di_submit(e, &q, &r[k].id, NULL), DI_OK);
    }
    int wakeups = 0, empty_wakeups = 0;
    while (di_engine_pending(e) > 0) {
        int n = epoll_wait(ep, &ev, 1, 10000);
        assert_int_equal(n, 1); /* within 10 s: the engine's events wake it */
        wakeups++;
        int64_t got = di_poll(e, 0);
        assert_true(got >= 0);
        empty_wakeups += got == 0;
    }
    assert_int_equal(empty_wakeups, 0);
    assert_true(wakeups >= 1);
    assert_int_equal(poll(&pfd, 1, 0), 0); /* all delivered: quiet again */
    for (int k = 0; k < N; k++) {
        assert_int_equal(r[k].n_done, 1);
        assert_int_equal(r[k].status, DI_OK);
        assert_int_equal(r[k].n_toks, 8 + 4 * k);
    }
    close(ep);
    assert_int_equal(di_engine_destroy(e), DI_OK);
}

/* GGUFs that cannot render chat still serve token requests: one without a
 * vocabulary (tokenizer.ggml.model "none", llama.cpp's LLAMA_VOCAB_TYPE_NONE)
 * gives the model's greedy tokens: those of di_model on the same prompt, whose
 * logits model_parity holds to llama.cpp's and to the f32 reference (a tiny
 * random model's near-ties make llama.cpp's own tokens an unfair exact
 * oracle), and the first tokens before any near-tie are llama.cpp's; a deepseek2 file whose
 * tokenizer.ggml.pre declares DeepSeek V3 but whose vocabulary lacks its turn
 * tokens runs without a codec, and its protocol requests (and those of the
 * qwen2 file, which has no tokenizer) fail saying why; asking
 * for that encoding outright is refused at create. */
static void test_gguf_without_chat_tokens_serves_token_requests(void **state)
{
    (void)state;
    json_error_t jerr;
    json_t *ref = json_load_file(DI_FIXTURE_DIR "/model/gguf-tiny/qwen2-q4_k_m.json", 0, &jerr);
    assert_non_null(ref);
    int32_t prompt[64];
    size_t n_prompt = json_array_size(json_object_get(ref, "prompt"));
    assert_true(n_prompt > 0 && n_prompt <= 64);
    for (size_t i = 0; i < n_prompt; i++)
        prompt[i] = (int32_t)json_integer_value(json_array_get(json_object_get(ref, "prompt"), i));
    di_engine *e =
        make_engine(DI_FIXTURE_DIR "/model/gguf-tiny/qwen2-q4_k_m.gguf", 4, 0, NULL, NULL);
    assert_int_equal(di_engine_encoding(e), 0);
    g.e = e;
    rec r;
    memset(&r, 0, sizeof r);
    r.cancel_at = -1;
    di_request q;
    di_request_init(&q);
    q.tokens = prompt;
    q.n_tokens = n_prompt;
    q.max_tokens = 16;
    q.temperature = 0.0f;
    q.ignore_eos = 1;
    q.on_event = on_event;
    q.user_data = &r;
    assert_int_equal(di_submit(e, &q, &r.id, NULL), DI_OK);
    poll_until_idle(e);
    assert_int_equal(r.status, DI_OK);
    assert_int_equal(r.n_toks, 16);
    di_model_options mo;
    di_model_options_init(&mo);
    mo.n_threads = 2;
    di_model *m = NULL;
    assert_int_equal(
        di_model_load(DI_FIXTURE_DIR "/model/gguf-tiny/qwen2-q4_k_m.gguf", &mo, &m, NULL), DI_OK);
    int32_t vocab = di_model_vocab_size(m), tok = 0;
    float *logits = malloc((size_t)vocab * sizeof *logits);
    assert_non_null(logits);
    assert_int_equal(di_model_eval(m, prompt, n_prompt, logits, 0, NULL), DI_OK);
    json_t *greedy = json_object_get(ref, "greedy");
    for (int i = 0; i < 16; i++) {
        tok = 0;
        for (int32_t v = 1; v < vocab; v++)
            if (logits[v] > logits[tok]) tok = v;
        assert_int_equal(r.toks[i], tok);
        if (i < 4) /* before the file's first near-tie: llama.cpp's own */
            assert_int_equal(tok, (int32_t)json_integer_value(json_array_get(greedy, (size_t)i)));
        assert_int_equal(di_model_eval(m, &tok, 1, logits, 0, NULL), DI_OK);
    }
    free(logits);
    di_model_free(m);
    json_decref(ref);
    di_request p;
    di_request_init(&p);
    p.protocol = DI_PROTOCOL_CHAT;
    p.json = "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}";
    p.on_event = on_event;
    p.user_data = &r;
    di_error *err = NULL;
    uint64_t id;
    assert_int_equal(di_submit(e, &p, &id, &err), DI_ERR_UNSUPPORTED);
    assert_non_null(strstr(di_error_message(err), "this model has no tokenizer"));
    di_error_free(err);
    assert_int_equal(di_engine_destroy(e), DI_OK);

    const char *ds = DI_FIXTURE_DIR "/model/gguf-dsv3/dsv3-qlora-q8_0.gguf";
    e = make_engine(ds, 4, 0, NULL, NULL);
    assert_int_equal(di_engine_encoding(e), 0);
    err = NULL;
    assert_int_equal(di_submit(e, &p, &id, &err), DI_ERR_UNSUPPORTED);
    const char *msg = di_error_message(err);
    assert_non_null(strstr(msg, "declares encoding dsv3"));
    assert_non_null(strstr(msg, "deepseek-v3"));
    assert_non_null(strstr(msg, "Assistant"));
    di_error_free(err);
    memset(&r, 0, sizeof r);
    r.cancel_at = -1;
    q.tokens = prompt;
    q.n_tokens = 8;
    assert_int_equal(di_submit(e, &q, &r.id, NULL), DI_OK);
    poll_until_idle(e);
    assert_int_equal(r.status, DI_OK);
    assert_int_equal(r.n_toks, 16);
    assert_int_equal(di_engine_destroy(e), DI_OK);

    /* llama.cpp's deepseek4 file: its pre-tokenizer "deepseek-v3" (what the
     * converter names V4's too) declares V4's encoding with V4 weights */
    e = make_engine(DI_FIXTURE_DIR "/model/gguf-dsv4/dsv4-gguf-bf16.gguf", 4, 0, NULL, NULL);
    assert_int_equal(di_engine_encoding(e), 0);
    err = NULL;
    assert_int_equal(di_submit(e, &p, &id, &err), DI_ERR_UNSUPPORTED);
    msg = di_error_message(err);
    if (!strstr(msg, "declares encoding dsv4") || !strstr(msg, "deepseek-v3")) fail_msg("%s", msg);
    di_error_free(err);
    memset(&r, 0, sizeof r);
    r.cancel_at = -1;
    assert_int_equal(di_submit(e, &q, &r.id, NULL), DI_OK);
    poll_until_idle(e);
    assert_int_equal(r.status, DI_OK);
    assert_int_equal(r.n_toks, 16);
    assert_int_equal(di_engine_destroy(e), DI_OK);

    di_engine_config cfg;
    di_engine_config_init(&cfg);
    cfg.model_path = ds;
    cfg.n_threads = 1;
    cfg.encoding = DI_ENCODING_DSV3;
    err = NULL;
    assert_int_equal(di_engine_create(&cfg, &e, &err), DI_ERR_UNSUPPORTED);
    assert_non_null(strstr(di_error_message(err), "which encoding dsv3 needs"));
    di_error_free(err);
}

/* An engine over a model that writer puts in a new folder under dir (a
 * mkdtemp template; the model in model_dir) with the tokenizer tok: 2 threads,
 * 4 running. The test removes the model (remove_hf_model) and dir. */
static di_engine *vocab_model_engine(void (*writer)(const char *), const char *tok, char *dir,
                                     char *model_dir, size_t size)
{
    assert_non_null(mkdtemp(dir));
    snprintf(model_dir, size, "%s/model", dir);
    writer(model_dir);
    di_engine_config cfg;
    di_engine_config_init(&cfg);
    cfg.model_path = model_dir;
    cfg.tokenizer_path = tok;
    cfg.n_threads = 2;
    cfg.max_running = 4;
    di_engine *e = NULL;
    di_error *err = NULL;
    if (di_engine_create(&cfg, &e, &err) != DI_OK) fail_msg("%s", di_error_message(err));
    g.e = e;
    return e;
}

/* A streamed request of some protocol, with what its first and last SSE
 * chunks must hold. */
typedef struct protocol_request {
    di_protocol protocol;
    const char *body, *first, *last;
} protocol_request;

/* Each request run alone (one after another), then all together: exactly
 * one DONE each, the same tokens, the protocol's first and last chunks. */
static void check_alone_and_together(di_engine *e, const protocol_request *reqs, int n)
{
    rec *alone = calloc((size_t)n, sizeof *alone), *got = calloc((size_t)n, sizeof *got);
    assert_true(alone && got);
    di_error *err = NULL;
    di_request q;
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < n; i++) {
            rec *r = pass == 0 ? &alone[i] : &got[i];
            r->cancel_at = -1;
            di_request_init(&q);
            q.protocol = reqs[i].protocol;
            q.json = reqs[i].body;
            q.json_len = strlen(reqs[i].body);
            q.on_event = on_event;
            q.user_data = r;
            if (di_submit(e, &q, &r->id, &err) != DI_OK) fail_msg("%s", di_error_message(err));
            if (pass == 0) poll_until_idle(e); /* alone: one at a time */
        }
    poll_until_idle(e); /* together */
    for (int i = 0; i < n; i++) {
        assert_int_equal(got[i].n_done, 1);
        assert_int_equal(got[i].after_done, 0);
        assert_int_equal(got[i].status, DI_OK);
        assert_int_equal(alone[i].status, DI_OK);
        assert_true(got[i].n_toks >= 1);
        assert_int_equal(got[i].n_toks, alone[i].n_toks);
        assert_memory_equal(got[i].toks, alone[i].toks, (size_t)got[i].n_toks * sizeof(int32_t));
        if (!strstr(got[i].first_sse, reqs[i].first))
            fail_msg("request %d's first chunk: %s", i, got[i].first_sse);
        if (!strstr(got[i].last_sse, reqs[i].last))
            fail_msg("request %d's last chunk: %s", i, got[i].last_sse);
        assert_true(got[i].n_chunks >= 3);
        assert_true(got[i].has_response);
    }
    free(alone);
    free(got);
}

/* Chat Completions requests to a DeepSeek-V3-shaped model (MLA, MoE; the real
 * DeepSeek V3 tokenizer, so the engine picks the V3 encoding) stream through
 * the engine's batched step beside each other, each with the tokens it gives
 * alone, one role chunk first and "data: [DONE]" last. */
static void test_deepseek_v3_chat_requests_stream_beside_each_other(void **state)
{
    (void)state;
    const char *tok = DI_ASSET_DIR "/deepseek-v3/tokenizer.json";
    if (access(tok, R_OK) != 0) skip();
    char dir[] = "/tmp/di_test_engine_XXXXXX", model_dir[600];
    di_engine *e =
        vocab_model_engine(write_dsv3_vocab_model, tok, dir, model_dir, sizeof model_dir);
    assert_int_equal(di_engine_encoding(e), DI_ENCODING_DSV3);
    static const protocol_request reqs[] = {
        {DI_PROTOCOL_CHAT,
         "{\"model\":\"deepseek-v3\",\"stream\":true,\"temperature\":0,\"max_tokens\":10,"
         "\"messages\":[{\"role\":\"user\",\"content\":\"Hello!\"}]}",
         "\"role\":\"assistant\"", "data: [DONE]\n\n"},
        {DI_PROTOCOL_CHAT,
         "{\"model\":\"deepseek-v3\",\"stream\":true,\"temperature\":0,\"max_tokens\":7,"
         "\"messages\":[{\"role\":\"system\",\"content\":\"You are terse.\"},"
         "{\"role\":\"user\",\"content\":\"Name three primes, please.\"}]}",
         "\"role\":\"assistant\"", "data: [DONE]\n\n"},
        {DI_PROTOCOL_CHAT,
         "{\"model\":\"deepseek-v3\",\"stream\":true,\"temperature\":0,\"max_tokens\":12,"
         "\"messages\":[{\"role\":\"user\",\"content\":\"\u4f60\u597d\"},"
         "{\"role\":\"assistant\",\"content\":\"Hi.\"},{\"role\":\"user\",\"content\":\"Again\"}]}",
         "\"role\":\"assistant\"", "data: [DONE]\n\n"},
    };
    check_alone_and_together(e, reqs, (int)(sizeof reqs / sizeof reqs[0]));
    assert_int_equal(di_engine_destroy(e), DI_OK);
    remove_hf_model(model_dir);
    rmdir(dir);
}

/* The complete response of a request (malloc'd), its status and finish. */
typedef struct resp_rec {
    char *response;
    int32_t toks[256];
    size_t n_toks;
    di_status status;
    di_finish finish;
    int n_done;
} resp_rec;

static void on_resp_event(void *user, const di_event *ev)
{
    resp_rec *r = user;
    if (di_event_kind_of(ev) == DI_EVENT_TOKENS) {
        size_t n;
        const int32_t *t = di_event_tokens(ev, &n);
        for (size_t i = 0; i < n && r->n_toks < 256; i++) r->toks[r->n_toks++] = t[i];
    }
    if (di_event_kind_of(ev) != DI_EVENT_DONE) return;
    r->n_done++;
    r->status = di_event_status(ev);
    r->finish = di_event_finish_reason(ev);
    size_t len = 0;
    const char *j = di_event_response_json(ev, &len);
    free(r->response);
    r->response = j ? strndup(j, len) : NULL;
}

/* Append logit_bias -100 for every token of the vocabulary [n_vocab] that
 * is all whitespace (ids/values have room for n_vocab); the new count. */
static size_t whitespace_bias(const di_tokenizer *tk, int32_t n_vocab, int32_t *ids, float *values,
                              size_t nb)
{
    for (int32_t t = 0; t < n_vocab && nb < (size_t)n_vocab; t++) {
        char *text = NULL;
        size_t len = 0;
        if (di_tokenizer_decode(tk, &t, 1, 0, &text, &len, NULL) != DI_OK) continue;
        size_t w = 0;
        while (w < len && text[w] && strchr(" \t\r\n", text[w])) w++;
        if (len && w == len) ids[nb] = t, values[nb++] = -100.0f;
        di_text_free(text);
    }
    return nb;
}

/* The arguments schema of the V3 test's strict tool, checked by hand:
 * {"n": integer in [0, 9], "s": "x" | "y"}, both required, nothing else. */
static void assert_v3_args(const char *args, const char *response)
{
    json_t *a = json_loads(args, 0, NULL);
    json_t *n = json_object_get(a, "n");
    const char *sv = json_string_value(json_object_get(a, "s"));
    if (!json_is_object(a) || json_object_size(a) != 2 || !json_is_integer(n) ||
        json_integer_value(n) < 0 || json_integer_value(n) > 9 || !sv ||
        (strcmp(sv, "x") != 0 && strcmp(sv, "y") != 0))
        fail_msg("arguments do not match the schema: %s", response);
    json_decref(a);
}

/* Submit the Chat body with the logit bias (ids, values: nb of them), wait,
 * and return its response parsed (the caller frees it and r->response): *calls
 * its message's tool_calls, *n_complete how many of them are whole (a last one
 * cut by max_tokens left out). DI_TEST_DEBUG prints the output (request k). */
static json_t *submit_biased_chat(di_engine *e, const di_tokenizer *tk, int k, const char *body,
                                  const int32_t *ids, const float *values, size_t nb, resp_rec *r,
                                  json_t **calls, size_t *n_complete)
{
    di_request q;
    di_request_init(&q);
    q.protocol = DI_PROTOCOL_CHAT;
    q.json = body;
    q.json_len = strlen(body);
    q.logit_bias_ids = ids;
    q.logit_bias_values = values;
    q.n_logit_bias = nb;
    q.on_event = on_resp_event;
    q.user_data = r;
    uint64_t id;
    di_error *err = NULL;
    if (di_submit(e, &q, &id, &err) != DI_OK) fail_msg("%s", di_error_message(err));
    poll_until_idle(e);
    assert_int_equal(r->status, DI_OK);
    assert_non_null(r->response);
    if (getenv("DI_TEST_DEBUG")) {
        char *text = NULL;
        size_t len = 0;
        di_tokenizer_decode(tk, r->toks, r->n_toks, 0, &text, &len, NULL);
        print_message("k=%d output: %s\n%s\n", k, text ? text : "?", r->response);
        di_text_free(text);
    }
    json_t *resp = json_loads(r->response, 0, NULL);
    json_t *msg = json_object_get(json_array_get(json_object_get(resp, "choices"), 0), "message");
    *calls = json_object_get(msg, "tool_calls");
    *n_complete = json_array_size(*calls);
    if (*n_complete && r->finish == DI_FINISH_LENGTH) (*n_complete)--;
    return resp;
}

/* Strict tools in the V3 tool-call tokens: a DeepSeek-V3-shaped model with
 * random weights and the real V3 vocabulary (the call markers are added
 * tokens), sampled at temperature 1 with logit_bias toward tokens that would
 * break the call (`}`, the end-of-call token, a quote). tool_choice required
 * and named force a call from the first token; auto, with logit_bias toward
 * <｜tool▁calls▁begin｜>, opens one. Each complete call is parsed back by the
 * V3 stream parser with the arguments the schema allows. */
static void test_strict_tools_constrain_v3_calls(void **state)
{
    (void)state;
    const char *tok = DI_ASSET_DIR "/deepseek-v3/tokenizer.json";
    if (access(tok, R_OK) != 0) skip();
    char dir[] = "/tmp/di_test_engine_XXXXXX", model_dir[600];
    di_engine *e =
        vocab_model_engine(write_dsv3_vocab_model, tok, dir, model_dir, sizeof model_dir);
    const di_tokenizer *tk = di_engine_tokenizer(e);
    /* the markers biased up: a model that writes them anywhere breaks an
     * unconstrained call, and with random weights they are the tokens a
     * grammar that also allows them spelled out in pieces needs taken */
    static const char *const breakers[] = {"}",
                                           "\"",
                                           "<｜tool▁call▁end｜>",
                                           "<｜tool▁sep｜>",
                                           "<｜tool▁call▁begin｜>",
                                           "<｜tool▁calls▁end｜>",
                                           "<｜tool▁calls▁begin｜>"};
    int32_t n_vocab = 129280, *ids = malloc((size_t)n_vocab * sizeof *ids);
    float *values = malloc((size_t)n_vocab * sizeof *values);
    assert_non_null(ids);
    assert_non_null(values);
    static const float up[7] = {6.0f, 6.0f, 8.0f, 8.0f, 8.0f, 8.0f, 0.0f};
    for (int i = 0; i < 7; i++) {
        assert_int_equal(di_tokenizer_token_id(tk, breakers[i], strlen(breakers[i]), &ids[i]),
                         DI_OK);
        values[i] = up[i];
    }
    /* and the whitespace tokens down: JSON may hold any run of whitespace
     * (xgrammar's layout), where random weights would stay */
    size_t nb = whitespace_bias(tk, n_vocab, ids, values, 7);
    static const char *const choices[] = {
        "\"required\"", "{\"type\":\"function\",\"function\":{\"name\":\"pick\"}}", "\"auto\""};
    int n_calls = 0;
    for (int k = 0; k < 3; k++) {
        char body[2048];
        snprintf(body, sizeof body,
                 "{\"model\":\"deepseek-v3\",\"max_tokens\":64,\"temperature\":1,\"seed\":%d,"
                 "\"messages\":[{\"role\":\"user\",\"content\":\"Pick.\"}],\"tools\":["
                 "{\"type\":\"function\",\"function\":{\"name\":\"other\",\"parameters\":{}}},"
                 "{\"type\":\"function\",\"function\":{\"name\":\"pick\",\"strict\":true,"
                 "\"parameters\":{\"type\":\"object\",\"properties\":{\"n\":{\"type\":\"integer\","
                 "\"minimum\":0,\"maximum\":9},\"s\":{\"enum\":[\"x\",\"y\"]}},\"required\":[\"n\","
                 "\"s\"],\"additionalProperties\":false}}}],\"tool_choice\":%s}",
                 k + 1, choices[k]);
        values[6] = k == 2 ? 100.0f : 0.0f;
        resp_rec r = {0};
        json_t *calls;
        size_t last;
        json_t *resp = submit_biased_chat(e, tk, k, body, ids, values, nb, &r, &calls, &last);
        if (k < 2 && !json_array_size(calls)) {
            char *text = NULL;
            size_t len = 0;
            di_tokenizer_decode(tk, r.toks, r.n_toks, 0, &text, &len, NULL);
            for (size_t i = 0; i < r.n_toks; i++) print_message("%d ", (int)r.toks[i]);
            fail_msg("no call: %s\noutput: %s", r.response, text ? text : "?");
        }
        for (size_t i = 0; i < last; i++) {
            json_t *fn = json_object_get(json_array_get(calls, i), "function");
            const char *name = json_string_value(json_object_get(fn, "name"));
            const char *args = json_string_value(json_object_get(fn, "arguments"));
            assert_non_null(name);
            assert_non_null(args);
            if (k == 1 || strcmp(name, "pick") == 0) {
                assert_string_equal(name, "pick");
                assert_v3_args(args, r.response);
            } else {
                assert_string_equal(name, "other");
                json_t *a = json_loads(args, 0, NULL);
                if (!json_is_object(a)) fail_msg("not an object: %s", r.response);
                json_decref(a);
            }
            n_calls++;
        }
        json_decref(resp);
        free(r.response);
    }
    assert_true(n_calls >= 2);
    free(ids);
    free(values);
    assert_int_equal(di_engine_destroy(e), DI_OK);
    remove_hf_model(model_dir);
    rmdir(dir);
}

/* Strict tools in DeepSeek V4's DSML: a DeepSeek-V4-shaped model with random
 * weights and the real V4 vocabulary, at temperature 1 with logit_bias toward
 * the DSML marker and the tokens that would close a value early. tool_choice
 * required (the prompt opens the block) and named, and auto with the marker
 * pushed: each complete call is parsed back by the DSML parser with
 * {"n": integer in [0, 9] (string="false"), "s": "x" | "y", "note": a raw
 * string (string="true")}, nothing else (V4 strict: every property required). */
static void test_strict_tools_constrain_dsml_calls(void **state)
{
    (void)state;
    const char *tok = DI_ASSET_DIR "/deepseek-v4/tokenizer.json";
    if (access(tok, R_OK) != 0) skip();
    char dir[] = "/tmp/di_test_engine_XXXXXX", model_dir[600];
    di_engine *e =
        vocab_model_engine(write_dsv4_vocab_model, tok, dir, model_dir, sizeof model_dir);
    assert_int_equal(di_engine_encoding(e), DI_ENCODING_DSV4);
    const di_tokenizer *tk = di_engine_tokenizer(e);
    int32_t n_vocab = di_engine_vocab_size(e), *ids = malloc((size_t)n_vocab * sizeof *ids);
    float *values = malloc((size_t)n_vocab * sizeof *values);
    assert_non_null(ids);
    assert_non_null(values);
    static const char *const up[] = {"｜DSML｜", "</", ">", "\"", "<"};
    static const float upv[] = {15.0f, 15.0f, 6.0f, 6.0f, 0.0f};
    size_t nu = sizeof up / sizeof up[0];
    for (size_t i = 0; i < nu; i++) {
        assert_int_equal(di_tokenizer_token_id(tk, up[i], strlen(up[i]), &ids[i]), DI_OK);
        values[i] = upv[i];
    }
    size_t nb = whitespace_bias(tk, n_vocab, ids, values, nu);
    static const char *const choices[] = {
        "\"required\"", "{\"type\":\"function\",\"function\":{\"name\":\"pick\"}}", "\"auto\""};
    int n_calls = 0;
    for (int k = 0; k < 3; k++) {
        char body[2048];
        snprintf(body, sizeof body,
                 "{\"model\":\"DeepSeek-V4-Pro\",\"max_tokens\":140,\"temperature\":1,\"seed\":%d,"
                 "\"thinking\":{\"type\":\"disabled\"},"
                 "\"messages\":[{\"role\":\"user\",\"content\":\"Pick.\"}],\"tools\":["
                 "{\"type\":\"function\",\"function\":{\"name\":\"pick\",\"strict\":true,"
                 "\"parameters\":{\"type\":\"object\",\"properties\":{\"n\":{\"type\":\"integer\","
                 "\"minimum\":0,\"maximum\":9},\"s\":{\"type\":\"string\",\"enum\":[\"x\",\"y\"]},"
                 "\"note\":{\"type\":\"string\"}},\"required\":[\"n\",\"s\",\"note\"],"
                 "\"additionalProperties\":false}}}],\"tool_choice\":%s}",
                 k + 1, choices[k]);
        values[4] = k == 2 ? 14.0f : 0.0f; /* auto: "<" and the marker may open a call */
        resp_rec r = {0};
        json_t *calls;
        size_t last;
        json_t *resp = submit_biased_chat(e, tk, k, body, ids, values, nb, &r, &calls, &last);
        for (size_t i = 0; i < last; i++) {
            json_t *fn = json_object_get(json_array_get(calls, i), "function");
            assert_string_equal(json_string_value(json_object_get(fn, "name")), "pick");
            json_t *a = json_loads(json_string_value(json_object_get(fn, "arguments")), 0, NULL);
            json_t *n = json_object_get(a, "n"), *note = json_object_get(a, "note");
            const char *sv = json_string_value(json_object_get(a, "s"));
            if (!json_is_object(a) || json_object_size(a) != 3 || !json_is_integer(n) ||
                json_integer_value(n) < 0 || json_integer_value(n) > 9 || !sv ||
                (strcmp(sv, "x") != 0 && strcmp(sv, "y") != 0) || !json_is_string(note))
                fail_msg("arguments do not match the schema: %s", r.response);
            json_decref(a);
            n_calls++;
        }
        json_decref(resp);
        free(r.response);
    }
    assert_true(n_calls >= 2);
    free(ids);
    free(values);
    assert_int_equal(di_engine_destroy(e), DI_OK);
    remove_hf_model(model_dir);
    rmdir(dir);
}

/* A DeepSeek-V4-shaped model with the real DeepSeek V4 tokenizer: the engine
 * picks the V4 encoding and the DSML parser, and a Chat Completions, a
 * Messages and a Responses request stream beside each other through its
 * batched steps, each with the tokens it gives alone and exactly one DONE;
 * the stream's first and last chunks are each protocol's. Thinking is off in
 * each (thinking mode ignores temperature, as DeepSeek's API does, so greedy
 * needs it off). */
static void test_deepseek_v4_requests_of_every_protocol_stream_beside_each_other(void **state)
{
    (void)state;
    const char *tok = DI_ASSET_DIR "/deepseek-v4/tokenizer.json";
    if (access(tok, R_OK) != 0) skip();
    char dir[] = "/tmp/di_test_engine_XXXXXX", model_dir[600];
    di_engine *e =
        vocab_model_engine(write_dsv4_vocab_model, tok, dir, model_dir, sizeof model_dir);
    assert_int_equal(di_engine_encoding(e), DI_ENCODING_DSV4);
    static const protocol_request reqs[] = {
        {DI_PROTOCOL_CHAT,
         "{\"model\":\"DeepSeek-V4-Pro\",\"stream\":true,\"temperature\":0,\"max_tokens\":10,"
         "\"thinking\":{\"type\":\"disabled\"},\"messages\":[{\"role\":\"user\",\"content\":"
         "\"Hello!\"}]}",
         "\"role\":\"assistant\"", "data: [DONE]\n\n"},
        {DI_PROTOCOL_MESSAGES,
         "{\"model\":\"DeepSeek-V4-Pro\",\"stream\":true,\"temperature\":0,\"max_tokens\":7,"
         "\"thinking\":{\"type\":\"disabled\"},\"system\":\"You are "
         "terse.\",\"messages\":[{\"role\":\"user\","
         "\"content\":\"Name three primes.\"}]}",
         "event: message_start", "event: message_stop"},
        {DI_PROTOCOL_RESPONSES,
         "{\"model\":\"DeepSeek-V4-Pro\",\"stream\":true,\"temperature\":0,"
         "\"max_output_tokens\":12,\"reasoning\":{\"effort\":\"none\"},\"input\":\"\u4f60\u597d\"}",
         "event: response.created", "event: response.incomplete"}, /* cut by max_output_tokens */
    };
    check_alone_and_together(e, reqs, (int)(sizeof reqs / sizeof reqs[0]));
    assert_int_equal(di_engine_destroy(e), DI_OK);
    remove_hf_model(model_dir);
    rmdir(dir);
}

/* Chat `n` through the V4 encoding on a DeepSeek-V4-shaped model (its caches
 * are each sequence's own: every choice computes the prompt itself): greedy
 * choices each equal the n = 1 answer, seeded choice i equals the request
 * with seed + i, and the stream ends with one [DONE]. */
typedef struct choices_rec {
    int32_t toks[3][MAX_OUT];
    int n[3], n_done, n_done_sse;
    di_status status;
    uint32_t completion_tokens;
} choices_rec;

static void on_choice_event(void *user, const di_event *ev)
{
    choices_rec *r = user;
    uint32_t c = di_event_choice_index(ev);
    size_t n;
    if (di_event_kind_of(ev) == DI_EVENT_TOKENS) {
        assert_true(c < 3);
        const int32_t *t = di_event_tokens(ev, &n);
        for (size_t i = 0; i < n && r->n[c] < MAX_OUT; i++) r->toks[c][r->n[c]++] = t[i];
    } else if (di_event_kind_of(ev) == DI_EVENT_CHUNK) {
        const char *sse = di_event_chunk_sse(ev, &n);
        r->n_done_sse += sse && strcmp(sse, "data: [DONE]\n\n") == 0;
    } else if (di_event_kind_of(ev) == DI_EVENT_DONE) {
        r->n_done++;
        r->status = di_event_status(ev);
        r->completion_tokens = di_event_completion_tokens(ev);
    }
}

static void run_choices(di_engine *e, const char *fields, choices_rec *r)
{
    char body[512];
    snprintf(body, sizeof body,
             "{\"model\":\"DeepSeek-V4-Pro\",\"stream\":true,\"max_tokens\":8,\"thinking\":{"
             "\"type\":\"disabled\"},%s,\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}]}",
             fields);
    memset(r, 0, sizeof *r);
    di_request q;
    di_request_init(&q);
    q.protocol = DI_PROTOCOL_CHAT;
    q.json = body;
    q.json_len = strlen(body);
    q.on_event = on_choice_event;
    q.user_data = r;
    uint64_t id;
    di_error *err = NULL;
    if (di_submit(e, &q, &id, &err) != DI_OK) fail_msg("%s", di_error_message(err));
    poll_until_idle(e);
    assert_int_equal(r->n_done, 1);
    assert_int_equal(r->n_done_sse, 1);
    assert_int_equal(r->status, DI_OK);
}

static void test_deepseek_v4_chat_n_choices(void **state)
{
    (void)state;
    const char *tok = DI_ASSET_DIR "/deepseek-v4/tokenizer.json";
    if (access(tok, R_OK) != 0) skip();
    char dir[] = "/tmp/di_test_engine_XXXXXX", model_dir[600];
    di_engine *e =
        vocab_model_engine(write_dsv4_vocab_model, tok, dir, model_dir, sizeof model_dir);
    choices_rec all, one;
    run_choices(e, "\"n\":3,\"temperature\":0", &all);
    run_choices(e, "\"temperature\":0", &one);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(all.n[i], one.n[0]);
        assert_memory_equal(all.toks[i], one.toks[0], (size_t)one.n[0] * sizeof(int32_t));
    }
    assert_int_equal(all.completion_tokens, 3 * one.completion_tokens);
    run_choices(e, "\"n\":2,\"seed\":40,\"temperature\":1", &all);
    for (int i = 0; i < 2; i++) {
        char f[64];
        snprintf(f, sizeof f, "\"seed\":%d,\"temperature\":1", 40 + i);
        run_choices(e, f, &one);
        assert_int_equal(all.n[i], one.n[0]);
        assert_memory_equal(all.toks[i], one.toks[0], (size_t)one.n[0] * sizeof(int32_t));
    }
    assert_int_equal(di_engine_destroy(e), DI_OK);
    remove_hf_model(model_dir);
    rmdir(dir);
}

/* ---- SmolLM2 (when the asset is fetched) ---- */

#define SMOL DI_ASSET_DIR "/smollm2-135m-instruct/SmolLM2-135M-Instruct.Q4_1.gguf"

static void test_smollm2_text_and_batch_invariance(void **state)
{
    (void)state;
    if (access(SMOL, R_OK) != 0) skip();
    di_engine *e = make_engine(SMOL, 8, 0, NULL, NULL);
    g.e = e;
    const di_tokenizer *tok = di_engine_tokenizer(e);
    assert_non_null(tok);
    assert_int_equal(di_engine_encoding(e), DI_ENCODING_CHATML);
    const char *texts[4] = {"The capital of France is",
                            "def fibonacci(n):", "Once upon a time, there", "1, 2, 3, 4,"};
    spec s[4];
    rec alone[4], got[4];
    int32_t *ids[4];
    for (int i = 0; i < 4; i++) {
        size_t n;
        assert_int_equal(di_tokenizer_encode(tok, texts[i], strlen(texts[i]), 0, &ids[i], &n, NULL),
                         DI_OK);
        di_request_init(&s[i].req);
        s[i].req.tokens = ids[i];
        s[i].req.n_tokens = n;
        s[i].req.max_tokens = 10;
        s[i].req.temperature = i % 2 ? 0.8f : 0.0f;
        s[i].req.seed = 77 + i;
        s[i].req.on_event = on_event;
        run_alone(e, &s[i], &alone[i]);
        /* The text events are the decoded tokens (stop tokens excluded). */
        int n_text = alone[i].n_toks;
        if (alone[i].finish == DI_FINISH_STOP) n_text--;
        char *dec;
        size_t len;
        assert_int_equal(
            di_tokenizer_decode(tok, alone[i].toks, (size_t)n_text, 0, &dec, &len, NULL), DI_OK);
        assert_int_equal(len, alone[i].text_len);
        assert_memory_equal(dec, alone[i].text, len);
        di_text_free(dec);
    }
    for (int i = 0; i < 4; i++) {
        memset(&got[i], 0, sizeof got[i]);
        got[i].cancel_at = -1;
        s[i].req.user_data = &got[i];
        assert_int_equal(di_submit(e, &s[i].req, &got[i].id, NULL), DI_OK);
    }
    poll_until_idle(e);
    for (int i = 0; i < 4; i++) {
        check_against_alone(&got[i], &alone[i]);
        assert_int_equal(got[i].status, DI_OK);
        di_tokens_free(ids[i]);
    }
    assert_int_equal(di_engine_destroy(e), DI_OK);
}

/* SmolLM2 speaks ChatML: a Chat request with a tool, the function named by
 * tool_choice, answered greedily, ends in that call (the prompt writes the
 * name; the model writes the arguments), with <|im_end|> as a stop token. */
/* Run one protocol request to its end; exactly one terminal event. */
static void run_protocol(di_engine *e, di_protocol protocol, const char *body, rec *r)
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
    if (di_submit(e, &q, &r->id, &err) != DI_OK) fail_msg("%s", di_error_message(err));
    poll_until_idle(e);
    assert_int_equal(r->n_done, 1);
}

static void test_smollm2_chatml_tool_call(void **state)
{
    (void)state;
    if (access(SMOL, R_OK) != 0) skip();
    /* an encoding whose turn tokens the tokenizer lacks is refused, not rendered as text */
    di_engine_config bad;
    di_engine_config_init(&bad);
    bad.model_path = SMOL;
    bad.encoding = DI_ENCODING_R1;
    di_engine *none = NULL;
    di_error *berr = NULL;
    assert_int_equal(di_engine_create(&bad, &none, &berr), DI_ERR_UNSUPPORTED);
    assert_null(none);
    assert_non_null(strstr(di_error_message(berr), "Assistant"));
    di_error_free(berr);
    di_engine *e = make_engine(SMOL, 4, 0, NULL, NULL);
    g.e = e;
    assert_int_equal(di_engine_encoding(e), DI_ENCODING_CHATML);
    const char *body =
        "{\"model\":\"smollm2\",\"temperature\":0,\"max_tokens\":64,\"tools\":[{\"type\":"
        "\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":{\"type\":"
        "\"object\",\"properties\":{\"city\":{\"type\":\"string\"}}}}}],\"tool_choice\":{"
        "\"type\":\"function\",\"function\":{\"name\":\"get_weather\"}},\"messages\":[{"
        "\"role\":\"user\",\"content\":\"What is the weather in Paris?\"}]}";
    rec r;
    run_protocol(e, DI_PROTOCOL_CHAT, body, &r);
    assert_int_equal(r.status, DI_OK);
    assert_string_equal(r.finish_text, "tool_calls");
    assert_int_equal(r.finish, DI_FINISH_STOP); /* at <|im_end|> or the end of its calls */
    /* Messages too: the named tool comes back as its tool_use */
    const char *msgs =
        "{\"model\":\"smollm2\",\"temperature\":0,\"max_tokens\":64,\"tools\":[{\"name\":"
        "\"get_weather\",\"input_schema\":{\"type\":\"object\",\"properties\":{\"city\":{"
        "\"type\":\"string\"}}}}],\"tool_choice\":{\"type\":\"tool\",\"name\":\"get_weather\"},"
        "\"messages\":[{\"role\":\"user\",\"content\":\"What is the weather in Paris?\"}]}";
    rec m;
    run_protocol(e, DI_PROTOCOL_MESSAGES, msgs, &m);
    assert_int_equal(m.status, DI_OK);
    assert_string_equal(m.finish_text, "tool_use");
    /* a request that a stop sequence ends inside a push still reports its finish
     * reason in DONE (it was lost: the stream had finished before DI_EVENT_DONE) */
    const char *stopped = "{\"model\":\"smollm2\",\"temperature\":0,\"max_tokens\":32,\"stop\":"
                          "[\" \"],\"messages\":[{\"role\":\"user\",\"content\":\"Hi!\"}]}";
    rec st;
    run_protocol(e, DI_PROTOCOL_CHAT, stopped, &st);
    assert_int_equal(st.status, DI_OK);
    assert_string_equal(st.finish_text, "stop");
    assert_true(st.n_toks < 32);
    assert_null(memchr(st.text, ' ', st.text_len));
    assert_int_equal(di_engine_destroy(e), DI_OK);
}

/* The entries of a protocol response's logprobs array: each one's logprob is
 * the log probability the engine computed for its token (di_event_logprobs),
 * in the order of the tokens, and under greedy decoding its first alternative
 * is the token itself; n_top alternatives each. */
static void check_entries(const lp_rec *r, json_t *entries, size_t n_top)
{
    assert_true(json_is_array(entries));
    size_t n = json_array_size(entries);
    assert_true(n >= 1 && n <= (size_t)r->n);
    /* where the entries start among the tokens (a stripped token gives none) */
    int from = -1;
    for (int k = 0; k + (int)n <= r->n && from < 0; k++) {
        int all = 1;
        for (size_t j = 0; j < n && all; j++) {
            json_t *lp = json_object_get(json_array_get(entries, j), "logprob");
            all = json_is_real(lp) && (float)json_real_value(lp) == r->lp[k + (int)j];
        }
        if (all) from = k;
    }
    if (from < 0) fail_msg("the entries' log probabilities are not the tokens'");
    for (size_t j = 0; j < n; j++) {
        json_t *e = json_array_get(entries, j), *top = json_object_get(e, "top_logprobs");
        assert_int_equal(json_array_size(top), n_top);
        if (n_top) {
            json_t *first = json_array_get(top, 0);
            assert_true(json_equal(json_object_get(first, "token"), json_object_get(e, "token")));
            assert_true(json_equal(json_object_get(first, "bytes"), json_object_get(e, "bytes")));
        }
    }
}

/* Chat logprobs / top_logprobs and Responses' output text log probabilities
 * through the engine (SmolLM2, greedy): the complete responses carry, in the
 * protocol's place, the values the engine computed for the tokens (their
 * agreement with transformers is test_token_logprobs_equal_transformers_log_softmax's). */
static void test_protocol_requests_return_logprobs(void **state)
{
    (void)state;
    if (access(SMOL, R_OK) != 0) skip();
    di_engine *e = make_engine(SMOL, 4, 0, NULL, NULL);
    static const struct {
        int protocol;
        const char *body;
        size_t n_top;
    } cases[] = {
        {DI_PROTOCOL_CHAT,
         "{\"model\":\"m\",\"temperature\":0,\"max_tokens\":8,\"logprobs\":true,"
         "\"top_logprobs\":3,\"messages\":[{\"role\":\"user\",\"content\":\"Hi!\"}]}",
         3},
        {DI_PROTOCOL_CHAT,
         "{\"model\":\"m\",\"temperature\":0,\"max_tokens\":8,\"logprobs\":true,"
         "\"stream\":true,\"messages\":[{\"role\":\"user\",\"content\":\"Hi!\"}]}",
         0},
        {DI_PROTOCOL_RESPONSES,
         "{\"model\":\"m\",\"temperature\":0,\"max_output_tokens\":16,\"top_logprobs\":2,"
         "\"input\":\"Hi!\"}",
         2},
        {DI_PROTOCOL_RESPONSES,
         "{\"model\":\"m\",\"temperature\":0,\"max_output_tokens\":16,\"include\":["
         "\"message.output_text.logprobs\"],\"input\":\"Hi!\"}",
         0},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        lp_rec *r = calloc(1, sizeof *r);
        assert_non_null(r);
        di_request q;
        di_request_init(&q);
        q.protocol = cases[c].protocol;
        q.json = cases[c].body;
        q.json_len = strlen(cases[c].body);
        q.on_event = on_lp_event;
        q.user_data = r;
        uint64_t id;
        di_error *err = NULL;
        if (di_submit(e, &q, &id, &err) != DI_OK) fail_msg("%s", di_error_message(err));
        poll_until_idle(e);
        assert_int_equal(r->status, DI_OK);
        assert_false(r->bad_shape);
        assert_true(r->n >= 1);
        json_error_t jerr;
        json_t *resp = json_loads(r->response, 0, &jerr);
        assert_non_null(resp);
        json_t *entries;
        if (cases[c].protocol == DI_PROTOCOL_CHAT) {
            entries = json_object_get(
                json_object_get(json_array_get(json_object_get(resp, "choices"), 0), "logprobs"),
                "content");
        } else {
            json_t *out = json_object_get(resp, "output"), *msg = NULL;
            for (size_t i = 0; i < json_array_size(out); i++)
                if (json_is_string(json_object_get(json_array_get(out, i), "type")) &&
                    strcmp(json_string_value(json_object_get(json_array_get(out, i), "type")),
                           "message") == 0)
                    msg = json_array_get(out, i);
            assert_non_null(msg);
            entries =
                json_object_get(json_array_get(json_object_get(msg, "content"), 0), "logprobs");
        }
        check_entries(r, entries, cases[c].n_top);
        json_decref(resp);
        free(r->response);
        free(r);
    }
    /* not asked: none (Chat's logprobs null; the tokens' events carry none) */
    lp_rec *r = calloc(1, sizeof *r);
    assert_non_null(r);
    const char *plain = "{\"model\":\"m\",\"temperature\":0,\"max_tokens\":4,\"messages\":[{"
                        "\"role\":\"user\",\"content\":\"Hi!\"}]}";
    di_request q;
    di_request_init(&q);
    q.protocol = DI_PROTOCOL_CHAT;
    q.json = plain;
    q.json_len = strlen(plain);
    q.on_event = on_lp_event;
    q.user_data = r;
    uint64_t id;
    assert_int_equal(di_submit(e, &q, &id, NULL), DI_OK);
    poll_until_idle(e);
    assert_int_equal(r->status, DI_OK);
    assert_true(r->bad_shape); /* its TOKENS events have no log probabilities */
    assert_non_null(strstr(r->response, "\"logprobs\":null"));
    free(r->response);
    free(r);
    /* a body asking for more alternatives than OpenAI allows is refused, naming it */
    const char *bad = "{\"model\":\"m\",\"logprobs\":true,\"top_logprobs\":21,\"messages\":[{"
                      "\"role\":\"user\",\"content\":\"Hi!\"}]}";
    q.json = bad;
    q.json_len = strlen(bad);
    expect_submit_error(e, &q, DI_ERR_INVALID_REQUEST, "top_logprobs");
    assert_int_equal(di_engine_destroy(e), DI_OK);
}

/* What a token request with stop strings saw: its tokens, the text length when
 * each token's event came (the text of the tokens before it), the text. */
typedef struct stop_rec {
    int32_t toks[64];
    size_t text_at[64];
    int n, n_done;
    char text[4096];
    size_t text_len;
    di_finish finish;
    di_status status;
} stop_rec;

static void on_stop_event(void *user, const di_event *ev)
{
    stop_rec *r = user;
    size_t n;
    const char *t;
    switch (di_event_kind_of(ev)) {
    case DI_EVENT_TOKENS: {
        const int32_t *ids = di_event_tokens(ev, &n);
        for (size_t i = 0; i < n && r->n < 64; i++, r->n++) {
            r->toks[r->n] = ids[i];
            r->text_at[r->n] = r->text_len;
        }
        break;
    }
    case DI_EVENT_TEXT:
        t = di_event_text(ev, &n);
        assert_true(r->text_len + n < sizeof r->text);
        memcpy(r->text + r->text_len, t, n);
        r->text_len += n;
        r->text[r->text_len] = '\0';
        break;
    case DI_EVENT_DONE:
        r->n_done++;
        r->status = di_event_status(ev);
        r->finish = di_event_finish_reason(ev);
        break;
    default: break;
    }
}

static void run_stops(di_engine *e, const int32_t *prompt, size_t np, const char *const *stops,
                      size_t n_stops, stop_rec *r)
{
    memset(r, 0, sizeof *r);
    di_request q;
    di_request_init(&q);
    q.tokens = prompt;
    q.n_tokens = np;
    q.temperature = 0.0f;
    q.max_tokens = 24;
    q.ignore_eos = 1;
    q.stop_strings = stops;
    q.n_stop_strings = n_stops;
    q.on_event = on_stop_event;
    q.user_data = r;
    uint64_t id;
    di_error *err = NULL;
    if (di_submit(e, &q, &id, &err) != DI_OK) fail_msg("%s", di_error_message(err));
    poll_until_idle(e);
    assert_int_equal(r->n_done, 1);
    assert_int_equal(r->status, DI_OK);
}

/* Stop strings of token requests are matched on the decoded text across token
 * boundaries. The oracle is the same greedy request without them: with a
 * string cut from its text across two tokens' boundary, the output must be its
 * text up to the string's first occurrence, its tokens up to the one that
 * completes the string, finish DI_FINISH_STOP; the earliest of two strings
 * wins; a string whose start is held at the end is released. */
static void test_stop_strings_match_across_token_boundaries(void **state)
{
    (void)state;
    if (access(SMOL, R_OK) != 0) skip();
    di_engine *e = make_engine(SMOL, 4, 0, NULL, NULL);
    const char *ptext = "Once upon a time, there";
    int32_t *prompt;
    size_t np;
    assert_int_equal(
        di_tokenizer_encode(di_engine_tokenizer(e), ptext, strlen(ptext), 0, &prompt, &np, NULL),
        DI_OK);
    stop_rec *ref = calloc(1, sizeof *ref), *got = calloc(1, sizeof *got);
    assert_non_null(ref);
    assert_non_null(got);
    run_stops(e, prompt, np, NULL, 0, ref);
    assert_int_equal(ref->n, 24);
    assert_int_equal(ref->finish, DI_FINISH_LENGTH);
    /* a boundary with two ASCII bytes of text on each side */
    int b = -1;
    for (int i = 2; i < ref->n - 1 && b < 0; i++) {
        size_t at = ref->text_at[i], after = ref->text_at[i + 1];
        if (at >= 2 && after >= at + 2 && !(ref->text[at - 2] & 0x80) &&
            !(ref->text[at - 1] & 0x80) && !(ref->text[at] & 0x80) && !(ref->text[at + 1] & 0x80))
            b = i;
    }
    assert_true(b > 0);
    char cut[8] = {0};
    memcpy(cut, ref->text + ref->text_at[b] - 2, 4);
    size_t pos = (size_t)(strstr(ref->text, cut) - ref->text);
    int want_n = 0; /* the tokens up to the one whose text completes the string */
    while (want_n < ref->n && ref->text_at[want_n] < pos + 4) want_n++;
    print_message("stop string \"%s\" across tokens %d|%d: text cut at byte %zu, %d tokens\n", cut,
                  b - 1, b, pos, want_n);
    const char *one[] = {cut};
    run_stops(e, prompt, np, one, 1, got);
    assert_int_equal(got->finish, DI_FINISH_STOP);
    assert_int_equal(got->text_len, pos);
    assert_memory_equal(got->text, ref->text, pos);
    assert_int_equal(got->n, want_n);
    assert_memory_equal(got->toks, ref->toks, (size_t)want_n * sizeof *got->toks);
    /* two strings: the one that appears first wins, whatever their order */
    char last[8] = {0};
    memcpy(last, ref->text + ref->text_len - 3, 3);
    if (strstr(ref->text, last) > ref->text + pos) {
        const char *two[] = {last, cut};
        run_stops(e, prompt, np, two, 2, got);
        assert_int_equal(got->finish, DI_FINISH_STOP);
        assert_int_equal(got->text_len, pos);
    }
    /* a string that never completes, whose start ends the text: held, then
     * released at the end (the text is whole) */
    char tail[16];
    snprintf(tail, sizeof tail, "%c%c#@!", ref->text[ref->text_len - 2],
             ref->text[ref->text_len - 1]);
    assert_null(strstr(ref->text, tail));
    const char *never[] = {tail};
    run_stops(e, prompt, np, never, 1, got);
    assert_int_equal(got->finish, DI_FINISH_LENGTH);
    assert_int_equal(got->n, ref->n);
    assert_int_equal(got->text_len, ref->text_len);
    assert_memory_equal(got->text, ref->text, ref->text_len);
    /* errors name the field */
    di_request q;
    di_request_init(&q);
    q.tokens = prompt;
    q.n_tokens = np;
    q.on_event = on_stop_event;
    const char *empty[] = {""}, *nul[] = {NULL}, *bad_utf8[] = {"a\xff"};
    char big[300];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    const char *too_long[] = {big};
    const char *many[17];
    for (int i = 0; i < 17; i++) many[i] = "x";
    static const struct {
        int which;
        size_t n;
        const char *msg;
    } bad[] = {
        {0, 1, "stop_strings[0]: 0 bytes"},
        {1, 1, "stop_strings[0]: NULL"},
        {2, 1, "stop_strings[0]: not valid UTF-8"},
        {3, 1, "stop_strings[0]: 299 bytes"},
        {4, 17, "at most 16"},
        {5, 1, "stop_strings: must not be NULL"},
    };
    const char *const *arrays[] = {empty, nul, bad_utf8, too_long, many, NULL};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        q.stop_strings = arrays[bad[i].which];
        q.n_stop_strings = bad[i].n;
        expect_submit_error(e, &q, DI_ERR_INVALID_ARGUMENT, bad[i].msg);
    }
    di_request_init(&q);
    q.protocol = DI_PROTOCOL_CHAT;
    q.json = "{}";
    q.json_len = 2;
    q.on_event = on_stop_event;
    q.stop_strings = one;
    q.n_stop_strings = 1;
    expect_submit_error(e, &q, DI_ERR_INVALID_ARGUMENT, "stop_strings: token requests only");
    di_tokens_free(prompt);
    free(ref);
    free(got);
    assert_int_equal(di_engine_destroy(e), DI_OK);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_greedy_tokens_equal_transformers),
        cmocka_unit_test(test_token_logprobs_equal_transformers_log_softmax),
        cmocka_unit_test(test_protocol_requests_return_logprobs),
        cmocka_unit_test(test_stop_strings_match_across_token_boundaries),
        cmocka_unit_test(test_concurrent_requests_with_random_cancels_equal_alone),
        cmocka_unit_test(test_deepseek_concurrent_requests_with_random_cancels_equal_alone),
        cmocka_unit_test(test_deepseek_v4_concurrent_requests_with_random_cancels_equal_alone),
        cmocka_unit_test(test_deepseek_v4_preempted_requests_give_the_same_tokens),
        cmocka_unit_test(test_deepseek_v4_requests_of_every_protocol_stream_beside_each_other),
        cmocka_unit_test(test_deepseek_v4_chat_n_choices),
        cmocka_unit_test(test_deepseek_preempted_requests_give_the_same_tokens),
        cmocka_unit_test(test_preempted_requests_give_the_same_tokens),
        cmocka_unit_test(test_random_cancels_many_requests),
        cmocka_unit_test(test_submit_from_threads_each_request_one_terminal_event),
        cmocka_unit_test(test_callbacks_may_submit_and_cancel_but_not_poll_or_destroy),
        cmocka_unit_test(test_context_limit_ends_with_length),
        cmocka_unit_test(test_request_outgrowing_the_kv_budget_ends_with_a_clear_status),
        cmocka_unit_test(test_cancel_statuses),
        cmocka_unit_test(test_invalid_requests_are_rejected_at_once),
        cmocka_unit_test(test_engine_config_errors_name_the_field),
        cmocka_unit_test(test_load_progress_reaches_one_and_can_cancel),
        cmocka_unit_test(test_destroy_delivers_every_terminal_event),
        cmocka_unit_test(test_a_waiting_poller_excludes_destroy_and_other_pollers),
        cmocka_unit_test(test_chat_request_streams_protocol_chunks),
        cmocka_unit_test(test_chat_response_format_constrains_the_answer),
        cmocka_unit_test(test_token_request_grammar_ends),
        cmocka_unit_test(test_event_fd_wakes_an_epoll_loop),
        cmocka_unit_test(test_gguf_without_chat_tokens_serves_token_requests),
        cmocka_unit_test(test_deepseek_v3_chat_requests_stream_beside_each_other),
        cmocka_unit_test(test_strict_tools_constrain_v3_calls),
        cmocka_unit_test(test_strict_tools_constrain_dsml_calls),
        cmocka_unit_test(test_smollm2_text_and_batch_invariance),
        cmocka_unit_test(test_smollm2_chatml_tool_call),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
