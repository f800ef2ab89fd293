/* DeepSeek-V3/V2 on the CPU (lib/model/deepseek_v3.c) against the tiny
 * transformers checkpoints in tests/fixtures/model/ds*: the config and names
 * the loader reads, the absorbed MLA path against the naive one (and both
 * against transformers), the latent KV cache's size, and the errors. */
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
#include "model/weights.h"
#include "sampler/sampler.h"
#include "model_variant.h"
#include "mtp_checks.h"

static const char *const FIXTURES[] = {
    "dsv3-qlora-bf16", "dsv3-noqlora-yarn-f32", "dsv3-group1-noninterleave-f32", "dsv3-dense-bf16",
    "dsv3-fp8",        "dsv2-softmax-yarn-bf16"};
enum { N_FIXTURES = sizeof FIXTURES / sizeof FIXTURES[0] };

static json_t *reference(const char *name, char *dir, size_t size)
{
    char path[700];
    snprintf(dir, size, "%s/model/%s", DI_FIXTURE_DIR, name);
    snprintf(path, sizeof path, "%s/reference.json", dir);
    json_t *ref = json_load_file(path, 0, NULL);
    assert_non_null(ref);
    return ref;
}

static uint32_t cfg_u32(json_t *cfg, const char *key)
{
    return (uint32_t)json_integer_value(json_object_get(cfg, key));
}

static void test_fixture_configs_and_names(void **state)
{
    (void)state;
    for (size_t i = 0; i < N_FIXTURES; i++) {
        char dir[512];
        json_t *ref = reference(FIXTURES[i], dir, sizeof dir);
        json_t *cfg = json_object_get(ref, "config");
        model_weights *w = NULL;
        di_error *err = NULL;
        if (model_weights_open(dir, &w, &err) != DI_OK) {
            print_error("%s: %s\n", dir, di_error_message(err));
            fail();
        }
        const model_config *c = model_weights_config(w);
        int v3 = strcmp(json_string_value(json_object_get(ref, "architecture")),
                        "DeepseekV3ForCausalLM") == 0;
        assert_int_equal(c->arch, v3 ? MODEL_ARCH_DEEPSEEK_V3 : MODEL_ARCH_DEEPSEEK_V2);
        json_t *qlora = json_object_get(cfg, "q_lora_rank");
        assert_int_equal(c->q_lora_rank, json_is_null(qlora) ? 0 : json_integer_value(qlora));
        assert_int_equal(c->kv_lora_rank, cfg_u32(cfg, "kv_lora_rank"));
        assert_int_equal(c->qk_nope_head_dim, cfg_u32(cfg, "qk_nope_head_dim"));
        assert_int_equal(c->qk_rope_head_dim, cfg_u32(cfg, "qk_rope_head_dim"));
        assert_int_equal(c->v_head_dim, cfg_u32(cfg, "v_head_dim"));
        assert_int_equal(c->head_dim, c->qk_nope_head_dim + c->qk_rope_head_dim);
        assert_int_equal(c->n_expert, cfg_u32(cfg, "n_routed_experts"));
        assert_int_equal(c->n_expert_shared, cfg_u32(cfg, "n_shared_experts"));
        assert_int_equal(c->n_expert_used, cfg_u32(cfg, "num_experts_per_tok"));
        assert_int_equal(c->n_ff_exp, cfg_u32(cfg, "moe_intermediate_size"));
        assert_int_equal(c->n_group, cfg_u32(cfg, "n_group"));
        assert_int_equal(c->topk_group, cfg_u32(cfg, "topk_group"));
        uint32_t dense = cfg_u32(cfg, "first_k_dense_replace");
        assert_int_equal(c->n_layer_dense_lead, dense < c->n_layer ? dense : c->n_layer);
        assert_true(c->routed_scaling_factor ==
                    (float)json_number_value(json_object_get(cfg, "routed_scaling_factor")));
        assert_int_equal(c->norm_topk_prob,
                         v3 && json_is_true(json_object_get(cfg, "norm_topk_prob")));
        assert_int_equal(c->expert_gating,
                         v3 ? MODEL_EXPERT_GATING_SIGMOID : MODEL_EXPERT_GATING_SOFTMAX);
        assert_int_equal(c->topk_method, v3 ? MODEL_TOPK_NOAUX_TC : MODEL_TOPK_GROUP_LIMITED);
        assert_int_equal(c->rope_style, v3 && json_is_false(json_object_get(cfg, "rope_interleave"))
                                            ? MODEL_ROPE_NEOX
                                            : MODEL_ROPE_NORM);
        double scaling = json_number_value(json_object_get(ref, "rope_attention_scaling"));
        assert_true(fabs(c->yarn_attn_factor - scaling) < 1e-6);
        /* llama.cpp's deepseek2 names; one 2-D tensor per expert */
        const model_tensor *t = model_weights_get(w, "blk.1.attn_kv_a_mqa.weight");
        assert_non_null(t);
        assert_int_equal(t->ne[0], c->n_embd);
        assert_int_equal(t->ne[1], c->kv_lora_rank + c->qk_rope_head_dim);
        assert_non_null(model_weights_get(w, "blk.1.attn_kv_b.weight"));
        assert_non_null(model_weights_get(w, "blk.1.attn_kv_a_norm.weight"));
        assert_non_null(
            model_weights_get(w, c->q_lora_rank ? "blk.1.attn_q_b.weight" : "blk.1.attn_q.weight"));
        if (c->n_layer_dense_lead < c->n_layer) {
            t = model_weights_get(w, "blk.2.ffn_down_exps.7.weight");
            assert_non_null(t);
            assert_int_equal(t->ne[0], c->n_ff_exp);
            assert_int_equal(t->ne[1], c->n_embd);
            assert_non_null(model_weights_get(w, "blk.2.ffn_gate_inp.weight"));
            assert_non_null(model_weights_get(w, "blk.2.ffn_up_shexp.weight"));
            assert_true((model_weights_get(w, "blk.2.exp_probs_b.bias") != NULL) == v3);
        }
        t = model_weights_get(w, "blk.0.attn_output.weight");
        int fp8 = strstr(FIXTURES[i], "fp8") != NULL;
        assert_int_equal(t->dtype == MODEL_DTYPE_FP8_E4M3, fp8);
        assert_true((t->scale != NULL) == fp8);
        model_weights_close(w);
        json_decref(ref);
    }
}

