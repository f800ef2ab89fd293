/* Chat Completions `n` (several choices of one request):
 *   - the block manager's fork: the full blocks are shared (reference counts),
 *     the partial one is not, and every block comes back;
 *   - seeded: choice i equals a request of its own with seed + i (an
 *     independent run as the oracle); greedy: every choice equals the n = 1
 *     answer;
 *   - the prompt is prefilled once (the engine's prefill counter);
 *   - streaming: every chunk parses, indices in range, each choice finishes
 *     once, one usage chunk summing the choices, one [DONE] and last;
 *   - cancellation mid-stream ends the request once; pre-emption of forked
 *     choices recomputes the same tokens;
 *   - n out of range, of the wrong type, or beyond the engine's running set.
 * Real-model cases run on SmolLM2-135M-Instruct (skipped without it). */
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

#define SMOL DI_ASSET_DIR "/smollm2-135m-instruct/SmolLM2-135M-Instruct.Q4_1.gguf"

enum { B = MODEL_KV_BLOCK, MAX_N = 8, MAX_OUT = 128 };

/* Under the sanitizers (ten times slower) the pre-emption run is half as long
 * (still past the cache's room). */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
enum { PREEMPT_TOKENS = 30 };
#else
enum { PREEMPT_TOKENS = 60 };
#endif

/* ---- the block manager's fork ---- */

static void test_pool_fork_shares_full_blocks_only(void **state)
{
    (void)state;
    kv_pool p;
    assert_int_equal(kv_pool_init(&p, 16, 7), DI_OK);
    backend_kv_seq src, a, b;
    assert_int_equal(kv_pool_seq_init(&p, &src, 256), DI_OK);
    assert_int_equal(kv_pool_seq_init(&p, &a, 256), DI_OK);
    assert_int_equal(kv_pool_seq_init(&p, &b, 256), DI_OK);
    assert_int_equal(kv_pool_seq_reserve(&p, &src, 2 * B + 5), DI_OK); /* 2 full + 1 partial */
    src.n_tokens = 2 * B + 5;
    int32_t avail = kv_pool_available(&p);
    /* the choices compute at least the prompt's last token: n_tokens - 1 */
    assert_int_equal(kv_pool_seq_fork(&p, &a, &src, 2 * B + 4), 2 * B);
    assert_int_equal(kv_pool_seq_fork(&p, &b, &src, 2 * B), 2 * B); /* block-aligned: both */
    assert_int_equal(kv_pool_available(&p), avail); /* nothing taken, nothing copied */
    for (int k = 0; k < 2; k++) {
        assert_int_equal(a.block_table[k], src.block_table[k]);
        assert_int_equal(p.ref[src.block_table[k]], 3);
    }
    assert_int_equal(p.ref[src.block_table[2]], 1); /* the partial block stays src's */
    assert_int_equal(a.n_tokens, 2 * B);
    /* a grows into a block of its own; a fork of a non-empty sequence takes nothing */
    assert_int_equal(kv_pool_seq_reserve(&p, &a, 2 * B + 5), DI_OK);
    assert_true(a.block_table[2] != src.block_table[2]);
    assert_int_equal(kv_pool_seq_fork(&p, &a, &src, 2 * B), 0);
    /* truncation never cuts into the shared blocks */
    kv_pool_seq_truncate(&p, &a, B);
    assert_int_equal(a.n_blocks, 2);
    assert_int_equal(a.n_tokens, 2 * B);
    kv_pool_seq_free(&p, &src);
    assert_int_equal(p.ref[a.block_table[0]], 2);
    kv_pool_seq_free(&p, &a);
    kv_pool_seq_free(&p, &b);
    assert_int_equal(kv_pool_available(&p), 16);
    kv_pool_free(&p);
}

/* ---- through the engine ---- */

typedef struct rec {
    di_engine *e;
    int32_t toks[MAX_N][MAX_OUT];
    int n_toks[MAX_N];
    int n_done, n_chunks, cancel_at, n_tokens_events;
    di_status status;
    char *response;
    json_t *chunks; /* array of every chunk (null for [DONE]), in order */
    uint32_t completion_tokens, prompt_tokens;
} rec;

