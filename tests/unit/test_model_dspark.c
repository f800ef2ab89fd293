/* lib/model: DeepSeek-V4's DSpark draft head (deepseek_v4_dspark.c). The
 * oracle is the fixture dsv4-dspark-release (make_dspark_fixtures.py): a
 * float32 reference of llama.cpp's DSpark graph (dflash.cpp's graph_dsv4 and
 * Markov head), itself checked against llama.cpp live (--llama-cpp), on a
 * tiny V4 target in DeepSeek's release layout with two DSpark stages:
 * dspark_features.f32 (the target's features of the first 30 positions),
 * dspark_logits.f32 (one block per case: the features of the positions before
 * it injected first), its drafts and confidences.
 *   - the target's features, captured in one forward pass;
 *   - each case's biased logits, drafts and confidences, from the fixture's
 *     features and from the model's own;
 *   - the DSpark drafter, over requests prefilled in one batched step, drafts
 *     the reference's blocks (its observe reading the step's features);
 *   - a block's rows do not depend on the batch (two sequences in one call
 *     equal each alone, bit for bit), nor on how the features were injected;
 *   - a config or checkpoint this code cannot run is refused, named; the
 *     operations' errors. */
#include <jansson.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "api/engram_vocab.h"
#include "engine/draft.h"
#include "model/model.h"
#include "sampler/sampler.h"
#include "util/error.h"
#include "model_variant.h"

#define FIXTURE     "dsv4-dspark-release"
#define FIXTURE_V41 "dsv41-dspark-release"
#define GGUF_TARGET DI_FIXTURE_DIR "/model/gguf-dsv4/dsv4-dspark-target.gguf"
#define GGUF_DSPARK DI_FIXTURE_DIR "/model/gguf-dsv4/dsv4-dspark.gguf"

static char tmpdir[64];

static int setup(void **state)
{
    (void)state;
    return model_variant_make(tmpdir, sizeof tmpdir, "/tmp/di_test_dsparkXXXXXX");
}

static int teardown(void **state)
{
    (void)state;
    model_variant_remove(tmpdir);
    return 0;
}

typedef struct fixture {
    json_t *ref, *ds;
    int32_t seq[64];
    size_t n_seq;
    int n_cases, block;
    int64_t cases[16];
    float *features, *logits; /* [cases[last], width], [n_cases x block, n_vocab] */
} fixture;

static void fixture_load(fixture *f, const model *m, const char *name)
{
    char dir[600], path[700];
    snprintf(dir, sizeof dir, "%s/model/%s", DI_FIXTURE_DIR, name);
    snprintf(path, sizeof path, "%s/reference.json", dir);
    assert_non_null(f->ref = json_load_file(path, 0, NULL));
    assert_non_null(f->ds = json_object_get(f->ref, "dspark"));
    json_t *p = json_object_get(f->ref, "prompt");
    f->n_seq = json_array_size(p);
    assert_true(f->n_seq > 0 && f->n_seq <= 64);
    for (size_t i = 0; i < f->n_seq; i++)
        f->seq[i] = (int32_t)json_integer_value(json_array_get(p, i));
    json_t *cases = json_object_get(f->ds, "cases");
    f->n_cases = (int)json_array_size(cases);
    assert_true(f->n_cases > 0 && f->n_cases <= 16);
    for (int k = 0; k < f->n_cases; k++) f->cases[k] = json_integer_value(json_array_get(cases, k));
    f->block = (int)json_integer_value(json_object_get(f->ds, "block_size"));
    assert_int_equal(model_dspark_block(m), f->block);
    const size_t V = model_get_config(m)->n_vocab, W = (size_t)model_dspark_feature_width(m);
    f->features =
        model_fixture_f32(dir, "dspark_features.f32", (size_t)f->cases[f->n_cases - 1] * W);
    f->logits = model_fixture_f32(dir, "dspark_logits.f32", (size_t)(f->n_cases * f->block) * V);
}

static void fixture_free(fixture *f)
{
    free(f->features);
    free(f->logits);
    json_decref(f->ref);
}

static model *load(const char *dir, int64_t n_batch)
{
    model_options o = {0};
    o.n_threads = 2;
    o.n_ctx = 128;
    o.n_batch = n_batch;
    o.kv_dtype = MODEL_DTYPE_F32;
    model *m = NULL;
    di_error *err = NULL;
    if (model_load(dir, &o, &m, &err) != DI_OK ||
        /* (V4.1's Engram: the folder's tokenizer.json, as di_model_load) */
        api_engram_vocab(m, NULL, dir, &err) != DI_OK)
        fail_msg("%s: %s", dir, di_error_message(err));
    return m;
}

