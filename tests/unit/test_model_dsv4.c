/* lib/model: DeepSeek-V4's loading. The oracle for every load that succeeds is
 * transformers' logits in the fixture (make_dsv4_fixtures.py); the rest are
 * error paths, each message checked for the field or tensor it names.
 *   - DeepSeek's release config keys (compress_ratios, num_hash_layers,
 *     qk_rope_head_dim, a flat YaRN rope dict), which transformers folds into
 *     its own, give the same model;
 *   - a layer type, scoring function or shape this code cannot run is refused
 *     at load, named;
 *   - a tid2eid entry that is not an expert is refused, named;
 *   - the prefix cache's tiers, which V4's caches cannot use yet, are ignored
 *     with a warning. */
#include <malloc.h>
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
#include <jansson.h>

#include "deepinfer/deepinfer.h"
#include "model/model.h"
#include "model_variant.h"
#include "util/error.h"

static char tmpdir[64];

/* tmpdir/variant: the fixture's config.json with edit merged over it (null
 * deletes a key), its weights linked (copied when copy_weights, to be edited). */
static const char *variant(const char *fixture, const char *edit, int copy_weights)
{
    return model_variant_folder(tmpdir, fixture, edit, copy_weights);
}

static int setup(void **state)
{
    (void)state;
    return model_variant_make(tmpdir, sizeof tmpdir, "/tmp/di_test_dsv4XXXXXX");
}

static int teardown(void **state)
{
    (void)state;
    model_variant_remove(tmpdir);
    return 0;
}

static model *load(const char *dir)
{
    model_options o = {0};
    o.n_threads = 1;
    o.kv_dtype = MODEL_DTYPE_F32;
    model *m = NULL;
    di_error *err = NULL;
    di_status st = model_load(dir, &o, &m, &err);
    if (st != DI_OK) fail_msg("%s: %s", dir, di_error_message(err));
    return m;
}

/* The prompt's logits of the model in dir against the fixture's (transformers):
 * the largest difference over the logit range. */
static double prompt_error(const char *fixture, const char *dir)
{
    char path[600];
    snprintf(path, sizeof path, "%s/model/%s/reference.json", DI_FIXTURE_DIR, fixture);
    json_t *ref = json_load_file(path, 0, NULL);
    assert_non_null(ref);
    json_t *p = json_object_get(ref, "prompt");
    size_t n = json_array_size(p);
    int32_t prompt[64];
    assert_true(n > 0 && n <= 64);
    for (size_t i = 0; i < n; i++) prompt[i] = (int32_t)json_integer_value(json_array_get(p, i));
    model *m = load(dir);
    const size_t V = model_get_config(m)->n_vocab;
    float *want = malloc(n * V * sizeof *want), *got = malloc(n * V * sizeof *got);
    assert_true(want && got);
    snprintf(path, sizeof path, "%s/model/%s/logits.f32", DI_FIXTURE_DIR, fixture);
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    assert_int_equal(fread(want, sizeof *want, n * V, f), n * V);
    fclose(f);
    assert_int_equal(model_forward(m, prompt, (int64_t)n, got, 1, NULL), DI_OK);
    float lo = INFINITY, hi = -INFINITY;
    double worst = 0;
    for (size_t i = 0; i < n * V; i++) {
        lo = fminf(lo, want[i]);
        hi = fmaxf(hi, want[i]);
        worst = fmax(worst, fabs((double)got[i] - want[i]));
    }
    free(want);
    free(got);
    model_free(m);
    json_decref(ref);
    return worst / (hi - lo);
}

static void test_release_config_keys_give_the_same_model(void **state)
{
    (void)state;
    const char *F = "dsv4-sigmoid-yarn-bf16"; /* HCA, CSA, sliding; hash_moe, moe, moe */
    assert_true(prompt_error(F, variant(F, "{}", 0)) < 1e-5);
    /* DeepSeek's keys: per-layer compress ratios, a hash-layer count, the rope
     * head dim, and the compressed branches' YaRN as a flat dict (whose
     * attention_factor V4 defaults to 1) */
    const char *release =
        "{\"layer_types\": null, \"compress_ratios\": [128, 4, 0],"
        " \"mlp_layer_types\": null, \"num_hash_layers\": 1,"
        " \"partial_rotary_factor\": null, \"qk_rope_head_dim\": 8,"
        " \"rope_parameters\": {\"rope_type\": \"yarn\", \"factor\": 4.0,"
        " \"original_max_position_embeddings\": 32, \"beta_fast\": 32, \"beta_slow\": 1}}";
    assert_true(prompt_error(F, variant(F, release, 0)) < 1e-5);
}