static void rec_clear(rec *r)
{
    free(r->response);
    json_decref(r->chunks);
    memset(r, 0, sizeof *r);
}

static void on_event(void *user, const di_event *ev)
{
    rec *r = user;
    size_t n;
    uint32_t c = di_event_choice_index(ev);
    switch (di_event_kind_of(ev)) {
    case DI_EVENT_TOKENS: {
        assert_true(c < MAX_N);
        const int32_t *t = di_event_tokens(ev, &n);
        for (size_t i = 0; i < n && r->n_toks[c] < MAX_OUT; i++) r->toks[c][r->n_toks[c]++] = t[i];
        if (r->cancel_at > 0 && ++r->n_tokens_events == r->cancel_at)
            assert_int_equal(di_cancel(r->e, di_event_request_id(ev), NULL), DI_OK);
        break;
    }
    case DI_EVENT_CHUNK: {
        const char *j = di_event_chunk_json(ev, &n);
        if (!r->chunks) r->chunks = json_array();
        json_t *v = json_null();
        if (j) {
            json_error_t jerr;
            v = json_loadb(j, n, 0, &jerr);
            if (!v) fail_msg("a chunk does not parse: %s (%.*s)", jerr.text, (int)n, j);
            /* each choice's chunks carry its index */
            json_t *ch = json_object_get(v, "choices");
            if (json_array_size(ch))
                assert_int_equal(
                    json_integer_value(json_object_get(json_array_get(ch, 0), "index")), c);
        } else {
            assert_int_equal(c, 0);
        }
        json_array_append_new(r->chunks, v);
        break;
    }
    case DI_EVENT_DONE: {
        assert_int_equal(c, 0);
        r->n_done++;
        r->status = di_event_status(ev);
        r->completion_tokens = di_event_completion_tokens(ev);
        r->prompt_tokens = di_event_prompt_tokens(ev);
        const char *j = di_event_response_json(ev, &n);
        if (j) r->response = strndup(j, n);
        break;
    }
    default: break;
    }
}

static int n_preempted;
static void count_preemptions(void *user, di_log_level level, const char *message)
{
    (void)level;
    (void)user;
    if (strstr(message, "pre-empted")) __atomic_add_fetch(&n_preempted, 1, __ATOMIC_RELAXED);
}

static di_engine *make_engine(int max_running, int64_t kv_bytes, int no_prefix_cache)
{
    di_engine_config cfg;
    di_engine_config_init(&cfg);
    cfg.model_path = SMOL;
    cfg.n_threads = 2;
    cfg.n_ctx = 512;
    cfg.n_batch = 64;
    cfg.max_running = max_running;
    cfg.kv_cache_bytes = kv_bytes;
    cfg.disable_prefix_cache = no_prefix_cache;
    cfg.log = count_preemptions;
    di_engine *e = NULL;
    di_error *err = NULL;
    if (di_engine_create(&cfg, &e, &err) != DI_OK)
        fail_msg("di_engine_create: %s", di_error_message(err));
    return e;
}

/* The engine most cases share (8 running, prefix cache on), loaded once:
 * a load is most of a case's time under the sanitizers. */
static di_engine *shared_engine;
static di_engine *shared(void)
{
    if (!shared_engine) shared_engine = make_engine(8, 0, 0);
    return shared_engine;
}
static int teardown_shared(void **state)
{
    (void)state;
    if (shared_engine) assert_int_equal(di_engine_destroy(shared_engine), DI_OK);
    shared_engine = NULL;
    return 0;
}

static void poll_until_idle(di_engine *e)
{
    for (int i = 0; i < 1000000 && di_engine_pending(e) > 0; i++) assert_true(di_poll(e, 50) >= 0);
    assert_int_equal(di_engine_pending(e), 0);
}

static const char *const MSGS = "\"messages\":[{\"role\":\"user\",\"content\":\"Write a short "
                                "poem about the sea and the wind, please.\"}]";

/* Submit a Chat body made of `fields` and MSGS; poll to the end. */
static di_status run_chat(di_engine *e, const char *fields, rec *r, di_error **err)
{
    char body[1024];
    snprintf(body, sizeof body, "{\"model\":\"m\",%s,%s}", fields, MSGS);
    di_request q;
    di_request_init(&q);
    q.protocol = DI_PROTOCOL_CHAT;
    q.json = body;
    q.json_len = strlen(body);
    q.on_event = on_event;
    q.user_data = r;
    r->e = e;
    uint64_t id;
    di_status st = di_submit(e, &q, &id, err);
    if (st == DI_OK) poll_until_idle(e);
    return st;
}

