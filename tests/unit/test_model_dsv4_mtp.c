/* lib/model: DeepSeek-V4's MTP layer (deepseek_v4_mtp.c) and the MTP drafter
 * on it. The oracle is the fixture dsv4-mtp-f32 (make_dsv4_fixtures.py): the
 * main model is transformers' DeepseekV4ForCausalLM; the MTP layer, which
 * transformers ignores, is computed as llama.cpp's deepseek4 MTP graph does,
 * with transformers' own DeepseekV4DecoderLayer as the block (mtp_logits.f32:
 * row i from the streams of token i and token i + 1, at position i + 1; the
 * reference's mtp_chain: drafts chained on the layer's own output streams).
 *   - the layer's logits, in one pass and token by token beside the main
 *     model's decode;
 *   - the MTP drafter's first and chained drafts, over requests prefilled in
 *     one batched step, and after decode steps that keep some drafts;
 *   - a config this code cannot run (a compressed MTP layer) is refused,
 *     named; a missing MTP tensor is named; a checkpoint that declares an MTP
 *     layer but ships none runs without one. */
#include <jansson.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "engine/draft.h"
#include "model/model.h"
#include "sampler/sampler.h"
#include "util/error.h"
#include "model_variant.h"
#include "mtp_checks.h"

#define FIXTURE  "dsv4-mtp-f32"
#define GGUF_DIR DI_FIXTURE_DIR "/model/gguf-dsv4"

static char tmpdir[64];

static int setup(void **state)
{
    (void)state;
    return model_variant_make(tmpdir, sizeof tmpdir, "/tmp/di_test_dsv4_mtpXXXXXX");
}

static int teardown(void **state)
{
    (void)state;
    model_variant_remove(tmpdir);
    return 0;
}

static json_t *reference(const char *name, char *dir, size_t size)
{
    char path[700];
    snprintf(dir, size, "%s/model/%s", DI_FIXTURE_DIR, name);
    snprintf(path, sizeof path, "%s/reference.json", dir);
    json_t *ref = json_load_file(path, 0, NULL);
    assert_non_null(ref);
    return ref;
}

/* The fixture's prompt + greedy sequence into seq; its length. */
static size_t sequence(json_t *ref, int32_t *seq, size_t cap)
{
    size_t n = 0;
    const char *keys[2] = {"prompt", "greedy"};
    for (int k = 0; k < 2; k++) {
        json_t *a = json_object_get(ref, keys[k]);
        for (size_t i = 0; i < json_array_size(a); i++) {
            assert_true(n < cap);
            seq[n++] = (int32_t)json_integer_value(json_array_get(a, i));
        }
    }
    return n;
}

static model *load(const char *dir, int64_t n_batch)
{
    model_options o = {0};
    o.n_threads = 2;
    o.n_ctx = 256;
    o.n_batch = n_batch;
    o.kv_n_ctx_multiple = 2;
    o.kv_dtype = MODEL_DTYPE_F32;
    model *m = NULL;
    di_error *err = NULL;
    if (model_load(dir, &o, &m, &err) != DI_OK) fail_msg("%s: %s", dir, di_error_message(err));
    return m;
}

/* The MTP layer's logits against the reference's, over the 48-token
 * sequence: once in one pass, once token by token beside the main model's
 * decode (the hidden rows each step's model_last_hidden). */
/* The MTP layer of m (loaded from fixture name's checkpoint, or files of it)
 * against the mtp_logits at logits (NULL: the fixture's): one pass and token
 * by token, within 1e-3 of the range, or, given bar (llama.cpp's largest and
 * median row differences from the same reference on the same files), no
 * further than 1.2 times llama.cpp. */
