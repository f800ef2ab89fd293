/* A host thread with a small stack runs the model synchronously: di_model_load
 * and di_model_eval run on the caller's thread, and the caller runs the CPU
 * pool's tasks too, so every kernel frame lands on the host's stack. A host
 * thread of 64 KiB (musl's default is 128 KiB) loads and evaluates SmolLM2
 * (GQA: the flash attention's tiles), a tiny DeepSeek-V3 (MLA's latent tiles)
 * and a tiny DeepSeek-V4 (the sink attention and the lightning indexer): a
 * prompt of PROMPT tokens (prefill tiles) then DECODE single-token steps, at
 * 1 and 2 threads. (A host thread of 96 KiB crashed on SmolLM2 while the
 * kernels kept their K/V staging tiles, up to ~118 KB, on the stack.)
 *
 * The logits must be those of the same calls on the main thread (8 MiB),
 * bit for bit: the kernels' workspace does not depend on the stack. */
#include <limits.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "deepinfer/deepinfer.h"

enum { HOST_STACK = 64 * 1024, PROMPT = 44, DECODE = 3, N_CTX = 128 };

#define SMOL DI_ASSET_DIR "/smollm2-135m-instruct/SmolLM2-135M-Instruct.Q4_1.gguf"
#define DSV3 DI_FIXTURE_DIR "/model/gguf-dsv3/dsv3-qlora-q8_0.gguf"
#define DSV4 DI_FIXTURE_DIR "/model/dsv4-sqrtsoftplus-f32"

/* One load and evaluation: the prompt's last logits row, then each decode
 * step's, into logits [1 + DECODE, vocab] (malloc'd, owned by the caller). */
typedef struct eval_run {
    const char *path;
    int n_threads;
    di_status status;
    char message[512];
    float *logits;
    int32_t vocab;
} eval_run;

static void *load_and_eval(void *arg)
{
    eval_run *r = arg;
    di_model_options o;
    di_model_options_init(&o);
    o.n_threads = r->n_threads;
    o.n_ctx = N_CTX;
    di_model *m = NULL;
    di_error *e = NULL;
    r->status = di_model_load(r->path, &o, &m, &e);
    if (r->status != DI_OK) goto done;
    r->vocab = di_model_vocab_size(m);
    r->logits = malloc(sizeof(float) * (size_t)(1 + DECODE) * (size_t)r->vocab);
    if (!r->logits) {
        r->status = DI_ERR_OUT_OF_MEMORY;
        goto done;
    }
    int32_t ids[PROMPT + DECODE];
    for (int i = 0; i < PROMPT + DECODE; i++) ids[i] = (int32_t)((i * 131 + 7) % r->vocab);
    r->status = di_model_eval(m, ids, PROMPT, r->logits, 0, &e);
    for (int s = 0; s < DECODE && r->status == DI_OK; s++)
        r->status =
            di_model_eval(m, &ids[PROMPT + s], 1, r->logits + (size_t)(1 + s) * r->vocab, 0, &e);
done:
    if (e) snprintf(r->message, sizeof r->message, "%s", di_error_message(e));
    di_error_free(e);
    di_model_free(m);
    return NULL;
}

/* The same calls on a thread of HOST_STACK bytes and on this one: both
 * succeed and give the same logits. */
static void check_small_stack(const char *path, int n_threads)
{
    eval_run big = {.path = path, .n_threads = n_threads};
    eval_run small = {.path = path, .n_threads = n_threads};
    load_and_eval(&big);
    if (big.status != DI_OK) fail_msg("%s: %s", path, big.message);

    pthread_attr_t attr;
    size_t stack = HOST_STACK;
    long min = sysconf(_SC_THREAD_STACK_MIN); /* (larger where AMX's signal frames are) */
    if (min > 0 && (size_t)min > stack) stack = (size_t)min;
    assert_int_equal(pthread_attr_init(&attr), 0);
    assert_int_equal(pthread_attr_setstacksize(&attr, stack), 0);
    pthread_t t;
    assert_int_equal(pthread_create(&t, &attr, load_and_eval, &small), 0);
    assert_int_equal(pthread_join(t, NULL), 0);
    pthread_attr_destroy(&attr);
    printf("%s, %d thread(s), host stack %zu bytes: %s\n", path, n_threads, stack,
           small.status == DI_OK ? "ok" : small.message);
    assert_int_equal(small.status, DI_OK);
    assert_int_equal(small.vocab, big.vocab);
    assert_memory_equal(small.logits, big.logits,
                        sizeof(float) * (size_t)(1 + DECODE) * (size_t)big.vocab);
    free(small.logits);
    free(big.logits);
}

static void test_smollm2_evals_on_a_64k_host_stack(void **state)
{
    (void)state;
    if (access(SMOL, R_OK) != 0) {
        printf("skipped: %s absent (scripts/test.sh fetches it)\n", SMOL);
        skip();
    }
    check_small_stack(SMOL, 1);
    check_small_stack(SMOL, 2);
}

static void test_deepseek_v3_mla_evals_on_a_64k_host_stack(void **state)
{
    (void)state;
    check_small_stack(DSV3, 1);
    check_small_stack(DSV3, 2);
}

static void test_deepseek_v4_evals_on_a_64k_host_stack(void **state)
{
    (void)state;
    check_small_stack(DSV4, 1);
    check_small_stack(DSV4, 2);
}

/* argv[1], if any: run only the tests whose names match it (cmocka's filter). */
int main(int argc, char **argv)
{
    if (argc > 1) cmocka_set_test_filter(argv[1]);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_smollm2_evals_on_a_64k_host_stack),
        cmocka_unit_test(test_deepseek_v3_mla_evals_on_a_64k_host_stack),
        cmocka_unit_test(test_deepseek_v4_evals_on_a_64k_host_stack),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