static json_t *parse(const char *s)
{
    json_error_t jerr;
    json_t *v = s ? json_loads(s, 0, &jerr) : NULL;
    if (!v) fail_msg("the response does not parse: %s", s ? jerr.text : "(none)");
    return v;
}

static const char *choice_content(json_t *resp, size_t i)
{
    json_t *c = json_array_get(json_object_get(resp, "choices"), i);
    assert_int_equal(json_integer_value(json_object_get(c, "index")), (json_int_t)i);
    assert_non_null(json_string_value(json_object_get(c, "finish_reason")));
    return json_string_value(json_object_get(json_object_get(c, "message"), "content"));
}

static void test_seeded_choices_equal_single_requests(void **state)
{
    (void)state;
    if (access(SMOL, R_OK) != 0) skip();
    di_engine *e = shared();
    enum { N = 3 };
    rec all = {0}, one = {0};
    assert_int_equal(
        run_chat(e, "\"n\":3,\"seed\":7,\"temperature\":1.2,\"max_tokens\":12", &all, NULL), DI_OK);
    assert_int_equal(all.n_done, 1);
    assert_int_equal(all.status, DI_OK);
    json_t *resp = parse(all.response);
    assert_int_equal(json_array_size(json_object_get(resp, "choices")), N);
    uint32_t sum = 0;
    int differ = 0;
    for (int i = 0; i < N; i++) {
        sum += (uint32_t)all.n_toks[i];
        char f[128];
        snprintf(f, sizeof f, "\"seed\":%d,\"temperature\":1.2,\"max_tokens\":12", 7 + i);
        rec_clear(&one);
        assert_int_equal(run_chat(e, f, &one, NULL), DI_OK);
        assert_int_equal(one.n_toks[0], all.n_toks[i]);
        assert_memory_equal(one.toks[0], all.toks[i], (size_t)all.n_toks[i] * sizeof(int32_t));
        json_t *r1 = parse(one.response);
        assert_string_equal(choice_content(r1, 0), choice_content(resp, (size_t)i));
        json_decref(r1);
        differ |= i > 0 && (all.n_toks[i] != all.n_toks[0] ||
                            memcmp(all.toks[i], all.toks[0], (size_t)all.n_toks[0] * 4) != 0);
    }
    assert_true(differ); /* three draws at temperature 1.2: not all the same */
    /* usage: the prompt once, the completion tokens of every choice */
    json_t *u = json_object_get(resp, "usage");
    assert_int_equal(json_integer_value(json_object_get(u, "completion_tokens")), sum);
    assert_int_equal(all.completion_tokens, sum);
    assert_int_equal(json_integer_value(json_object_get(u, "prompt_tokens")), all.prompt_tokens);
    json_decref(resp);
    /* greedy: every choice is the n = 1 answer */
    rec_clear(&all);
    rec_clear(&one);
    assert_int_equal(run_chat(e, "\"n\":4,\"temperature\":0,\"max_tokens\":10", &all, NULL), DI_OK);
    assert_int_equal(run_chat(e, "\"temperature\":0,\"max_tokens\":10", &one, NULL), DI_OK);
    for (int i = 0; i < 4; i++) {
        assert_int_equal(all.n_toks[i], one.n_toks[0]);
        assert_memory_equal(all.toks[i], one.toks[0], (size_t)one.n_toks[0] * sizeof(int32_t));
    }
    rec_clear(&all);
    rec_clear(&one);
}

static int64_t prefilled(di_engine *e)
{
    di_kv_cache_stats st;
    di_kv_cache_stats_init(&st);
    assert_int_equal(di_engine_kv_cache_stats(e, &st, NULL), DI_OK);
    return st.prefill_tokens_total;
}

