/* The public model API (di_model_*) on a tiny transformers checkpoint
 * (tests/fixtures/model/llama-gqa-f16): prefill equals token-by-token decode,
 * reset forgets the sequence, and every error path returns its status and a
 * message naming the problem, leaving the sequence unchanged. */
#include <deepinfer/deepinfer.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#define TINY DI_FIXTURE_DIR "/model/llama-gqa-f16"

static di_model *load(int kv_f32, int64_t n_ctx)
{
    di_model_options o;
    di_model_options_init(&o);
    o.n_threads = 2;
    o.kv_cache_f32 = kv_f32;
    o.n_ctx = n_ctx;
    di_model *m = NULL;
    assert_int_equal(di_model_load(TINY, &o, &m, NULL), DI_OK);
    return m;
}

static void test_prefill_equals_decode_and_reset_forgets(void **state)
{
    (void)state;
    di_model *m = load(1, 0);
    assert_int_equal(di_model_vocab_size(m), 512);
    assert_int_equal(di_model_context_length(m), 256); /* max_position_embeddings */
    /* K and V: 2 layers x 2 KV heads x head_dim 16 x 2 x 4 bytes (f32 cache) */
    assert_int_equal(di_model_kv_bytes_per_token(m), 2 * 2 * 16 * 2 * 4);
    const int32_t ids[6] = {5, 77, 301, 9, 500, 42};
    float all[6 * 512], one[512];
    assert_int_equal(di_model_eval(m, ids, 6, all, DI_EVAL_ALL_LOGITS, NULL), DI_OK);
    assert_int_equal(di_model_n_past(m), 6);
    di_model_reset(m);
    assert_int_equal(di_model_n_past(m), 0);
    for (int t = 0; t < 6; t++) {
        assert_int_equal(di_model_eval(m, &ids[t], 1, one, 0, NULL), DI_OK);
        for (int v = 0; v < 512; v++) assert_true(fabsf(one[v] - all[t * 512 + v]) < 1e-4f);
    }
    /* the last row alone, and no logits at all */
    di_model_reset(m);
    assert_int_equal(di_model_eval(m, ids, 5, NULL, 0, NULL), DI_OK);
    assert_int_equal(di_model_eval(m, ids + 5, 1, one, 0, NULL), DI_OK);
    for (int v = 0; v < 512; v++) assert_true(fabsf(one[v] - all[5 * 512 + v]) < 1e-4f);
    di_model_free(m);
}

static void expect_error(di_model *m, const int32_t *ids, size_t n, unsigned flags, di_status want,
                         const char *needle)
{
    int64_t before = di_model_n_past(m);
    di_error *err = NULL;
    float logits[512];
    assert_int_equal(di_model_eval(m, ids, n, logits, flags, &err), want);
    assert_non_null(err);
    assert_int_equal(di_error_status(err), want);
    if (!strstr(di_error_message(err), needle))
        fail_msg("message '%s' lacks '%s'", di_error_message(err), needle);
    di_error_free(err);
    assert_int_equal(di_model_n_past(m), before);
}

static void test_bad_input_is_refused_and_changes_nothing(void **state)
{
    (void)state;
    di_model *m = load(0, 8);
    const int32_t ok[3] = {1, 2, 3}, big[2] = {1, 512}, neg[1] = {-1};
    assert_int_equal(di_model_eval(m, ok, 3, NULL, 0, NULL), DI_OK);
    expect_error(m, big, 2, 0, DI_ERR_INVALID_ARGUMENT, "tokens[1] = 512");
    expect_error(m, neg, 1, 0, DI_ERR_INVALID_ARGUMENT, "tokens[0] = -1");
    expect_error(m, ok, 0, 0, DI_ERR_INVALID_ARGUMENT, "no tokens");
    expect_error(m, ok, 3, 1u << 7, DI_ERR_INVALID_ARGUMENT, "flags");
    int32_t six[6] = {4, 4, 4, 4, 4, 4}; /* 3 + 6 > 8 */
    expect_error(m, six, 6, 0, DI_ERR_CONTEXT_LENGTH, "context of 8");
    /* exactly filling the context works; one more does not */
    assert_int_equal(di_model_eval(m, six, 5, NULL, 0, NULL), DI_OK);
    expect_error(m, ok, 1, 0, DI_ERR_CONTEXT_LENGTH, "context");
    di_model_free(m);
}