static void test_bad_configs_and_tensors_are_named(void **state)
{
    (void)state;
    const char *F = "dsv4-fp8";
    model_expect_load_error(variant(F,
                                    "{\"layer_types\": [\"compressed_sparse_attention\","
                                    " \"linear_attention\", \"sliding_attention\"]}",
                                    0),
                            DI_ERR_UNSUPPORTED, "layer_types[1] 'linear_attention'", NULL);
    model_expect_load_error(
        variant(F, "{\"layer_types\": null, \"compress_ratios\": [4, 16, 0]}", 0),
        DI_ERR_UNSUPPORTED, "compress_ratios[1]", NULL);
    model_expect_load_error(variant(F, "{\"n_shared_experts\": 2}", 0), DI_ERR_MODEL_FORMAT,
                            "n_shared_experts must be 1", NULL);
    model_expect_load_error(
        variant(F, "{\"mlp_layer_types\": [\"hash_moe\", \"dense\", \"moe\"]}", 0),
        DI_ERR_UNSUPPORTED, "mlp_layer_types[1] 'dense'", NULL);
    model_expect_load_error(variant(F, "{\"scoring_func\": \"softmax\"}", 0), DI_ERR_UNSUPPORTED,
                            "scoring_func 'softmax'", NULL);
    model_expect_load_error(variant(F, "{\"num_key_value_heads\": 2}", 0), DI_ERR_MODEL_FORMAT,
                            "num_key_value_heads must be 1", NULL);
    model_expect_load_error(variant(F, "{\"o_groups\": 3}", 0), DI_ERR_MODEL_FORMAT,
                            "o_groups must divide", NULL);
    model_expect_load_error(variant(F,
                                    "{\"rope_parameters\": {\"main\": {\"rope_type\": \"yarn\"},"
                                    " \"compress\": {\"rope_type\": \"default\"}}}",
                                    0),
                            DI_ERR_UNSUPPORTED, "rope_parameters.main.rope_type 'yarn'", NULL);
    model_expect_load_error(variant(F, "{\"rope_parameters\": {\"rope_type\": \"yarn\"}}", 0),
                            DI_ERR_MODEL_FORMAT, "lack factor", NULL);
    model_expect_load_error(variant(F, "{\"swiglu_limit\": 0}", 0), DI_ERR_MODEL_FORMAT,
                            "swiglu_limit must be positive", NULL);
    /* the config disagrees with the tensors: the tensor is named */
    model_expect_load_error(variant(F, "{\"index_head_dim\": 32}", 0), DI_ERR_MODEL_FORMAT,
                            "model.layers.0.self_attn.compressor.indexer.kv_proj.weight", NULL);
    model_expect_load_error(variant(F, "{\"hc_mult\": 2}", 0), DI_ERR_MODEL_FORMAT,
                            "model.hc_head.hc_fn", NULL);
    /* a hash layer without its table */
    model_expect_load_error(
        variant(F, "{\"mlp_layer_types\": [\"hash_moe\", \"hash_moe\", \"moe\"]}", 0),
        DI_ERR_MODEL_FORMAT, "model.layers.1.mlp.gate.tid2eid", "is missing");
}

/* Numbers out of their field's range are refused, named: a rotary factor
 * outside (0, 1] (-0.5 once loaded with the rope dims taken from elsewhere;
 * 1e30 times head_dim has no uint32_t), and a number past float's range
 * (1e300 became an infinite rope_theta and loaded). */
static void test_out_of_range_numbers_are_named(void **state)
{
    (void)state;
    const char *F = "dsv4-fp8";
    model_expect_load_error(variant(F, "{\"partial_rotary_factor\": -0.5}", 0), DI_ERR_MODEL_FORMAT,
                            "partial_rotary_factor -0.5 is not in (0, 1]", NULL);
    model_expect_load_error(variant(F, "{\"partial_rotary_factor\": 1e30}", 0), DI_ERR_MODEL_FORMAT,
                            "partial_rotary_factor 1e+30 is not in (0, 1]", NULL);
    model_expect_load_error(variant(F, "{\"rope_theta\": 1e300}", 0), DI_ERR_MODEL_FORMAT,
                            "rope_theta 1e+300 is out of a float's range", NULL);
    model_expect_load_error(variant(F, "{\"swiglu_limit\": -1e39}", 0), DI_ERR_MODEL_FORMAT,
                            "swiglu_limit -1e+39 is out of a float's range", NULL);
    /* a factor in range still loads (0.5: the rope part fits the indexer's 16 dims) */
    model_free(load(variant(F, "{\"partial_rotary_factor\": 0.5}", 0)));
}

/* The logits of every row of a fixed 40-token prompt through the variant of
 * `fixture` with `edit`, at a context of n_ctx (malloc'd [40, vocab]; NULL
 * when the load fails, its status in *st). */
static float *variant_logits(const char *fixture, const char *edit, int64_t n_ctx, di_status *st)
{
    const char *dir = variant(fixture, edit, 0);
    model_options o = {0};
    o.n_threads = 1;
    o.kv_dtype = MODEL_DTYPE_F32;
    o.n_ctx = n_ctx;
    model *m = NULL;
    di_error *err = NULL;
    if ((*st = model_load(dir, &o, &m, &err)) != DI_OK) {
        di_error_free(err);
        return NULL;
    }
    int32_t toks[40];
    for (int i = 0; i < 40; i++) toks[i] = (i * 37 + 5) % 512;
    const size_t V = model_get_config(m)->n_vocab;
    float *lg = malloc(40 * V * sizeof *lg);
    assert_non_null(lg);
    assert_int_equal(model_forward(m, toks, 40, lg, 1, NULL), DI_OK);
    model_free(m);
    return lg;
}

