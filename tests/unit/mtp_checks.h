/* Test helper shared by the MTP tests of DeepSeek-V3 (test_model_deepseek.c)
 * and DeepSeek-V4 (test_model_dsv4_mtp.c): the MTP layer's logits against
 * the fixture's mtp_logits, and the MTP drafter's drafts against its chain.
 * Include after cmocka.h, with engine/draft.h, model/model.h and
 * sampler/sampler.h. */
#ifndef DI_TESTS_MTP_CHECKS_H
#define DI_TESTS_MTP_CHECKS_H

#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static inline int32_t mtp_argmax(const float *x, int32_t n)
{
    int32_t b = 0;
    for (int32_t i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return b;
}

static int mtp_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The MTP layer of m over seq[0, n) against want (mtp_logits [n - 1, vocab]:
 * row i from the hidden rows of token i and token i + 1): the largest
 * difference over want's range in one pass (*one) and token by token beside
 * the main model's decode (*step); median (may be NULL): the one pass's
 * median row. The model is reset before and after. */
static inline void mtp_layer_error(model *m, const int32_t *seq, size_t n, const float *want,
                                   double *one, double *step, double *median)
{
    const int32_t V = (int32_t)model_get_config(m)->n_vocab;
    const int64_t W = model_mtp_hidden_width(m);
    float *got = malloc((n - 1) * (size_t)V * sizeof *got);
    float *hidden = malloc(n * (size_t)W * sizeof *hidden);
    assert_true(got && hidden);
    float lo = INFINITY, hi = -INFINITY;
    for (size_t i = 0; i < (n - 1) * (size_t)V; i++) {
        lo = fminf(lo, want[i]);
        hi = fmaxf(hi, want[i]);
    }
    model_reset(m);
    assert_int_equal(model_forward(m, seq, (int64_t)n, NULL, 0, NULL), DI_OK);
    int64_t rows = 0;
    const float *h = model_last_hidden(m, &rows);
    assert_int_equal(rows, (int64_t)n);
    memcpy(hidden, h, n * (size_t)W * sizeof *hidden);
    assert_int_equal(model_mtp_forward(m, seq + 1, (int64_t)n - 1, hidden, got, NULL), DI_OK);
    double worst = 0, *rows_err = calloc(n - 1, sizeof *rows_err);
    assert_non_null(rows_err);
    for (size_t i = 0; i < (n - 1) * (size_t)V; i++) {
        const double d = fabs((double)got[i] - want[i]);
        worst = fmax(worst, d);
        rows_err[i / (size_t)V] = fmax(rows_err[i / (size_t)V], d / (hi - lo));
    }
    *one = worst / (hi - lo);
    qsort(rows_err, n - 1, sizeof *rows_err, mtp_cmp_double);
    if (median) *median = rows_err[(n - 1) / 2];
    free(rows_err);
    model_reset(m);
    assert_int_equal(model_forward(m, seq, 1, NULL, 0, NULL), DI_OK);
    worst = 0;
    for (size_t i = 1; i < n; i++) {
        h = model_last_hidden(m, &rows);
        assert_int_equal(rows, 1);
        memcpy(hidden, h, (size_t)W * sizeof *hidden);
        assert_int_equal(model_mtp_forward(m, &seq[i], 1, hidden, got, NULL), DI_OK);
        for (int32_t v = 0; v < V; v++)
            worst = fmax(worst, fabs((double)got[v] - want[(i - 1) * (size_t)V + (size_t)v]));
        assert_int_equal(model_forward(m, &seq[i], 1, NULL, 0, NULL), DI_OK);
    }
    *step = worst / (hi - lo);
    model_reset(m);
    free(got);
    free(hidden);
}

/* The MTP drafter (lib/engine/draft_mtp.c) on m against the reference: chain
 * {"prefixes": [6 P], "drafts": [6 x 4]}, want the mtp_logits of seq (the
 * prompt, n_prompt tokens, then the model's greedy tokens). Requests holding
 * seq's first P + 1 tokens are prefilled in one batched step and shown to
 * observe as the scheduler shows them; propose at temperature 0, twice, gives
 * the first draft (the argmax of want's row P - 1, its probability the
 * confidence) and the chained ones. Then decode steps of request 4 keep two
 * drafts and reject one, then keep none and reject one: after observe cuts
 * the chained pairs off, the first draft is the reference's again. */
static inline void mtp_check_drafter(model *m, const int32_t *seq, size_t n_prompt,
                                     const float *want, json_t *chain)
{
    enum { R = 6 };
    const int32_t V = (int32_t)model_get_config(m)->n_vocab;
    json_t *prefixes = json_object_get(chain, "prefixes"),
           *drafts = json_object_get(chain, "drafts");
    assert_int_equal(json_array_size(prefixes), R);
    int64_t P[R];
    for (int r = 0; r < R; r++) P[r] = json_integer_value(json_array_get(prefixes, (size_t)r));
    drafter *d = NULL;
    assert_int_equal(drafter_mtp_create(m, R, &d), DI_OK);
    assert_string_equal(d->ops->name, "mtp");
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
        /* the token after each row: the sequence's next (the last one stands
         * for the token the request sampled) */
        memcpy(next + row, seq + 1, (size_t)P[r] * sizeof *next);
        obs[r] = (draft_observation){&states[r], smp, 0, row, P[r], next + row};
        row += P[r];
    }
    di_error *err = NULL;
    if (model_forward_batch(m, items, R, logits, &err) != DI_OK)
        fail_msg("%s", di_error_message(err));
    for (int r = 0; r < R; r++) /* past the prompt, seq is the model's greedy output */
        if ((size_t)P[r] >= n_prompt)
            assert_int_equal(mtp_argmax(logits + (size_t)r * V, V), seq[P[r]]);
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
            int32_t top = mtp_argmax(w, V);
            double sum = 0;
            for (int32_t v = 0; v < V; v++) sum += exp((double)(w[v] - w[top]));
            assert_int_equal(dr[r].n, round == 0 ? 4 : 1);
            assert_int_equal(dr[r].has_q, 0);
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
    /* Decode steps of request 4 (P = 37, past the prompt), verified as the
     * scheduler does: drafts equal to the greedy tokens are kept, the first
     * that differs is corrected, the rejected rows' KV is cut off. Step 1
     * verifies [x37, x38, x39, wrong], step 2 [x41, wrong]. */
    const int r4 = 4;
    int64_t n_tok = P[r4] + 1;
    for (int stp = 0; stp < 2; stp++) {
        int k = stp == 0 ? 3 : 1; /* drafts in the item */
        int32_t item_tok[4];
        memcpy(item_tok, seq + n_tok - 1, (size_t)k * sizeof *item_tok);
        item_tok[k] = (seq[n_tok - 1 + k] + 1) % V; /* a draft the model rejects */
        assert_int_equal(model_seq_reserve(m, seqs[r4], n_tok + k), DI_OK);
        model_batch_item it = {seqs[r4], item_tok, k + 1, k + 1};
        assert_int_equal(model_forward_batch(m, &it, 1, logits, NULL), DI_OK);
        int32_t emitted[4];
        int n_emit = 0;
        for (int j = 0; j <= k; j++) {
            emitted[n_emit++] = mtp_argmax(logits + (size_t)j * V, V);
            assert_int_equal(emitted[j], seq[n_tok + j]); /* the greedy sequence */
            if (j == k || item_tok[j + 1] != emitted[j]) break;
        }
        assert_int_equal(n_emit, k); /* k - 1 kept, the wrong one corrected */
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
        assert_int_equal(out4[0], mtp_argmax(want + (size_t)(n_tok - 2) * (size_t)V, V));
    }
    for (int r = 0; r < R; r++) {
        d->ops->release(d, states[r]);
        model_seq_free(m, seqs[r]);
    }
    drafter_destroy(d);
    sampler_free(smp);
    free(logits);
}

#endif
