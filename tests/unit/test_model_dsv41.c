/* DeepSeek-V4.1 (docs/deepseek-v41.md) through the model API: what its
 * config.json may say and what is refused, naming the field; the sharing maps
 * choose which tensors a layer reads; the cache's bytes per token counted by
 * hand. Its logits against the reference (tests/oracle/dsv41_reference.py)
 * are model_parity's (tests/CMakeLists.txt), its batch invariance and
 * truncation test_model_batch's. */
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
#include <jansson.h>

#include "deepinfer/deepinfer.h"
#include "model/model.h"
#include "model_variant.h"
#include "util/error.h"

static char tmpdir[64];

static const char *variant(const char *edit)
{
    return model_variant_folder(tmpdir, "dsv41-f32", edit, 0);
}

static int setup(void **state)
{
    (void)state;
    return model_variant_make(tmpdir, sizeof tmpdir, "/tmp/di_test_dsv41XXXXXX");
}

static int teardown(void **state)
{
    (void)state;
    model_variant_remove(tmpdir);
    return 0;
}

/* A config.json edit (TEXT: merged into text_config) and the load error it
 * must give: its status and a piece of its message. */
#define TEXT(json) "{\"text_config\": " json "}"
typedef struct config_case {
    const char *edit;
    di_status status;
    const char *says;
} config_case;

/* Each case's edit of fixture's config loads with its error. */
static void expect_config_cases(const char *fixture, const config_case *cases, size_t n)
{
    for (size_t i = 0; i < n; i++)
        model_expect_load_error(model_variant_folder(tmpdir, fixture, cases[i].edit, 0),
                                cases[i].status, cases[i].says, NULL);
}

