/* di_bytes_map: the empty key, as the first key and among others (a safetensors
 * header naming a tensor "" reached the pool before it existed: fuzz input
 * tests/fuzz/corpus/safetensors/empty_name_first_key). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "util/hashmap.h"

static void test_empty_key_first(void **state)
{
    (void)state;
    di_bytes_map m;
    assert_int_equal(di_bytes_map_init(&m, 4), 0);
    assert_int_equal(di_bytes_map_get(&m, "", 0), -1);
    assert_int_equal(di_bytes_map_put(&m, "", 0, 7), 0);
    assert_int_equal(di_bytes_map_get(&m, "", 0), 7);
    assert_int_equal(di_bytes_map_put(&m, "", 0, 8), 1);
    assert_int_equal(di_bytes_map_get(&m, "", 0), 7);
    assert_int_equal(di_bytes_map_put(&m, "a", 1, 9), 0);
    assert_int_equal(di_bytes_map_get(&m, "a", 1), 9);
    assert_int_equal(di_bytes_map_get(&m, "", 0), 7);
    assert_int_equal(di_bytes_map_get(&m, "b", 1), -1);
    di_bytes_map_free(&m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_empty_key_first)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
