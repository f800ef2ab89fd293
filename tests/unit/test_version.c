/* The running library reports the version its header declares. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <cmocka.h>

#include "deepinfer/deepinfer.h"

static void test_version_number_matches_header(void **state)
{
    (void)state;
    assert_int_equal(di_version(), DI_VERSION_NUMBER);
    assert_int_equal(DI_VERSION_NUMBER,
                     DI_VERSION_MAJOR * 10000 + DI_VERSION_MINOR * 100 + DI_VERSION_PATCH);
}

static void test_version_string_spells_the_three_numbers(void **state)
{
    (void)state;
    char expect[32];
    snprintf(expect, sizeof expect, "%d.%d.%d", DI_VERSION_MAJOR, DI_VERSION_MINOR,
             DI_VERSION_PATCH);
    assert_string_equal(di_version_string(), expect);
    assert_string_equal(DI_VERSION_STRING, expect);
}

static void test_version_components_fit_their_digits(void **state)
{
    (void)state;
    /* The integer encoding is only ordered while MINOR and PATCH stay below 100. */
    assert_in_range(DI_VERSION_MINOR, 0, 99);
    assert_in_range(DI_VERSION_PATCH, 0, 99);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_version_number_matches_header),
        cmocka_unit_test(test_version_string_spells_the_three_numbers),
        cmocka_unit_test(test_version_components_fit_their_digits),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