/* A sliding window longer than the context covers all of it, as a window of
 * exactly the context does: the same logits, and the window's ring is sized
 * by the context (sliding_window 2^31 - 1 once asked for a 275 GB ring). */
static void test_window_past_the_context_is_the_whole_context(void **state)
{
    (void)state;
    const char *F = "dsv4-fp8";
    di_status st;
    float *want = variant_logits(F, "{\"sliding_window\": 64}", 64, &st);
    assert_int_equal(st, DI_OK);
    const char *edits[] = {"{\"sliding_window\": 65}", "{\"sliding_window\": 2147483647}",
                           "{\"sliding_window\": 4294967295}"};
    for (size_t i = 0; i < sizeof edits / sizeof edits[0]; i++) {
        float *got = variant_logits(F, edits[i], 64, &st);
        assert_int_equal(st, DI_OK);
        assert_memory_equal(got, want, 40 * 512 * sizeof *got);
        free(got);
    }
    free(want);
}

/* Overwrite n bytes at byte `at` of tensor `name`'s data in the safetensors file. */

static void test_bad_tid2eid_is_named(void **state)
{
    (void)state;
    const char *dir = variant("dsv4-fp8", "{}", 1);
    int64_t v = 8; /* token 3's second expert: the ninth of 8 */
    model_variant_poke(dir, "model.layers.0.ffn.gate.tid2eid", 7 * sizeof v, &v, sizeof v);
    model_expect_load_error(dir, DI_ERR_MODEL_FORMAT, "model.layers.0.mlp.gate.tid2eid",
                            "entry 7 (token 3) is 8, not one of the 8 experts");
    dir = variant("dsv4-fp8", "{}", 1);
    v = -1;
    model_variant_poke(dir, "model.layers.0.ffn.gate.tid2eid", 0, &v, sizeof v);
    model_expect_load_error(dir, DI_ERR_MODEL_FORMAT, "entry 0 (token 0) is -1", NULL);
}

/* DeepSeek's release layout (no "model." prefix, "X.scale" block scales, E8M0
 * ones) loads as transformers runs it (make_dsv4_fixtures.py's reference); an
 * E8M0 scale of 255 (its NaN) is refused, named. */
static void test_release_layout_scales(void **state)
{
    (void)state;
    const char *F = "dsv4-fp8-ue8m0-release";
    assert_true(prompt_error(F, variant(F, "{}", 0)) < 1e-5);
    const char *dir = variant(F, "{}", 1);
    const uint8_t nan = 255;
    model_variant_poke(dir, "layers.0.attn.wq_b.scale", 0, &nan, 1);
    model_expect_load_error(dir, DI_ERR_MODEL_FORMAT,
                            "'model.layers.0.self_attn.q_b_proj.scale' block 0", "E8M0's NaN");
}

/* DeepSeek-V4-Flash's MXFP4 routed experts (I8 codes with an E8M0 scale per 32
 * values; the fixture's packing checked against llama.cpp's converter) run as
 * transformers runs their dequantized values; a NaN scale there is refused. */
static void test_mxfp4_experts(void **state)
{
    (void)state;
    const char *F = "dsv4-mxfp4-release";
    assert_true(prompt_error(F, variant(F, "{}", 0)) < 1e-5);
    const char *dir = variant(F, "{}", 1);
    const uint8_t nan = 255;
    model_variant_poke(dir, "layers.1.ffn.experts.3.w2.scale", 5, &nan, 1);
    model_expect_load_error(dir, DI_ERR_MODEL_FORMAT,
                            "'model.layers.1.mlp.experts.3.down_proj.scale' block 5", "E8M0's NaN");
}

/* The engine's warnings, kept (the last one). */
static void keep_warnings(void *user, di_log_level level, const char *message)
{
    if (level == DI_LOG_WARN) snprintf(user, 512, "%s", message);
}

/* The bytes of model.safetensors in dir: *hdr its parsed header, *data (malloc'd) the byte
 * buffer after it, *n_data its size. */
static void read_safetensors(const char *dir, json_t **hdr, char **data, size_t *n_data)
{
    char path[300];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    uint64_t hl;
    assert_int_equal(fread(&hl, 8, 1, f), 1);
    char *h = calloc(1, hl + 1);
    assert_non_null(h);
    assert_int_equal(fread(h, 1, hl, f), hl);
    *hdr = json_loads(h, 0, NULL);
    assert_non_null(*hdr);
    free(h);
    long at = ftell(f);
    assert_int_equal(fseek(f, 0, SEEK_END), 0);
    *n_data = (size_t)(ftell(f) - at);
    assert_int_equal(fseek(f, at, SEEK_SET), 0);
    *data = malloc(*n_data + 1);
    assert_non_null(*data);
    assert_int_equal(fread(*data, 1, *n_data, f), *n_data);
    fclose(f);
}