static model *load(const char *dir, int naive, model_dtype kv)
{
    model_options o = {0};
    o.n_threads = 2;
    o.n_ctx = 64;
    o.kv_dtype = kv;
    o.mla_naive = naive;
    model *m = NULL;
    di_error *err = NULL;
    if (model_load(dir, &o, &m, &err) != DI_OK) {
        print_error("%s: %s\n", dir, di_error_message(err));
        fail();
    }
    return m;
}

static int32_t argmax(const float *x, int32_t n)
{
    int32_t b = 0;
    for (int32_t i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return b;
}

/* Prefill the prompt (all logits), then 32 greedy decode steps: logits rows
 * [16 + 32, vocab] and the greedy tokens. */
static void run(model *m, const int32_t *prompt, size_t n_prompt, float *rows, int32_t *greedy,
                size_t n_greedy)
{
    int32_t V = (int32_t)model_get_config(m)->n_vocab;
    assert_int_equal(model_forward(m, prompt, (int64_t)n_prompt, rows, 1, NULL), DI_OK);
    const float *last = rows + (n_prompt - 1) * (size_t)V;
    for (size_t i = 0; i < n_greedy; i++) {
        greedy[i] = argmax(last, V);
        float *out = rows + (n_prompt + i) * (size_t)V;
        assert_int_equal(model_forward(m, &greedy[i], 1, out, 0, NULL), DI_OK);
        last = out;
    }
}

static void test_absorbed_matches_naive_and_transformers(void **state)
{
    (void)state;
    for (size_t f = 0; f < N_FIXTURES; f++) {
        char dir[512], path[700];
        json_t *ref = reference(FIXTURES[f], dir, sizeof dir);
        json_t *jp = json_object_get(ref, "prompt"), *jg = json_object_get(ref, "greedy");
        size_t n_prompt = json_array_size(jp), n_greedy = json_array_size(jg);
        int32_t prompt[64], want[64], got_a[64], got_n[64];
        assert_true(n_prompt <= 64 && n_greedy <= 64);
        for (size_t i = 0; i < n_prompt; i++)
            prompt[i] = (int32_t)json_integer_value(json_array_get(jp, i));
        for (size_t i = 0; i < n_greedy; i++)
            want[i] = (int32_t)json_integer_value(json_array_get(jg, i));
        model *ma = load(dir, 0, MODEL_DTYPE_F32), *mn = load(dir, 1, MODEL_DTYPE_F32);
        int32_t V = (int32_t)model_get_config(ma)->n_vocab;
        size_t rows = n_prompt + n_greedy;
        float *a = malloc(rows * (size_t)V * sizeof *a), *n = malloc(rows * (size_t)V * sizeof *n);
        float *expect = malloc(n_prompt * (size_t)V * sizeof *expect);
        assert_true(a && n && expect);
        run(ma, prompt, n_prompt, a, got_a, n_greedy);
        run(mn, prompt, n_prompt, n, got_n, n_greedy);
        snprintf(path, sizeof path, "%s/logits.f32", dir);
        FILE *fp = fopen(path, "rb");
        assert_non_null(fp);
        assert_int_equal(fread(expect, sizeof *expect, n_prompt * (size_t)V, fp),
                         n_prompt * (size_t)V);
        fclose(fp);
        float lo = INFINITY, hi = -INFINITY;
        for (size_t i = 0; i < n_prompt * (size_t)V; i++) {
            lo = fminf(lo, expect[i]);
            hi = fmaxf(hi, expect[i]);
        }
        double an = 0, at = 0, nt = 0;
        for (size_t i = 0; i < rows * (size_t)V; i++) an = fmax(an, fabs(a[i] - n[i]));
        for (size_t i = 0; i < n_prompt * (size_t)V; i++) {
            at = fmax(at, fabs(a[i] - expect[i]));
            nt = fmax(nt, fabs(n[i] - expect[i]));
        }
        an /= hi - lo;
        at /= hi - lo;
        nt /= hi - lo;
        printf("%s: absorbed vs naive %.2e (48 rows), vs transformers: absorbed %.2e, naive "
               "%.2e\n",
               FIXTURES[f], an, at, nt);
        /* Same arithmetic up to summation order (f32 cache): tighter than the
         * 1e-3 both paths are held to against transformers. */
        assert_true(an <= 1e-5);
        assert_true(at <= 1e-3);
        assert_true(nt <= 1e-3);
        assert_memory_equal(got_a, want, n_greedy * sizeof *want);
        assert_memory_equal(got_n, want, n_greedy * sizeof *want);
        free(a);
        free(n);
        free(expect);
        model_free(ma);
        model_free(mn);
        json_decref(ref);
    }
}

static void test_kv_bytes_per_token_is_the_latent(void **state)
{
    (void)state;
    char dir[512];
    for (size_t f = 0; f < N_FIXTURES; f++) {
        json_t *ref = reference(FIXTURES[f], dir, sizeof dir);
        for (int half = 0; half < 2; half++) {
            model *m = load(dir, 0, half ? MODEL_DTYPE_F16 : MODEL_DTYPE_F32);
            const model_config *c = model_get_config(m);
            size_t elem = half ? 2 : 4;
            size_t mla = (size_t)c->n_layer * (c->kv_lora_rank + c->qk_rope_head_dim) * elem;
            /* a standard multi-head cache of the same attention: per layer, every
             * head's key (nope + rope) and value */
            size_t mha = (size_t)c->n_layer * c->n_head *
                         (c->qk_nope_head_dim + c->qk_rope_head_dim + c->v_head_dim) * elem;
            assert_int_equal(model_kv_bytes_per_token(m), mla);
            assert_true(mla < mha);
            if (half)
                printf("%s: KV cache %zu bytes/token (f16) vs %zu for multi-head (%.1fx)\n",
                       FIXTURES[f], mla, mha, (double)mha / (double)mla);
            model_free(m);
        }
        json_decref(ref);
    }
    /* A dense model's cache holds keys and values. */
    snprintf(dir, sizeof dir, "%s/model/llama-gqa-f16", DI_FIXTURE_DIR);
    model *m = load(dir, 0, MODEL_DTYPE_F16);
    const model_config *c = model_get_config(m);
    assert_int_equal(model_kv_bytes_per_token(m),
                     (size_t)2 * c->n_layer * c->n_head_kv * c->head_dim * 2);
    model_free(m);
}

/* The MTP drafter (lib/engine/draft_mtp.c) against transformers' MtpLayer
 * (mtp_checks.h): the first draft of requests prefilled in one batched step
 * is the argmax of mtp_logits row P - 1, its confidence that row's softmax
 * probability, and the three chained drafts after it are transformers'
 * module run on its own output (mtp_chain.json,
 * tests/oracle/make_mtp_chain_fixture.py); a second round of drafting gives
 * the same, and so do decode steps that keep some drafts and reject others. */
static void test_mtp_drafter_first_draft_matches_transformers(void **state)
{
    (void)state;
    char dir[512];
    json_t *ref = reference("dsv3-mtp-f32", dir, sizeof dir);
    json_t *jp = json_object_get(ref, "prompt"), *jg = json_object_get(ref, "greedy");
    int32_t seq[64];
    size_t n = 0;
    for (size_t i = 0; i < json_array_size(jp); i++)
        seq[n++] = (int32_t)json_integer_value(json_array_get(jp, i));
    for (size_t i = 0; i < json_array_size(jg); i++)
        seq[n++] = (int32_t)json_integer_value(json_array_get(jg, i));
    model_options o = {0};
    o.n_threads = 2;
    o.n_ctx = 256;
    o.n_batch = 256;
    o.kv_n_ctx_multiple = 2;
    o.kv_dtype = MODEL_DTYPE_F32;
    model *m = NULL;
    assert_int_equal(model_load(dir, &o, &m, NULL), DI_OK);
    const int32_t V = (int32_t)model_get_config(m)->n_vocab;
    float *want = model_fixture_f32(dir, "mtp_logits.f32", (n - 1) * (size_t)V);
    char chain_path[600];
    snprintf(chain_path, sizeof chain_path, "%s/mtp_chain.json", dir);
    json_t *chain = json_load_file(chain_path, 0, NULL);
    assert_non_null(chain);
    mtp_check_drafter(m, seq, json_array_size(jp), want, chain);
    /* a model without MTP has no MTP drafter */
    drafter *d = NULL;
    model *plain = load(DI_FIXTURE_DIR "/model/dsv3-fp8", 0, MODEL_DTYPE_F32);
    assert_int_equal(drafter_mtp_create(plain, 4, &d), DI_ERR_UNSUPPORTED);
    assert_null(d);
    model_free(plain);
    free(want);
    model_free(m);
    json_decref(chain);
    json_decref(ref);
}

/* The MTP module against transformers' MtpLayer (mtp_logits.f32: row i drafts
 * token i + 2 from the main model's normed hidden state at i and token i + 1),
 * over the 48-token prompt + greedy sequence: once in one pass, once token by
 * token beside the main model's decode. */
static void test_mtp_layer_matches_transformers(void **state)
{
    (void)state;
    char dir[512];
    json_t *ref = reference("dsv3-mtp-f32", dir, sizeof dir);
    json_t *jp = json_object_get(ref, "prompt"), *jg = json_object_get(ref, "greedy");
    int32_t seq[64];
    size_t n = 0;
    for (size_t i = 0; i < json_array_size(jp); i++)
        seq[n++] = (int32_t)json_integer_value(json_array_get(jp, i));
    for (size_t i = 0; i < json_array_size(jg); i++)
        seq[n++] = (int32_t)json_integer_value(json_array_get(jg, i));
    assert_int_equal(
        json_integer_value(json_array_get(json_object_get(ref, "mtp_logits_shape"), 0)),
        (json_int_t)(n - 1));
    model *m = load(dir, 0, MODEL_DTYPE_F32);
    assert_int_equal(model_mtp_layers(m), 1);
    assert_int_equal(model_mtp_hidden_width(m), model_get_config(m)->n_embd);
    const int32_t V = (int32_t)model_get_config(m)->n_vocab;
    const int64_t E = model_get_config(m)->n_embd;
    float *want = model_fixture_f32(dir, "mtp_logits.f32", (n - 1) * (size_t)V);
    float *got = malloc((size_t)V * sizeof *got);
    float *hidden = malloc((size_t)E * sizeof *hidden);
    assert_true(got && hidden);
    memset(hidden, 0, (size_t)E * sizeof *hidden);
    double one, step;
    mtp_layer_error(m, seq, n, want, &one, &step, NULL);
    printf("dsv3-mtp-f32: MTP logits vs transformers: one pass %.2e, token by token %.2e\n", one,
           step);
    assert_true(one <= 1e-3);
    assert_true(step <= 1e-3);
    /* errors */
    di_error *err = NULL;
    int32_t bad = V;
    assert_int_equal(model_mtp_forward(m, &bad, 1, hidden, got, &err), DI_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(di_error_message(err), "tokens[0]"));
    di_error_free(err);
    model_free(m);
    /* a model without MTP */
    snprintf(dir, sizeof dir, "%s/model/dsv3-fp8", DI_FIXTURE_DIR);
    m = load(dir, 0, MODEL_DTYPE_F32);
    assert_int_equal(model_mtp_layers(m), 0);
    int64_t rows = 0;
    assert_null(model_last_hidden(m, &rows));
    assert_int_equal(model_mtp_forward(m, seq, 1, hidden, got, NULL), DI_ERR_UNSUPPORTED);
    model_free(m);
    free(want);
    free(got);
    free(hidden);
    json_decref(ref);
}

/* A copy of a fixture with config.json edited by `edit` (a JSON object merged
 * over it; null values delete keys). */
static char tmpdir[64];

static const char *variant(const char *fixture, const char *edit)
{
    return model_variant_config(tmpdir, fixture, edit);
}

static int setup(void **state)
{
    (void)state;
    snprintf(tmpdir, sizeof tmpdir, "/tmp/di_test_dsXXXXXX");
    if (!mkdtemp(tmpdir)) return -1;
    char dir[128], src[512], dst[160];
    snprintf(dir, sizeof dir, "%s/variant", tmpdir);
    if (mkdir(dir, 0700) != 0) return -1;
    snprintf(src, sizeof src, "%s/model/dsv3-qlora-bf16/model.safetensors", DI_FIXTURE_DIR);
    snprintf(dst, sizeof dst, "%s/model.safetensors", dir);
    return symlink(src, dst);
}

static int teardown(void **state)
{
    (void)state;
    model_variant_remove(tmpdir);
    return 0;
}

static void test_bad_configs_and_tensors_are_named(void **state)
{
    (void)state;
    const char *F = "dsv3-qlora-bf16";
    model_free(load(variant(F, "{}"), 0, MODEL_DTYPE_F32)); /* the unedited copy loads */
    model_expect_load_error(variant(F, "{\"kv_lora_rank\": null}"), DI_ERR_MODEL_FORMAT,
                            "config.json", "kv_lora_rank is missing");
    model_expect_load_error(variant(F, "{\"topk_method\": \"greedy\"}"), DI_ERR_UNSUPPORTED,
                            "topk_method 'greedy'", NULL);
    model_expect_load_error(variant(F, "{\"scoring_func\": \"softmax\"}"), DI_ERR_UNSUPPORTED,
                            "scoring_func 'softmax'", NULL);
    model_expect_load_error(variant(F, "{\"n_group\": 3}"), DI_ERR_MODEL_FORMAT,
                            "MoE fields are inconsistent", "n_group 3");
    model_expect_load_error(variant(F, "{\"num_experts_per_tok\": 9}"), DI_ERR_MODEL_FORMAT,
                            "MoE fields are inconsistent", NULL);
    model_expect_load_error(variant(F, "{\"attention_bias\": true}"), DI_ERR_UNSUPPORTED,
                            "attention_bias", NULL);
    /* the config disagrees with the tensors: the tensor is named */
    model_expect_load_error(variant(F, "{\"kv_lora_rank\": 24}"), DI_ERR_MODEL_FORMAT,
                            "blk.0.attn_kv_a_mqa.weight", NULL);
    model_expect_load_error(variant(F, "{\"n_routed_experts\": 12, \"n_group\": 4}"),
                            DI_ERR_MODEL_FORMAT, "blk.1.ffn_gate_inp.weight", NULL);
    model_expect_load_error(variant(F, "{\"q_lora_rank\": null}"), DI_ERR_MODEL_FORMAT,
                            "blk.0.attn_q.weight", NULL);
    /* fewer layers than the file holds: not a silently truncated model */
    model_expect_load_error(variant(F, "{\"num_hidden_layers\": 2}"), DI_ERR_MODEL_FORMAT,
                            "past the 2 layers", "blk.2.");
}

/* A copy of gguf-dsv3/<name>.gguf edited as model_variant_gguf says. */
static const char *gguf_variant(const char *name, const char *from, const char *to,
                                long value_after)
{
    static char path[512];
    char src[512];
    snprintf(src, sizeof src, DI_FIXTURE_DIR "/model/gguf-dsv3/%s.gguf", name);
    snprintf(path, sizeof path, "/tmp/di_test_dsv3_gguf_%d.gguf", (int)getpid());
    return model_variant_gguf(src, path, from, to, value_after);
}

/* Malformed or mismatched deepseek2 GGUFs: an error naming the key or tensor. */
static void test_bad_deepseek2_ggufs_are_named(void **state)
{
    (void)state;
    const char *F = "dsv3-qlora-q8_0";
    model_free(load(gguf_variant(F, "general", "general", -1), 0, MODEL_DTYPE_F32));
    /* the expert count disagrees with the stacked experts */
    model_expect_load_error(gguf_variant(F, "deepseek2.expert_count", NULL, 16),
                            DI_ERR_MODEL_FORMAT, "ffn_gate_exps.weight", "16 experts");
    /* a missing tensor (its name changed) */
    model_expect_load_error(gguf_variant(F, "blk.1.attn_k_b.weight", "blk.1.attn_kXb.weight", -1),
                            DI_ERR_MODEL_FORMAT, "blk.1.attn_k_b.weight", NULL);
    model_expect_load_error(
        gguf_variant(F, "blk.2.ffn_up_exps.weight", "blk.2.ffn_up_eXps.weight", -1),
        DI_ERR_MODEL_FORMAT, "blk.2.ffn_up_exps.0.weight", NULL);
    /* shapes that lie: the latent rank, the MLA head widths, the groups */
    model_expect_load_error(gguf_variant(F, "deepseek2.attention.kv_lora_rank", NULL, 30),
                            DI_ERR_MODEL_FORMAT, "kv_lora_rank 30", NULL);
    model_expect_load_error(gguf_variant(F, "deepseek2.attention.value_length_mla", NULL, 12),
                            DI_ERR_MODEL_FORMAT, "attn_v_b.weight", NULL);
    model_expect_load_error(gguf_variant(F, "deepseek2.expert_group_count", NULL, 3),
                            DI_ERR_MODEL_FORMAT, "MoE fields are inconsistent", NULL);
    model_expect_load_error(gguf_variant(F, "deepseek2.expert_gating_func", NULL, 7),
                            DI_ERR_UNSUPPORTED, "expert_gating_func 7", NULL);
    unlink(gguf_variant(F, "general", "general", -1));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fixture_configs_and_names),
        cmocka_unit_test(test_absorbed_matches_naive_and_transformers),
        cmocka_unit_test(test_kv_bytes_per_token_is_the_latent),
        cmocka_unit_test(test_bad_configs_and_tensors_are_named),
        cmocka_unit_test(test_bad_deepseek2_ggufs_are_named),
        cmocka_unit_test(test_mtp_layer_matches_transformers),
        cmocka_unit_test(test_mtp_drafter_first_draft_matches_transformers),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