/* The largest |a - b| over n values, over the range of b. */
static double rel_diff(const float *a, const float *b, size_t n)
{
    double worst = 0, lo = b[0], hi = b[0];
    for (size_t i = 0; i < n; i++) {
        worst = fmax(worst, fabs((double)a[i] - b[i]));
        lo = fmin(lo, b[i]);
        hi = fmax(hi, b[i]);
    }
    return worst / (hi - lo);
}

/* Every case of the fixture on one DSpark sequence, its features from
 * features (rows of positions 0 ..): the worst logit difference over the
 * range; the drafts and confidences checked. */
static double run_cases(model *m, const fixture *f, const float *features)
{
    const model_config *c = model_get_config(m);
    const size_t V = c->n_vocab, W = (size_t)model_dspark_feature_width(m), B = (size_t)f->block;
    model_seq *s = NULL;
    assert_int_equal(model_dspark_seq_create(m, &s), DI_OK);
    float *logits = malloc(B * V * sizeof *logits), conf[64];
    int32_t drafts[64];
    assert_non_null(logits);
    double worst = 0, conf_worst = 0;
    int64_t done = 0;
    json_t *jd = json_object_get(f->ds, "drafts"), *jc = json_object_get(f->ds, "confidence");
    for (int k = 0; k < f->n_cases; k++) {
        di_error *err = NULL;
        if (model_dspark_inject(m, s, features + done * W, f->cases[k] - done, &err) != DI_OK)
            fail_msg("inject: %s", di_error_message(err));
        done = f->cases[k];
        assert_int_equal(model_seq_n_past(s), done);
        const int32_t anchor = f->seq[done];
        model_seq *seqs[1] = {s};
        if (model_dspark_draft(m, seqs, &anchor, 1, logits, conf, drafts, &err) != DI_OK)
            fail_msg("draft: %s", di_error_message(err));
        assert_int_equal(model_seq_n_past(s), done); /* the block does not append */
        worst = fmax(worst, rel_diff(logits, f->logits + (size_t)k * B * V, B * V));
        for (size_t i = 0; i < B; i++) {
            assert_int_equal(drafts[i],
                             json_integer_value(json_array_get(json_array_get(jd, k), i)));
            conf_worst =
                fmax(conf_worst,
                     fabs(conf[i] - json_real_value(json_array_get(json_array_get(jc, k), i))));
        }
    }
    printf("  confidences: max |diff| %.2e\n", conf_worst);
    assert_true(conf_worst < 1e-4);
    model_dspark_seq_free(m, s);
    free(logits);
    return worst;
}

/* The target's features in one pass, then every case's block from the
 * fixture's features and from the model's own. */
static void test_dspark_matches_the_reference(void **state)
{
    const char *name = *state;
    char dir[600];
    snprintf(dir, sizeof dir, "%s/model/%s", DI_FIXTURE_DIR, name);
    model *m = load(dir, 64);
    fixture f;
    fixture_load(&f, m, name);
    const size_t W = (size_t)model_dspark_feature_width(m), N = (size_t)f.cases[f.n_cases - 1];
    assert_int_equal(W, json_array_size(json_object_get(f.ds, "target_layer_ids")) *
                            model_get_config(m)->n_embd);
    di_error *err = NULL;
    if (model_forward(m, f.seq, (int64_t)N, NULL, 0, &err) != DI_OK)
        fail_msg("%s", di_error_message(err));
    int64_t rows = 0;
    const float *own = model_dspark_features(m, &rows);
    assert_non_null(own);
    assert_int_equal(rows, (int64_t)N);
    float *copy = malloc(N * W * sizeof *copy);
    assert_non_null(copy);
    memcpy(copy, own, N * W * sizeof *copy);
    const double feat = rel_diff(copy, f.features, N * W);
    printf("%s: the target's features (%zu positions) vs the reference: max |diff| %.2e of the "
           "range\n",
           name, N, feat);
    assert_true(feat < 1e-5);
    const double given = run_cases(m, &f, f.features);
    printf("%s: %d blocks of %d from the reference's features: logits max |diff| %.2e of the "
           "range\n",
           name, f.n_cases, f.block, given);
    assert_true(given < 1e-5);
    const double mine = run_cases(m, &f, copy);
    printf("%s: the same from the model's own features: %.2e\n", name, mine);
    assert_true(mine < 1e-5);
    free(copy);
    fixture_free(&f);
    model_free(m);
}