static void test_bad_configs_are_named(void **state)
{
    (void)state;
    static const config_case cases[] = {
        {TEXT("{\"engram_layer_ids\": [1]}"), DI_ERR_MODEL_FORMAT, "engram_max_ngram_size"},
        /* the candidate-block top-k (dsv41-f32: ratios 0, 2, 2, 1, 1; top-k
         * sources 1, 3, 4) */
        {TEXT("{\"candidate_source_layer_id\": 3}"), DI_ERR_MODEL_FORMAT, "candidate_topk_blocks"},
        {TEXT("{\"candidate_source_layer_id\": 5}"), DI_ERR_MODEL_FORMAT,
         "candidate_source_layer_id is not a layer number below 5"},
        {TEXT("{\"candidate_source_layer_id\": \"3\"}"), DI_ERR_MODEL_FORMAT,
         "candidate_source_layer_id is not a layer number"},
        {TEXT("{\"candidate_source_layer_id\": 0, \"candidate_topk_blocks\": 8, "
              "\"candidate_block_size\": 8}"),
         DI_ERR_MODEL_FORMAT, "candidate_source_layer_id 0 is not a compressed layer"},
        {TEXT("{\"candidate_source_layer_id\": 2, \"candidate_topk_blocks\": 8, "
              "\"candidate_block_size\": 8}"),
         DI_ERR_MODEL_FORMAT, "making its own top-k"},
        {TEXT("{\"candidate_source_layer_id\": 1, \"candidate_topk_blocks\": 8, "
              "\"candidate_block_size\": 8}"),
         DI_ERR_MODEL_FORMAT, "compress_ratios[3] is 1, not the candidate source's 2"},
        {TEXT("{\"candidate_source_layer_id\": 3, \"candidate_topk_blocks\": 12, "
              "\"candidate_block_size\": 8}"),
         DI_ERR_MODEL_FORMAT, "candidate_topk_blocks 12 is not a multiple of 8"},
        {TEXT("{\"candidate_source_layer_id\": 3, \"candidate_topk_blocks\": 8, "
              "\"candidate_block_size\": 4}"),
         DI_ERR_UNSUPPORTED, "candidate_block_size 4 is not 8 or 16"},
        {TEXT("{\"candidate_source_layer_id\": 3, \"candidate_topk_blocks\": 8, "
              "\"candidate_block_size\": 8, \"index_topk\": 65}"),
         DI_ERR_MODEL_FORMAT, "hold fewer entries than index_topk 65"},
        {TEXT("{\"compress_ratios\": [0, 4, 2, 1, 1]}"), DI_ERR_UNSUPPORTED,
         "compress_ratios[1] is not 0, 1 or 2"},
        {TEXT("{\"compress_ratios\": [0, 2, 2, 1]}"), DI_ERR_MODEL_FORMAT,
         "compress_ratios must list"},
        /* layer 3 (ratio 1) cannot take layer 2's (ratio 2) */
        {TEXT("{\"kv_source_layer_ids\": [1, 4]}"), DI_ERR_UNSUPPORTED,
         "kv_source_layer_ids: layer 3"},
        /* top-k segments within key segments: layer 2's top-k layer 1's, its keys its own */
        {TEXT("{\"index_k_source_layer_ids\": [1, 2, 3, 4]}"), DI_ERR_UNSUPPORTED,
         "index_source_layer_ids: layer 2 takes"},
        /* key segments within KV segments: layer 2's keys layer 1's, its KV its own */
        {TEXT("{\"index_source_layer_ids\": [1, 3, 4], \"index_k_source_layer_ids\": [1, 3, 4],"
              " \"kv_source_layer_ids\": [1, 2, 3, 4]}"),
         DI_ERR_UNSUPPORTED, "index_k_source_layer_ids: layer 2 takes"},
        {TEXT("{\"kv_source_layer_ids\": [1, 9]}"), DI_ERR_MODEL_FORMAT,
         "kv_source_layer_ids[1] is not a layer number"},
        {TEXT("{\"hc_shifted\": false}"), DI_ERR_UNSUPPORTED, "hc_shifted"},
        {TEXT("{\"scoring_func\": \"sigmoid\"}"), DI_ERR_UNSUPPORTED, "scoring_func"},
        {TEXT("{\"norm_topk_prob\": false}"), DI_ERR_UNSUPPORTED, "norm_topk_prob"},
        {TEXT("{\"head_dim\": null}"), DI_ERR_MODEL_FORMAT, "head_dim"},
        {TEXT("{\"rope_scaling\": {\"factor\": 4.0}}"), DI_ERR_MODEL_FORMAT,
         "original_max_position_embeddings"},
        {"{\"model_type\": \"deepseek_v4\"}", DI_ERR_MODEL_FORMAT, "model_type is not"},
        {"{\"text_config\": null}", DI_ERR_MODEL_FORMAT, "text_config is not an object"},
        {"{\"quantization_config\": {\"weight_block_size\": [64, 64]}}", DI_ERR_UNSUPPORTED,
         "weight_block_size"},
        {"{\"quantization_config\": {\"weight_block_size\": [\"32\", \"32\"]}}", DI_ERR_UNSUPPORTED,
         "weight_block_size"},
        /* the breakers' finds: a field the library overrode, and values taken as absent */
        {TEXT("{\"num_key_value_heads\": 2}"), DI_ERR_MODEL_FORMAT,
         "num_key_value_heads must be 1"},
        {TEXT("{\"engram_layer_ids\": \"1\"}"), DI_ERR_MODEL_FORMAT,
         "engram_layer_ids is not a list"},
        /* layer 2 made a source of its own: its compressor is not in the file */
        {TEXT("{\"kv_source_layer_ids\": [1, 2, 3, 4], \"index_source_layer_ids\": [1, 2, 3, 4]}"),
         DI_ERR_MODEL_FORMAT, "model.layers.2.self_attn.compressor.kv_proj.weight"},
    };
    expect_config_cases("dsv41-f32", cases, sizeof cases / sizeof cases[0]);
}