/* Write hdr's tensors (their bytes from data) packed one after another. */
static void write_safetensors(const char *dir, json_t *hdr, const char *data, size_t n_data)
{
    char *packed = malloc(n_data + 1);
    assert_non_null(packed);
    size_t at = 0;
    const char *key;
    json_t *v;
    json_object_foreach(hdr, key, v)
    {
        json_t *offs = json_object_get(v, "data_offsets");
        if (!offs) continue; /* __metadata__ */
        size_t b = (size_t)json_integer_value(json_array_get(offs, 0)),
               n = (size_t)json_integer_value(json_array_get(offs, 1)) - b;
        memcpy(packed + at, data + b, n);
        json_array_set_new(offs, 0, json_integer((json_int_t)at));
        json_array_set_new(offs, 1, json_integer((json_int_t)(at + n)));
        at += n;
    }
    data = packed;
    n_data = at;
    char path[300];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    unlink(path);
    char *h = json_dumps(hdr, JSON_COMPACT);
    assert_non_null(h);
    uint64_t hl = strlen(h);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(&hl, 8, 1, f), 1);
    assert_int_equal(fwrite(h, 1, hl, f), hl);
    assert_int_equal(fwrite(data, 1, n_data, f), n_data);
    fclose(f);
    free(h);
    free(packed);
}

/* The bytes of tensor `name` in the buffer. */
static const char *tensor_bytes(json_t *hdr, const char *data, const char *name, size_t *n)
{
    json_t *offs = json_object_get(json_object_get(hdr, name), "data_offsets");
    assert_non_null(offs);
    size_t b = (size_t)json_integer_value(json_array_get(offs, 0));
    *n = (size_t)json_integer_value(json_array_get(offs, 1)) - b;
    return data + b;
}

/* Append a tensor to the header and buffer. */
static void add_tensor(json_t *hdr, char **data, size_t *n_data, const char *name,
                       const char *dtype, const int64_t *shape, int rank, const char *bytes,
                       size_t n)
{
    *data = realloc(*data, *n_data + n);
    assert_non_null(*data);
    memcpy(*data + *n_data, bytes, n);
    json_t *sh = json_array();
    for (int i = 0; i < rank; i++) json_array_append_new(sh, json_integer(shape[i]));
    json_object_set_new(hdr, name,
                        json_pack("{s:s, s:o, s:[I, I]}", "dtype", dtype, "shape", sh,
                                  "data_offsets", (json_int_t)*n_data, (json_int_t)(*n_data + n)));
    *n_data += n;
}

/* dsv4-fp8 with each layer's experts E.w1 / w3 / w2 as transformers' fused
 * fp8 mlp.experts.gate_up_proj [X, 2 I, n_embd] and down_proj [X, n_embd, I]
 * with their _scale_inv [X, 1, 1] (w1's scale for the gate_up block, which
 * holds w1 and w3: one 128-row block); or (fused 0) the per-expert layout with
 * w3's scale set to w1's, the same weights. */
static const char *fp8_experts_variant(int fused)
{
    const char *dir = variant("dsv4-fp8", "{}", 1);
    json_t *hdr;
    char *data;
    size_t n_data, n;
    read_safetensors(dir, &hdr, &data, &n_data);
    enum { L = 3, X = 8, I = 32, E = 64 };
    static char gu[X * 2 * I * E], dn[X * E * I];
    float gs[X], ds[X];
    char name[160];
    for (int l = 0; l < L; l++) {
        for (int e = 0; e < X; e++) {
            const char *w[3] = {"w1", "w3", "w2"};
            for (int k = 0; k < 3; k++) {
                snprintf(name, sizeof name, "model.layers.%d.ffn.experts.%d.%s.weight", l, e, w[k]);
                const char *b = tensor_bytes(hdr, data, name, &n);
                assert_int_equal(n, I * E);
                memcpy(k == 2 ? dn + (size_t)e * I * E : gu + ((size_t)e * 2 + k) * I * E, b, n);
                snprintf(name, sizeof name, "model.layers.%d.ffn.experts.%d.%s.weight_scale_inv", l,
                         e, w[k]);
                b = tensor_bytes(hdr, data, name, &n);
                assert_int_equal(n, 4);
                if (k == 0) memcpy(&gs[e], b, 4);
                if (k == 2) memcpy(&ds[e], b, 4);
                if (k == 1 && !fused) memcpy((char *)b, &gs[e], 4); /* w3's scale := w1's */
                if (fused) {
                    json_object_del(hdr, name);
                    name[strlen(name) - strlen("_scale_inv")] = 0;
                    json_object_del(hdr, name);
                }
            }
        }
        if (!fused) continue;
        const int64_t sgu[3] = {X, 2 * I, E}, sdn[3] = {X, E, I}, ss[3] = {X, 1, 1};
        snprintf(name, sizeof name, "model.layers.%d.mlp.experts.gate_up_proj", l);
        add_tensor(hdr, &data, &n_data, name, "F8_E4M3", sgu, 3, gu, sizeof gu);
        snprintf(name, sizeof name, "model.layers.%d.mlp.experts.gate_up_proj_scale_inv", l);
        add_tensor(hdr, &data, &n_data, name, "F32", ss, 3, (const char *)gs, sizeof gs);
        snprintf(name, sizeof name, "model.layers.%d.mlp.experts.down_proj", l);
        add_tensor(hdr, &data, &n_data, name, "F8_E4M3", sdn, 3, dn, sizeof dn);
        snprintf(name, sizeof name, "model.layers.%d.mlp.experts.down_proj_scale_inv", l);
        add_tensor(hdr, &data, &n_data, name, "F32", ss, 3, (const char *)ds, sizeof ds);
    }
    write_safetensors(dir, hdr, data, n_data);
    json_decref(hdr);
    free(data);
    return dir;
}