/* A block's rows are its own: two sequences drafted in one call equal each
 * drafted alone, and a sequence fed its features one at a time equals one fed
 * them at once (bit for bit); a small n_batch runs the blocks in passes. */
static void test_dspark_batch_invariance(void **state)
{
    const char *name = *state;
    char dir[600];
    snprintf(dir, sizeof dir, "%s/model/%s", DI_FIXTURE_DIR, name);
    model *m = load(dir, 4);
    fixture f;
    fixture_load(&f, m, name);
    const size_t V = model_get_config(m)->n_vocab, W = (size_t)model_dspark_feature_width(m),
                 B = (size_t)f.block;
    const int64_t na = f.cases[1], nb = f.cases[f.n_cases - 1];
    model_seq *a = NULL, *b = NULL, *b1 = NULL;
    assert_int_equal(model_dspark_seq_create(m, &a), DI_OK);
    assert_int_equal(model_dspark_seq_create(m, &b), DI_OK);
    assert_int_equal(model_dspark_seq_create(m, &b1), DI_OK);
    assert_int_equal(model_dspark_inject(m, a, f.features, na, NULL), DI_OK);
    assert_int_equal(model_dspark_inject(m, b, f.features, nb, NULL), DI_OK);
    for (int64_t t = 0; t < nb; t++)
        assert_int_equal(model_dspark_inject(m, b1, f.features + t * W, 1, NULL), DI_OK);
    float *both = malloc(2 * B * V * sizeof *both), *one = malloc(B * V * sizeof *one);
    float conf2[128], conf1[64];
    int32_t d2[128], d1[64];
    assert_true(both && one);
    model_seq *seqs[2] = {a, b};
    const int32_t anchors[2] = {f.seq[na], f.seq[nb]};
    /* (n_batch 4 = one block a pass: the two run in two passes) */
    assert_int_equal(model_dspark_draft(m, seqs, anchors, 2, both, conf2, d2, NULL), DI_OK);
    for (int k = 0; k < 2; k++) {
        model_seq *alone[1] = {k ? b1 : a};
        assert_int_equal(model_dspark_draft(m, alone, &anchors[k], 1, one, conf1, d1, NULL), DI_OK);
        assert_memory_equal(one, both + (size_t)k * B * V, B * V * sizeof *one);
        assert_memory_equal(conf1, conf2 + (size_t)k * B, B * sizeof *conf1);
        assert_memory_equal(d1, d2 + (size_t)k * B, B * sizeof *d1);
    }
    model_dspark_seq_free(m, a);
    model_dspark_seq_free(m, b);
    model_dspark_seq_free(m, b1);
    free(both);
    free(one);
    fixture_free(&f);
    model_free(m);
}

/* The drafter: every case's prefix prefilled as one request, all in one
 * batched target step; observe hands each its features; propose drafts the
 * reference's block after it (anchor: the token after the prefix, standing
 * for the token the request sampled), at temperature 0, twice (the block does
 * not change the sequence), and after the requests move on one token. */
