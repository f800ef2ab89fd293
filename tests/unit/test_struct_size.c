/* The struct_size convention: an older caller's struct gets defaults for the
 * fields it lacks; a newer caller's struct is accepted only while the fields this
 * library does not know are zero. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "util/struct_size.h"

/* Three releases of one config struct, as three headers would declare it: each
 * release ends on an 8-byte boundary with no trailing padding (deepinfer.h). */
typedef struct cfg_v1 {
    size_t struct_size;
    int32_t n_threads;
    int32_t reserved0;
} cfg_v1;

typedef struct cfg_v2 {
    size_t struct_size;
    int32_t n_threads;
    int32_t reserved0;
    double temperature; /* added in "v2" */
} cfg_v2;

typedef struct cfg_v3 {
    size_t struct_size;
    int32_t n_threads;
    int32_t reserved0;
    double temperature;
    uint64_t flags; /* added in "v3": unknown to a "v2" library */
} cfg_v3;

_Static_assert(sizeof(cfg_v1) == DI_STRUCT_SIZE_UNTIL(cfg_v1, reserved0), "v1 is padded");
_Static_assert(sizeof(cfg_v2) == DI_STRUCT_SIZE_UNTIL(cfg_v2, temperature), "v2 is padded");
_Static_assert(sizeof(cfg_v3) == DI_STRUCT_SIZE_UNTIL(cfg_v3, flags), "v3 is padded");

static cfg_v2 defaults_v2(void)
{
    cfg_v2 d;
    memset(&d, 0, sizeof d);
    d.struct_size = sizeof d;
    d.n_threads = 1;
    d.temperature = 0.7;
    return d;
}

static void test_struct_older_caller_gets_defaults_for_new_fields(void **state)
{
    (void)state;
    cfg_v1 old = {.struct_size = sizeof old, .n_threads = 8};
    cfg_v2 got = defaults_v2();
    const char *msg = "unchanged";
    assert_int_equal(di_struct_copy_in(&got, sizeof got, &old, sizeof(cfg_v1), &msg), DI_OK);
    assert_null(msg);
    assert_int_equal(got.struct_size, sizeof(cfg_v2));
    assert_int_equal(got.n_threads, 8);
    assert_true(got.temperature == 0.7);
}

static void test_struct_newer_caller_with_zero_unknown_fields_is_accepted(void **state)
{
    (void)state;
    cfg_v3 newer;
    memset(&newer, 0, sizeof newer);
    newer.struct_size = sizeof newer;
    newer.n_threads = 3;
    newer.temperature = 0.25;
    cfg_v2 got = defaults_v2();
    const char *msg;
    assert_int_equal(di_struct_copy_in(&got, sizeof got, &newer, sizeof(cfg_v1), &msg), DI_OK);
    assert_int_equal(got.n_threads, 3);
    assert_true(got.temperature == 0.25);
    assert_int_equal(got.struct_size, sizeof(cfg_v2));
}

static void test_struct_newer_caller_setting_unknown_field_is_rejected(void **state)
{
    (void)state;
    cfg_v3 newer;
    memset(&newer, 0, sizeof newer);
    newer.struct_size = sizeof newer;
    newer.flags = 1;
    cfg_v2 got = defaults_v2();
    const char *msg = NULL;
    assert_int_equal(di_struct_copy_in(&got, sizeof got, &newer, sizeof(cfg_v1), &msg),
                     DI_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(msg, "does not know"));
    assert_int_equal(got.n_threads, 1); /* untouched on error */
}

static void test_struct_size_too_small_or_null_is_rejected(void **state)
{
    (void)state;
    cfg_v2 got = defaults_v2();
    const char *msg = NULL;
    cfg_v1 uninitialised = {.struct_size = 0, .n_threads = 8};
    assert_int_equal(di_struct_copy_in(&got, sizeof got, &uninitialised, sizeof(cfg_v1), &msg),
                     DI_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(msg, "struct_size"));
    assert_int_equal(got.n_threads, 1);
    assert_int_equal(di_struct_copy_in(&got, sizeof got, NULL, sizeof(cfg_v1), &msg),
                     DI_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(msg, "NULL"));
}

/* A struct_size past DI_STRUCT_SIZE_MAX (a page, clone3's cap) is refused
 * before any byte past the library's struct is read: it is what an
 * uninitialised struct looks like. The page itself, zero past the fields, is
 * a newer release's struct and accepted. (The smallest failing input: a
 * breaker's di_request with struct_size = sizeof + 4096 in an exact malloc,
 * an ASan heap overflow in the zero scan.) */
static void test_struct_size_over_a_page_is_rejected_unread(void **state)
{
    (void)state;
    unsigned char *page = calloc(1, DI_STRUCT_SIZE_MAX);
    assert_non_null(page);
    size_t size = DI_STRUCT_SIZE_MAX;
    memcpy(page, &size, sizeof size);
    cfg_v2 got = defaults_v2();
    const char *msg = NULL;
    assert_int_equal(di_struct_copy_in(&got, sizeof got, page, sizeof(cfg_v1), &msg), DI_OK);
    cfg_v1 small;
    memset(&small, 0, sizeof small);
    size = DI_STRUCT_SIZE_MAX + 1; /* the struct is sizeof small: nothing past it may be read */
    memcpy(&small, &size, sizeof size);
    assert_int_equal(di_struct_copy_in(&got, sizeof got, &small, sizeof(cfg_v1), &msg),
                     DI_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(msg, "larger than any"));
    size = (size_t)-1;
    memcpy(&small, &size, sizeof size);
    assert_int_equal(di_struct_copy_in(&got, sizeof got, &small, sizeof(cfg_v1), &msg),
                     DI_ERR_INVALID_ARGUMENT);
    /* an initialiser told such a size writes the size alone, which the reader
     * refuses (memset over SIZE_MAX bytes before) */
    memset(&small, 0x5a, sizeof small);
    assert_int_equal(di_struct_init(&small, (size_t)-1), 0);
    memcpy(&size, &small, sizeof size);
    assert_true(size == (size_t)-1);
    assert_int_equal(((unsigned char *)&small)[sizeof size], 0x5a);
    assert_int_equal(di_struct_copy_in(&got, sizeof got, &small, sizeof(cfg_v1), &msg),
                     DI_ERR_INVALID_ARGUMENT);
    free(page);
}

static void test_struct_size_until_matches_each_release(void **state)
{
    (void)state;
    assert_int_equal(DI_STRUCT_SIZE_UNTIL(cfg_v3, reserved0), sizeof(cfg_v1));
    assert_int_equal(DI_STRUCT_SIZE_UNTIL(cfg_v3, temperature), sizeof(cfg_v2));
    assert_int_equal(DI_STRUCT_SIZE_UNTIL(cfg_v3, flags), sizeof(cfg_v3));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_struct_older_caller_gets_defaults_for_new_fields),
        cmocka_unit_test(test_struct_newer_caller_with_zero_unknown_fields_is_accepted),
        cmocka_unit_test(test_struct_newer_caller_setting_unknown_field_is_rejected),
        cmocka_unit_test(test_struct_size_too_small_or_null_is_rejected),
        cmocka_unit_test(test_struct_size_over_a_page_is_rejected_unread),
        cmocka_unit_test(test_struct_size_until_matches_each_release),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