/* The logits of the 40-token prompt of the model in dir (malloc'd [40, 512]). */
static float *dir_logits(const char *dir)
{
    model *m = load(dir);
    int32_t toks[40];
    for (int i = 0; i < 40; i++) toks[i] = (i * 37 + 5) % 512;
    float *lg = malloc(40 * 512 * sizeof *lg);
    assert_non_null(lg);
    assert_int_equal(model_forward(m, toks, 40, lg, 1, NULL), DI_OK);
    model_free(m);
    return lg;
}

/* transformers' fused fp8 experts (gate_up_proj / down_proj with their
 * _scale_inv, which docs/deepseek-v4.md lists) load, as the same weights per
 * expert do: the same logits. They were refused ("fp8 tensor ... has no
 * weight_scale_inv": only X.weight_scale_inv was attached). A fused scale of
 * the wrong shape is refused, named, before any row view reads it. */
static void test_fused_fp8_experts_equal_the_per_expert_layout(void **state)
{
    (void)state;
    float *want = dir_logits(fp8_experts_variant(0));
    float *got = dir_logits(fp8_experts_variant(1));
    assert_memory_equal(got, want, 40 * 512 * sizeof *got);
    free(want);
    free(got);
    /* a scale of [X, 1] for the 3-D weight */
    const char *dir = fp8_experts_variant(1);
    json_t *hdr;
    char *data;
    size_t n_data;
    read_safetensors(dir, &hdr, &data, &n_data);
    json_t *sh = json_object_get(
        json_object_get(hdr, "model.layers.1.mlp.experts.down_proj_scale_inv"), "shape");
    assert_int_equal(json_array_remove(sh, 2), 0);
    write_safetensors(dir, hdr, data, n_data);
    json_decref(hdr);
    free(data);
    model_expect_load_error(dir, DI_ERR_MODEL_FORMAT,
                            "'model.layers.1.mlp.experts.down_proj_scale_inv' must be F32 of shape "
                            "{1, 1, 8}",
                            NULL);
}

/* V4's caches are each sequence's own: no prefix cache tier can hold them, so
 * asking for one is a warning naming the fields, and the engine serves. */
static void forward_chunks(model *m, model_seq *s, const int32_t *tokens, int64_t to, float *logits)
{
    di_error *err = NULL;
    for (int64_t p = model_seq_n_past(s); p < to;) {
        int64_t n = to - p < 16 ? to - p : 16; /* the model's n_batch */
        assert_int_equal(model_seq_reserve(m, s, p + n), DI_OK);
        model_batch_item it = {s, tokens + p, n, (int)n};
        if (model_forward_batch(m, &it, 1, logits ? logits + p * 512 : NULL, &err) != DI_OK)
            fail_msg("%s", di_error_message(err));
        p += n;
    }
}

/* A sequence cut back (rejected drafts) and computed again gives the logits
 * of one never cut: within n_batch tokens of the most it held its rings
 * still hold the rows; cut deeper (a draft model's sequence behind by more
 * than a step), it was computed from rows other tokens overwrote (logits
 * off by about 3) and is now dropped whole, to be computed again. The
 * context (250) is no multiple of the compress rates (4, 8). */
