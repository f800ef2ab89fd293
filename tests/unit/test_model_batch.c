/* lib/model: several sequences in one forward step. The property: a
 * sequence's logits are bit-identical whatever else is in the step and
 * however its prompt is chunked (batch invariance, model.h), for a dense model
 * (GQA over the paged K/V cache), for DeepSeek-V3 and V2 (MLA over the
 * latent paged cache, the step's tokens grouped by routed expert) and for
 * DeepSeek-V4 (each sequence's window and compressed caches, the indexer per
 * sequence, hash routing by each row's token). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "api/engram_vocab.h"
#include "model/model.h"

#define MODEL_DIR DI_FIXTURE_DIR "/model/qwen2-tied-f16"

static model_dtype kv_dtype = MODEL_DTYPE_F16; /* the cache of the models loaded */

static model *load_dir(const char *dir, int n_threads)
{
    model_options o = {0};
    o.n_threads = n_threads;
    o.kv_dtype = kv_dtype;
    o.n_batch = 64;
    o.kv_n_ctx_multiple = 4;
    model *m = NULL;
    di_error *err = NULL;
    assert_int_equal(model_load(dir, &o, &m, &err), DI_OK);
    /* (DeepSeek-V4.1's Engram: the folder's tokenizer.json, as di_model_load) */
    assert_int_equal(api_engram_vocab(m, NULL, dir, &err), DI_OK);
    return m;
}

static model *load(int n_threads)
{
    return load_dir(MODEL_DIR, n_threads);
}

enum { V_QWEN = 512, N_PROMPT = 20, N_DECODE = 6 };

static void prompt_of(int which, int32_t *out, int32_t n_vocab)
{
    for (int i = 0; i < N_PROMPT; i++) out[i] = (int32_t)((which * 97 + i * 31 + 7) % n_vocab);
}

/* Logits of each decode step of sequence `which`, run alone: the whole
 * prompt in one step, then one token per step (greedy). */
static void run_alone(model *m, int which, float *out /* [N_DECODE, V] */)
{
    const int32_t V = (int32_t)model_get_config(m)->n_vocab;
    int32_t toks[N_PROMPT + N_DECODE];
    prompt_of(which, toks, V);
    model_seq *s;
    assert_int_equal(model_seq_create(m, &s), DI_OK);
    int64_t n = N_PROMPT;
    const int32_t *feed = toks;
    for (int step = 0; step < N_DECODE; step++) {
        assert_int_equal(model_seq_reserve(m, s, model_seq_n_past(s) + n), DI_OK);
        model_batch_item it = {s, feed, n, 1};
        assert_int_equal(model_forward_batch(m, &it, 1, out + (size_t)step * V, NULL), DI_OK);
        int32_t best = 0;
        for (int32_t i = 1; i < V; i++)
            if (out[(size_t)step * V + i] > out[(size_t)step * V + best]) best = i;
        toks[N_PROMPT + step] = best;
        feed = &toks[N_PROMPT + step];
        n = 1;
    }
    model_seq_free(m, s);
}

