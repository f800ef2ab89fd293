/* lib/sampler: each processor against the property that defines it, and the
 * seeded draws against the distribution they sample. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "sampler/sampler.h"

static sampler_params defaults(void)
{
    sampler_params p = {0};
    p.temperature = 1.0f;
    p.top_p = 1.0f;
    p.repetition_penalty = 1.0f;
    return p;
}

static sampler *make(const sampler_params *p, int32_t V)
{
    sampler *s = NULL;
    char msg[128];
    assert_int_equal(sampler_create(p, V, &s, msg, sizeof msg), DI_OK);
    return s;
}

static int32_t draw(sampler *s, const float *logits, int32_t V)
{
    float buf[64];
    memcpy(buf, logits, (size_t)V * sizeof *buf);
    return sampler_sample(s, buf);
}

static void test_greedy_takes_the_largest_lowest_id_on_ties(void **state)
{
    (void)state;
    sampler_params p = defaults();
    p.temperature = 0.0f;
    sampler *s = make(&p, 6);
    const float l[6] = {0.5f, 3.0f, -1.0f, 3.0f, 2.9f, 0.0f};
    assert_int_equal(draw(s, l, 6), 1);
    sampler_free(s);
}

static void test_same_seed_same_tokens_other_seed_other_tokens(void **state)
{
    (void)state;
    const float l[8] = {0, 0.1f, 0.2f, 0.3f, 0.4f, 0.5f, 0.6f, 0.7f};
    sampler_params p = defaults();
    p.seed = 42;
    sampler *a = make(&p, 8), *b = make(&p, 8);
    p.seed = 43;
    sampler *c = make(&p, 8);
    int differ = 0;
    for (int i = 0; i < 200; i++) {
        int32_t x = draw(a, l, 8), y = draw(b, l, 8), z = draw(c, l, 8);
        assert_int_equal(x, y);
        differ |= x != z;
    }
    assert_true(differ);
    sampler_free(a);
    sampler_free(b);
    sampler_free(c);
}

/* Draw frequencies at temperature T follow softmax(logits / T): a chi-square
 * test with 3 degrees of freedom at p = 0.001 (critical value 16.27). */
static void test_draws_follow_the_softmax(void **state)
{
    (void)state;
    const float l[4] = {1.0f, 0.0f, -0.5f, 2.0f};
    const float T = 0.7f;
    sampler_params p = defaults();
    p.temperature = T;
    p.seed = 7;
    sampler *s = make(&p, 4);
    enum { N = 40000 };
    int count[4] = {0};
    for (int i = 0; i < N; i++) count[draw(s, l, 4)]++;
    double z = 0, prob[4];
    for (int i = 0; i < 4; i++) z += exp(l[i] / T);
    double chi = 0;
    for (int i = 0; i < 4; i++) {
        prob[i] = exp(l[i] / T) / z;
        double e = prob[i] * N;
        chi += (count[i] - e) * (count[i] - e) / e;
    }
    assert_true(chi < 16.27);
    sampler_free(s);
}

static void test_top_k_keeps_the_k_largest(void **state)
{
    (void)state;
    const float l[6] = {5.0f, 4.9f, 4.8f, 0.0f, 4.7f, -3.0f};
    sampler_params p = defaults();
    p.top_k = 2;
    p.seed = 1;
    sampler *s = make(&p, 6);
    int seen[6] = {0};
    for (int i = 0; i < 2000; i++) seen[draw(s, l, 6)]++;
    assert_true(seen[0] > 0 && seen[1] > 0);
    assert_int_equal(seen[2] + seen[3] + seen[4] + seen[5], 0);
    sampler_free(s);
}

static void test_top_p_keeps_the_smallest_prefix_reaching_p(void **state)
{
    (void)state;
    /* probabilities 0.5, 0.25, 0.125, 0.125 (logits are log-probabilities) */
    const float l[4] = {logf(0.5f), logf(0.25f), logf(0.125f), logf(0.125f)};
    sampler_params p = defaults();
    p.top_p = 0.7f; /* 0.5 < 0.7 <= 0.75: tokens 0 and 1 */
    p.seed = 3;
    sampler *s = make(&p, 4);
    int seen[4] = {0};
    for (int i = 0; i < 3000; i++) seen[draw(s, l, 4)]++;
    assert_true(seen[0] > 0 && seen[1] > 0);
    assert_int_equal(seen[2] + seen[3], 0);
    sampler_free(s);
}