static void test_prompt_prefilled_once(void **state)
{
    (void)state;
    if (access(SMOL, R_OK) != 0) skip();
    di_engine *e = make_engine(8, 0, 1); /* no prefix cache: sharing is the fork's */
    rec r = {0};
    int64_t before = prefilled(e);
    assert_int_equal(run_chat(e, "\"n\":4,\"seed\":1,\"max_tokens\":4", &r, NULL), DI_OK);
    int64_t p = r.prompt_tokens, tail = p - (p - 1) / B * B;
    assert_true(p > 2 * B);
    /* the leader prefills p tokens; each other choice only the tokens after
     * the prompt's last full block (at least its last token) */
    assert_int_equal(prefilled(e) - before, p + 3 * tail);
    rec_clear(&r);
    before = prefilled(e);
    assert_int_equal(run_chat(e, "\"seed\":1,\"max_tokens\":4", &r, NULL), DI_OK);
    assert_int_equal(prefilled(e) - before, p);
    rec_clear(&r);
    assert_int_equal(di_engine_destroy(e), DI_OK);
}

/* The chunks of a streaming n-choice request obey the protocol. */
static void check_stream(const rec *r, int n)
{
    size_t count = json_array_size(r->chunks);
    assert_true(count > (size_t)n);
    int finished[MAX_N] = {0}, roles[MAX_N] = {0}, n_usage = 0;
    for (size_t k = 0; k < count; k++) {
        json_t *c = json_array_get(r->chunks, k);
        if (json_is_null(c)) { /* [DONE]: once, last */
            assert_int_equal(k, count - 1);
            continue;
        }
        assert_string_equal(json_string_value(json_object_get(c, "object")),
                            "chat.completion.chunk");
        json_t *ch = json_object_get(c, "choices");
        if (json_array_size(ch) == 0) { /* the usage chunk: after every finish */
            n_usage++;
            for (int i = 0; i < n; i++) assert_int_equal(finished[i], 1);
            json_t *u = json_object_get(c, "usage");
            assert_int_equal(json_integer_value(json_object_get(u, "completion_tokens")),
                             r->completion_tokens);
            continue;
        }
        assert_int_equal(json_array_size(ch), 1);
        json_t *c0 = json_array_get(ch, 0);
        json_int_t i = json_integer_value(json_object_get(c0, "index"));
        assert_true(i >= 0 && i < n);
        assert_int_equal(finished[i], 0); /* nothing after a choice's finish */
        if (json_object_get(json_object_get(c0, "delta"), "role")) roles[i]++;
        if (json_string_value(json_object_get(c0, "finish_reason"))) finished[i]++;
        /* only the request's last chunk reports usage */
        json_t *u = json_object_get(c, "usage");
        assert_true(!u || json_is_null(u));
    }
    assert_int_equal(n_usage, 1);
    assert_true(json_is_null(json_array_get(r->chunks, count - 1)));
    for (int i = 0; i < n; i++) {
        assert_int_equal(roles[i], 1);
        assert_int_equal(finished[i], 1);
    }
}

static void test_stream_chunks_protocol_valid(void **state)
{
    (void)state;
    if (access(SMOL, R_OK) != 0) skip();
    di_engine *e = shared();
    rec r = {0};
    assert_int_equal(run_chat(e,
                              "\"n\":3,\"seed\":3,\"max_tokens\":9,\"stream\":true,"
                              "\"stream_options\":{\"include_usage\":true}",
                              &r, NULL),
                     DI_OK);
    assert_int_equal(r.status, DI_OK);
    check_stream(&r, 3);
    /* each choice's deltas make its message */
    json_t *resp = parse(r.response);
    for (int i = 0; i < 3; i++) {
        char text[2048] = "";
        for (size_t k = 0; k < json_array_size(r.chunks); k++) {
            json_t *c0 = json_array_get(json_object_get(json_array_get(r.chunks, k), "choices"), 0);
            if (!c0 || json_integer_value(json_object_get(c0, "index")) != i) continue;
            const char *d =
                json_string_value(json_object_get(json_object_get(c0, "delta"), "content"));
            if (d) strncat(text, d, sizeof text - strlen(text) - 1);
        }
        assert_string_equal(text, choice_content(resp, (size_t)i));
    }
    json_decref(resp);
    rec_clear(&r);
    /* without include_usage the shape is the same (the usage comes last, as
     * the reference sends it for n = 1) */
    assert_int_equal(run_chat(e, "\"n\":2,\"seed\":3,\"max_tokens\":5,\"stream\":true", &r, NULL),
                     DI_OK);
    check_stream(&r, 2);
    rec_clear(&r);
}

