/* The versioned structs' initialisers (deepinfer.h, "Versioned input structs"),
 * as hosts built against different headers call them: di_X_init_size writes
 * exactly the caller's struct_size bytes — the documented defaults of the
 * fields inside them, nothing past them — and the struct it gives is accepted
 * by the call that reads it; the di_X_init macro passes the caller's sizeof;
 * the exported di_X_init writes its frozen release.
 *
 * The bug these guard against: a host compiled against an older header (a
 * smaller struct) called the library's di_X_init, which wrote the library's
 * own, larger sizeof over whatever followed the host's struct. Here a struct of
 * the first release's size is followed by canary bytes (0xA5) that must
 * survive. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "deepinfer/deepinfer.h"

/* a tiny Llama checkpoint (head_dim 16, 2 layers, 2 KV heads) and a tiny
 * Qwen2 one without a tokenizer (vocabulary 512) */
#define LLAMA DI_FIXTURE_DIR "/model/llama-gqa-f16"
#define QWEN2 DI_FIXTURE_DIR "/model/qwen2-tied-f16"

/* A buffer of BUF bytes, every one CANARY: a host's struct at its start, and
 * after the struct what the host keeps there (the next variable on its stack,
 * a heap neighbour). BUF is larger than any of the structs. */
enum { CANARY = 0xA5, BUF = 1024 };

static unsigned char *canary_buffer(void)
{
    unsigned char *b = malloc(BUF);
    assert_non_null(b);
    memset(b, CANARY, BUF);
    return b;
}

/* Every byte of the buffer from `from` on is still CANARY. */
static void assert_canary_from(const unsigned char *b, size_t from, const char *what)
{
    for (size_t i = from; i < BUF; i++)
        if (b[i] != CANARY)
            fail_msg("%s, struct_size %zu: byte %zu past the struct was written (0x%02x)", what,
                     from, i, b[i]);
}

/* The documented defaults of each struct (deepinfer.h, with each field),
 * written over a zeroed struct of this release. */
static void request_defaults(void *p)
{
    di_request *r = p;
    r->temperature = 1.0f;
    r->top_p = 1.0f;
    r->repetition_penalty = 1.0f;
    r->seed = -1;
}
static void engine_config_defaults(void *p)
{
    ((di_engine_config *)p)->device = DI_DEVICE_CPU;
}
static void all_zero(void *p)
{
    (void)p;
}

/* Each struct's three initialisers, through void * so one table covers them:
 * di_X_init_size, the di_X_init macro (the host's sizeof), and the exported
 * di_X_init reached by name. */
