/* di_thread_create: the library's threads get at least DI_THREAD_STACK bytes of
 * stack whatever the C library's default (ctest also runs this under
 * `ulimit -s 256`, which glibc takes as its default thread stack). */
#define _GNU_SOURCE /* pthread_getattr_np */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "util/thread.h"

static void *stack_size_of_self(void *out)
{
    pthread_attr_t attr;
    size_t size = 0;
    if (pthread_getattr_np(pthread_self(), &attr) == 0) {
        pthread_attr_getstacksize(&attr, &size);
        pthread_attr_destroy(&attr);
    }
    /* and use 256 KB of it: more than the glibc default under ulimit -s 256 */
    volatile char tile[256 * 1024];
    memset((char *)tile, 1, sizeof tile);
    *(size_t *)out = size + (size_t)(tile[12345] - 1);
    return NULL;
}

static void test_threads_get_the_stack_the_kernels_need(void **state)
{
    (void)state;
    pthread_attr_t attr;
    size_t dflt = 0, got = 0;
    assert_int_equal(pthread_attr_init(&attr), 0);
    pthread_attr_getstacksize(&attr, &dflt);
    pthread_attr_destroy(&attr);
    pthread_t t;
    assert_int_equal(di_thread_create(&t, stack_size_of_self, &got), 0);
    assert_int_equal(pthread_join(t, NULL), 0);
    printf("default thread stack %zu bytes, the library's thread %zu\n", dflt, got);
    assert_true(got >= (size_t)DI_THREAD_STACK);
    if (dflt > (size_t)DI_THREAD_STACK) assert_true(got >= dflt);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_threads_get_the_stack_the_kernels_need),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
