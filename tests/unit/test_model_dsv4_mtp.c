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

#define FIXTURE "dsv4-mtp-f32"

static char tmpdir[64];

static int setup(void **state)
{
    (void)state;
    snprintf(tmpdir, sizeof tmpdir, "/tmp/di_test_dsv4_mtpXXXXXX");
    if (!mkdtemp(tmpdir)) return -1;
    char dir[128];
    snprintf(dir, sizeof dir, "%s/variant", tmpdir);
    return mkdir(dir, 0700);
}

static int teardown(void **state)
{
    (void)state;
    model_variant_remove(tmpdir);
    return 0;
}

static json_t *reference(char *dir, size_t size)
{
    char path[700];
    snprintf(dir, size, "%s/model/%s", DI_FIXTURE_DIR, FIXTURE);
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

static float *read_f32(const char *dir, const char *file, size_t n)
{
    char path[700];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    float *v = malloc(n * sizeof *v);
    FILE *fp = fopen(path, "rb");
    assert_true(v && fp);
    assert_int_equal(fread(v, sizeof *v, n, fp), n);
    fclose(fp);
    return v;
}

static int32_t argmax(const float *x, int32_t n)
{
    int32_t b = 0;
    for (int32_t i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return b;
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

static void expect_load_error(const char *dir, di_status status, const char *n1, const char *n2)
{
    model_options o = {0};
    o.n_threads = 1;
    o.kv_dtype = MODEL_DTYPE_F32;
    model *m = NULL;
    di_error *err = NULL;
    assert_int_equal(model_load(dir, &o, &m, &err), status);
    assert_null(m);
    const char *msg = di_error_message(err);
    if (!strstr(msg, n1) || (n2 && !strstr(msg, n2)))
        fail_msg("message '%s' lacks '%s' / '%s'", msg, n1, n2 ? n2 : "");
    di_error_free(err);
}

/* The MTP layer's logits against the reference's, over the 48-token
 * sequence: once in one pass, once token by token beside the main model's
 * decode (the hidden rows each step's model_last_hidden). */
static void test_mtp_layer_matches_the_reference(void **state)
{
    (void)state;
    char dir[512];
    json_t *ref = reference(dir, sizeof dir);
    int32_t seq[64];
    const size_t n = sequence(ref, seq, 64);
    assert_int_equal(
        json_integer_value(json_array_get(json_object_get(ref, "mtp_logits_shape"), 0)),
        (json_int_t)(n - 1));
    model *m = load(dir, 64);
    assert_int_equal(model_mtp_layers(m), 1);
    const model_config *c = model_get_config(m);
    const int32_t V = (int32_t)c->n_vocab;
    const int64_t W = model_mtp_hidden_width(m);
    assert_int_equal(W, (int64_t)c->v4.hc_mult * c->n_embd); /* the streams */
    float *want = read_f32(dir, "mtp_logits.f32", (n - 1) * (size_t)V);
    float *got = malloc((n - 1) * (size_t)V * sizeof *got);
    float *hidden = malloc(n * (size_t)W * sizeof *hidden);
    assert_true(got && hidden);
    float lo = INFINITY, hi = -INFINITY;
    for (size_t i = 0; i < (n - 1) * (size_t)V; i++) {
        lo = fminf(lo, want[i]);
        hi = fmaxf(hi, want[i]);
    }
    /* one pass */
    assert_int_equal(model_forward(m, seq, (int64_t)n, NULL, 0, NULL), DI_OK);
    int64_t rows = 0;
    const float *h = model_last_hidden(m, &rows);
    assert_int_equal(rows, (int64_t)n);
    memcpy(hidden, h, n * (size_t)W * sizeof *hidden);
    assert_int_equal(model_mtp_forward(m, seq + 1, (int64_t)n - 1, hidden, got, NULL), DI_OK);
    double one = 0;
    for (size_t i = 0; i < (n - 1) * (size_t)V; i++) one = fmax(one, fabs(got[i] - want[i]));
    /* token by token */
    model_reset(m);
    assert_int_equal(model_forward(m, seq, 1, NULL, 0, NULL), DI_OK);
    double step = 0;
    for (size_t i = 1; i < n; i++) {
        h = model_last_hidden(m, &rows);
        assert_int_equal(rows, 1);
        memcpy(hidden, h, (size_t)W * sizeof *hidden);
        assert_int_equal(model_mtp_forward(m, &seq[i], 1, hidden, got, NULL), DI_OK);
        for (int32_t v = 0; v < V; v++)
            step = fmax(step, fabs(got[v] - want[(i - 1) * (size_t)V + (size_t)v]));
        assert_int_equal(model_forward(m, &seq[i], 1, NULL, 0, NULL), DI_OK);
    }
    printf("%s: MTP logits vs the reference: one pass %.2e, token by token %.2e of the range\n",
           FIXTURE, one / (hi - lo), step / (hi - lo));
    assert_true(one / (hi - lo) <= 1e-3);
    assert_true(step / (hi - lo) <= 1e-3);
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
    assert_null(model_last_hidden(m, &rows));
    assert_int_equal(model_mtp_forward(m, seq, 1, hidden, got, NULL), DI_ERR_UNSUPPORTED);
    model_seq *s = NULL;
    assert_int_equal(model_mtp_seq_create(m, &s), DI_ERR_UNSUPPORTED);
    assert_null(s);
    model_free(m);
    free(want);
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
    json_t *ref = reference(dir, sizeof dir);
    int32_t seq[64];
    const size_t n = sequence(ref, seq, 64);
    const size_t n_prompt = json_array_size(json_object_get(ref, "prompt"));
    model *m = load(dir, 256);
    const int32_t V = (int32_t)model_get_config(m)->n_vocab;
    float *want = read_f32(dir, "mtp_logits.f32", (n - 1) * (size_t)V);
    json_t *chain = json_object_get(ref, "mtp_chain");
    json_t *prefixes = json_object_get(chain, "prefixes"),
           *drafts = json_object_get(chain, "drafts");
    enum { R = 6 };
    assert_int_equal(json_array_size(prefixes), R);
    int64_t P[R];
    for (int r = 0; r < R; r++) P[r] = json_integer_value(json_array_get(prefixes, (size_t)r));
    drafter *d = NULL;
    assert_int_equal(drafter_mtp_create(m, R, &d), DI_OK);
    sampler_params sp = {.temperature = 0, .top_p = 1, .repetition_penalty = 1};
    sampler *smp = NULL;
    assert_int_equal(sampler_create(&sp, V, &smp, NULL, 0), DI_OK);
    model_seq *seqs[R];
    model_batch_item items[R];
    draft_observation obs[R];
    void *states[R] = {0};
    int32_t next[256], outs[R][4];
    float conf[R][4], *logits = malloc((size_t)R * (size_t)V * sizeof *logits);
    assert_non_null(logits);
    int64_t row = 0;
    for (int r = 0; r < R; r++) {
        assert_int_equal(model_seq_create(m, &seqs[r]), DI_OK);
        assert_int_equal(model_seq_reserve(m, seqs[r], P[r]), DI_OK);
        items[r] = (model_batch_item){seqs[r], seq, P[r], 1};
        memcpy(next + row, seq + 1, (size_t)P[r] * sizeof *next);
        obs[r] = (draft_observation){&states[r], smp, 0, row, P[r], next + row};
        row += P[r];
    }
    di_error *err = NULL;
    if (model_forward_batch(m, items, R, logits, &err) != DI_OK)
        fail_msg("%s", di_error_message(err));
    for (int r = 0; r < R; r++) /* past the prompt, seq is the model's greedy output */
        if ((size_t)P[r] >= n_prompt)
            assert_int_equal(argmax(logits + (size_t)r * V, V), seq[P[r]]);
    int64_t n_rows = 0;
    const float *hidden = model_last_hidden(m, &n_rows);
    assert_int_equal(n_rows, row);
    d->ops->observe(d, obs, R, hidden);
    for (int round = 0; round < 2; round++) {
        draft_request dr[R];
        for (int r = 0; r < R; r++)
            dr[r] = (draft_request){.tokens = seq,
                                    .n_tokens = P[r] + 1,
                                    .max = round == 0 ? 4 : 1,
                                    .smp = smp,
                                    .state = &states[r],
                                    .out = outs[r],
                                    .conf = conf[r]};
        d->ops->propose(d, dr, R);
        for (int r = 0; r < R; r++) {
            const float *w = want + (size_t)(P[r] - 1) * (size_t)V;
            int32_t top = argmax(w, V);
            double sum = 0;
            for (int32_t v = 0; v < V; v++) sum += exp((double)(w[v] - w[top]));
            assert_int_equal(dr[r].n, round == 0 ? 4 : 1);
            assert_int_equal(outs[r][0], top);
            assert_float_equal(conf[r][0], 1.0 / sum, 1e-4);
            json_t *jd = json_array_get(drafts, (size_t)r);
            for (int j = 0; j < dr[r].n; j++)
                if (outs[r][j] != json_integer_value(json_array_get(jd, (size_t)j)))
                    fail_msg("request %d (P = %lld), round %d: draft %d is %d, the reference's %d",
                             r, (long long)P[r], round, j, outs[r][j],
                             (int)json_integer_value(json_array_get(jd, (size_t)j)));
        }
    }
    /* decode steps of request 4 (P = 37, past the prompt), verified as the
     * scheduler does: step 1 verifies [x37, x38, x39, wrong], step 2
     * [x41, wrong] */
    const int r4 = 4;
    int64_t n_tok = P[r4] + 1;
    for (int stp = 0; stp < 2; stp++) {
        int k = stp == 0 ? 3 : 1;
        int32_t item_tok[4];
        memcpy(item_tok, seq + n_tok - 1, (size_t)k * sizeof *item_tok);
        item_tok[k] = (seq[n_tok - 1 + k] + 1) % V; /* a draft the model rejects */
        assert_int_equal(model_seq_reserve(m, seqs[r4], n_tok + k), DI_OK);
        model_batch_item it = {seqs[r4], item_tok, k + 1, k + 1};
        assert_int_equal(model_forward_batch(m, &it, 1, logits, NULL), DI_OK);
        int32_t emitted[4];
        int n_emit = 0;
        for (int j = 0; j <= k; j++) {
            emitted[n_emit++] = argmax(logits + (size_t)j * V, V);
            assert_int_equal(emitted[j], seq[n_tok + j]);
            if (j == k || item_tok[j + 1] != emitted[j]) break;
        }
        assert_int_equal(n_emit, k);
        model_seq_truncate(m, seqs[r4], n_tok - 1 + n_emit);
        hidden = model_last_hidden(m, &n_rows);
        assert_int_equal(n_rows, k + 1);
        draft_observation ob = {&states[r4], smp, n_tok - 1, 0, n_emit, emitted};
        d->ops->observe(d, &ob, 1, hidden);
        n_tok += n_emit;
        int32_t out4[4];
        float conf4[4];
        draft_request dr = {.tokens = seq,
                            .n_tokens = n_tok,
                            .max = 3,
                            .smp = smp,
                            .state = &states[r4],
                            .out = out4,
                            .conf = conf4};
        d->ops->propose(d, &dr, 1);
        assert_int_equal(dr.n, 3);
        assert_int_equal(out4[0], argmax(want + (size_t)(n_tok - 2) * (size_t)V, V));
    }
    for (int r = 0; r < R; r++) {
        d->ops->release(d, states[r]);
        model_seq_free(m, seqs[r]);
    }
    drafter_destroy(d);
    sampler_free(smp);
    free(logits);
    free(want);
    model_free(m);
    json_decref(ref);
}

/* Rename a tensor in tmpdir/variant's model.safetensors (a copy): the header's
 * name changed in place, same length. */
static void rename_tensor(const char *dir, const char *from, const char *to)
{
    assert_int_equal(strlen(from), strlen(to));
    char path[300];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    FILE *f = fopen(path, "r+b");
    assert_non_null(f);
    uint64_t hl;
    assert_int_equal(fread(&hl, 8, 1, f), 1);
    char *hdr = calloc(1, hl + 1);
    assert_non_null(hdr);
    assert_int_equal(fread(hdr, 1, hl, f), hl);
    char quoted[200];
    snprintf(quoted, sizeof quoted, "\"%s\"", from);
    char *at = strstr(hdr, quoted);
    assert_non_null(at);
    memcpy(at + 1, to, strlen(to));
    assert_int_equal(fseek(f, 8, SEEK_SET), 0);
    assert_int_equal(fwrite(hdr, 1, hl, f), hl);
    fclose(f);
    free(hdr);
}

/* tmpdir/variant: the fixture's config with edit merged, its weights linked
 * (copied when copy). */
static const char *variant(const char *fixture, const char *edit, int copy)
{
    const char *dir = model_variant_config(tmpdir, fixture, edit);
    char src[700], dst[700];
    snprintf(src, sizeof src, "%s/model/%s/model.safetensors", DI_FIXTURE_DIR, fixture);
    snprintf(dst, sizeof dst, "%s/model.safetensors", dir);
    unlink(dst);
    if (!copy) {
        assert_int_equal(symlink(src, dst), 0);
        return dir;
    }
    FILE *in = fopen(src, "rb"), *out = fopen(dst, "wb");
    assert_true(in && out);
    char buf[65536];
    size_t k;
    while ((k = fread(buf, 1, sizeof buf, in)) > 0) assert_int_equal(fwrite(buf, 1, k, out), k);
    fclose(in);
    fclose(out);
    return dir;
}

static void test_mtp_configs_and_tensors(void **state)
{
    (void)state;
    /* DeepSeek's compress_ratios may list the MTP layer after the main ones:
     * 0 (sliding window) runs, a compressed MTP layer is refused, named */
    model *m = load(variant(FIXTURE, "{\"compress_ratios\": [0, 4, 8, 0]}", 0), 64);
    assert_int_equal(model_mtp_layers(m), 1);
    model_free(m);
    expect_load_error(variant(FIXTURE, "{\"compress_ratios\": [0, 4, 8, 4]}", 0),
                      DI_ERR_UNSUPPORTED, "compress_ratios[3] (the MTP layer's) is not 0", NULL);
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
    rename_tensor(dir, "mtp.0.hnorm.weight", "mtp.0.hnorX.weight");
    expect_load_error(dir, DI_ERR_MODEL_FORMAT, "model.mtp.0.hnorm.weight", NULL);
    dir = variant(FIXTURE, "{}", 1);
    rename_tensor(dir, "mtp.0.attn.wkv.weight", "mtp.0.attn.wkX.weight");
    expect_load_error(dir, DI_ERR_MODEL_FORMAT, "model.mtp.0.self_attn.kv_proj.weight", NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mtp_layer_matches_the_reference),
        cmocka_unit_test(test_mtp_drafter_matches_the_reference),
        cmocka_unit_test(test_mtp_configs_and_tensors),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