/* Engram's config and tables (the dsv41-engram-f32 fixture, its tokenizer.json
 * beside it): every field out of range named at load; a tokenizer whose
 * compressed vocabulary disagrees with the config, or none, refused by
 * di_model_load. */
static void test_engram_errors_are_named(void **state)
{
    (void)state;
    static const config_case cases[] = {
        {TEXT("{\"engram_layer_ids\": [2, 0]}"), DI_ERR_MODEL_FORMAT, "engram_layer_ids[1]"},
        {TEXT("{\"engram_layer_ids\": [7]}"), DI_ERR_MODEL_FORMAT, "engram_layer_ids[0]"},
        {TEXT("{\"engram_max_ngram_size\": 1}"), DI_ERR_UNSUPPORTED,
         "engram_max_ngram_size 1 is outside [2, 8]"},
        {TEXT("{\"engram_max_ngram_size\": 9}"), DI_ERR_UNSUPPORTED,
         "engram_max_ngram_size 9 is outside [2, 8]"},
        {TEXT("{\"engram_head_dim\": null}"), DI_ERR_MODEL_FORMAT, "engram_head_dim"},
        {TEXT("{\"engram_pad_token_id\": 320}"), DI_ERR_MODEL_FORMAT,
         "engram_pad_token_id 320 is outside"},
        /* tables of 211 + 223 + 227 + 229 rows: more than the 512 stored */
        {TEXT("{\"engram_vocab_size\": 200}"), DI_ERR_MODEL_FORMAT,
         "engram.embed.weight' is not [at least 890, 16]"},
        {TEXT("{\"engram_head_dim\": 8}"), DI_ERR_MODEL_FORMAT, "engram.embed.weight"},
        /* Engram named where the checkpoint has none */
        {TEXT("{\"engram_layer_ids\": [0, 1]}"), DI_ERR_MODEL_FORMAT,
         "model.layers.1.engram.q_weight"},
    };
    expect_config_cases("dsv41-engram-f32", cases, sizeof cases / sizeof cases[0]);
    /* the tokenizer: missing, or another compressed vocabulary size */
    const char *dir = model_variant_folder(tmpdir, "dsv41-engram-f32", "{}", 0);
    char tok[700], link[300];
    snprintf(tok, sizeof tok, "%s/model/dsv41-engram-f32/tokenizer.json", DI_FIXTURE_DIR);
    snprintf(link, sizeof link, "%s/tokenizer.json", dir);
    di_model *dm = NULL;
    di_error *err = NULL;
    unlink(link);
    assert_int_equal(di_model_load(dir, NULL, &dm, &err), DI_ERR_MODEL_FORMAT);
    assert_non_null(strstr(di_error_message(err), "tokenizer.json is missing"));
    di_error_free(err);
    err = NULL;
    dir = model_variant_folder(tmpdir, "dsv41-engram-f32",
                               TEXT("{\"engram_compressed_vocab_size\": 300}"), 0);
    assert_int_equal(symlink(tok, link), 0);
    assert_int_equal(di_model_load(dir, NULL, &dm, &err), DI_ERR_MODEL_FORMAT);
    assert_non_null(strstr(di_error_message(err),
                           "engram_compressed_vocab_size is 300, but the tokenizer's compressed "
                           "vocabulary has 271"));
    assert_null(dm);
    di_error_free(err);
    /* and with it, the model runs */
    dir = model_variant_folder(tmpdir, "dsv41-engram-f32", "{}", 0);
    err = NULL;
    assert_int_equal(di_model_load(dir, NULL, &dm, &err), DI_OK);
    int32_t ids[3] = {5, 77, 300};
    float *logits = malloc(320 * sizeof *logits);
    assert_int_equal(di_model_eval(dm, ids, 3, logits, 0, &err), DI_OK);
    free(logits);
    di_model_free(dm);
    unlink(link);
}

