/* util/utf8 against utf8proc (tests/fuzz/utf8_oracle.h), exhaustively over all
 * short inputs, plus the cases streaming text depends on. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include "../fuzz/utf8_oracle.h"
#include "util/utf8.h"

static void assert_scan_equals_oracle(const uint8_t *s, size_t n)
{
    di_utf8_scan got = di_utf8_scan_bytes(s, n);
    di_utf8_scan want = oracle_scan(s, n);
    if (got.valid != want.valid || got.state != want.state) {
        print_error("input of %zu bytes %02x %02x %02x %02x: got (%zu, %d), oracle (%zu, %d)\n", n,
                    n > 0 ? s[0] : 0, n > 1 ? s[1] : 0, n > 2 ? s[2] : 0, n > 3 ? s[3] : 0,
                    got.valid, (int)got.state, want.valid, (int)want.state);
        fail();
    }
}

static void test_utf8_every_one_and_two_byte_input_matches_oracle(void **state)
{
    (void)state;
    uint8_t b[2];
    for (unsigned x = 0; x < 256; x++) {
        b[0] = (uint8_t)x;
        assert_scan_equals_oracle(b, 1);
    }
    for (unsigned x = 0; x < 65536; x++) {
        b[0] = (uint8_t)(x >> 8);
        b[1] = (uint8_t)x;
        assert_scan_equals_oracle(b, 2);
    }
}

static void test_utf8_every_three_byte_input_is_valid_exactly_when_utf8proc_says(void **state)
{
    (void)state;
    uint8_t b[3];
    for (unsigned x = 0; x < (1u << 24); x++) {
        b[0] = (uint8_t)(x >> 16);
        b[1] = (uint8_t)(x >> 8);
        b[2] = (uint8_t)x;
        int valid = di_utf8_scan_bytes(b, 3).state == DI_UTF8_VALID;
        int want = oracle_all_valid(b, 3);
        if (valid != want) {
            print_error("%02x %02x %02x: got valid=%d\n", b[0], b[1], b[2], valid);
            fail();
        }
    }
}

static void test_utf8_three_byte_inputs_with_multibyte_leads_match_oracle(void **state)
{
    (void)state;
    uint8_t b[3];
    for (unsigned lead = 0xC0; lead < 0x100; lead++)
        for (unsigned x = 0; x < 65536; x++) {
            b[0] = (uint8_t)lead;
            b[1] = (uint8_t)(x >> 8);
            b[2] = (uint8_t)x;
            if (b[1] >= 0x80 && b[1] <= 0xBF && (b[2] & 0x0F) != 0) continue; /* sample */
            assert_scan_equals_oracle(b, 3);
        }
}

static void test_utf8_four_byte_leads_match_oracle(void **state)
{
    (void)state;
    uint8_t b[4];
    for (unsigned lead = 0xF0; lead <= 0xF7; lead++)
        for (unsigned second = 0; second < 256; second++)
            for (unsigned third = 0x70; third <= 0xC0; third += 0x10)
                for (unsigned fourth = 0x70; fourth <= 0xC0; fourth += 0x08) {
                    b[0] = (uint8_t)lead;
                    b[1] = (uint8_t)second;
                    b[2] = (uint8_t)third;
                    b[3] = (uint8_t)fourth;
                    assert_scan_equals_oracle(b, 4);
                }
}

static void test_utf8_random_mixed_text_matches_oracle(void **state)
{
    (void)state;
    /* Mostly well-formed text with occasional damage, as streamed tokens look. */
    static const char *pieces[] = {"a",
                                   " ",
                                   "\xc3\xa9",
                                   "\xe4\xb8\xad",
                                   "\xf0\x9f\x98\x80",
                                   "\xe2\x80",
                                   "\xf0\x9f",
                                   "\xed\xa0\x80",
                                   "\xc0\xaf",
                                   "\xff",
                                   "\xef\xbd\x9c",
                                   "\n"};
    uint8_t buf[64];
    srand(12345);
    for (int iter = 0; iter < 3000; iter++) {
        size_t n = 0;
        while (n < sizeof buf - 4) {
            const char *p = pieces[rand() % (int)(sizeof pieces / sizeof pieces[0])];
            size_t len = strlen(p);
            memcpy(buf + n, p, len);
            n += len;
            if (rand() % 8 == 0) break;
        }
        for (size_t cut = 0; cut <= n; cut++) assert_scan_equals_oracle(buf, cut);
    }
}

static void test_utf8_incomplete_tail_is_held_only_while_completable(void **state)
{
    (void)state;
    /* "中" cut after each byte: incomplete, then valid. */
    const uint8_t zhong[] = {'x', 0xE4, 0xB8, 0xAD};
    di_utf8_scan s = di_utf8_scan_bytes(zhong, 2);
    assert_int_equal(s.state, DI_UTF8_INCOMPLETE);
    assert_int_equal(s.valid, 1);
    s = di_utf8_scan_bytes(zhong, 3);
    assert_int_equal(s.state, DI_UTF8_INCOMPLETE);
    assert_int_equal(s.valid, 1);
    s = di_utf8_scan_bytes(zhong, 4);
    assert_int_equal(s.state, DI_UTF8_VALID);
    assert_int_equal(s.valid, 4);
    /* A surrogate prefix can never complete: invalid at once, no stall. */
    const uint8_t surrogate[] = {'x', 0xED, 0xA0};
    s = di_utf8_scan_bytes(surrogate, 3);
    assert_int_equal(s.state, DI_UTF8_INVALID);
    assert_int_equal(s.valid, 1);
}

static void test_utf8_sequence_length(void **state)
{
    (void)state;
    assert_int_equal(di_utf8_sequence_length((const uint8_t *)"a", 1), 1);
    assert_int_equal(di_utf8_sequence_length((const uint8_t *)"\xc3\xa9!", 3), 2);
    assert_int_equal(di_utf8_sequence_length((const uint8_t *)"\xf0\x9f\x98\x80", 4), 4);
    assert_int_equal(di_utf8_sequence_length((const uint8_t *)"\xf0\x9f\x98", 3), 0);
    assert_int_equal(di_utf8_sequence_length((const uint8_t *)"\x80", 1), 0);
    assert_int_equal(di_utf8_sequence_length((const uint8_t *)"", 0), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_utf8_every_one_and_two_byte_input_matches_oracle),
        cmocka_unit_test(test_utf8_every_three_byte_input_is_valid_exactly_when_utf8proc_says),
        cmocka_unit_test(test_utf8_three_byte_inputs_with_multibyte_leads_match_oracle),
        cmocka_unit_test(test_utf8_four_byte_leads_match_oracle),
        cmocka_unit_test(test_utf8_random_mixed_text_matches_oracle),
        cmocka_unit_test(test_utf8_incomplete_tail_is_held_only_while_completable),
        cmocka_unit_test(test_utf8_sequence_length),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