static void check_batch_invariance(const char *dir)
{
    model *m = load_dir(dir, 2);
    const int32_t V = (int32_t)model_get_config(m)->n_vocab;
    enum { N_SEQ = 3 };
    float *alone = malloc((size_t)N_SEQ * N_DECODE * V * sizeof(float));
    float *batched = malloc((size_t)N_SEQ * N_DECODE * V * sizeof(float));
    float *row = malloc((size_t)N_SEQ * V * sizeof(float));
    assert_non_null(alone);
    assert_non_null(batched);
    assert_non_null(row);
    for (int q = 0; q < N_SEQ; q++) run_alone(m, q, alone + (size_t)q * N_DECODE * V);
    /* Together: sequence q starts q steps late, prompts go in chunks of 7 tokens,
     * so every step mixes prefill chunks and decode tokens of the others. */
    int32_t toks[N_SEQ][N_PROMPT + N_DECODE];
    int64_t fed[N_SEQ] = {0}, n_all[N_SEQ];
    int decoded[N_SEQ] = {0};
    model_seq *s[N_SEQ];
    for (int q = 0; q < N_SEQ; q++) {
        prompt_of(q, toks[q], V);
        n_all[q] = N_PROMPT;
        assert_int_equal(model_seq_create(m, &s[q]), DI_OK);
    }
    for (int step = 0; step < 40; step++) {
        model_batch_item it[N_SEQ];
        int who[N_SEQ], n = 0;
        for (int q = 0; q < N_SEQ; q++) {
            if (step < q || decoded[q] == N_DECODE) continue;
            int64_t take = n_all[q] - fed[q];
            if (take > 7) take = 7;
            assert_int_equal(model_seq_reserve(m, s[q], fed[q] + take), DI_OK);
            it[n] = (model_batch_item){s[q], toks[q] + fed[q], take, fed[q] + take == n_all[q]};
            who[n++] = q;
            fed[q] += take;
        }
        if (n == 0) break;
        assert_int_equal(model_forward_batch(m, it, n, row, NULL), DI_OK);
        int r = 0;
        for (int i = 0; i < n; i++) {
            if (!it[i].want_logits) continue;
            int q = who[i];
            memcpy(batched + ((size_t)q * N_DECODE + decoded[q]) * V, row + (size_t)r * V,
                   V * sizeof(float));
            int32_t best = 0;
            for (int32_t k = 1; k < V; k++)
                if (row[(size_t)r * V + k] > row[(size_t)r * V + best]) best = k;
            toks[q][n_all[q]++] = best;
            decoded[q]++;
            r++;
        }
    }
    for (int q = 0; q < N_SEQ; q++) assert_int_equal(decoded[q], N_DECODE);
    assert_memory_equal(alone, batched, (size_t)N_SEQ * N_DECODE * V * sizeof(float));
    for (int q = 0; q < N_SEQ; q++) model_seq_free(m, s[q]);
    free(alone);
    free(batched);
    free(row);
    model_free(m);
}

static void test_logits_do_not_depend_on_the_batch(void **state)
{
    (void)state;
    check_batch_invariance(MODEL_DIR);
}

/* The Q8_0 and Q4_0 caches (rotated, blocks quantized row by row) keep the
 * property, on SmolLM2 (head_dim 64: the tiny fixtures' 16 is refused). */
static void test_quantized_kv_caches_keep_batch_invariance(void **state)
{
    (void)state;
    const char *smol = DI_ASSET_DIR "/smollm2-135m-instruct/SmolLM2-135M-Instruct.Q4_1.gguf";
    FILE *f = fopen(smol, "rb");
    if (!f) {
        printf("skipped: %s absent (scripts/test.sh fetches it)\n", smol);
        skip();
    }
    fclose(f);
    kv_dtype = MODEL_DTYPE_Q8_0;
    check_batch_invariance(smol);
    kv_dtype = MODEL_DTYPE_Q4_0;
    check_batch_invariance(smol);
    kv_dtype = MODEL_DTYPE_F16;
}

/* DeepSeek-V3: MLA with q LoRA, sigmoid group-limited routing with the
 * correction bias, shared experts, a dense first layer. */
static void test_deepseek_v3_logits_do_not_depend_on_the_batch(void **state)
{
    (void)state;
    check_batch_invariance(DI_FIXTURE_DIR "/model/dsv3-qlora-bf16");
}

/* DeepSeek-V2: softmax routing, YaRN. */
static void test_deepseek_v2_logits_do_not_depend_on_the_batch(void **state)
{
    (void)state;
    check_batch_invariance(DI_FIXTURE_DIR "/model/dsv2-softmax-yarn-bf16");
}

/* DeepSeek-V4: sliding, CSA and HCA layers, hash then scored MoE; prompts of
 * 20 in chunks of 7 cross the compressors' windows (4 and 8 tokens) mid-chunk. */
static void test_deepseek_v4_logits_do_not_depend_on_the_batch(void **state)
{
    (void)state;
    check_batch_invariance(DI_FIXTURE_DIR "/model/dsv4-sqrtsoftplus-f32");
    check_batch_invariance(DI_FIXTURE_DIR "/model/dsv4-fp8");
    /* its caches in Q8_0 and Q4_0: the window and entries' rows of 32 as they
     * are, the indexer keys' rows of 64 rotated */
    kv_dtype = MODEL_DTYPE_Q8_0;
    check_batch_invariance(DI_FIXTURE_DIR "/model/dsv4-gguf-release");
    kv_dtype = MODEL_DTYPE_Q4_0;
    check_batch_invariance(DI_FIXTURE_DIR "/model/dsv4-gguf-release");
    kv_dtype = MODEL_DTYPE_F16;
}

/* DeepSeek-V4.1: ratio 2 and 1 layers sharing entries, indexer keys and top-k
 * across layers, YOCO, shifted mHC; f32, f16 and Q8_0 caches (its head_dim of
 * 96 is whole blocks of 32, not rotated; the keys' 64 are). */