static void test_dspark_drafter(void **state)
{
    const char *name = *state;
    char dir[600];
    snprintf(dir, sizeof dir, "%s/model/%s", DI_FIXTURE_DIR, name);
    model *m = load(dir, 128);
    fixture f;
    fixture_load(&f, m, name);
    enum { RMAX = 8 };
    const int R = f.n_cases;
    assert_true(R <= RMAX);
    const int32_t V = (int32_t)model_get_config(m)->n_vocab;
    drafter *d = NULL;
    assert_int_equal(drafter_dspark_create(m, R, &d), DI_OK);
    assert_string_equal(d->ops->name, "dspark");
    sampler_params sp = {.temperature = 0, .top_p = 1, .repetition_penalty = 1};
    sampler *smp = NULL;
    assert_int_equal(sampler_create(&sp, V, &smp, NULL, 0), DI_OK);
    model_seq *seqs[RMAX];
    model_batch_item items[RMAX];
    draft_observation obs[RMAX];
    void *states[RMAX] = {0};
    int32_t next[256], outs[RMAX][8];
    float conf[RMAX][8], *logits = malloc((size_t)R * (size_t)V * sizeof *logits);
    assert_non_null(logits);
    int64_t row = 0;
    for (int r = 0; r < R; r++) {
        const int64_t P = f.cases[r];
        assert_int_equal(model_seq_create(m, &seqs[r]), DI_OK);
        assert_int_equal(model_seq_reserve(m, seqs[r], P + 1), DI_OK);
        items[r] = (model_batch_item){seqs[r], f.seq, P, 1};
        memcpy(next + row, f.seq + 1, (size_t)P * sizeof *next);
        obs[r] = (draft_observation){&states[r], smp, 0, row, P, next + row};
        row += P;
    }
    assert_true(row <= 128);
    di_error *err = NULL;
    if (model_forward_batch(m, items, R, logits, &err) != DI_OK)
        fail_msg("%s", di_error_message(err));
    int64_t n_rows = 0;
    const float *features = model_dspark_features(m, &n_rows);
    assert_int_equal(n_rows, row);
    d->ops->observe(d, obs, R, features);
    json_t *jd = json_object_get(f.ds, "drafts");
    for (int round = 0; round < 2; round++) {
        draft_request dr[RMAX];
        for (int r = 0; r < R; r++)
            dr[r] = (draft_request){.tokens = f.seq,
                                    .n_tokens = f.cases[r] + 1,
                                    .max = 8,
                                    .smp = smp,
                                    .state = &states[r],
                                    .out = outs[r],
                                    .conf = conf[r]};
        d->ops->propose(d, dr, R);
        for (int r = 0; r < R; r++) {
            assert_int_equal(dr[r].n, f.block); /* (max 8: the block's 4) */
            assert_int_equal(dr[r].has_q, 0);
            for (int j = 0; j < f.block; j++) {
                assert_int_equal(outs[r][j], json_integer_value(json_array_get(
                                                 json_array_get(jd, (size_t)r), (size_t)j)));
                assert_true(conf[r][j] > 0.0f && conf[r][j] < 1.0f);
            }
        }
    }
    /* a request whose sequence lacks its last token's features drafts nothing */
    draft_request late = {.tokens = f.seq,
                          .n_tokens = f.cases[0] + 2,
                          .max = 4,
                          .smp = smp,
                          .state = &states[0],
                          .out = outs[0],
                          .conf = conf[0]};
    d->ops->propose(d, &late, 1);
    assert_int_equal(late.n, 0);
    for (int r = 0; r < R; r++) {
        d->ops->release(d, states[r]);
        model_seq_free(m, seqs[r]);
    }
    drafter_destroy(d);
    sampler_free(smp);
    free(logits);
    fixture_free(&f);
    model_free(m);
}

/* llama.cpp's files: the fixture's target through its converter and the DSpark
 * GGUF (convert_hf_to_gguf.py --dspark) attached to it, every tensor stored
 * exactly (bf16, f32, the experts' MXFP4): the features and blocks equal the
 * reference's as the folder's do. */
static void test_dspark_gguf(void **state)
{
    (void)state;
    assert_true(model_file_is_dspark(GGUF_DSPARK));
    assert_false(model_file_is_dspark(GGUF_TARGET));
    assert_false(model_file_is_dspark(DI_FIXTURE_DIR "/model/gguf-dsv4/dsv4-gguf-mtp.gguf"));
    assert_false(model_file_is_dspark("/nonexistent.gguf"));
    model *m = load(GGUF_TARGET, 64);
    assert_int_equal(model_dspark_block(m), 0);
    di_error *err = NULL;
    if (model_attach_dspark(m, GGUF_DSPARK, &err) != DI_OK) fail_msg("%s", di_error_message(err));
    fixture f;
    fixture_load(&f, m, FIXTURE);
    const size_t W = (size_t)model_dspark_feature_width(m), N = (size_t)f.cases[f.n_cases - 1];
    if (model_forward(m, f.seq, (int64_t)N, NULL, 0, &err) != DI_OK)
        fail_msg("%s", di_error_message(err));
    int64_t rows = 0;
    const float *own = model_dspark_features(m, &rows);
    assert_int_equal(rows, (int64_t)N);
    const double feat = rel_diff(own, f.features, N * W);
    float *copy = malloc(N * W * sizeof *copy);
    assert_non_null(copy);
    memcpy(copy, own, N * W * sizeof *copy);
    const double given = run_cases(m, &f, f.features), mine = run_cases(m, &f, copy);
    printf("%s + %s: features %.2e, blocks from the reference's features %.2e, from its own "
           "%.2e of the range\n",
           "dsv4-dspark-target.gguf", "dsv4-dspark.gguf", feat, given, mine);
    assert_true(feat < 1e-5 && given < 1e-5 && mine < 1e-5);
    /* a second head, or the MTP GGUF after it: refused, the model unchanged */
    assert_int_equal(model_attach_dspark(m, GGUF_DSPARK, &err), DI_ERR_UNSUPPORTED);
    di_error_free(err);
    err = NULL;
    assert_int_equal(model_dspark_block(m), f.block);
    free(copy);
    fixture_free(&f);
    model_free(m);
    /* the DSpark GGUF as a model of its own; attached to a model of another
     * shape; a file that is not one */
    model_expect_load_error(GGUF_DSPARK, DI_ERR_UNSUPPORTED, "is a DSpark GGUF",
                            "draft_model_path");
    char dir[600];
    snprintf(dir, sizeof dir, "%s/model/dsv4-sigmoid-yarn-bf16", DI_FIXTURE_DIR);
    m = load(dir, 64);
    assert_int_equal(model_attach_dspark(m, GGUF_DSPARK, &err), DI_ERR_MODEL_FORMAT);
    assert_non_null(strstr(di_error_message(err), "is not the model's"));
    di_error_free(err);
    err = NULL;
    assert_int_equal(model_attach_dspark(m, GGUF_TARGET, &err), DI_ERR_UNSUPPORTED);
    assert_non_null(strstr(di_error_message(err), "is not a DSpark GGUF"));
    di_error_free(err);
    assert_int_equal(model_dspark_block(m), 0);
    model_free(m);
}