static void check_layer(model *m, const char *name, const char *what, const char *logits,
                        const double *bar)
{
    char dir[512];
    json_t *ref = reference(name, dir, sizeof dir);
    int32_t seq[256];
    const size_t n = sequence(ref, seq, 256);
    assert_int_equal(
        json_integer_value(json_array_get(json_object_get(ref, "mtp_logits_shape"), 0)),
        (json_int_t)(n - 1));
    assert_int_equal(model_mtp_layers(m), 1);
    const model_config *c = model_get_config(m);
    assert_int_equal(model_mtp_hidden_width(m), (int64_t)c->v4.hc_mult * c->n_embd);
    float *want =
        logits ? model_fixture_f32(DI_FIXTURE_DIR "/model", logits, (n - 1) * (size_t)c->n_vocab)
               : model_fixture_f32(dir, "mtp_logits.f32", (n - 1) * (size_t)c->n_vocab);
    double one, step, median;
    mtp_layer_error(m, seq, n, want, &one, &step, &median);
    printf("%s (%s): MTP logits vs the reference: one pass %.2e (median row %.2e), token by "
           "token %.2e of the range",
           name, what, one, median, step);
    if (bar) {
        printf("; llama.cpp %.2e (median row %.2e)\n", bar[0], bar[1]);
        assert_true(one <= 1.2 * bar[0] && step <= 1.2 * bar[0] && median <= 1.2 * bar[1]);
    } else {
        printf("\n");
        assert_true(one <= 1e-3);
        assert_true(step <= 1e-3);
    }
    free(want);
    json_decref(ref);
}

/* The MTP layer's logits against the references: transformers' layout in
 * f32, and DeepSeek's release layout with MXFP4 experts and bf16 elsewhere;
 * its errors. */
static void test_mtp_layer_matches_the_reference(void **state)
{
    (void)state;
    char dir[512];
    snprintf(dir, sizeof dir, "%s/model/dsv4-gguf-release", DI_FIXTURE_DIR);
    model *m = load(dir, 256); /* (its 176 tokens in one pass) */
    check_layer(m, "dsv4-gguf-release", "release layout, MXFP4 experts", NULL, NULL);
    model_free(m);
    /* llama.cpp's files of it: the model's GGUF and the MTP GGUF its
     * converter writes with --mtp (eh_proj in Q8_0: the reference is on the
     * files' dequantized weights) */
    m = load(GGUF_DIR "/dsv4-gguf-bf16.gguf", 256);
    assert_int_equal(model_mtp_layers(m), 0);
    assert_int_equal(model_attach_mtp(m, GGUF_DIR "/dsv4-gguf-mtp.gguf", NULL), DI_OK);
    json_t *gj = json_load_file(GGUF_DIR "/dsv4-gguf-mtp.json", 0, NULL);
    assert_non_null(gj);
    const double bar[2] = {json_real_value(json_object_get(gj, "llama_cpp_max_rel_diff")),
                           json_real_value(json_object_get(gj, "llama_cpp_median_rel_diff"))};
    assert_true(bar[0] > 0 && bar[1] > 0);
    check_layer(m, "dsv4-gguf-release", "llama.cpp's GGUF and MTP GGUF",
                "gguf-dsv4/dsv4-gguf-mtp.mtp_logits.f32", bar);
    json_decref(gj);
    model_free(m);
    json_t *ref = reference(FIXTURE, dir, sizeof dir);
    int32_t seq[64];
    sequence(ref, seq, 64);
    m = load(dir, 64);
    check_layer(m, FIXTURE, "transformers' layout, f32", NULL, NULL);
    const int32_t V = (int32_t)model_get_config(m)->n_vocab;
    const int64_t W = model_mtp_hidden_width(m);
    float *got = malloc((size_t)V * sizeof *got);
    float *hidden = calloc((size_t)W, sizeof *hidden);
    assert_true(got && hidden);
    /* errors: a bad token; the context's end */
    di_error *err = NULL;
    int32_t bad = V;
    assert_int_equal(model_mtp_forward(m, &bad, 1, hidden, got, &err), DI_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(di_error_message(err), "tokens[0]"));
    di_error_free(err);
    err = NULL;
    int32_t *many = calloc(300, sizeof *many);
    float *hid = calloc(300 * (size_t)W, sizeof *hid);
    assert_true(many && hid);
    assert_int_equal(model_mtp_forward(m, many, 300, hid, NULL, &err), DI_ERR_CONTEXT_LENGTH);
    di_error_free(err);
    free(many);
    free(hid);
    model_free(m);
    /* a V4 model without MTP */
    snprintf(dir, sizeof dir, "%s/model/dsv4-sqrtsoftplus-f32", DI_FIXTURE_DIR);
    m = load(dir, 64);
    assert_int_equal(model_mtp_layers(m), 0);
    int64_t rows = 0;
    assert_null(model_last_hidden(m, &rows));
    assert_int_equal(model_mtp_forward(m, seq, 1, hidden, got, NULL), DI_ERR_UNSUPPORTED);
    model_seq *s = NULL;
    assert_int_equal(model_mtp_seq_create(m, &s), DI_ERR_UNSUPPORTED);
    assert_null(s);
    model_free(m);
    free(got);
    free(hidden);
    json_decref(ref);
}