static void test_deepseek_v41_logits_do_not_depend_on_the_batch(void **state)
{
    (void)state;
    check_batch_invariance(DI_FIXTURE_DIR "/model/dsv41-f32");
    check_batch_invariance(DI_FIXTURE_DIR "/model/dsv41-fp8-mxfp4-release");
    /* Engram: a step's n-grams reach back into earlier steps' tokens */
    check_batch_invariance(DI_FIXTURE_DIR "/model/dsv41-engram-f32");
    kv_dtype = MODEL_DTYPE_Q8_0;
    check_batch_invariance(DI_FIXTURE_DIR "/model/dsv41-fp8-mxfp4-release");
    kv_dtype = MODEL_DTYPE_F16;
}

/* A speculative step's rejected tokens are truncated away: the next step must
 * see exactly the cache of a sequence that never had them (the windows they
 * closed dropped, their ring rows overwritten). */
static void check_truncation_forgets(const char *dir)
{
    model *m = load_dir(dir, 1);
    const int32_t V = (int32_t)model_get_config(m)->n_vocab;
    int32_t toks[N_PROMPT], wrong[6] = {5, 6, 7, 8, 9, 10}, next[2] = {11, 12};
    prompt_of(1, toks, V);
    float *a = malloc(2 * (size_t)V * sizeof(float)), *b = malloc(2 * (size_t)V * sizeof(float));
    assert_non_null(a);
    assert_non_null(b);
    model_seq *s, *t;
    assert_int_equal(model_seq_create(m, &s), DI_OK);
    assert_int_equal(model_seq_create(m, &t), DI_OK);
    /* s: the prompt (its end at 20: inside an HCA window), 6 tokens that close
     * windows (24: CSA and HCA), dropped, then 2 more */
    assert_int_equal(model_seq_reserve(m, s, N_PROMPT + 6), DI_OK);
    model_batch_item it = {s, toks, N_PROMPT, 0};
    assert_int_equal(model_forward_batch(m, &it, 1, NULL, NULL), DI_OK);
    it = (model_batch_item){s, wrong, 6, 1};
    assert_int_equal(model_forward_batch(m, &it, 1, a, NULL), DI_OK);
    model_seq_truncate(m, s, N_PROMPT);
    assert_int_equal(model_seq_n_past(s), N_PROMPT);
    assert_int_equal(model_seq_reserve(m, s, N_PROMPT + 2), DI_OK);
    it = (model_batch_item){s, next, 2, 2};
    assert_int_equal(model_forward_batch(m, &it, 1, a, NULL), DI_OK);
    /* t: the prompt, then the 2 */
    assert_int_equal(model_seq_reserve(m, t, N_PROMPT + 2), DI_OK);
    it = (model_batch_item){t, toks, N_PROMPT, 0};
    assert_int_equal(model_forward_batch(m, &it, 1, NULL, NULL), DI_OK);
    it = (model_batch_item){t, next, 2, 2};
    assert_int_equal(model_forward_batch(m, &it, 1, b, NULL), DI_OK);
    assert_memory_equal(a, b, 2 * (size_t)V * sizeof(float));
    model_seq_free(m, s);
    model_seq_free(m, t);
    free(a);
    free(b);
    model_free(m);
}

static void test_deepseek_v4_truncation_forgets_the_dropped_tokens(void **state)
{
    (void)state;
    check_truncation_forgets(DI_FIXTURE_DIR "/model/dsv4-sqrtsoftplus-f32");
    /* V4.1: entries of ratio 2 and 1, the keys made from them, a shared top-k */
    check_truncation_forgets(DI_FIXTURE_DIR "/model/dsv41-f32");
    /* Engram: the dropped tokens' IDs leave the n-grams */
    check_truncation_forgets(DI_FIXTURE_DIR "/model/dsv41-engram-f32");
}

static void test_blocks_are_shared_and_returned(void **state)
{
    (void)state;
    model *m = load(1);
    int32_t total = model_kv_blocks_total(m);
    assert_int_equal(total, 4 * model_kv_blocks_for(model_n_ctx(m)));
    model_seq *a, *b;
    assert_int_equal(model_seq_create(m, &a), DI_OK);
    assert_int_equal(model_seq_create(m, &b), DI_OK);
    assert_int_equal(model_seq_reserve(m, a, model_n_ctx(m)), DI_OK);
    assert_int_equal(model_kv_blocks_free(m), total - model_kv_blocks_for(model_n_ctx(m)));
    assert_int_equal(model_seq_reserve(m, b, model_n_ctx(m) + 1), DI_ERR_CONTEXT_LENGTH);
    model_seq_reset(m, a);
    assert_int_equal(model_kv_blocks_free(m), total);
    model_seq_free(m, a);
    model_seq_free(m, b);
    model_free(m);
}

