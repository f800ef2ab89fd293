/* The chatml encoding: rendering (errors, tools, tool_choice, the default system
 * prompt found in a chat template) and the Hermes tool calls parsed back from
 * the output. The oracle for the calls is the encoding itself: a conversation's
 * assistant turn with calls, as rendered, is parsed back at every split point
 * (the prompt side is compared with jinja2 in tests/parity/template_parity.py). */
#define _POSIX_C_SOURCE 200809L
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "deepinfer/deepinfer.h"
#include "recipe/encoding.h"

#define TOOLS                                                                                      \
    "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":{"    \
    "\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"}}}}},{\"type\":"            \
    "\"function\",\"function\":{\"name\":\"get_time\"}}]"

static di_codec *chatml(void)
{
    di_codec *c = NULL;
    assert_int_equal(di_codec_create(NULL, DI_ENCODING_CHATML, &c, NULL), DI_OK);
    return c;
}

static di_prompt *render_ok(di_codec *c, const char *body)
{
    di_prompt *p = NULL;
    di_error *err = NULL;
    if (di_codec_render(c, DI_PROTOCOL_CHAT, body, strlen(body), &p, &err) != DI_OK)
        fail_msg("%s", di_error_message(err));
    return p;
}

static void expect_render_error(di_codec *c, const char *body, const char *needle)
{
    di_prompt *p = NULL;
    di_error *err = NULL;
    assert_int_equal(di_codec_render(c, DI_PROTOCOL_CHAT, body, strlen(body), &p, &err),
                     DI_ERR_INVALID_REQUEST);
    assert_null(p);
    if (!strstr(di_error_message(err), needle))
        fail_msg("'%s' does not name '%s'", di_error_message(err), needle);
    di_error_free(err);
}

static void blank_call_ids(char *r)
{
    for (char *q = strstr(r, "call_"); q; q = strstr(q + 1, "call_"))
        for (char *c = q + 8; *c && *c != '"'; c++) *c = 'X';
}

/* The complete Chat response to `out`, pushed in two parts cut at `cut`. */
static char *respond(const di_prompt *p, const char *out, size_t len, size_t cut, di_finish fin)
{
    di_stream *s = NULL;
    assert_int_equal(di_stream_create(p, NULL, NULL, &s, NULL), DI_OK);
    assert_int_equal(di_stream_push_text(s, out, cut, 1, NULL), DI_OK);
    assert_int_equal(di_stream_push_text(s, out + cut, len - cut, 1, NULL), DI_OK);
    assert_int_equal(di_stream_finish(s, fin, NULL), DI_OK);
    char *r = strdup(di_stream_response_json(s, NULL));
    blank_call_ids(r);
    di_stream_free(s);
    return r;
}

static void test_rendered_calls_parse_back_at_every_split(void **state)
{
    (void)state;
    const char *body =
        "{\"model\":\"m\"," TOOLS ",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"},"
        "{\"role\":\"assistant\",\"content\":\"Let me check.\",\"tool_calls\":[{\"id\":\"a\","
        "\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"arguments\":\"{"
        "\\\"city\\\":"
        " \\\"Pa\\\\\\\"ris 🎉\\\"}\"}},{\"id\":\"b\",\"type\":\"function\",\"function\":{\"name\":"
        "\"get_time\",\"arguments\":\"{}\"}}]},{\"role\":\"user\",\"content\":\"again\"}]}";
    di_codec *c = chatml();
    di_prompt *p = render_ok(c, body);
    const char *text = di_prompt_text(p, NULL);
    /* the assistant turn, as rendered (the "\n" before the first call may stay
     * in the content or not, depending on the pushes, as with DSML) */
    const char *from = strstr(text, "<|im_start|>assistant\n");
    assert_non_null(from);
    from += strlen("<|im_start|>assistant\n");
    const char *to = strstr(from, "<|im_end|>");
    assert_non_null(to);
    assert_non_null(strstr(text, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
                                 "{\"city\": \"Pa\\\"ris 🎉\"}}\n</tool_call>\n<tool_call>"));
    size_t len = (size_t)(to - from);
    for (size_t cut = 0; cut <= len; cut++) {
        if (((unsigned char)from[cut] & 0xC0) == 0x80) continue;
        char *r = respond(p, from, len, cut, DI_FINISH_STOP);
        if (!strstr(r, "\"name\":\"get_weather\",\"arguments\":\"{\\\"city\\\": \\\"Pa\\\\\\\"ris "
                       "🎉\\\"}\"") ||
            !strstr(r, "\"name\":\"get_time\",\"arguments\":\"{}\"") ||
            !strstr(r, "\"finish_reason\":\"tool_calls\"") ||
            !strstr(r, "\"content\":\"Let me check."))
            fail_msg("cut %zu: %s", cut, r);
        free(r);
    }
    di_prompt_free(p);
    di_codec_free(c);
}