static void test_truncated_sequence_recomputes_the_same_logits(void **state)
{
    (void)state;
    enum { N = 120 };
    model_options o = {0};
    o.n_threads = 1;
    o.kv_dtype = MODEL_DTYPE_F32;
    o.n_ctx = 250;
    o.n_batch = 16;
    o.kv_n_ctx_multiple = 2;
    model *m = NULL;
    di_error *err = NULL;
    if (model_load(DI_FIXTURE_DIR "/model/dsv4-sqrtsoftplus-f32", &o, &m, &err) != DI_OK)
        fail_msg("%s", di_error_message(err));
    int32_t tokens[N], junk[N];
    for (int i = 0; i < N; i++) tokens[i] = (int32_t)((i * 37 + 11) % 500);
    float *want = malloc((size_t)N * 512 * sizeof *want),
          *got = malloc((size_t)N * 512 * sizeof *got);
    assert_non_null(want);
    assert_non_null(got);
    model_seq *s;
    assert_int_equal(model_seq_create(m, &s), DI_OK);
    forward_chunks(m, s, tokens, N, want);
    static const int64_t cut[][2] = {{100, 84}, {100, 60}, {120, 20}};
    for (int k = 0; k < 3; k++) {
        for (int i = 0; i < N; i++) junk[i] = i < cut[k][1] ? tokens[i] : 3; /* rejected drafts */
        model_seq_reset(m, s);
        forward_chunks(m, s, junk, cut[k][0], NULL);
        model_seq_truncate(m, s, cut[k][1]);
        int64_t kept = model_seq_n_past(s);
        assert_true(kept == cut[k][1] || (kept == 0 && cut[k][0] - cut[k][1] > 16));
        forward_chunks(m, s, tokens, N, got);
        for (int64_t i = cut[k][1] * 512; i < N * 512; i++)
            if (got[i] != want[i])
                fail_msg("cut %lld -> %lld: logit %lld is %g, want %g", (long long)cut[k][0],
                         (long long)cut[k][1], (long long)i, got[i], want[i]);
    }
    model_seq_free(m, s);
    free(want);
    free(got);
    model_free(m);
}

/* llama.cpp's deepseek4 GGUF (gguf-dsv4/dsv4-gguf-bf16.gguf, its converter's
 * output): its metadata read into the same model as the checkpoint's
 * config.json (the parity test holds its logits to transformers'), and a key
 * or tensor that is missing, lies or cannot run refused, named. */
static void test_deepseek4_gguf_config_and_bad_files(void **state)
{
    (void)state;
    const char *src = DI_FIXTURE_DIR "/model/gguf-dsv4/dsv4-gguf-bf16.gguf";
    char dst[600];
    snprintf(dst, sizeof dst, "%s/variant.gguf", tmpdir);
    model *g = load(src);
    model *h = load(DI_FIXTURE_DIR "/model/dsv4-gguf-release");
    const model_config *a = model_weights_config(model_get_weights(g)),
                       *b = model_weights_config(model_get_weights(h));
    assert_int_equal(a->arch, MODEL_ARCH_DEEPSEEK_V4);
    assert_memory_equal(&a->v4, &b->v4, sizeof a->v4);
    assert_int_equal(a->head_dim, b->head_dim);
    assert_int_equal(a->qk_rope_head_dim, b->qk_rope_head_dim);
    assert_int_equal(a->n_ff_exp, b->n_ff_exp);
    assert_int_equal(a->expert_gating, b->expert_gating);
    assert_float_equal(a->routed_scaling_factor, b->routed_scaling_factor, 0);
    assert_float_equal(a->rope_theta, b->rope_theta, 0);
    model_free(g);
    model_free(h);
    model_expect_load_error(model_variant_gguf(src, dst, "deepseek4.hash_layer_count",
                                               "deepseek4.hash_layer_cXunt", -1),
                            DI_ERR_MODEL_FORMAT, "deepseek4.hash_layer_count", "missing");
    model_expect_load_error(model_variant_gguf(src, dst, "deepseek4.expert_gating_func", NULL, 1),
                            DI_ERR_UNSUPPORTED, "expert_gating_func 1", NULL);
    model_expect_load_error(model_variant_gguf(src, dst, "deepseek4.expert_count", NULL, 16),
                            DI_ERR_MODEL_FORMAT, "ffn_gate_exps.weight", "16 experts");
    model_expect_load_error(
        model_variant_gguf(src, dst, "deepseek4.hyper_connection.count", NULL, 3),
        DI_ERR_MODEL_FORMAT, "hc_head", NULL);
    /* a shared-expert count V4 does not have: refused, not run as one */
    model_expect_load_error(model_variant_gguf(src, dst, "deepseek4.expert_shared_count", NULL, 0),
                            DI_ERR_MODEL_FORMAT, "n_shared_experts", NULL);
    model_expect_load_error(model_variant_gguf(src, dst, "deepseek4.expert_shared_count", NULL, 2),
                            DI_ERR_MODEL_FORMAT, "n_shared_experts", NULL);
    /* a tensor missing: named as deepseek_v4.c reads it */
    model_expect_load_error(
        model_variant_gguf(src, dst, "blk.1.attn_sinks.weight", "blk.1.attn_sinkX.weight", -1),
        DI_ERR_MODEL_FORMAT, "model.layers.1.self_attn.sinks", NULL);
    /* a fractional width: the key rewritten as the f32 32.5 */
    const float ff = 32.5f;
    model_variant_gguf(src, dst, "deepseek4.expert_feed_forward_length", (const char *)&ff,
                       MODEL_VARIANT_AS_F32);
    model_expect_load_error(dst, DI_ERR_MODEL_FORMAT, "expert_feed_forward_length 32.5", NULL);
    unlink(dst);
}