/* llama.cpp's DSpark GGUF damaged or attached where it cannot go: refused,
 * named, the model without a head. */
static void test_dspark_gguf_errors(void **state)
{
    (void)state;
    char damaged[160];
    snprintf(damaged, sizeof damaged, "%s/damaged.gguf", tmpdir);
    static const struct {
        const char *from, *to;
        int value;
        di_status status;
        const char *says;
    } files[] = {
        {"dflash.block_size", NULL, 0, DI_ERR_MODEL_FORMAT, "dflash.block_size 0 is not in"},
        {"dflash.block_size", NULL, 65, DI_ERR_MODEL_FORMAT, "dflash.block_size 65 is not in"},
        {"tokenizer.ggml.mask_token_id", "tokenizer.ggml.mask_token_iX", -1, DI_ERR_MODEL_FORMAT,
         "mask_token_id (DSpark's noise token) is missing"},
        {"tokenizer.ggml.mask_token_id", NULL, 512, DI_ERR_MODEL_FORMAT,
         "mask_token_id 512 is past the vocabulary"},
        {"dflash.target_layers", "dflash.target_layerX", -1, DI_ERR_MODEL_FORMAT,
         "dflash.target_layers is missing"},
        {"dflash.expert_gating_func", NULL, 2, DI_ERR_UNSUPPORTED,
         "expert_gating_func 2 is not supported (4 sqrtsoftplus is)"},
        {"dflash.attention.sliding_window", NULL, 16, DI_ERR_MODEL_FORMAT,
         "attention.sliding_window is not the model's"},
        {"markov_w1.weight", "markov_wX.weight", -1, DI_ERR_MODEL_FORMAT,
         "'markov_w1.weight' is missing"},
        {"blk.1.attn_kv.weight", "blk.1.attn_kX.weight", -1, DI_ERR_MODEL_FORMAT,
         "model.layers.1.self_attn.kv_proj.weight"},
    };
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        model_variant_gguf(GGUF_DSPARK, damaged, files[i].from, files[i].to, files[i].value);
        model *m = load(GGUF_TARGET, 64);
        di_error *err = NULL;
        assert_int_equal(model_attach_dspark(m, damaged, &err), files[i].status);
        if (!strstr(di_error_message(err), files[i].says))
            fail_msg("case %zu: '%s' lacks '%s'", i, di_error_message(err), files[i].says);
        di_error_free(err);
        assert_int_equal(model_dspark_block(m), 0);
        model_free(m);
    }
    unlink(damaged);
    /* llama.cpp's MTP GGUF given to a model with a DSpark head: its stages
     * take the MTP layer's place (the breakers' reproducer: it was loaded over
     * stage 0) */
    char dir[600];
    snprintf(dir, sizeof dir, "%s/model/%s", DI_FIXTURE_DIR, FIXTURE);
    model *dm = load(dir, 64);
    di_error *merr = NULL;
    assert_int_equal(
        model_attach_mtp(dm, DI_FIXTURE_DIR "/model/gguf-dsv4/dsv4-gguf-mtp.gguf", &merr),
        DI_ERR_UNSUPPORTED);
    assert_non_null(strstr(di_error_message(merr), "a DSpark head"));
    di_error_free(merr);
    assert_int_equal(model_mtp_layers(dm), 0);
    assert_int_equal(model_dspark_block(dm), 4);
    model_free(dm);
    static const struct {
        const char *model;
        const char *says;
    } models[] = {
        {DI_FIXTURE_DIR "/model/dsv3-mtp-f32", "DeepSeek-V4 models only"},
        {DI_FIXTURE_DIR "/model/dsv4-dspark-release", "has a DSpark head already"},
        {DI_FIXTURE_DIR "/model/dsv4-gguf-release", "has an MTP layer already"},
    };
    for (size_t i = 0; i < sizeof models / sizeof models[0]; i++) {
        model *m = load(models[i].model, 64);
        const int before = model_dspark_block(m);
        di_error *err = NULL;
        assert_int_equal(model_attach_dspark(m, GGUF_DSPARK, &err), DI_ERR_UNSUPPORTED);
        if (!strstr(di_error_message(err), models[i].says))
            fail_msg("model %zu: '%s' lacks '%s'", i, di_error_message(err), models[i].says);
        di_error_free(err);
        assert_int_equal(model_dspark_block(m), before);
        model_free(m);
    }
}