/* The MTP drafter (lib/engine/draft_mtp.c) on DeepSeek-V4: requests holding
 * the first P + 1 tokens of the sequence, prefilled in one batched step and
 * shown to observe as the scheduler shows them; propose at temperature 0
 * gives the reference's first draft (the argmax of mtp_logits row P - 1, its
 * probability the confidence) and its chained drafts. Then decode steps of
 * one request that keep some drafts and reject one: after observe cuts the
 * chained pairs off, the first draft is the reference's again. */
static void test_mtp_drafter_matches_the_reference(void **state)
{
    (void)state;
    char dir[512];
    json_t *ref = reference(FIXTURE, dir, sizeof dir);
    int32_t seq[64];
    const size_t n = sequence(ref, seq, 64);
    const size_t n_prompt = json_array_size(json_object_get(ref, "prompt"));
    model *m = load(dir, 256);
    const int32_t V = (int32_t)model_get_config(m)->n_vocab;
    float *want = model_fixture_f32(dir, "mtp_logits.f32", (n - 1) * (size_t)V);
    mtp_check_drafter(m, seq, n_prompt, want, json_object_get(ref, "mtp_chain"));
    free(want);
    model_free(m);
    json_decref(ref);
}

/* Drafts asked for past n_batch (speculative_tokens > n_batch): the drafter
 * chains n_batch - 1 of them at most (what a step can verify), so the next
 * observe's cut stays within n_batch and the MTP sequence keeps its pairs (a
 * deeper cut drops it whole): every decode step then drafts, the reference's
 * first draft. */