/* The compressed entries grow with the sequence, not with the context: a
 * context of 4 Mi tokens (before: 1 Mi CSA entries and their indexer keys per
 * CSA layer and 512 Ki HCA ones, about 450 MB of heap at load) costs a
 * 16-token prompt 34 MB, the pool's block accounting for that context (about
 * 8 bytes a token, as for every model), and its logits are still
 * transformers'. (mallinfo2 counts glibc's heap; under a sanitizer's
 * allocator it reads 0 and only the logits count.) */
static void test_compressed_cache_grows_with_the_sequence(void **state)
{
    (void)state;
    const char *dir = variant("dsv4-sqrtsoftplus-f32", "{\"max_position_embeddings\": 4194304}", 0);
    struct mallinfo2 a = mallinfo2();
    model_options o = {0};
    o.n_threads = 1;
    o.kv_dtype = MODEL_DTYPE_F32;
    o.n_ctx = 4194304;
    o.kv_n_ctx_multiple = 1; /* the pool's block accounting for one context, not four */
    model *m = NULL;
    di_error *err = NULL;
    if (model_load(dir, &o, &m, &err) != DI_OK) fail_msg("%s", di_error_message(err));
    char path[600];
    snprintf(path, sizeof path, "%s/model/dsv4-sqrtsoftplus-f32/reference.json", DI_FIXTURE_DIR);
    json_t *ref = json_load_file(path, 0, NULL);
    assert_non_null(ref);
    json_t *p = json_object_get(ref, "prompt");
    int32_t tokens[64];
    size_t n = json_array_size(p);
    assert_true(n <= 64);
    for (size_t i = 0; i < n; i++) tokens[i] = (int32_t)json_integer_value(json_array_get(p, i));
    float *logits = malloc(n * 512 * sizeof *logits), *want = malloc(n * 512 * sizeof *want);
    assert_non_null(logits);
    assert_non_null(want);
    assert_int_equal(model_forward(m, tokens, (int64_t)n, logits, 1, &err), DI_OK);
    struct mallinfo2 b = mallinfo2();
    size_t grew = (b.hblkhd + b.uordblks) - (a.hblkhd + a.uordblks);
    print_message("heap grew by %zu bytes for a 4 Mi-token context and %zu tokens\n", grew, n);
    assert_true(grew < (size_t)96 << 20);
    snprintf(path, sizeof path, "%s/model/dsv4-sqrtsoftplus-f32/logits.f32", DI_FIXTURE_DIR);
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    assert_int_equal(fread(want, sizeof *want, n * 512, f), n * 512);
    fclose(f);
    float lo = INFINITY, hi = -INFINITY, worst = 0;
    for (size_t i = 0; i < n * 512; i++) {
        lo = fminf(lo, want[i]);
        hi = fmaxf(hi, want[i]);
        worst = fmaxf(worst, fabsf(want[i] - logits[i]));
    }
    assert_true(worst / (hi - lo) < 1e-4f);
    free(logits);
    free(want);
    json_decref(ref);
    model_free(m);
}

/* di_model_kv_bytes_per_token in each cache type, from dsv4-gguf-release's
 * layers (CSA rate 4, sliding, HCA rate 128, CSA; head_dim 32,
 * index_head_dim 64) counted by hand: per token the two CSA layers keep a
 * quarter of an entry row (32) and of an indexer key row (64), the HCA layer
 * 1/128 of an entry row; Q8_0 rows are 34 bytes a 32, Q4_0 18. The fixed
 * part (windows, f32 compressor rings) spread over a 4 Mi context adds under
 * a byte. */
static void test_kv_bytes_per_token_follow_the_cache_type(void **state)
{
    (void)state;
    const char *dir = variant("dsv4-gguf-release", "{\"max_position_embeddings\": 4194304}", 0);
    static const model_kv_bytes_case cases[] = {
        {MODEL_DTYPE_F32, 2 * (32 + 64) / 4.0 * 4 + 32 / 128.0 * 4},
        {MODEL_DTYPE_F16, 2 * (32 + 64) / 4.0 * 2 + 32 / 128.0 * 2},
        {MODEL_DTYPE_Q8_0, 2 * (34 + 68) / 4.0 + 34 / 128.0},
        {MODEL_DTYPE_Q4_0, 2 * (18 + 36) / 4.0 + 18 / 128.0},
    };
    model_expect_kv_bytes(dir, cases, sizeof cases / sizeof cases[0]);
}

/* A step may run to the end of the blocks a sequence reserved (16 tokens
 * each): reserving 100 tokens (7 blocks) and then evaluating 112 closed CSA
 * entries 25-27 past the 26 the entries had grown for (a heap overflow under
 * ASan; the breakers' find). Now the entries grow for the whole blocks, and
 * the logits are those of the same tokens without the reserve, in every
 * cache type. */