static void test_cancel_mid_stream_ends_all_choices(void **state)
{
    (void)state;
    if (access(SMOL, R_OK) != 0) skip();
    di_engine *e = shared();
    rec r = {0};
    r.cancel_at = 5; /* after a few tokens, some choices under way */
    assert_int_equal(run_chat(e, "\"n\":4,\"seed\":5,\"max_tokens\":100,\"stream\":true", &r, NULL),
                     DI_OK);
    assert_int_equal(r.n_done, 1);
    assert_int_equal(r.status, DI_ERR_CANCELLED);
    int total = 0;
    for (int i = 0; i < 4; i++) total += r.n_toks[i];
    assert_true(total < 4 * 100);
    /* no [DONE] for a cancelled request */
    for (size_t k = 0; k < json_array_size(r.chunks); k++)
        assert_false(json_is_null(json_array_get(r.chunks, k)));
    rec_clear(&r);
    /* the engine serves the next request */
    assert_int_equal(run_chat(e, "\"n\":2,\"max_tokens\":3", &r, NULL), DI_OK);
    assert_int_equal(r.status, DI_OK);
    rec_clear(&r);
}

static void test_preempted_choices_recompute_the_same_tokens(void **state)
{
    (void)state;
    if (access(SMOL, R_OK) != 0) skip();
    char f[128];
    snprintf(f, sizeof f,
             "\"n\":4,\"seed\":11,\"temperature\":0.9,\"max_tokens\":%d,\"stop\":[\"zzzz\"]",
             PREEMPT_TOKENS);
    rec want = {0}, got = {0};
    assert_int_equal(run_chat(shared(), f, &want, NULL), DI_OK);
    /* a cache of 10 blocks (SmolLM2: 23,040 bytes a token): four choices of
     * the ~35-token prompt and 30 to 60 tokens each need more */
    di_engine *small = make_engine(8, 10 * B * 23040, 0);
    __atomic_store_n(&n_preempted, 0, __ATOMIC_RELAXED);
    assert_int_equal(run_chat(small, f, &got, NULL), DI_OK);
    assert_int_equal(got.status, DI_OK);
    assert_true(__atomic_load_n(&n_preempted, __ATOMIC_RELAXED) > 0);
    for (int i = 0; i < 4; i++) {
        assert_int_equal(got.n_toks[i], want.n_toks[i]);
        assert_memory_equal(got.toks[i], want.toks[i], (size_t)want.n_toks[i] * sizeof(int32_t));
    }
    rec_clear(&want);
    rec_clear(&got);
    assert_int_equal(di_engine_destroy(small), DI_OK);
}

/* Tool calls, stop sequences and log probabilities apply to each choice on
 * its own: a named tool_choice gives every choice its call (greedy: the call
 * of the n = 1 request), a stop sequence
 * ends every choice before it, and each choice has its own log probabilities. */
