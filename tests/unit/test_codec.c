/* The codec API's error paths and contracts that the oracle fixtures do not reach:
 * NULL and unknown arguments, oversized bodies, prompts without a tokenizer, the
 * context-length check, and protocol/encoding combinations. The rendering itself
 * is checked against deepseek-recipe by tests/parity/codec_parity.py. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "deepinfer/deepinfer.h"

static const char chat[] = "{\"model\":\"DeepSeek-V4-Pro\",\"messages\":[{\"role\":\"user\","
                           "\"content\":\"Hi\"}],\"stop\":[\"END\"],\"reasoning_effort\":\"none\"}";

static void test_codec_rejects_bad_arguments(void **state)
{
    (void)state;
    di_codec *codec = NULL;
    di_error *err = NULL;
    assert_int_equal(di_codec_create(NULL, (di_encoding)99, &codec, &err), DI_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(di_error_message(err), "encoding"));
    di_error_free(err);
    err = NULL;
    assert_int_equal(di_codec_create(NULL, DI_ENCODING_DSV4, NULL, NULL), DI_ERR_INVALID_ARGUMENT);
    assert_int_equal(di_codec_create(NULL, DI_ENCODING_DSV4, &codec, NULL), DI_OK);
    di_prompt *p = NULL;
    assert_int_equal(di_codec_render(codec, (di_protocol)42, chat, strlen(chat), &p, &err),
                     DI_ERR_INVALID_ARGUMENT);
    di_error_free(err);
    err = NULL;
    assert_int_equal(di_codec_render(codec, DI_PROTOCOL_CHAT, NULL, 0, &p, NULL),
                     DI_ERR_INVALID_ARGUMENT);
    /* the size is checked before a byte is read */
    assert_int_equal(
        di_codec_render(codec, DI_PROTOCOL_CHAT, chat, DI_CODEC_MAX_REQUEST_BYTES + 1, &p, &err),
        DI_ERR_INVALID_REQUEST);
    assert_non_null(strstr(di_error_message(err), "MiB"));
    assert_null(p);
    di_error_free(err);
    di_codec_free(codec);
}

static void test_codec_prompt_without_tokenizer_has_text_and_settings(void **state)
{
    (void)state;
    di_codec *codec = NULL;
    assert_int_equal(di_codec_create(NULL, DI_ENCODING_DSV4, &codec, NULL), DI_OK);
    di_prompt *p = NULL;
    assert_int_equal(di_codec_render(codec, DI_PROTOCOL_CHAT, chat, strlen(chat), &p, NULL), DI_OK);
    size_t len;
    assert_string_equal(di_prompt_text(p, &len),
                        "<\xef\xbd\x9c"
                        "begin\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>"
                        "<\xef\xbd\x9cUser\xef\xbd\x9c>Hi<\xef\xbd\x9c"
                        "Assistant\xef\xbd\x9c></think>");
    const int32_t *ids;
    size_t n;
    di_error *err = NULL;
    assert_int_equal(di_prompt_tokens(p, &ids, &n, &err), DI_ERR_INVALID_STATE);
    assert_non_null(strstr(di_error_message(err), "tokenizer"));
    di_error_free(err);
    assert_int_equal(di_prompt_thinking(p), 0);
    assert_int_equal(di_prompt_stop_count(p), 1);
    assert_string_equal(di_prompt_stop(p, 0), "END");
    assert_null(di_prompt_stop(p, 1));
    assert_int_equal(di_prompt_image_count(p), 0);
    /* thinking off, no max_tokens: the reference's 8192, lowered to the room left */
    uint32_t max = 0;
    assert_int_equal(di_prompt_max_tokens(p, 100, 1000, &max, NULL), DI_OK);
    assert_int_equal(max, 900);
    assert_int_equal(di_prompt_max_tokens(p, 100, 100000, &max, NULL), DI_OK);
    assert_int_equal(max, 8192);
    err = NULL;
    assert_int_equal(di_prompt_max_tokens(p, 2000, 1000, &max, &err), DI_ERR_CONTEXT_LENGTH);
    assert_non_null(strstr(di_error_message(err), "1000"));
    di_error_free(err);
    di_prompt_free(p);
    di_codec_free(codec);
}

static void test_codec_templates_take_chat_only(void **state)
{
    (void)state;
    di_codec *codec = NULL;
    assert_int_equal(di_codec_create(NULL, DI_ENCODING_R1, &codec, NULL), DI_OK);
    di_prompt *p = NULL;
    di_error *err = NULL;
    assert_int_equal(di_codec_render(codec, DI_PROTOCOL_MESSAGES, chat, strlen(chat), &p, &err),
                     DI_ERR_UNSUPPORTED);
    di_error_free(err);
    assert_int_equal(di_codec_render(codec, DI_PROTOCOL_CHAT, chat, strlen(chat), &p, NULL), DI_OK);
    assert_non_null(strstr(di_prompt_text(p, NULL), "Hi"));
    di_prompt_free(p);
    di_codec_free(codec);
}

/* A Messages body's tool with a "type" is a server tool, refused with the
 * reference's message (tests/fixtures/codec/messages.json,
 * err-server-tool-bash); a Chat Completions tool sent as a Messages one is told
 * apart, after that message. */
static void expect_messages_error(const char *body, const char *want)
{
    di_codec *codec = NULL;
    assert_int_equal(di_codec_create(NULL, DI_ENCODING_DSV4, &codec, NULL), DI_OK);
    di_prompt *p = NULL;
    di_error *err = NULL;
    assert_int_equal(di_codec_render(codec, DI_PROTOCOL_MESSAGES, body, strlen(body), &p, &err),
                     DI_ERR_INVALID_REQUEST);
    assert_null(p);
    assert_string_equal(di_error_message(err), want);
    di_error_free(err);
    di_codec_free(codec);
}

static void test_codec_messages_names_a_chat_tool(void **state)
{
    (void)state;
    expect_messages_error(
        "{\"model\":\"DeepSeek-V4-Pro\",\"max_tokens\":5,\"messages\":[{\"role\":\"user\","
        "\"content\":\"hi\"}],\"tools\":[{\"type\":\"function\",\"function\":{\"name\":"
        "\"f\",\"parameters\":{\"type\":\"object\"}}}]}",
        "tools[0]: server tools are not supported (this is a Chat Completions tool, {\"type\": "
        "\"function\", \"function\": {...}}: a Messages tool is {\"name\", \"description\", "
        "\"input_schema\"})");
    expect_messages_error(
        "{\"model\":\"DeepSeek-V4-Pro\",\"max_tokens\":100,\"messages\":[{\"role\":\"user\","
        "\"content\":\"hi\"}],\"tools\":[{\"type\":\"bash_20250124\",\"name\":\"bash\"}]}",
        "tools[0]: server tools are not supported");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_codec_rejects_bad_arguments),
        cmocka_unit_test(test_codec_prompt_without_tokenizer_has_text_and_settings),
        cmocka_unit_test(test_codec_templates_take_chat_only),
        cmocka_unit_test(test_codec_messages_names_a_chat_tool),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