/* The head's tensors where another checkpoint may keep them (llama.cpp's
 * converter takes each root tensor from whichever stage holds it): the Markov
 * and confidence heads on stage 0, the projection on stage 1 — the same
 * blocks; a head tensor in no stage is named as the last stage's. */
static void test_dspark_head_on_any_stage(void **state)
{
    (void)state;
    const char *dir = model_variant_folder(tmpdir, FIXTURE, "{}", 1);
    model_variant_rename(dir, "mtp.1.markov_head.markov_w1.weight",
                         "mtp.0.markov_head.markov_w1.weight");
    model_variant_rename(dir, "mtp.1.confidence_head.proj.weight",
                         "mtp.0.confidence_head.proj.weight");
    model_variant_rename(dir, "mtp.0.main_proj.weight", "mtp.1.main_proj.weight");
    model *m = load(dir, 64);
    fixture f;
    fixture_load(&f, m, FIXTURE);
    const double given = run_cases(m, &f, f.features);
    printf("the heads on other stages: blocks %.2e of the range\n", given);
    assert_true(given < 1e-5);
    fixture_free(&f);
    model_free(m);
    model_variant_rename(dir, "mtp.1.markov_head.markov_w2.weight",
                         "mtp.9.markov_head.markov_w2.weight");
    model_expect_load_error(dir, DI_ERR_MODEL_FORMAT, "model.mtp.1.markov_head.markov_w2.weight",
                            NULL);
}

/* The operations' errors, and a model without a DSpark head. */
static void test_dspark_operation_errors(void **state)
{
    (void)state;
    char dir[600];
    snprintf(dir, sizeof dir, "%s/model/%s", DI_FIXTURE_DIR, FIXTURE);
    model *m = load(dir, 64);
    const model_config *c = model_get_config(m);
    model_seq *s = NULL;
    assert_int_equal(model_dspark_seq_create(m, &s), DI_OK);
    float feat[256] = {0}, logits[4 * 512], conf[4];
    int32_t drafts[4], bad = (int32_t)c->n_vocab;
    model_seq *seqs[1] = {s};
    di_error *err = NULL;
    assert_int_equal(model_dspark_inject(m, s, feat, 0, &err), DI_ERR_INVALID_ARGUMENT);
    di_error_free(err);
    err = NULL;
    assert_int_equal(model_dspark_draft(m, seqs, &bad, 1, logits, conf, drafts, &err),
                     DI_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(di_error_message(err), "anchor"));
    di_error_free(err);
    err = NULL;
    /* past the context (128): a block at 126 would reach 129 */
    for (int i = 0; i < 126; i++) assert_int_equal(model_dspark_inject(m, s, feat, 1, NULL), DI_OK);
    const int32_t ok = 5;
    assert_int_equal(model_dspark_draft(m, seqs, &ok, 1, logits, conf, drafts, &err),
                     DI_ERR_CONTEXT_LENGTH);
    di_error_free(err);
    model_dspark_seq_free(m, s);
    model_free(m);
    /* n_batch below the block: the model loads (and runs without drafting),
     * the block is refused, and so is the drafter */
    m = load(dir, 3);
    assert_int_equal(model_dspark_block(m), 4);
    assert_int_equal(model_dspark_seq_create(m, &s), DI_OK);
    assert_int_equal(model_dspark_inject(m, s, feat, 1, NULL), DI_OK);
    seqs[0] = s;
    err = NULL;
    assert_int_equal(model_dspark_draft(m, seqs, &ok, 1, logits, conf, drafts, &err),
                     DI_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(di_error_message(err), "below DSpark's block"));
    di_error_free(err);
    drafter *d = NULL;
    assert_int_equal(drafter_dspark_create(m, 4, &d), DI_ERR_INVALID_ARGUMENT);
    assert_null(d);
    model_dspark_seq_free(m, s);
    model_free(m);
    /* a V4 model without DSpark */
    snprintf(dir, sizeof dir, "%s/model/dsv4-sqrtsoftplus-f32", DI_FIXTURE_DIR);
    m = load(dir, 64);
    assert_int_equal(model_dspark_block(m), 0);
    assert_int_equal(model_dspark_seq_create(m, &s), DI_ERR_UNSUPPORTED);
    int64_t rows = 1;
    assert_null(model_dspark_features(m, &rows));
    assert_int_equal(rows, 0);
    err = NULL;
    assert_int_equal(model_dspark_draft(m, seqs, &ok, 1, logits, conf, drafts, &err),
                     DI_ERR_UNSUPPORTED);
    di_error_free(err);
    assert_int_equal(drafter_dspark_create(m, 4, &d), DI_ERR_UNSUPPORTED);
    model_free(m);
}