static void test_tools_stops_and_logprobs_per_choice(void **state)
{
    (void)state;
    if (access(SMOL, R_OK) != 0) skip();
    di_engine *e = shared();
    static const char tools[] =
        "\"temperature\":0,\"max_tokens\":64,\"tools\":[{\"type\":\"function\",\"function\":{"
        "\"name\":\"get_weather\",\"parameters\":{\"type\":\"object\",\"properties\":{\"city\":{"
        "\"type\":\"string\"}}}}}],\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":"
        "\"get_weather\"}}";
    rec r = {0}, one = {0};
    char f[512];
    snprintf(f, sizeof f, "\"n\":2,%s", tools);
    assert_int_equal(run_chat(e, f, &r, NULL), DI_OK);
    assert_int_equal(run_chat(e, tools, &one, NULL), DI_OK); /* the oracle: n = 1 */
    json_t *resp = parse(r.response), *want = parse(one.response);
    json_t *w = json_array_get(json_object_get(want, "choices"), 0);
    json_t *wcall = json_array_get(json_object_get(json_object_get(w, "message"), "tool_calls"), 0);
    for (size_t i = 0; i < 2; i++) {
        json_t *c = json_array_get(json_object_get(resp, "choices"), i);
        json_t *call =
            json_array_get(json_object_get(json_object_get(c, "message"), "tool_calls"), 0);
        json_t *fn = json_object_get(call, "function");
        assert_string_equal(json_string_value(json_object_get(fn, "name")), "get_weather");
        assert_string_equal(
            json_string_value(json_object_get(fn, "arguments")),
            json_string_value(json_object_get(json_object_get(wcall, "function"), "arguments")));
        assert_string_equal(json_string_value(json_object_get(c, "finish_reason")),
                            json_string_value(json_object_get(w, "finish_reason")));
    }
    json_decref(want);
    rec_clear(&one);
    json_decref(resp);
    rec_clear(&r);
    assert_int_equal(run_chat(e,
                              "\"n\":3,\"seed\":4,\"max_tokens\":32,\"stop\":[\" \"],\"logprobs\":"
                              "true,\"top_logprobs\":2",
                              &r, NULL),
                     DI_OK);
    resp = parse(r.response);
    for (size_t i = 0; i < 3; i++) {
        json_t *c = json_array_get(json_object_get(resp, "choices"), i);
        const char *text = choice_content(resp, i);
        assert_null(strchr(text, ' '));
        assert_true(r.n_toks[i] < 32);
        assert_string_equal(json_string_value(json_object_get(c, "finish_reason")), "stop");
        json_t *lp = json_object_get(json_object_get(c, "logprobs"), "content");
        assert_true(json_array_size(lp) >= 1);
        assert_int_equal(json_array_size(json_object_get(json_array_get(lp, 0), "top_logprobs")),
                         2);
    }
    json_decref(resp);
    rec_clear(&r);
}

static void test_n_errors(void **state)
{
    (void)state;
    if (access(SMOL, R_OK) != 0) skip();
    di_engine *e = shared();
    static const struct {
        const char *fields;
        di_status st;
        const char *msg;
    } cases[] = {
        {"\"n\":0", DI_ERR_INVALID_REQUEST, "n: 0 choices, expected 1 to 128"},
        {"\"n\":129", DI_ERR_INVALID_REQUEST, "n: 129 choices, expected 1 to 128"},
        {"\"n\":300", DI_ERR_INVALID_REQUEST, "n"},
        {"\"n\":\"2\"", DI_ERR_INVALID_REQUEST, "n"},
        {"\"n\":1.5", DI_ERR_INVALID_REQUEST, "n"},
        {"\"n\":-1", DI_ERR_INVALID_REQUEST, "n"},
        {"\"n\":9", DI_ERR_UNSUPPORTED, "n: 9 choices, but this engine decodes at most 8"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        rec r = {0};
        di_error *err = NULL;
        char f[128];
        snprintf(f, sizeof f, "%s,\"max_tokens\":2", cases[i].fields);
        di_status st = run_chat(e, f, &r, &err);
        if (st != cases[i].st || strncmp(di_error_message(err), cases[i].msg, strlen(cases[i].msg)))
            fail_msg("%s: status %d, \"%s\"", cases[i].fields, (int)st, di_error_message(err));
        di_error_free(err);
        rec_clear(&r);
    }
    /* n = 1 and null are one choice, as before */
    rec r = {0};
    assert_int_equal(run_chat(e, "\"n\":null,\"max_tokens\":2", &r, NULL), DI_OK);
    json_t *resp = parse(r.response);
    assert_int_equal(json_array_size(json_object_get(resp, "choices")), 1);
    json_decref(resp);
    rec_clear(&r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pool_fork_shares_full_blocks_only),
        cmocka_unit_test(test_seeded_choices_equal_single_requests),
        cmocka_unit_test(test_prompt_prefilled_once),
        cmocka_unit_test(test_stream_chunks_protocol_valid),
        cmocka_unit_test(test_cancel_mid_stream_ends_all_choices),
        cmocka_unit_test(test_preempted_choices_recompute_the_same_tokens),
        cmocka_unit_test(test_tools_stops_and_logprobs_per_choice),
        cmocka_unit_test(test_n_errors),
    };
    return cmocka_run_group_tests(tests, NULL, teardown_shared);
}