static void test_bad_steps_are_refused_with_the_item_named(void **state)
{
    (void)state;
    model *m = load(1);
    model_seq *s;
    assert_int_equal(model_seq_create(m, &s), DI_OK);
    int32_t t[2] = {1, 2};
    model_batch_item it = {s, t, 2, 1};
    di_error *err = NULL;
    float logits[V_QWEN];
    /* no blocks reserved */
    assert_int_equal(model_forward_batch(m, &it, 1, logits, &err), DI_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(di_error_message(err), "items[0]"));
    di_error_free(err);
    err = NULL;
    assert_int_equal(model_seq_reserve(m, s, 2), DI_OK);
    t[1] = V_QWEN;
    assert_int_equal(model_forward_batch(m, &it, 1, logits, &err), DI_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(di_error_message(err), "items[0].tokens[1]"));
    di_error_free(err);
    err = NULL;
    t[1] = 2;
    model_batch_item two[2] = {it, it};
    assert_int_equal(model_forward_batch(m, two, 2, logits, &err), DI_ERR_INVALID_ARGUMENT);
    di_error_free(err);
    assert_int_equal(model_seq_n_past(s), 0);
    model_seq_free(m, s);
    model_free(m);
}

/* A context that is not a multiple of the block size: the last block has slots
 * past n_ctx, and a step into them is refused (it overflowed the attention
 * scratch, sized by n_ctx), for the dense and the MLA cache alike. */
static void check_step_past_the_context_is_refused(const char *dir)
{
    model_options o = {0};
    o.n_threads = 1;
    o.kv_dtype = MODEL_DTYPE_F16;
    o.n_ctx = 17;
    o.n_batch = 17;
    model *m = NULL;
    assert_int_equal(model_load(dir, &o, &m, NULL), DI_OK);
    const int32_t V = (int32_t)model_get_config(m)->n_vocab;
    model_seq *s;
    assert_int_equal(model_seq_create(m, &s), DI_OK);
    int32_t t[17];
    for (int i = 0; i < 17; i++) t[i] = (i * 5 + 3) % V;
    float *logits = malloc((size_t)V * sizeof *logits);
    assert_non_null(logits);
    assert_int_equal(model_seq_reserve(m, s, 17), DI_OK);
    model_batch_item it = {s, t, 17, 1};
    assert_int_equal(model_forward_batch(m, &it, 1, logits, NULL), DI_OK);
    assert_int_equal(model_seq_reserve(m, s, 18), DI_ERR_CONTEXT_LENGTH);
    it.n_tokens = 1;
    di_error *err = NULL;
    assert_int_equal(model_forward_batch(m, &it, 1, logits, &err), DI_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(di_error_message(err), "context"));
    di_error_free(err);
    assert_int_equal(model_seq_n_past(s), 17);
    free(logits);
    model_seq_free(m, s);
    model_free(m);
}

static void test_step_past_the_context_is_refused(void **state)
{
    (void)state;
    check_step_past_the_context_is_refused(MODEL_DIR);
    check_step_past_the_context_is_refused(DI_FIXTURE_DIR "/model/dsv3-mtp-f32");
    check_step_past_the_context_is_refused(DI_FIXTURE_DIR "/model/dsv4-sigmoid-yarn-bf16");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_logits_do_not_depend_on_the_batch),
        cmocka_unit_test(test_quantized_kv_caches_keep_batch_invariance),
        cmocka_unit_test(test_deepseek_v3_logits_do_not_depend_on_the_batch),
        cmocka_unit_test(test_deepseek_v2_logits_do_not_depend_on_the_batch),
        cmocka_unit_test(test_deepseek_v4_logits_do_not_depend_on_the_batch),
        cmocka_unit_test(test_deepseek_v41_logits_do_not_depend_on_the_batch),
        cmocka_unit_test(test_deepseek_v4_truncation_forgets_the_dropped_tokens),
        cmocka_unit_test(test_blocks_are_shared_and_returned),
        cmocka_unit_test(test_bad_steps_are_refused_with_the_item_named),
        cmocka_unit_test(test_step_past_the_context_is_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