static void test_what_is_not_a_call_stays_text(void **state)
{
    (void)state;
    di_codec *c = chatml();
    const char *with_tools =
        "{\"model\":\"m\"," TOOLS ",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}";
    const char *without = "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}";
    di_prompt *p = render_ok(c, with_tools), *q = render_ok(c, without);
    /* a block that is not {"name": …, "arguments": …} is answer text, tags and all */
    const char *bad = "See <tool_call>\nnot json\n</tool_call>";
    char *r = respond(p, bad, strlen(bad), 7, DI_FINISH_STOP);
    assert_non_null(strstr(r, "\"content\":\"See <tool_call>\\nnot json\\n</tool_call>\""));
    assert_null(strstr(r, "tool_calls\":["));
    free(r);
    /* an unclosed block at the end: a call when its JSON is whole, else text */
    const char *open_ok = "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}";
    r = respond(p, open_ok, strlen(open_ok), 3, DI_FINISH_LENGTH);
    assert_non_null(strstr(r, "\"name\":\"get_time\",\"arguments\":\"{}\""));
    free(r);
    /* after a call, text that is no other call ends the output (the stream is
     * finished in that push: the engine stops generating); whitespace and a
     * second call do not */
    const char *chatter =
        "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>\n"
        "<tool_call>{\"name\": \"get_weather\", \"arguments\": {}}</tool_call>\n\n"
        "And then I will";
    for (size_t cut = 0; cut <= strlen(chatter); cut += 7) {
        di_stream *cs = NULL;
        assert_int_equal(di_stream_create(p, NULL, NULL, &cs, NULL), DI_OK);
        assert_int_equal(di_stream_push_text(cs, chatter, cut, 1, NULL), DI_OK);
        if (!di_stream_finished(cs)) /* the first part may already end it */
            assert_int_equal(di_stream_push_text(cs, chatter + cut, strlen(chatter) - cut, 1, NULL),
                             DI_OK);
        assert_true(di_stream_finished(cs));
        r = strdup(di_stream_response_json(cs, NULL));
        if (!strstr(r, "\"name\":\"get_time\"") || !strstr(r, "\"name\":\"get_weather\"") ||
            strstr(r, "And then") || !strstr(r, "\"finish_reason\":\"tool_calls\""))
            fail_msg("cut %zu: %s", cut, r);
        free(r);
        di_stream_free(cs);
    }
    /* after a block that was no call, the answer goes on */
    const char *after_bad = "<tool_call>oops</tool_call> Sorry, it is sunny.";
    r = respond(p, after_bad, strlen(after_bad), 12, DI_FINISH_STOP);
    assert_non_null(strstr(r, "\"content\":\"<tool_call>oops</tool_call> Sorry, it is sunny.\""));
    free(r);
    /* the output cut inside the closing tag: the tag's start is not the call's */
    static const char *const cut_tags[] = {"\n<", "\n</tool_", "\n</tool_call"};
    for (size_t k = 0; k < 3; k++) {
        char out[128];
        snprintf(out, sizeof out, "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}%s",
                 cut_tags[k]);
        r = respond(p, out, strlen(out), 2, DI_FINISH_LENGTH);
        if (!strstr(r, "\"name\":\"get_time\",\"arguments\":\"{}\""))
            fail_msg("cut at %s: %s", cut_tags[k], r);
        free(r);
    }
    /* a block that never closes (the breaker's 1.6 MB took 209 s when every push
     * searched all of it): pushed 4 bytes at a time, it ends as the call cut short */
    size_t big = 400000;
    char *huge = malloc(big + 64);
    assert_non_null(huge);
    int head = snprintf(huge, 64, "<tool_call>\n{\"name\": \"a\", \"arguments\": {\"x\": \"");
    memset(huge + head, 'y', big);
    size_t len = (size_t)head + big;
    di_stream *st = NULL;
    assert_int_equal(di_stream_create(p, NULL, NULL, &st, NULL), DI_OK);
    for (size_t i = 0; i < len; i += 4)
        assert_int_equal(di_stream_push_text(st, huge + i, len - i < 4 ? len - i : 4, 1, NULL),
                         DI_OK);
    assert_int_equal(di_stream_finish(st, DI_FINISH_LENGTH, NULL), DI_OK);
    size_t rlen;
    const char *resp = di_stream_response_json(st, &rlen);
    assert_true(rlen > big);
    assert_non_null(strstr(resp, "\"name\":\"a\",\"arguments\":\"{\\\"x\\\": \\\"yyyy"));
    assert_null(strstr(resp, "<tool_call>"));
    di_stream_free(st);
    free(huge);
    /* without tools, <tool_call> is plain text */
    const char *call = "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>";
    r = respond(q, call, strlen(call), 4, DI_FINISH_STOP);
    assert_non_null(strstr(r, "\"content\":\"<tool_call>"));
    assert_non_null(strstr(r, "\"finish_reason\":\"stop\""));
    free(r);
    /* arguments given as a string holding JSON are taken as they are */
    const char *str_args =
        "<tool_call>{\"name\": \"get_weather\", \"arguments\": \"{\\\"city\\\":\\\"Oslo\\\"}\"}"
        "</tool_call>";
    r = respond(p, str_args, strlen(str_args), 0, DI_FINISH_STOP);
    assert_non_null(strstr(r, "\"arguments\":\"{\\\"city\\\":\\\"Oslo\\\"}\""));
    free(r);
    di_prompt_free(p);
    di_prompt_free(q);
    di_codec_free(c);
}

