/* di_error_set / di_error_setf: the status and message a caller reads back. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "util/error.h"

static void test_setf_formats_the_message(void **state)
{
    (void)state;
    di_error *err = NULL;
    assert_int_equal(di_error_setf(&err, DI_ERR_MODEL_FORMAT, "%s: %d of %lld", "w.bin", 3, 7LL),
                     DI_ERR_MODEL_FORMAT);
    assert_non_null(err);
    assert_int_equal(di_error_status(err), DI_ERR_MODEL_FORMAT);
    assert_string_equal(di_error_message(err), "w.bin: 3 of 7");
    di_error_free(err);
}

static void test_setf_keeps_a_long_message_whole(void **state)
{
    (void)state;
    char name[3000];
    memset(name, 'x', sizeof name - 1);
    name[sizeof name - 1] = '\0';
    di_error *err = NULL;
    di_error_setf(&err, DI_ERR_UNSUPPORTED, "%s: unsupported", name);
    assert_int_equal(strlen(di_error_message(err)), sizeof name - 1 + strlen(": unsupported"));
    assert_memory_equal(di_error_message(err), name, sizeof name - 1);
    di_error_free(err);
}

/* A name read from a corrupt file or a request's bytes may hold a newline, a
 * terminal escape (ESC, or C1's CSI), DEL or bytes that are not UTF-8: the
 * message writes each \xNN, one line of valid UTF-8; well-formed multibyte
 * characters (é, U+00A0, an emoji) stay as they are. */
static void test_messages_escape_control_bytes_and_ill_formed_utf8(void **state)
{
    (void)state;
    di_error *err = NULL;
    di_error_setf(&err, DI_ERR_MODEL_FORMAT, "tensor '%s' has type %d",
                  "blk.0\n\x1b[31mq\x7f\xc2\x9b\xc3\xa9\xc2\xa0\xff\xe0\x80\xf0\x9f\x98\x80\xc3",
                  6);
    assert_string_equal(di_error_message(err),
                        "tensor 'blk.0\\x0A\\x1B[31mq\\x7F\\xC2\\x9B\xc3\xa9\xc2\xa0\\xFF\\xE0\\x80"
                        "\xf0\x9f\x98\x80\\xC3' has type 6");
    di_error_free(err);
    err = NULL;
    di_error_set(&err, DI_ERR_IO, "a\tb\r\n");
    assert_string_equal(di_error_message(err), "a\\x09b\\x0D\\x0A");
    di_error_free(err);
}

/* di_escape_dup (di_event_message's text): the same escapes; an escaped
 * text comes back unchanged (a di_error's message passed on is not escaped
 * twice); NULL stays NULL. */
static void test_escape_dup(void **state)
{
    (void)state;
    const char *raw = "x\n\x1b[2J\xc2\x85\xc3\xa9\xfe";
    char *once = di_escape_dup(raw);
    assert_non_null(once);
    assert_string_equal(once, "x\\x0A\\x1B[2J\\xC2\\x85\xc3\xa9\\xFE");
    char *twice = di_escape_dup(once);
    assert_string_equal(twice, once);
    free(once);
    free(twice);
    assert_null(di_escape_dup(NULL));
    char *empty = di_escape_dup("");
    assert_string_equal(empty, "");
    free(empty);
}

static void test_setf_without_err_returns_the_status(void **state)
{
    (void)state;
    assert_int_equal(di_error_setf(NULL, DI_ERR_BACKEND, "%d", 1), DI_ERR_BACKEND);
    assert_int_equal(di_error_set(NULL, DI_ERR_BACKEND, "x"), DI_ERR_BACKEND);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_setf_formats_the_message),
        cmocka_unit_test(test_setf_keeps_a_long_message_whole),
        cmocka_unit_test(test_messages_escape_control_bytes_and_ill_formed_utf8),
        cmocka_unit_test(test_escape_dup),
        cmocka_unit_test(test_setf_without_err_returns_the_status),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