static void test_min_p_drops_tokens_below_the_fraction_of_the_largest(void **state)
{
    (void)state;
    const float l[3] = {logf(0.6f), logf(0.3f), logf(0.1f)};
    sampler_params p = defaults();
    p.min_p = 0.3f; /* 0.1 / 0.6 < 0.3 <= 0.3 / 0.6 */
    p.seed = 5;
    sampler *s = make(&p, 3);
    int seen[3] = {0};
    for (int i = 0; i < 3000; i++) seen[draw(s, l, 3)]++;
    assert_true(seen[0] > 0 && seen[1] > 0);
    assert_int_equal(seen[2], 0);
    sampler_free(s);
}

static void test_logit_bias_moves_the_greedy_choice(void **state)
{
    (void)state;
    const float l[4] = {1.0f, 2.0f, 0.0f, 0.5f};
    const int32_t ids[1] = {2};
    const float vals[1] = {2.5f};
    sampler_params p = defaults();
    p.temperature = 0.0f;
    p.bias_ids = ids;
    p.bias_values = vals;
    p.n_bias = 1;
    sampler *s = make(&p, 4);
    assert_int_equal(draw(s, l, 4), 2);
    sampler_free(s);
}

/* transformers' RepetitionPenaltyLogitsProcessor: positive logits divided,
 * negative multiplied; OpenAI's presence and frequency penalties subtract. */
static void test_penalties_follow_their_definitions(void **state)
{
    (void)state;
    sampler_params p = defaults();
    p.repetition_penalty = 2.0f;
    p.presence_penalty = 0.5f;
    p.frequency_penalty = 0.25f;
    p.temperature = 0.0f;
    sampler *s = make(&p, 4);
    sampler_accept_prompt(s, 0);
    sampler_accept(s, 1);
    sampler_accept(s, 1);
    sampler_accept_prompt(s, 3);
    float l[4] = {4.0f, -1.0f, 1.0f, 3.0f};
    sampler_sample(s, l);
    assert_true(l[0] == 2.0f);                     /* prompt: repetition only */
    assert_true(l[1] == -2.0f - 0.5f - 2 * 0.25f); /* output twice: all three */
    assert_true(l[2] == 1.0f);                     /* unseen */
    assert_true(l[3] == 1.5f);
    sampler_free(s);
}

static void test_bad_parameters_name_the_field(void **state)
{
    (void)state;
    sampler *s = NULL;
    char msg[128];
    sampler_params p = defaults();
    p.top_p = 0.0f;
    assert_int_equal(sampler_create(&p, 4, &s, msg, sizeof msg), DI_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(msg, "top_p"));
    p = defaults();
    p.temperature = -1.0f;
    assert_int_equal(sampler_create(&p, 4, &s, msg, sizeof msg), DI_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(msg, "temperature"));
    p = defaults();
    p.temperature = NAN;
    assert_int_equal(sampler_create(&p, 4, &s, msg, sizeof msg), DI_ERR_INVALID_ARGUMENT);
    const int32_t ids[1] = {4};
    const float vals[1] = {1.0f};
    p = defaults();
    p.bias_ids = ids;
    p.bias_values = vals;
    p.n_bias = 1;
    assert_int_equal(sampler_create(&p, 4, &s, msg, sizeof msg), DI_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(msg, "logit_bias[0]"));
    assert_null(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_greedy_takes_the_largest_lowest_id_on_ties),
        cmocka_unit_test(test_same_seed_same_tokens_other_seed_other_tokens),
        cmocka_unit_test(test_draws_follow_the_softmax),
        cmocka_unit_test(test_top_k_keeps_the_k_largest),
        cmocka_unit_test(test_top_p_keeps_the_smallest_prefix_reaching_p),
        cmocka_unit_test(test_min_p_drops_tokens_below_the_fraction_of_the_largest),
        cmocka_unit_test(test_logit_bias_moves_the_greedy_choice),
        cmocka_unit_test(test_penalties_follow_their_definitions),
        cmocka_unit_test(test_bad_parameters_name_the_field),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