/* Configs this code cannot run, and a missing tensor: refused at load, the
 * field or tensor named. */
static void test_dspark_config_errors(void **state)
{
    (void)state;
    static const struct {
        const char *edit, *name;
        di_status st;
    } cases[] = {
        {"{\"dspark_block_size\": 0}", "dspark_block_size", DI_ERR_MODEL_FORMAT},
        {"{\"dspark_noise_token_id\": 512}", "dspark_noise_token_id", DI_ERR_MODEL_FORMAT},
        {"{\"dspark_noise_token_id\": null}", "dspark_noise_token_id", DI_ERR_MODEL_FORMAT},
        {"{\"dspark_target_layer_ids\": [1, 4]}", "dspark_target_layer_ids[1]",
         DI_ERR_MODEL_FORMAT},
        {"{\"dspark_target_layer_ids\": []}", "dspark_target_layer_ids", DI_ERR_MODEL_FORMAT},
        {"{\"num_nextn_predict_layers\": 0}", "num_nextn_predict_layers", DI_ERR_MODEL_FORMAT},
        {"{\"compress_ratios\": [4, 0, 128, 4, 0, 4]}", "compress_ratios[5]", DI_ERR_UNSUPPORTED},
        /* layer_types and mlp_layer_types naming a stage something else */
        {"{\"layer_types\": [\"compressed_sparse_attention\", \"sliding_attention\", "
         "\"heavily_compressed_attention\", \"compressed_sparse_attention\", "
         "\"compressed_sparse_attention\", \"sliding_attention\"]}",
         "layer_types[4] (DSpark stage 0)", DI_ERR_UNSUPPORTED},
        {"{\"mlp_layer_types\": [\"hash_moe\", \"moe\", \"moe\", \"moe\", \"moe\", "
         "\"hash_moe\"]}",
         "mlp_layer_types[5] (DSpark stage 1)", DI_ERR_UNSUPPORTED},
        /* a third stage the checkpoint does not have */
        {"{\"num_nextn_predict_layers\": 3, \"compress_ratios\": [4, 0, 128, 4, 0, 0, 0]}",
         "model.mtp.2.", DI_ERR_MODEL_FORMAT},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        model_expect_load_error(model_variant_folder(tmpdir, FIXTURE, cases[i].edit, 0),
                                cases[i].st, cases[i].name, NULL);
}

/* DeepSeek-V4.1's head: its own keys missing or out of range, a config
 * DeepInfer does not run, the Markov head's rank or names: refused, named. */
static void test_dspark_v41_config_errors(void **state)
{
    (void)state;
#define TEXT(json) "{\"text_config\": " json "}"
    static const struct {
        const char *edit, *name;
        di_status st;
    } cases[] = {
        {TEXT("{\"dspark_target_attn_input\": false}"), "dspark_target_attn_input",
         DI_ERR_UNSUPPORTED},
        {TEXT("{\"dspark_n_routed_experts\": null}"), "dspark_n_routed_experts",
         DI_ERR_MODEL_FORMAT},
        {TEXT("{\"dspark_num_experts_per_tok\": 9}"), "dspark_num_experts_per_tok 9",
         DI_ERR_MODEL_FORMAT},
        {TEXT("{\"dspark_markov_rank\": null}"), "dspark_markov_rank", DI_ERR_MODEL_FORMAT},
        {TEXT("{\"dspark_markov_rank\": 7}"), "dspark_markov_rank is 7", DI_ERR_MODEL_FORMAT},
        {TEXT("{\"dspark_block_size\": 65}"), "dspark_block_size", DI_ERR_MODEL_FORMAT},
        {TEXT("{\"dspark_noise_token_id\": 100000}"), "dspark_noise_token_id", DI_ERR_MODEL_FORMAT},
        {TEXT("{\"dspark_target_layer_ids\": [0, 9]}"), "dspark_target_layer_ids[1]",
         DI_ERR_MODEL_FORMAT},
        /* more experts than the stages hold: the gate's shape named */
        {TEXT("{\"dspark_n_routed_experts\": 9}"), "model.mtp.0.mlp.gate.weight",
         DI_ERR_MODEL_FORMAT},
    };
#undef TEXT
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        model_expect_load_error(model_variant_folder(tmpdir, FIXTURE_V41, cases[i].edit, 0),
                                cases[i].st, cases[i].name, NULL);
    /* the Markov head's table missing: its V4.1 name asked for */
    const char *dir = model_variant_folder(tmpdir, FIXTURE_V41, "{}", 1);
    model_variant_rename(dir, "mtp.1.markov_head.embed.weight", "mtp.1.markov_head.embeX.weight");
    model_expect_load_error(dir, DI_ERR_MODEL_FORMAT, "model.mtp.1.markov_head.embed.weight", NULL);
}

/* dspark_noise_token_id 0 is a token id like any other (a DSpark GGUF's
 * tokenizer.ggml.mask_token_id 0 loads): V4's and V4.1's configs load with
 * it, the noise token 0; a negative id is refused, named (the breakers'
 * reproducer: 0 was refused as "not a positive integer"). */
static void test_dspark_noise_token_zero(void **state)
{
    (void)state;
    static const char *const fixtures[2] = {FIXTURE, FIXTURE_V41};
    static const char *const zero[2] = {"{\"dspark_noise_token_id\": 0}",
                                        "{\"text_config\": {\"dspark_noise_token_id\": 0}}"};
    static const char *const negative[2] = {"{\"dspark_noise_token_id\": -1}",
                                            "{\"text_config\": {\"dspark_noise_token_id\": -1}}"};
    for (int i = 0; i < 2; i++) {
        const char *dir = model_variant_folder(tmpdir, fixtures[i], zero[i], 0);
        /* (V4.1's Engram reads the folder's tokenizer.json) */
        char src[700], tok[700];
        snprintf(src, sizeof src, "%s/model/%s/tokenizer.json", DI_FIXTURE_DIR, fixtures[i]);
        snprintf(tok, sizeof tok, "%s/tokenizer.json", dir);
        unlink(tok);
        if (i == 1) assert_int_equal(symlink(src, tok), 0);
        model *m = load(dir, 64);
        assert_int_equal(model_dspark_block(m), 4);
        assert_int_equal(model_get_config(m)->v4.dspark_noise, 0);
        model_free(m);
        unlink(tok);
        model_expect_load_error(model_variant_folder(tmpdir, fixtures[i], negative[i], 0),
                                DI_ERR_MODEL_FORMAT, "dspark_noise_token_id", NULL);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_prestate(test_dspark_matches_the_reference, FIXTURE),
        cmocka_unit_test_prestate(test_dspark_batch_invariance, FIXTURE),
        cmocka_unit_test_prestate(test_dspark_drafter, FIXTURE),
        cmocka_unit_test_prestate(test_dspark_matches_the_reference, FIXTURE_V41),
        cmocka_unit_test_prestate(test_dspark_batch_invariance, FIXTURE_V41),
        cmocka_unit_test_prestate(test_dspark_drafter, FIXTURE_V41),
        cmocka_unit_test(test_dspark_v41_config_errors),
        cmocka_unit_test(test_dspark_head_on_any_stage),
        cmocka_unit_test(test_dspark_gguf),
        cmocka_unit_test(test_dspark_gguf_errors),
        cmocka_unit_test(test_dspark_operation_errors),
        cmocka_unit_test(test_dspark_config_errors),
        cmocka_unit_test(test_dspark_noise_token_zero),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