#define INITIALISERS(X)                                                                            \
    static void X##_size(void *p, size_t n)                                                        \
    {                                                                                              \
        di_##X##_init_size(p, n);                                                                  \
    }                                                                                              \
    static void X##_macro(void *p)                                                                 \
    {                                                                                              \
        di_##X *s = p;                                                                             \
        di_##X##_init(s);                                                                          \
    }                                                                                              \
    static void X##_exported(void *p)                                                              \
    {                                                                                              \
        (di_##X##_init)(p);                                                                        \
    }
INITIALISERS(stream_options)
INITIALISERS(model_options)
INITIALISERS(engine_config)
INITIALISERS(request)
INITIALISERS(kv_cache_stats)

typedef struct kind {
    const char *name;
    size_t size;   /* sizeof, this header */
    size_t first;  /* the first release's size: the readers' struct_size floor */
    size_t frozen; /* what the exported di_X_init writes: this release, for good */
    void (*defaults)(void *p);
    void (*init_size)(void *p, size_t n);
    void (*init_macro)(void *p);
    void (*init_exported)(void *p);
} kind;

static const kind kinds[] = {
    {"di_stream_options", sizeof(di_stream_options),
     DI_STRUCT_SIZE_UNTIL(di_stream_options, n_stop_sequences),
     DI_STRUCT_SIZE_UNTIL(di_stream_options, n_stop_sequences), all_zero, stream_options_size,
     stream_options_macro, stream_options_exported},
    {"di_model_options", sizeof(di_model_options), DI_STRUCT_SIZE_UNTIL(di_model_options, n_ctx),
     DI_STRUCT_SIZE_UNTIL(di_model_options, reserved), all_zero, model_options_size,
     model_options_macro, model_options_exported},
    {"di_engine_config", sizeof(di_engine_config),
     DI_STRUCT_SIZE_UNTIL(di_engine_config, progress_user),
     DI_STRUCT_SIZE_UNTIL(di_engine_config, reserved_kv), engine_config_defaults,
     engine_config_size, engine_config_macro, engine_config_exported},
    {"di_request", sizeof(di_request), DI_STRUCT_SIZE_UNTIL(di_request, user_data),
     DI_STRUCT_SIZE_UNTIL(di_request, n_stop_strings), request_defaults, request_size,
     request_macro, request_exported},
    {"di_kv_cache_stats", sizeof(di_kv_cache_stats),
     DI_STRUCT_SIZE_UNTIL(di_kv_cache_stats, blocks_evicted_total),
     DI_STRUCT_SIZE_UNTIL(di_kv_cache_stats, prefill_tokens_total), all_zero, kv_cache_stats_size,
     kv_cache_stats_macro, kv_cache_stats_exported},
};
enum { N_KINDS = sizeof kinds / sizeof kinds[0] };

/* The first `size` bytes of the struct holding its documented defaults, with
 * struct_size = size (zeros past this release's fields: their default). */
static unsigned char *expected_image(const kind *k, size_t size)
{
    size_t n = size > k->size ? size : k->size;
    unsigned char *want = calloc(1, n);
    assert_non_null(want);
    k->defaults(want);
    memcpy(want, &size, sizeof size);
    return want;
}

/* di_X_init_size(p, size) on `size` bytes followed by canaries: exactly the
 * defaults inside, nothing past. */
static void check_init_size(const kind *k, size_t size)
{
    unsigned char *b = canary_buffer();
    k->init_size(b, size);
    unsigned char *want = expected_image(k, size);
    if (memcmp(b, want, size) != 0)
        fail_msg("%s_init_size(p, %zu): not the defaults", k->name, size);
    assert_canary_from(b, size, k->name);
    free(want);
    free(b);
}

static void test_init_size_writes_the_defaults_and_nothing_past_struct_size(void **state)
{
    (void)state;
    for (int i = 0; i < N_KINDS; i++) {
        const kind *k = &kinds[i];
        check_init_size(k, k->first); /* a host built against the first release */
        check_init_size(k, k->size);  /* this header's */
        /* a host built against a newer header, whose fields this library does
         * not know: their default is zero, which is what they get */
        check_init_size(k, k->size + 24);
        /* every struct_size between, as hosts of releases to come might pass */
        for (size_t n = k->first; n <= k->size; n += 8) check_init_size(k, n);
    }
}

static void test_init_size_without_room_for_struct_size_writes_nothing(void **state)
{
    (void)state;
    for (int i = 0; i < N_KINDS; i++) {
        const kind *k = &kinds[i];
        k->init_size(NULL, k->size); /* a no-op */
        for (size_t n = 0; n < sizeof(size_t); n++) {
            unsigned char *b = canary_buffer();
            k->init_size(b, n);
            assert_canary_from(b, 0, k->name);
            free(b);
        }
        k->init_exported(NULL); /* a no-op too */
    }
}

static void test_init_macro_passes_sizeof_and_gives_the_defaults(void **state)
{
    (void)state;
    for (int i = 0; i < N_KINDS; i++) {
        const kind *k = &kinds[i];
        unsigned char *b = canary_buffer();
        k->init_macro(b);
        unsigned char *want = expected_image(k, k->size);
        if (memcmp(b, want, k->size) != 0)
            fail_msg("%s_init: not sizeof and the defaults", k->name);
        assert_canary_from(b, k->size, k->name);
        free(want);
        free(b);
    }
}

/* The exported function binaries already call: its release's struct, frozen
 * (a field appended to the header later must not make it write more), with the
 * same defaults as di_X_init_size at that size. */
static void test_exported_init_writes_its_frozen_release(void **state)
{
    (void)state;
    for (int i = 0; i < N_KINDS; i++) {
        const kind *k = &kinds[i];
        assert_true(k->frozen <= k->size);
        unsigned char *b = canary_buffer();
        k->init_exported(b);
        unsigned char *want = expected_image(k, k->frozen);
        if (memcmp(b, want, k->frozen) != 0)
            fail_msg("(%s_init): not struct_size %zu and the defaults", k->name, k->frozen);
        assert_canary_from(b, k->frozen, k->name);
        free(want);
        free(b);
    }
}

/* ---- the readers accept what di_X_init_size wrote for the first release ---- */

static void test_first_release_model_options_load(void **state)
{
    (void)state;
    const size_t first = DI_STRUCT_SIZE_UNTIL(di_model_options, n_ctx);
    unsigned char *b = canary_buffer();
    di_model_options *o = (di_model_options *)b;
    di_model_options_init_size(o, first);
    o->n_threads = 2;
    di_model *m = NULL;
    assert_int_equal(di_model_load(LLAMA, o, &m, NULL), DI_OK);
    /* the fields past n_ctx (canary bytes here) are not the caller's: f16 */
    assert_int_equal(di_model_kv_bytes_per_token(m), 2 * 2 * 16 * 2 * 2);
    di_model_free(m);
    assert_canary_from(b, first, "di_model_options");
    free(b);
}

static void test_first_release_stream_options_create_a_stream(void **state)
{
    (void)state;
    static const char body[] =
        "{\"model\":\"DeepSeek-V4-Pro\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}";
    di_codec *codec = NULL;
    di_prompt *p = NULL;
    assert_int_equal(di_codec_create(NULL, DI_ENCODING_DSV4, &codec, NULL), DI_OK);
    assert_int_equal(di_codec_render(codec, DI_PROTOCOL_CHAT, body, strlen(body), &p, NULL), DI_OK);
    const size_t first = DI_STRUCT_SIZE_UNTIL(di_stream_options, n_stop_sequences);
    unsigned char *b = canary_buffer();
    di_stream_options *o = (di_stream_options *)b;
    di_stream_options_init_size(o, first);
    o->response_id = "chatcmpl-1";
    di_stream *s = NULL;
    assert_int_equal(di_stream_create(p, NULL, o, &s, NULL), DI_OK);
    assert_int_equal(di_stream_finish(s, DI_FINISH_STOP, NULL), DI_OK);
    assert_non_null(strstr(di_stream_response_json(s, NULL), "\"chatcmpl-1\""));
    di_stream_free(s);
    di_prompt_free(p);
    di_codec_free(codec);
    assert_canary_from(b, first, "di_stream_options");
    free(b);
}

static void on_event(void *user, const di_event *ev)
{
    if (di_event_kind_of(ev) == DI_EVENT_DONE) *(di_status *)user = di_event_status(ev);
}

/* One engine from a first-release config, one first-release request run on it,
 * and its KV cache read into a first-release stats struct. */
static void test_first_release_engine_config_request_and_kv_cache_stats(void **state)
{
    (void)state;
    const size_t cfg_first = DI_STRUCT_SIZE_UNTIL(di_engine_config, progress_user);
    unsigned char *cb = canary_buffer();
    di_engine_config *cfg = (di_engine_config *)cb;
    di_engine_config_init_size(cfg, cfg_first);
    cfg->model_path = QWEN2;
    cfg->n_threads = 2;
    di_engine *e = NULL;
    assert_int_equal(di_engine_create(cfg, &e, NULL), DI_OK);
    assert_canary_from(cb, cfg_first, "di_engine_config");

    const size_t req_first = DI_STRUCT_SIZE_UNTIL(di_request, user_data);
    unsigned char *rb = canary_buffer();
    di_request *req = (di_request *)rb;
    di_request_init_size(req, req_first);
    const int32_t ids[4] = {5, 6, 7, 8};
    di_status done = DI_ERR_INTERNAL;
    req->tokens = ids;
    req->n_tokens = 4;
    req->max_tokens = 3;
    req->on_event = on_event;
    req->user_data = &done;
    uint64_t id = 0;
    assert_int_equal(di_submit(e, req, &id, NULL), DI_OK);
    while (di_engine_pending(e) > 0) assert_true(di_poll(e, 1000) >= 0);
    assert_int_equal(done, DI_OK);
    assert_canary_from(rb, req_first, "di_request");

    const size_t kv_first = DI_STRUCT_SIZE_UNTIL(di_kv_cache_stats, blocks_evicted_total);
    unsigned char *kb = canary_buffer();
    di_kv_cache_stats *kv = (di_kv_cache_stats *)kb;
    di_kv_cache_stats_init_size(kv, kv_first);
    assert_int_equal(di_engine_kv_cache_stats(e, kv, NULL), DI_OK);
    assert_int_equal(kv->struct_size, kv_first);
    assert_int_equal(kv->block_tokens, 16);
    assert_int_equal(kv->blocks_used + kv->blocks_cached + kv->blocks_free, kv->blocks_total);
    assert_canary_from(kb, kv_first, "di_kv_cache_stats"); /* prefill_tokens_total is not its */

    di_engine_destroy(e);
    free(kb);
    free(rb);
    free(cb);
}

/* ---- a struct_size below the first release: written, then refused ---- */

/* A refusal naming struct_size; frees the error. */
static void expect_struct_size_error(di_status st, di_error *err)
{
    assert_int_equal(st, DI_ERR_INVALID_ARGUMENT);
    if (!strstr(di_error_message(err), "struct_size"))
        fail_msg("message '%s' does not name struct_size", di_error_message(err));
    di_error_free(err);
}

static void test_struct_size_below_the_first_release_is_refused_by_the_reader(void **state)
{
    (void)state;
    const size_t small = sizeof(size_t) + 8; /* below every first release */
    unsigned char *b = canary_buffer();
    di_error *err = NULL;
    di_status st;

    di_model_options *mo = (di_model_options *)b;
    di_model_options_init_size(mo, small);
    assert_int_equal(mo->struct_size, small);
    assert_canary_from(b, small, "di_model_options");
    di_model *m = NULL;
    st = di_model_load(LLAMA, mo, &m, &err);
    expect_struct_size_error(st, err);
    assert_null(m);

    memset(b, CANARY, BUF);
    di_engine_config *cfg = (di_engine_config *)b;
    di_engine_config_init_size(cfg, small);
    assert_canary_from(b, small, "di_engine_config");
    di_engine *e = NULL;
    err = NULL;
    st = di_engine_create(cfg, &e, &err);
    expect_struct_size_error(st, err);
    assert_null(e);

    memset(b, CANARY, BUF);
    di_stream_options *so = (di_stream_options *)b;
    di_stream_options_init_size(so, small);
    assert_canary_from(b, small, "di_stream_options");
    static const char body[] =
        "{\"model\":\"DeepSeek-V4-Pro\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}";
    di_codec *codec = NULL;
    di_prompt *p = NULL;
    assert_int_equal(di_codec_create(NULL, DI_ENCODING_DSV4, &codec, NULL), DI_OK);
    assert_int_equal(di_codec_render(codec, DI_PROTOCOL_CHAT, body, strlen(body), &p, NULL), DI_OK);
    di_stream *s = NULL;
    err = NULL;
    st = di_stream_create(p, NULL, so, &s, &err);
    expect_struct_size_error(st, err);
    assert_null(s);
    di_prompt_free(p);
    di_codec_free(codec);

    di_engine_config full;
    di_engine_config_init(&full);
    full.model_path = QWEN2;
    full.n_threads = 1;
    assert_int_equal(di_engine_create(&full, &e, NULL), DI_OK);
    memset(b, CANARY, BUF);
    di_request *req = (di_request *)b;
    di_request_init_size(req, small);
    assert_canary_from(b, small, "di_request");
    uint64_t id = 0;
    err = NULL;
    st = di_submit(e, req, &id, &err);
    expect_struct_size_error(st, err);
    assert_int_equal(id, 0);
    memset(b, CANARY, BUF);
    di_kv_cache_stats *kv = (di_kv_cache_stats *)b;
    di_kv_cache_stats_init_size(kv, small);
    err = NULL;
    st = di_engine_kv_cache_stats(e, kv, &err);
    expect_struct_size_error(st, err);
    assert_canary_from(b, small, "di_kv_cache_stats"); /* and nothing written past it */
    di_engine_destroy(e);
    free(b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_init_size_writes_the_defaults_and_nothing_past_struct_size),
        cmocka_unit_test(test_init_size_without_room_for_struct_size_writes_nothing),
        cmocka_unit_test(test_init_macro_passes_sizeof_and_gives_the_defaults),
        cmocka_unit_test(test_exported_init_writes_its_frozen_release),
        cmocka_unit_test(test_first_release_model_options_load),
        cmocka_unit_test(test_first_release_stream_options_create_a_stream),
        cmocka_unit_test(test_first_release_engine_config_request_and_kv_cache_stats),
        cmocka_unit_test(test_struct_size_below_the_first_release_is_refused_by_the_reader),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
