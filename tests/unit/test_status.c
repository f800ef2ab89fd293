/* di_status_string names every status, distinctly, and survives unknown values. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "deepinfer/deepinfer.h"

/* The last status this release defines; a new status is appended after it. */
#define LAST_STATUS DI_ERR_INTERNAL

static void test_status_ok_is_zero_and_errors_are_positive(void **state)
{
    (void)state;
    assert_int_equal(DI_OK, 0);
    for (int s = 1; s <= (int)LAST_STATUS; s++) assert_true(s > DI_OK);
}

static void test_status_strings_are_distinct_and_known(void **state)
{
    (void)state;
    for (int a = 0; a <= (int)LAST_STATUS; a++) {
        const char *sa = di_status_string((di_status)a);
        assert_non_null(sa);
        assert_true(strlen(sa) > 0);
        assert_string_not_equal(sa, "unknown status");
        for (int b = 0; b < a; b++) assert_string_not_equal(sa, di_status_string((di_status)b));
    }
}

static void test_status_unknown_values_have_a_string(void **state)
{
    (void)state;
    const int unknown[] = {-1, (int)LAST_STATUS + 1, 1000, -2147483647 - 1, 2147483647};
    for (size_t i = 0; i < sizeof unknown / sizeof unknown[0]; i++)
        assert_string_equal(di_status_string((di_status)unknown[i]), "unknown status");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_status_ok_is_zero_and_errors_are_positive),
        cmocka_unit_test(test_status_strings_are_distinct_and_known),
        cmocka_unit_test(test_status_unknown_values_have_a_string),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