static void test_mtp_drafter_chains_within_n_batch(void **state)
{
    (void)state;
    char dir[512];
    json_t *ref = reference(FIXTURE, dir, sizeof dir);
    int32_t seq[64];
    const int64_t n = (int64_t)sequence(ref, seq, 64), B = 4, P = 20;
    model *m = load(dir, B);
    const int32_t V = (int32_t)model_get_config(m)->n_vocab;
    float *want = model_fixture_f32(dir, "mtp_logits.f32", (size_t)(n - 1) * (size_t)V);
    float *logits = malloc((size_t)B * (size_t)V * sizeof *logits);
    assert_non_null(logits);
    drafter *d = NULL;
    assert_int_equal(drafter_mtp_create(m, 1, &d), DI_OK);
    sampler_params sp = {.temperature = 0, .top_p = 1, .repetition_penalty = 1};
    sampler *smp = NULL;
    assert_int_equal(sampler_create(&sp, V, &smp, NULL, 0), DI_OK);
    model_seq *s = NULL;
    assert_int_equal(model_seq_create(m, &s), DI_OK);
    void *st = NULL;
    int64_t rows = 0;
    for (int64_t at = 0; at < P; at += B) { /* the prompt, a chunk a step */
        assert_int_equal(model_seq_reserve(m, s, at + B), DI_OK);
        model_batch_item it = {s, seq + at, B, 1};
        assert_int_equal(model_forward_batch(m, &it, 1, logits, NULL), DI_OK);
        draft_observation ob = {&st, smp, at, 0, B, seq + at + 1};
        d->ops->observe(d, &ob, 1, model_last_hidden(m, &rows));
    }
    for (int64_t n_tok = P + 1; n_tok < n - 1; n_tok++) {
        int32_t out[16];
        float conf[16];
        draft_request dr = {.tokens = seq,
                            .n_tokens = n_tok,
                            .max = 16,
                            .smp = smp,
                            .state = &st,
                            .out = out,
                            .conf = conf};
        d->ops->propose(d, &dr, 1);
        assert_int_equal(dr.n, B - 1);
        assert_int_equal(out[0], mtp_argmax(want + (size_t)(n_tok - 2) * (size_t)V, V));
        /* a decode step that verifies none of them */
        assert_int_equal(model_seq_reserve(m, s, n_tok), DI_OK);
        model_batch_item it = {s, seq + n_tok - 1, 1, 1};
        assert_int_equal(model_forward_batch(m, &it, 1, logits, NULL), DI_OK);
        int32_t next = mtp_argmax(logits, V);
        assert_int_equal(next, seq[n_tok]);
        draft_observation ob = {&st, smp, n_tok - 1, 0, 1, &next};
        d->ops->observe(d, &ob, 1, model_last_hidden(m, &rows));
    }
    d->ops->release(d, st);
    model_seq_free(m, s);
    drafter_destroy(d);
    sampler_free(smp);
    free(logits);
    free(want);
    model_free(m);
    json_decref(ref);
}

/* model_mtp_forward_batch refuses, naming the item, what it cannot run: an
 * item past n_batch, positions before 1 or past the context (a position near
 * INT64_MAX overflowed in the step's position rows), room not reserved, a bad
 * token id; the context's last position runs. */