/* fp8 in 32x32 blocks is widened to bf16 exactly: a block scale that puts a
 * weight past bf16's range is refused, named (E8M0 254 is 2^127: it loaded,
 * its weights infinite). */
static void test_fp8_block_scales_are_checked(void **state)
{
    (void)state;
    const char *dir = model_variant_folder(tmpdir, "dsv41-fp8-mxfp4-release", "{}", 1);
    const uint8_t e8m0 = 254;
    model_variant_poke(dir, "layers.0.attn.wq_a.scale", 0, &e8m0, 1);
    model_expect_load_error(dir, DI_ERR_MODEL_FORMAT, "model.layers.0.self_attn.q_a_proj",
                            "overflows or underflows bf16");
}

/* Entries and keys per token, counted by hand for dsv41-f32: layers 1 (ratio
 * 2), 3 and 4 (ratio 1) keep entries of head_dim 96 and keys of 64; layer 2
 * keeps nothing (it reads layer 1's), layer 0 its window only (fixed, spread
 * over a context of 2^22 tokens: under a byte, as the compressors' rings). */
static void test_kv_bytes_per_token_count_the_sources_only(void **state)
{
    (void)state;
    const char *dir = variant("{\"text_config\": {\"max_position_embeddings\": 4194304}}");
    static const model_kv_bytes_case cases[] = {
        {MODEL_DTYPE_F32, (96 + 64) * 4 / 2.0 + 2 * (96 + 64) * 4},
        {MODEL_DTYPE_F16, (96 + 64) * 2 / 2.0 + 2 * (96 + 64) * 2},
        {MODEL_DTYPE_Q8_0, (102 + 68) / 2.0 + 2 * (102 + 68)},
        {MODEL_DTYPE_Q4_0, (54 + 36) / 2.0 + 2 * (54 + 36)},
    };
    model_expect_kv_bytes(dir, cases, sizeof cases / sizeof cases[0]);
}

/* A candidate source with no layer after it (the last main layer) has no
 * consumer: DeepInfer's _validate_candidate_config checks the blocks'
 * capacity against index_topk only for the layers after the source, so the
 * config loads, and the logits are the dense model's (the breakers' find: it
 * was refused, "hold fewer entries than index_topk"). */
static void test_candidate_source_without_consumers_runs_dense(void **state)
{
    (void)state;
    enum { N = 90, V = 256 };
    int32_t ids[N];
    for (int i = 0; i < N; i++) ids[i] = (i * 37 + 11) % V;
    float *want = malloc(sizeof(float) * N * V), *got = malloc(sizeof(float) * N * V);
    assert_true(want && got);
    const char *edits[2] = {
        TEXT("{\"index_topk\": 65}"),
        TEXT("{\"index_topk\": 65, \"candidate_source_layer_id\": 4, \"candidate_topk_blocks\": 8, "
             "\"candidate_block_size\": 8}"),
    };
    for (int i = 0; i < 2; i++) {
        di_model_options o;
        di_model_options_init(&o);
        o.n_threads = 1;
        o.kv_cache_type = DI_KV_CACHE_F32;
        di_model *dm = NULL;
        di_error *err = NULL;
        di_status st = di_model_load(variant(edits[i]), &o, &dm, &err);
        if (st != DI_OK) fail_msg("%s: %s", edits[i], di_error_message(err));
        assert_int_equal(di_model_eval(dm, ids, N, i ? got : want, DI_EVAL_ALL_LOGITS, &err),
                         DI_OK);
        di_model_free(dm);
    }
    assert_memory_equal(want, got, sizeof(float) * N * V);
    free(want);
    free(got);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bad_configs_are_named),
        cmocka_unit_test(test_engram_errors_are_named),
        cmocka_unit_test(test_fp8_block_scales_are_checked),
        cmocka_unit_test(test_kv_bytes_per_token_count_the_sources_only),
        cmocka_unit_test(test_candidate_source_without_consumers_runs_dense),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