/* The Chat response's message and finish_reason (call ids blanked): from
 * `"message":` to `"usage"`. */
static char *message_of(const di_prompt *p, const char *out, di_finish fin)
{
    di_stream *s = NULL;
    assert_int_equal(di_stream_create(p, NULL, NULL, &s, NULL), DI_OK);
    assert_int_equal(di_stream_push_text(s, out, strlen(out), 1, NULL), DI_OK);
    assert_int_equal(di_stream_finish(s, fin, NULL), DI_OK);
    char *r = strdup(di_stream_response_json(s, NULL));
    di_stream_free(s);
    blank_call_ids(r);
    char *from = strstr(r, "\"message\":"), *to = from ? strstr(from, "\"usage\"") : NULL;
    assert_non_null(to);
    *to = 0;
    memmove(r, from, strlen(from) + 1);
    return r;
}

/* A Hermes call the output ends inside (max_tokens) comes back as the reference
 * returns a DSML call cut at the same place: a call with its name and the
 * arguments written so far once the name is whole, nothing before that, no
 * markup and no prompt text in content. The oracle is the V4 encoding's
 * response to the DSML output (tests/parity/stream_parity.py holds it to
 * deepseek-recipe's), compared message for message. */
static void test_a_cut_call_is_returned_as_the_reference_returns_a_cut_dsml_call(void **state)
{
    (void)state;
    di_codec *c = chatml(), *v4 = NULL;
    assert_int_equal(di_codec_create(NULL, DI_ENCODING_DSV4, &v4, NULL), DI_OK);
#define BODY(extra)                                                                                \
    "{\"model\":\"DeepSeek-V4-Pro\",\"reasoning_effort\":\"none\"," TOOLS extra                    \
    ",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}"
#define DSML_INVOKE "<｜DSML｜invoke name=\"get_weather\">\n"
#define DSML_CITY   "<｜DSML｜parameter name=\"city\" string=\"true\">Par"
    static const char *const cases[][4] = {
        /* body, Hermes output, the V4 body, the DSML output */
        {BODY(""), "a<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Par",
         BODY(""), "a\n\n<｜DSML｜tool_calls>\n" DSML_INVOKE DSML_CITY},
        {BODY(""), "a<tool_call>\n{\"name\": \"get_weather\", \"argu", BODY(""),
         "a\n\n<｜DSML｜tool_calls>\n" DSML_INVOKE},
        {BODY(""), "a<tool_call>\n{\"name\": \"get_w", BODY(""),
         "a\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"get_w"},
        {BODY(""), "a<tool_call>\nnot js", BODY(""), "a\n\n<｜DSML｜tool_calls>\nnot js"},
        /* the prompt opened the block */
        {BODY(",\"tool_choice\":\"required\""),
         "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Par",
         BODY(",\"tool_choice\":\"required\""), DSML_INVOKE DSML_CITY},
        {BODY(",\"tool_choice\":\"required\""), "{\"name\": \"get_w",
         BODY(",\"tool_choice\":\"required\""), "<｜DSML｜invoke name=\"get_w"},
        /* a named function: the prompt wrote the name, the output is the arguments */
        {BODY(",\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"get_weather\"}}"),
         "{\"city\": \"Par", BODY(",\"tool_choice\":\"required\""), DSML_INVOKE DSML_CITY},
        {BODY(",\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"get_weather\"}}"),
         "", BODY(",\"tool_choice\":\"required\""), DSML_INVOKE},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        di_prompt *hp = render_ok(c, cases[k][0]), *dp = NULL;
        assert_int_equal(
            di_codec_render(v4, DI_PROTOCOL_CHAT, cases[k][2], strlen(cases[k][2]), &dp, NULL),
            DI_OK);
        char *got = message_of(hp, cases[k][1], DI_FINISH_LENGTH);
        char *want = message_of(dp, cases[k][3], DI_FINISH_LENGTH);
        if (strcmp(got, want) != 0) fail_msg("case %zu:\n got %s\nwant %s", k, got, want);
        /* the cases with a whole name are calls; none shows markup */
        assert_int_equal(strstr(want, "\"tool_calls\":[") != NULL, k != 2 && k != 3 && k != 5);
        assert_null(strstr(got, "DSML"));
        assert_null(strstr(got, "tool_call>"));
        free(got);
        free(want);
        di_prompt_free(hp);
        di_prompt_free(dp);
    }
    /* a block the prompt opened for a named function that closes without being
     * whole JSON: the call, never the prompt's text as content */
    di_prompt *hp = render_ok(
        c,
        BODY(",\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"get_weather\"}}"));
    static const char *const closed[][2] = {
        {"{\"city\": \"Rome\"}\n</tool_call>", "\"arguments\":\"{\\\"city\\\": \\\"Rome\\\"}\""},
        {"{\"city\": Rome}}\n</tool_call>", "\"arguments\":\"{\\\"city\\\": Rome}}\""},
    };
    for (size_t k = 0; k < 2; k++) {
        char *r = message_of(hp, closed[k][0], DI_FINISH_STOP);
        if (!strstr(r, "\"name\":\"get_weather\"") || !strstr(r, closed[k][1]) ||
            strstr(r, "\"content\":\"\\n{") || strstr(r, "tool_call>"))
            fail_msg("closed %zu: %s", k, r);
        free(r);
    }
    di_prompt_free(hp);
#undef BODY
#undef DSML_INVOKE
#undef DSML_CITY
    di_codec_free(v4);
    di_codec_free(c);
}

static void test_tool_choice_opens_the_call(void **state)
{
    (void)state;
    di_codec *c = chatml();
    const char *required = "{\"model\":\"m\"," TOOLS ",\"tool_choice\":\"required\",\"messages\":"
                           "[{\"role\":\"user\",\"content\":\"hi\"}]}";
    di_prompt *p = render_ok(c, required);
    size_t n;
    const char *text = di_prompt_text(p, &n);
    const char *tail = "<|im_start|>assistant\n<tool_call>\n";
    assert_true(n >= strlen(tail));
    assert_string_equal(text + n - strlen(tail), tail);
    /* the output starts inside the block */
    const char *out = "{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>";
    char *r = respond(p, out, strlen(out), 9, DI_FINISH_STOP);
    assert_non_null(strstr(r, "\"name\":\"get_time\""));
    free(r);
    di_prompt_free(p);
    /* a named function: the prompt writes its name, the output is the arguments */
    const char *named = "{\"model\":\"m\"," TOOLS ",\"tool_choice\":{\"type\":\"function\","
                        "\"function\":{\"name\":\"get_weather\"}},\"messages\":[{\"role\":"
                        "\"user\",\"content\":\"hi\"}]}";
    p = render_ok(c, named);
    text = di_prompt_text(p, &n);
    tail = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": ";
    assert_string_equal(text + n - strlen(tail), tail);
    out = "{\"city\": \"Rome\"}}\n</tool_call>";
    for (size_t cut = 0; cut <= strlen(out); cut++) {
        r = respond(p, out, strlen(out), cut, DI_FINISH_STOP);
        assert_non_null(strstr(r, "\"name\":\"get_weather\",\"arguments\":\"{\\\"city\\\": "
                                  "\\\"Rome\\\"}\""));
        free(r);
    }
    di_prompt_free(p);
    /* none: the tools are not shown and nothing is parsed */
    const char *none = "{\"model\":\"m\"," TOOLS ",\"tool_choice\":\"none\",\"messages\":"
                       "[{\"role\":\"user\",\"content\":\"hi\"}]}";
    p = render_ok(c, none);
    assert_null(strstr(di_prompt_text(p, NULL), "<tools>"));
    di_prompt_free(p);
    di_codec_free(c);
}

static void test_tool_results_share_a_user_turn(void **state)
{
    (void)state;
    di_codec *c = chatml();
    assert_int_equal(di_codec_set_default_system(c, "Be kind.", NULL), DI_OK);
    const char *body =
        "{\"model\":\"m\"," TOOLS ",\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":"
        "\"text\",\"text\":\"a\"},{\"type\":\"text\",\"text\":\"b\"}]},{\"role\":\"assistant\","
        "\"content\":null,\"tool_calls\":[{\"id\":\"x\",\"type\":\"function\",\"function\":{"
        "\"name\":\"get_time\",\"arguments\":\"not json\"}}]},{\"role\":\"tool\",\"tool_call_id\":"
        "\"x\",\"content\":\"1\"},{\"role\":\"tool\",\"tool_call_id\":\"y\",\"content\":\"2\"}]}";
    di_prompt *p = render_ok(c, body);
    const char *text = di_prompt_text(p, NULL);
    /* the default system prompt carries the tools */
    assert_true(strncmp(text, "<|im_start|>system\nBe kind.\n\nYou can call", 41) == 0);
    assert_non_null(strstr(text, "<|im_start|>user\nab<|im_end|>\n"));
    /* arguments that are not JSON are written as a JSON string */
    assert_non_null(
        strstr(text, "<tool_call>\n{\"name\": \"get_time\", \"arguments\": \"not json\"}\n"));
    assert_non_null(strstr(text, "<|im_start|>user\n<tool_response>\n1\n</tool_response>\n"
                                 "<tool_response>\n2\n</tool_response><|im_end|>\n"
                                 "<|im_start|>assistant\n"));
    di_prompt_free(p);
    /* another encoding has no default system prompt; bad UTF-8 is refused */
    di_codec *v4 = NULL;
    assert_int_equal(di_codec_create(NULL, DI_ENCODING_DSV4, &v4, NULL), DI_OK);
    assert_int_equal(di_codec_set_default_system(v4, "x", NULL), DI_ERR_INVALID_ARGUMENT);
    assert_int_equal(di_codec_set_default_system(NULL, "x", NULL), DI_ERR_INVALID_ARGUMENT);
    assert_int_equal(di_codec_set_default_system(c, "bad \xff", NULL), DI_ERR_INVALID_UTF8);
    di_codec_free(v4);
    /* NULL removes it */
    assert_int_equal(di_codec_set_default_system(c, NULL, NULL), DI_OK);
    p = render_ok(c, "{\"messages\":[{\"role\":\"user\",\"content\":\"q\"}]}");
    assert_string_equal(di_prompt_text(p, NULL),
                        "<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\n");
    di_prompt_free(p);
    di_codec_free(c);
}

static void test_render_errors_name_the_field(void **state)
{
    (void)state;
    di_codec *c = chatml();
    const char *u = "[{\"role\":\"user\",\"content\":\"hi\"}]";
    char body[1024];
    expect_render_error(c, "{\"messages\":[]}", "messages");
    expect_render_error(c, "{\"messages\":3}", "messages");
    expect_render_error(c, "{\"messages\":[{\"content\":\"x\"}]}", "messages[0].role");
    expect_render_error(c, "{\"messages\":[{\"role\":\"wizard\",\"content\":\"x\"}]}",
                        "unknown role \"wizard\"");
    expect_render_error(c, "{\"messages\":[{\"role\":\"user\"}]}", "messages[0].content: missing");
    expect_render_error(c, "{\"messages\":[{\"role\":\"user\",\"content\":5}]}",
                        "messages[0].content");
    expect_render_error(c,
                        "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\","
                        "\"image_url\":{\"url\":\"http://x\"}}]}]}",
                        "messages[0].content[0]");
    snprintf(body, sizeof body, "{\"tools\":{},\"messages\":%s}", u);
    expect_render_error(c, body, "tools");
    snprintf(body, sizeof body, "{\"tools\":[{\"type\":\"function\"}],\"messages\":%s}", u);
    expect_render_error(c, body, "tools[0]");
    snprintf(body, sizeof body, "{" TOOLS ",\"tool_choice\":\"sometimes\",\"messages\":%s}", u);
    expect_render_error(c, body, "tool_choice");
    snprintf(body, sizeof body, "{\"tool_choice\":\"required\",\"messages\":%s}", u);
    expect_render_error(c, body, "no tools");
    /* a named function must be a declared tool; U+0000 does not end a keyword */
    snprintf(body, sizeof body,
             "{" TOOLS ",\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":"
             "\"zzz\"}},\"messages\":%s}",
             u);
    expect_render_error(c, body, "\"zzz\" is not one of the declared tools");
    snprintf(body, sizeof body,
             "{" TOOLS ",\"tool_choice\":{\"type\":\"banana\",\"function\":{\"name\":"
             "\"get_time\"}},\"messages\":%s}",
             u);
    expect_render_error(c, body, "tool_choice");
    snprintf(body, sizeof body,
             "{" TOOLS ",\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":"
             "\"\"}},\"messages\":%s}",
             u);
    expect_render_error(c, body, "tool_choice");
    snprintf(body, sizeof body, "{" TOOLS ",\"tool_choice\":\"auto\\u0000xx\",\"messages\":%s}", u);
    expect_render_error(c, body, "tool_choice");
    expect_render_error(c, "{\"messages\":[{\"role\":\"user\\u0000x\",\"content\":\"x\"}]}",
                        "messages[0].role");
    snprintf(body, sizeof body,
             "{\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"a\\u0000b\"}}],"
             "\"messages\":%s}",
             u);
    expect_render_error(c, body, "tools[0]");
    expect_render_error(c,
                        "{\"messages\":[{\"role\":\"assistant\",\"content\":\"\",\"tool_calls\":"
                        "{}}]}",
                        "messages[0].tool_calls");
    expect_render_error(c,
                        "{\"messages\":[{\"role\":\"assistant\",\"content\":\"\",\"tool_calls\":"
                        "[{\"function\":{\"name\":\"f\"}}]}]}",
                        "messages[0].tool_calls");
    expect_render_error(c, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}", "request");
    /* Messages and Responses requests are checked as the reference checks them */
    di_prompt *p = NULL;
    assert_int_equal(di_codec_render(c, DI_PROTOCOL_MESSAGES, "{}", 2, &p, NULL),
                     DI_ERR_INVALID_REQUEST);
    di_codec_free(c);
}

static void test_default_system_is_read_from_a_chat_template(void **state)
{
    (void)state;
    /* SmolLM2's template (tokenizer.chat_template of its GGUF), with real newlines */
    const char *smol =
        "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' "
        "%}{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by "
        "Hugging Face<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + "
        "message['content'] + '<|im_end|>' + '\n'}}{% endfor %}";
    char *s = rc_chatml_default_system(smol, strlen(smol));
    assert_string_equal(s, "You are a helpful AI assistant named SmolLM, trained by Hugging Face");
    free(s);
    /* an escaped newline, as tokenizer_config.json templates write it */
    const char *esc = "{{- '<|im_start|>system\\nYou are Q.<|im_end|>\\n' }}";
    s = rc_chatml_default_system(esc, strlen(esc));
    assert_string_equal(s, "You are Q.");
    free(s);
    /* template code after the opener is no literal */
    const char *code = "{{ '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>' }}";
    assert_null(rc_chatml_default_system(code, strlen(code)));
    assert_null(rc_chatml_default_system("<|im_start|>system\n", 19));
    assert_null(rc_chatml_default_system("", 0));
}

/* Messages and Responses requests render as the Chat Completions request they
 * amount to (converted as deepseek-recipe converts them), and their Hermes calls
 * come back in their own protocol. */
static void test_messages_and_responses_render_as_chat(void **state)
{
    (void)state;
    di_codec *c = chatml();
    assert_int_equal(di_codec_set_default_system(c, "Be kind.", NULL), DI_OK);
    const char *chat =
        "{\"model\":\"m\",\"messages\":[{\"role\":\"system\",\"content\":\"S\"},{\"role\":"
        "\"user\",\"content\":\"hi\"},{\"role\":\"assistant\",\"content\":\"ok\",\"tool_calls\":"
        "[{\"id\":\"t1\",\"type\":\"function\",\"function\":{\"name\":\"get_time\",\"arguments\":"
        "\"{\\\"tz\\\": \\\"UTC\\\"}\"}}]},{\"role\":\"tool\",\"tool_call_id\":\"t1\","
        "\"content\":\"12:00\"}],\"tools\":[{\"type\":\"function\",\"function\":{\"name\":"
        "\"get_time\",\"description\":\"Time\",\"parameters\":{\"type\":\"object\"}}}]}";
    const char *messages =
        "{\"model\":\"m\",\"max_tokens\":9,\"system\":\"S\",\"messages\":[{\"role\":\"user\","
        "\"content\":\"hi\"},{\"role\":\"assistant\",\"content\":[{\"type\":\"text\",\"text\":"
        "\"ok\"},{\"type\":\"tool_use\",\"id\":\"t1\",\"name\":\"get_time\",\"input\":{\"tz\":"
        "\"UTC\"}}]},{\"role\":\"user\",\"content\":[{\"type\":\"tool_result\",\"tool_use_id\":"
        "\"t1\",\"content\":\"12:00\"}]}],\"tools\":[{\"name\":\"get_time\",\"description\":"
        "\"Time\",\"input_schema\":{\"type\":\"object\"}}]}";
    const char *responses =
        "{\"model\":\"m\",\"instructions\":\"S\",\"input\":[{\"role\":\"user\",\"content\":"
        "\"hi\"},{\"type\":\"message\",\"role\":\"assistant\",\"content\":[{\"type\":"
        "\"output_text\",\"text\":\"ok\"}]},{\"type\":\"function_call\",\"call_id\":\"t1\","
        "\"name\":\"get_time\",\"arguments\":\"{\\\"tz\\\": \\\"UTC\\\"}\"},{\"type\":"
        "\"function_call_output\",\"call_id\":\"t1\",\"output\":\"12:00\"}],\"tools\":[{\"type\":"
        "\"function\",\"name\":\"get_time\",\"description\":\"Time\",\"parameters\":{\"type\":"
        "\"object\"}}]}";
    di_prompt *want = render_ok(c, chat), *p = NULL;
    di_error *err = NULL;
    const char *bodies[2] = {messages, responses};
    for (int k = 0; k < 2; k++) {
        di_protocol proto = k ? DI_PROTOCOL_RESPONSES : DI_PROTOCOL_MESSAGES;
        if (di_codec_render(c, proto, bodies[k], strlen(bodies[k]), &p, &err) != DI_OK)
            fail_msg("%s", di_error_message(err));
        assert_string_equal(di_prompt_text(p, NULL), di_prompt_text(want, NULL));
        assert_int_equal(di_prompt_thinking(p), 0);
        /* a call comes back as the protocol's own tool use */
        const char *out = "<tool_call>{\"name\": \"get_time\", \"arguments\": {}}</tool_call>";
        char *r = respond(p, out, strlen(out), 5, DI_FINISH_STOP);
        if (k == 0)
            assert_non_null(
                strstr(r, "\"type\":\"tool_use\",\"id\":\"call_00_XXXXXXXXXXXXXXXXXXXXXXXX\","
                          "\"name\":\"get_time\",\"input\":{}"));
        else
            assert_non_null(strstr(r, "\"type\":\"function_call\""));
        assert_null(strstr(r, "reasoning_content"));
        free(r);
        di_prompt_free(p);
    }
    di_prompt_free(want);
    /* an image becomes the reference's text-model placeholder; a turn's content
     * blocks are one turn; a named Messages tool_choice makes the prompt write it */
    const char *image =
        "{\"model\":\"m\",\"max_tokens\":9,\"messages\":[{\"role\":\"user\",\"content\":[{"
        "\"type\":\"image\",\"source\":{\"type\":\"url\",\"url\":\"https://x/y.png\"}},{"
        "\"type\":\"text\",\"text\":\"what?\"}]}]}";
    if (di_codec_render(c, DI_PROTOCOL_MESSAGES, image, strlen(image), &p, &err) != DI_OK)
        fail_msg("%s", di_error_message(err));
    assert_non_null(strstr(di_prompt_text(p, NULL),
                           "<|im_start|>user\n[Unsupported Image]\n\nwhat?<|im_end|>\n"));
    di_prompt_free(p);
    const char *named =
        "{\"model\":\"m\",\"max_tokens\":9,\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],"
        "\"tools\":[{\"name\":\"get_time\",\"input_schema\":{\"type\":\"object\"}}],"
        "\"tool_choice\":{\"type\":\"tool\",\"name\":\"get_time\"}}";
    if (di_codec_render(c, DI_PROTOCOL_MESSAGES, named, strlen(named), &p, &err) != DI_OK)
        fail_msg("%s", di_error_message(err));
    size_t n;
    const char *text = di_prompt_text(p, &n);
    const char *tail = "<tool_call>\n{\"name\": \"get_time\", \"arguments\": ";
    assert_string_equal(text + n - strlen(tail), tail);
    di_prompt_free(p);
    di_codec_free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rendered_calls_parse_back_at_every_split),
        cmocka_unit_test(test_what_is_not_a_call_stays_text),
        cmocka_unit_test(test_a_cut_call_is_returned_as_the_reference_returns_a_cut_dsml_call),
        cmocka_unit_test(test_tool_choice_opens_the_call),
        cmocka_unit_test(test_tool_results_share_a_user_turn),
        cmocka_unit_test(test_render_errors_name_the_field),
        cmocka_unit_test(test_default_system_is_read_from_a_chat_template),
        cmocka_unit_test(test_messages_and_responses_render_as_chat),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