static void test_load_errors(void **state)
{
    (void)state;
    di_model *m = NULL;
    di_error *err = NULL;
    assert_int_equal(di_model_load(NULL, NULL, &m, NULL), DI_ERR_INVALID_ARGUMENT);
    assert_int_equal(di_model_load(TINY, NULL, NULL, NULL), DI_ERR_INVALID_ARGUMENT);
    assert_int_not_equal(di_model_load(TINY "/absent", NULL, &m, &err), DI_OK);
    assert_null(m);
    assert_non_null(err);
    di_error_free(err);
    di_model_options o;
    di_model_options_init(&o);
    o.n_threads = -1;
    assert_int_equal(di_model_load(TINY, &o, &m, NULL), DI_ERR_INVALID_ARGUMENT);
    di_model_options_init(&o);
    o.kv_cache_f32 = 2;
    assert_int_equal(di_model_load(TINY, &o, &m, NULL), DI_ERR_INVALID_ARGUMENT);
    /* the KV cache's type: unknown, contradicting kv_cache_f32, and blocks of
     * 32 that this model's rows (head_dim 16) cannot hold; DeepSeek-V3's
     * latent row (32 + 8) and a DeepSeek-V4 indexer's keys (16) likewise */
    const struct {
        const char *path;
        int32_t type, f32, reserved;
        di_status want;
        const char *needle;
    } kv[] = {
        {TINY, 4, 0, 0, DI_ERR_INVALID_ARGUMENT, "kv_cache_type: unknown type 4"},
        {TINY, -1, 0, 0, DI_ERR_INVALID_ARGUMENT, "kv_cache_type: unknown type -1"},
        {TINY, DI_KV_CACHE_Q8_0, 1, 0, DI_ERR_INVALID_ARGUMENT, "kv_cache_f32: set"},
        {TINY, DI_KV_CACHE_F16, 0, 1, DI_ERR_INVALID_ARGUMENT, "reserved: must be 0"},
        {TINY, DI_KV_CACHE_Q8_0, 0, 0, DI_ERR_UNSUPPORTED, "kv_cache_type q8_0"},
        {TINY, DI_KV_CACHE_Q4_0, 0, 0, DI_ERR_UNSUPPORTED, "head_dim is 16"},
        {DI_FIXTURE_DIR "/model/dsv3-qlora-bf16", DI_KV_CACHE_Q8_0, 0, 0, DI_ERR_UNSUPPORTED,
         "MLA latent row (kv_lora_rank + qk_rope_head_dim) is 40"},
        {DI_FIXTURE_DIR "/model/dsv4-sqrtsoftplus-f32", DI_KV_CACHE_Q4_0, 0, 0, DI_ERR_UNSUPPORTED,
         "this model's index_head_dim is 16"},
    };
    for (size_t i = 0; i < sizeof kv / sizeof kv[0]; i++) {
        di_model_options_init(&o);
        o.kv_cache_type = kv[i].type;
        o.kv_cache_f32 = kv[i].f32;
        o.reserved = kv[i].reserved;
        err = NULL;
        assert_int_equal(di_model_load(kv[i].path, &o, &m, &err), kv[i].want);
        assert_null(m);
        if (!strstr(di_error_message(err), kv[i].needle))
            fail_msg("message '%s' lacks '%s'", di_error_message(err), kv[i].needle);
        di_error_free(err);
    }
    /* kv_cache_f32 with DI_KV_CACHE_F32 agrees */
    di_model_options_init(&o);
    o.kv_cache_f32 = 1;
    o.kv_cache_type = DI_KV_CACHE_F32;
    assert_int_equal(di_model_load(TINY, &o, &m, NULL), DI_OK);
    assert_int_equal(di_model_kv_bytes_per_token(m), 2 * 2 * 16 * 2 * 4);
    di_model_free(m);
    m = NULL;
    /* a caller built against the first release (its struct ends at n_ctx):
     * the fields after it are not its own, whatever those bytes hold, and get
     * their defaults */
    di_model_options_init(&o);
    o.struct_size = DI_STRUCT_SIZE_UNTIL(di_model_options, n_ctx);
    o.kv_cache_type = 99;
    o.reserved = 7;
    assert_int_equal(di_model_load(TINY, &o, &m, NULL), DI_OK);
    assert_int_equal(di_model_kv_bytes_per_token(m), 2 * 2 * 16 * 2 * 2); /* f16 */
    di_model_free(m);
    m = NULL;
    di_model_options_init(&o);
    o.struct_size = 4; /* smaller than the first release */
    assert_int_equal(di_model_load(TINY, &o, &m, NULL), DI_ERR_INVALID_ARGUMENT);
    /* NULL handles are harmless */
    di_model_free(NULL);
    di_model_reset(NULL);
    assert_int_equal(di_model_vocab_size(NULL), 0);
    assert_int_equal(di_model_n_past(NULL), 0);
    assert_int_equal(di_model_kv_bytes_per_token(NULL), 0);
    assert_int_equal(di_model_eval(NULL, NULL, 0, NULL, 0, NULL), DI_ERR_INVALID_ARGUMENT);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_prefill_equals_decode_and_reset_forgets),
        cmocka_unit_test(test_bad_input_is_refused_and_changes_nothing),
        cmocka_unit_test(test_load_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