static void test_a_step_may_fill_the_reserved_blocks(void **state)
{
    (void)state;
    static const model_dtype types[] = {MODEL_DTYPE_F32, MODEL_DTYPE_F16, MODEL_DTYPE_Q8_0,
                                        MODEL_DTYPE_Q4_0};
    int32_t tokens[112];
    for (int i = 0; i < 112; i++) tokens[i] = (int32_t)((i * 29 + 13) % 500);
    float *want = malloc(512 * sizeof *want), *got = malloc(512 * sizeof *got);
    assert_non_null(want);
    assert_non_null(got);
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
        model_options o = {0};
        o.n_threads = 1;
        o.kv_dtype = types[t];
        o.n_ctx = 400;
        o.n_batch = 128;
        model *m = NULL;
        di_error *err = NULL;
        if (model_load(DI_FIXTURE_DIR "/model/dsv4-gguf-release", &o, &m, &err) != DI_OK)
            fail_msg("%s", di_error_message(err));
        /* the short reserve first, on the model's fresh cache (a reused one
         * keeps the room it had) */
        float *out[2] = {got, want};
        for (int run = 0; run < 2; run++) {
            model_seq *s;
            assert_int_equal(model_seq_create(m, &s), DI_OK);
            assert_int_equal(model_seq_reserve(m, s, run == 0 ? 100 : 112), DI_OK);
            model_batch_item it = {s, tokens, 112, 1};
            if (model_forward_batch(m, &it, 1, out[run], &err) != DI_OK)
                fail_msg("%s", di_error_message(err));
            model_seq_free(m, s);
        }
        assert_memory_equal(got, want, 512 * sizeof *got);
        model_free(m);
    }
    free(want);
    free(got);
}

static void test_engine_ignores_the_prefix_cache_tiers_with_a_warning(void **state)
{
    (void)state;
    di_engine_config cfg;
    di_engine_config_init(&cfg);
    char model_dir[300], warning[512] = "";
    snprintf(model_dir, sizeof model_dir, "%s/model/dsv4-fp8", DI_FIXTURE_DIR);
    cfg.model_path = model_dir;
    cfg.n_threads = 1;
    cfg.kv_cache_dir = tmpdir;
    cfg.log = keep_warnings;
    cfg.log_user = warning;
    di_engine *e = NULL;
    assert_int_equal(di_engine_create(&cfg, &e, NULL), DI_OK);
    assert_non_null(strstr(warning, "kv_cache_dir ignored"));
    assert_int_equal(di_engine_destroy(e), DI_OK);
}

/* A tokenizer larger than the model's vocabulary (here the real V4 one on a
 * 512-token checkpoint) loads, with a warning saying what will fail. */
static void test_a_tokenizer_larger_than_the_vocabulary_is_a_warning(void **state)
{
    (void)state;
    const char *tok = DI_ASSET_DIR "/deepseek-v4/tokenizer.json";
    if (access(tok, R_OK) != 0) skip();
    di_engine_config cfg;
    di_engine_config_init(&cfg);
    char model_dir[300], warning[512] = "";
    snprintf(model_dir, sizeof model_dir, "%s/model/dsv4-fp8", DI_FIXTURE_DIR);
    cfg.model_path = model_dir;
    cfg.tokenizer_path = tok;
    cfg.n_threads = 1;
    cfg.log = keep_warnings;
    cfg.log_user = warning;
    di_engine *e = NULL;
    assert_int_equal(di_engine_create(&cfg, &e, NULL), DI_OK);
    if (!strstr(warning, "the tokenizer has 129280 tokens but the model only 512"))
        fail_msg("warning: %s", warning);
    assert_int_equal(di_engine_destroy(e), DI_OK);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_release_config_keys_give_the_same_model),
        cmocka_unit_test(test_bad_configs_and_tensors_are_named),
        cmocka_unit_test(test_out_of_range_numbers_are_named),
        cmocka_unit_test(test_window_past_the_context_is_the_whole_context),
        cmocka_unit_test(test_bad_tid2eid_is_named),
        cmocka_unit_test(test_release_layout_scales),
        cmocka_unit_test(test_mxfp4_experts),
        cmocka_unit_test(test_deepseek4_gguf_config_and_bad_files),
        cmocka_unit_test(test_compressed_cache_grows_with_the_sequence),
        cmocka_unit_test(test_truncated_sequence_recomputes_the_same_logits),
        cmocka_unit_test(test_kv_bytes_per_token_follow_the_cache_type),
        cmocka_unit_test(test_a_step_may_fill_the_reserved_blocks),
        cmocka_unit_test(test_engine_ignores_the_prefix_cache_tiers_with_a_warning),
        cmocka_unit_test(test_a_tokenizer_larger_than_the_vocabulary_is_a_warning),
        cmocka_unit_test(test_fused_fp8_experts_equal_the_per_expert_layout),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