static void test_mtp_forward_batch_checks(void **state)
{
    (void)state;
    char dir[512];
    json_t *ref = reference(FIXTURE, dir, sizeof dir);
    model *m = load(dir, 8); /* n_ctx 256 */
    const int64_t W = model_mtp_hidden_width(m);
    float *hidden = calloc(8 * (size_t)W, sizeof *hidden);
    float *logits = malloc(512 * sizeof *logits);
    assert_true(hidden && logits);
    model_seq *s = NULL;
    assert_int_equal(model_mtp_seq_create(m, &s), DI_OK);
    assert_int_equal(model_mtp_seq_reserve(m, s, 16), DI_OK);
    int32_t tok[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
    const struct {
        int64_t n, pos0;
        int32_t bad; /* tokens[0] */
        const char *what;
    } cases[] = {{9, 1, 1, "exceed n_batch"},
                 {1, 0, 1, "a position before 1"},
                 {1, 257, 1, "the context of 256"},
                 {2, 256, 1, "the context of 256"},
                 {2, INT64_MAX, 1, "the context of 256"},
                 {1, 1, 512, "tokens[0] = 512"}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        tok[0] = cases[i].bad;
        model_mtp_item it = {s, tok, cases[i].n, cases[i].pos0, 1};
        di_error *err = NULL;
        assert_int_equal(model_mtp_forward_batch(m, &it, 1, hidden, logits, NULL, &err),
                         DI_ERR_INVALID_ARGUMENT);
        if (!strstr(di_error_message(err), cases[i].what))
            fail_msg("case %zu: '%s' lacks '%s'", i, di_error_message(err), cases[i].what);
        di_error_free(err);
    }
    tok[0] = 1;
    model_mtp_item last = {s, tok, 1, 256, 1};
    assert_int_equal(model_mtp_forward_batch(m, &last, 1, hidden, logits, NULL, NULL), DI_OK);
    assert_int_equal(model_seq_n_past(s), 1);
    model_seq *unreserved = NULL;
    assert_int_equal(model_mtp_seq_create(m, &unreserved), DI_OK);
    model_mtp_item it = {unreserved, tok, 1, 1, 1};
    di_error *err = NULL;
    assert_int_equal(model_mtp_forward_batch(m, &it, 1, hidden, logits, NULL, &err),
                     DI_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(di_error_message(err), "reserved room"));
    di_error_free(err);
    model_mtp_seq_free(m, unreserved);
    model_mtp_seq_free(m, s);
    free(hidden);
    free(logits);
    model_free(m);
    json_decref(ref);
}

/* tmpdir/variant: the fixture's config.json with edit merged over it (null
 * deletes a key), its weights linked (copied when copy_weights, to be edited). */
static const char *variant(const char *fixture, const char *edit, int copy_weights)
{
    return model_variant_folder(tmpdir, fixture, edit, copy_weights);
}

static void test_mtp_configs_and_tensors(void **state)
{
    (void)state;
    /* DeepSeek's compress_ratios may list the MTP layer after the main ones:
     * 0 (sliding window) runs, a compressed MTP layer is refused, named */
    model *m = load(variant(FIXTURE, "{\"compress_ratios\": [0, 4, 8, 0]}", 0), 64);
    assert_int_equal(model_mtp_layers(m), 1);
    model_free(m);
    model_expect_load_error(variant(FIXTURE, "{\"compress_ratios\": [0, 4, 8, 4]}", 0),
                            DI_ERR_UNSUPPORTED, "compress_ratios[3] (the MTP layer's) is not 0",
                            NULL);
    /* num_nextn_predict_layers 0: the mtp.* tensors are ignored */
    m = load(variant(FIXTURE, "{\"num_nextn_predict_layers\": 0}", 0), 64);
    assert_int_equal(model_mtp_layers(m), 0);
    model_free(m);
    /* declared but not shipped (a checkpoint stripped of its MTP tensors):
     * the model runs without MTP */
    m = load(DI_FIXTURE_DIR "/model/dsv4-sqrtsoftplus-f32", 64);
    model_free(m);
    m = load(variant("dsv4-sqrtsoftplus-f32", "{\"num_nextn_predict_layers\": 1}", 0), 64);
    assert_int_equal(model_mtp_layers(m), 0);
    model_free(m);
    /* an MTP tensor missing: named */
    const char *dir = variant(FIXTURE, "{}", 1);
    model_variant_rename(dir, "mtp.0.hnorm.weight", "mtp.0.hnorX.weight");
    model_expect_load_error(dir, DI_ERR_MODEL_FORMAT, "model.mtp.0.hnorm.weight", NULL);
    dir = variant(FIXTURE, "{}", 1);
    model_variant_rename(dir, "mtp.0.attn.wkv.weight", "mtp.0.attn.wkX.weight");
    model_expect_load_error(dir, DI_ERR_MODEL_FORMAT, "model.mtp.0.self_attn.kv_proj.weight", NULL);
    dir = variant(FIXTURE, "{}", 1); /* (the first of its tensors too) */
    model_variant_rename(dir, "mtp.0.e_proj.weight", "mtp.0.e_proX.weight");
    model_expect_load_error(dir, DI_ERR_MODEL_FORMAT, "model.mtp.0.e_proj.weight", NULL);
    /* transformers' layer_types may list the MTP layer too: sliding only */
    m = load(variant(FIXTURE,
                     "{\"layer_types\": [\"sliding_attention\", \"compressed_sparse_attention\","
                     " \"heavily_compressed_attention\", \"sliding_attention\"]}",
                     0),
             64);
    assert_int_equal(model_mtp_layers(m), 1);
    model_free(m);
    model_expect_load_error(
        variant(FIXTURE,
                "{\"layer_types\": [\"sliding_attention\", \"compressed_sparse_attention\","
                " \"heavily_compressed_attention\", \"compressed_sparse_attention\"]}",
                0),
        DI_ERR_UNSUPPORTED, "layer_types[3] (the MTP layer's)", NULL);
}

/* llama.cpp's MTP GGUF attached to the wrong model, or not an MTP GGUF, or
 * damaged: refused, named, the model unchanged; loaded as a model of its own:
 * refused with what to do instead. */
static void test_mtp_gguf_errors(void **state)
{
    (void)state;
    const char *mtp = GGUF_DIR "/dsv4-gguf-mtp.gguf";
    assert_int_equal(model_file_is_mtp(mtp), 1);
    assert_int_equal(model_file_is_mtp(GGUF_DIR "/dsv4-gguf-bf16.gguf"), 0);
    assert_int_equal(model_file_is_mtp(DI_FIXTURE_DIR "/model/dsv4-mtp-f32"), 0);
    assert_int_equal(model_file_is_mtp("/nonexistent.gguf"), 0);
    model_expect_load_error(mtp, DI_ERR_UNSUPPORTED, "is an MTP GGUF", "draft_model_path");
    struct {
        const char *model, *file;
        di_status status;
        const char *says;
    } cases[] = {
        {DI_FIXTURE_DIR "/model/dsv3-mtp-f32", mtp, DI_ERR_UNSUPPORTED, "DeepSeek-V4 models only"},
        {GGUF_DIR "/dsv4-gguf-bf16.gguf", GGUF_DIR "/dsv4-gguf-q8_0.gguf", DI_ERR_UNSUPPORTED,
         "is not an MTP GGUF"},
        {DI_FIXTURE_DIR "/model/dsv4-gguf-release", mtp, DI_ERR_UNSUPPORTED,
         "has an MTP layer already"},
        {DI_FIXTURE_DIR "/model/dsv4-sqrtsoftplus-f32", mtp, DI_ERR_MODEL_FORMAT,
         "is not the model's"},
        {GGUF_DIR "/dsv4-gguf-bf16.gguf", "/nonexistent.gguf", DI_ERR_IO, "nonexistent"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        model *m = load(cases[i].model, 64);
        const int before = model_mtp_layers(m);
        di_error *err = NULL;
        assert_int_equal(model_attach_mtp(m, cases[i].file, &err), cases[i].status);
        if (!strstr(di_error_message(err), cases[i].says))
            fail_msg("case %zu: '%s' lacks '%s'", i, di_error_message(err), cases[i].says);
        di_error_free(err);
        assert_int_equal(model_mtp_layers(m), before);
        model_free(m);
    }
    /* a tensor missing from the MTP GGUF: named */
    char damaged[160];
    snprintf(damaged, sizeof damaged, "%s/damaged.gguf", tmpdir);
    model_variant_gguf(mtp, damaged, "blk.4.nextn.hnorm.weight", "blk.4.nextn.hnorX.weight", -1);
    model *m = load(GGUF_DIR "/dsv4-gguf-bf16.gguf", 64);
    di_error *err = NULL;
    assert_int_equal(model_attach_mtp(m, damaged, &err), DI_ERR_MODEL_FORMAT);
    assert_non_null(strstr(di_error_message(err), "model.layers.4.hnorm.weight"));
    di_error_free(err);
    assert_int_equal(model_mtp_layers(m), 0);
    model_free(m);
    unlink(damaged);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mtp_layer_matches_the_reference),
        cmocka_unit_test(test_mtp_drafter_matches_the_reference),
        cmocka_unit_test(test_mtp_drafter_chains_within_n_batch),
        cmocka_unit_test(test_mtp_forward_batch_checks),
        cmocka_unit_test(test_mtp_configs_and_tensors),
        cmocka_unit_test(test_mtp_gguf_errors),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
