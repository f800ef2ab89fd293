/* The output side's public API (di_stream_*): its contracts and error paths, and
 * properties that must hold whatever the reference does in detail — the split
 * position of a push never changes the accumulated response, every stream ends
 * with exactly one finish event, SSE framing is well formed. Byte-exact parity
 * with deepseek-recipe is tests/parity/stream_parity.py's job. */
#define _POSIX_C_SOURCE 200809L
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <deepinfer/deepinfer.h>

static const char *const chat_tools =
    "{\"model\":\"DeepSeek-V4-Pro\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],"
    "\"stream\":true,\"stop\":[\"STOP\"],\"tools\":[{\"type\":\"function\",\"function\":{"
    "\"name\":\"get_weather\",\"parameters\":{\"type\":\"object\",\"properties\":{\"city\":{"
    "\"type\":\"string\"}}}}}]}";

static const char *const dsml_call =
    "Let me check.</think>Checking.\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke "
    "name=\"get_weather\">\n"
    "<｜DSML｜parameter name=\"city\" string=\"true\">Pa\"ris 🎉</｜DSML｜parameter>\n"
    "</｜DSML｜invoke>\n</｜DSML｜tool_calls>";

static di_tokenizer *load_v4_tokenizer(void)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/deepseek-v4/tokenizer.json", DI_ASSET_DIR);
    di_tokenizer *tok = NULL;
    if (!DI_ASSET_DIR[0] || di_tokenizer_load(path, &tok, NULL) != DI_OK) return NULL;
    return tok;
}

static di_prompt *render(di_protocol protocol, const char *body)
{
    di_codec *codec = NULL;
    di_prompt *p = NULL;
    assert_int_equal(di_codec_create(NULL, DI_ENCODING_DSV4, &codec, NULL), DI_OK);
    assert_int_equal(di_codec_render(codec, protocol, body, strlen(body), &p, NULL), DI_OK);
    di_codec_free(codec);
    return p;
}

static di_stream *open_stream(di_protocol protocol, const char *body, const di_tokenizer *tok)
{
    di_prompt *p = render(protocol, body);
    di_stream_options o;
    di_stream_options_init(&o);
    o.response_id = "resp-1";
    o.created = 1700000000;
    o.seed = 42;
    di_stream *s = NULL;
    assert_int_equal(di_stream_create(p, tok, &o, &s, NULL), DI_OK);
    di_prompt_free(p);
    return s;
}

static void test_stream_rejects_bad_arguments(void **state)
{
    (void)state;
    di_error *err = NULL;
    di_stream *s = NULL;
    assert_int_equal(di_stream_create(NULL, NULL, NULL, &s, &err), DI_ERR_INVALID_ARGUMENT);
    assert_null(s);
    di_error_free(err);
    err = NULL;
    di_prompt *p = render(DI_PROTOCOL_CHAT, chat_tools);
    assert_int_equal(di_stream_create(p, NULL, NULL, NULL, NULL), DI_ERR_INVALID_ARGUMENT);

    di_stream_options o;
    di_stream_options_init(&o);
    o.thinking_stage = 9;
    assert_int_equal(di_stream_create(p, NULL, &o, &s, &err), DI_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(di_error_message(err), "thinking_stage"));
    di_error_free(err);
    err = NULL;
    di_stream_options_init(&o);
    o.reserved = 1;
    assert_int_equal(di_stream_create(p, NULL, &o, &s, NULL), DI_ERR_INVALID_ARGUMENT);
    di_stream_options_init(&o);
    o.n_stop_sequences = 1;
    assert_int_equal(di_stream_create(p, NULL, &o, &s, NULL), DI_ERR_INVALID_ARGUMENT);
    const char *bad_stop[] = {"\xff"};
    o.stop_sequences = bad_stop;
    assert_int_equal(di_stream_create(p, NULL, &o, &s, NULL), DI_ERR_INVALID_UTF8);
    di_stream_options_init(&o);
    o.struct_size = 3; /* smaller than any release */
    assert_int_equal(di_stream_create(p, NULL, &o, &s, NULL), DI_ERR_INVALID_ARGUMENT);

    assert_int_equal(di_stream_create(p, NULL, NULL, &s, NULL), DI_OK);
    assert_int_equal(di_stream_push_text(s, NULL, 3, 1, NULL), DI_ERR_INVALID_ARGUMENT);
    assert_int_equal(di_stream_finish(s, (di_finish)99, NULL), DI_ERR_INVALID_ARGUMENT);
    assert_int_equal(di_stream_push_tokens(s, (const int32_t[]){1}, 1, &err), DI_ERR_INVALID_STATE);
    assert_non_null(strstr(di_error_message(err), "tokenizer"));
    di_error_free(err);
    di_stream_free(s);
    di_prompt_free(p);
    di_stream_free(NULL);
}

static void test_invalid_utf8_push_is_rejected_and_loses_nothing(void **state)
{
    (void)state;
    di_stream *s = open_stream(DI_PROTOCOL_CHAT, chat_tools, NULL);
    di_error *err = NULL;
    assert_int_equal(di_stream_push_text(s, "ok \xe2\x82", 5, 1, &err), DI_ERR_INVALID_UTF8);
    assert_non_null(strstr(di_error_message(err), "byte offset 3"));
    di_error_free(err);
    assert_int_equal(di_stream_push_text(s, "abc</think>def", 14, 2, NULL), DI_OK);
    assert_int_equal(di_stream_finish(s, DI_FINISH_STOP, NULL), DI_OK);
    const char *r = di_stream_response_json(s, NULL);
    assert_non_null(strstr(r, "\"content\":\"def\""));
    assert_non_null(strstr(r, "\"reasoning_content\":\"abc\""));
    assert_non_null(strstr(r, "\"completion_tokens\":2"));
    di_stream_free(s);
}

/* Reassemble the complete response of `text` pushed in the given pieces. */
static char *response_of(const char *text, const size_t *cuts, size_t n_cuts)
{
    di_stream *s = open_stream(DI_PROTOCOL_CHAT, chat_tools, NULL);
    size_t from = 0, len = strlen(text);
    for (size_t i = 0; i <= n_cuts; i++) {
        size_t to = i < n_cuts ? cuts[i] : len;
        assert_int_equal(di_stream_push_text(s, text + from, to - from, 1, NULL), DI_OK);
        from = to;
    }
    assert_int_equal(di_stream_finish(s, DI_FINISH_STOP, NULL), DI_OK);
    char *r = strdup(di_stream_response_json(s, NULL));
    di_stream_free(s);
    return r;
}

/* Blank the random part of tool-call ids so responses can be compared. */
static void blank_call_ids(char *r)
{
    for (char *q = strstr(r, "call_"); q; q = strstr(q + 1, "call_"))
        for (char *c = q + 8; *c && *c != '"'; c++) *c = 'X';
}

static int on_boundary(const char *s, size_t i)
{
    return ((unsigned char)s[i] & 0xC0) != 0x80;
}

static void test_dsml_tool_call_split_at_every_byte(void **state)
{
    (void)state;
    char *whole = response_of(dsml_call, NULL, 0);
    blank_call_ids(whole);
    assert_non_null(strstr(whole, "\"finish_reason\":\"tool_calls\""));
    assert_non_null(strstr(whole, "\"arguments\":\"{\\\"city\\\": \\\"Pa\\\\\\\"ris 🎉\\\"}\""));
    size_t len = strlen(dsml_call);
    for (size_t i = 1; i < len; i++) {
        if (!on_boundary(dsml_call, i)) continue;
        size_t cut[1] = {i};
        char *r = response_of(dsml_call, cut, 1);
        blank_call_ids(r);
        /* usage differs only in completion_tokens (two pushes of one token) */
        char *u1 = strstr(r, "\"completion_tokens\":2"),
             *u0 = strstr(whole, "\"completion_tokens\":1");
        assert_non_null(u1);
        assert_non_null(u0);
        assert_memory_equal(r, whole, (size_t)(u0 - whole));
        free(r);
    }
    free(whole);
}

static void test_stop_sequence_ends_the_stream_inside_the_push(void **state)
{
    (void)state;
    di_stream *s = open_stream(DI_PROTOCOL_CHAT, chat_tools, NULL);
    assert_int_equal(di_stream_ready(s, 10, 4, "fp-1", NULL), DI_OK);
    assert_int_equal(di_stream_push_text(s, "r</think>abcST", 14, 1, NULL), DI_OK);
    assert_false(di_stream_finished(s));
    assert_int_equal(di_stream_push_text(s, "OPdef", 5, 1, NULL), DI_OK);
    assert_true(di_stream_finished(s));
    size_t n = di_stream_chunk_count(s);
    assert_true(n >= 2);
    /* the final chunk, then Chat's [DONE] */
    assert_null(di_stream_chunk_json(s, n - 1, NULL));
    size_t len;
    assert_string_equal(di_stream_chunk_sse(s, n - 1, &len), "data: [DONE]\n\n");
    assert_non_null(strstr(di_stream_chunk_json(s, n - 2, NULL), "\"finish_reason\":\"stop\""));
    assert_non_null(
        strstr(di_stream_chunk_json(s, n - 2, NULL), "\"system_fingerprint\":\"fp-1\""));
    di_error *err = NULL;
    assert_int_equal(di_stream_push_text(s, "x", 1, 1, &err), DI_ERR_INVALID_STATE);
    di_error_free(err);
    /* finish after a stop produces nothing and succeeds, as the reference's finish() */
    assert_int_equal(di_stream_finish(s, DI_FINISH_STOP, NULL), DI_OK);
    assert_int_equal(di_stream_chunk_count(s), 0);
    assert_non_null(strstr(di_stream_response_json(s, NULL), "\"content\":\"abc\""));
    di_stream_free(s);
}

static void test_events_describe_the_tool_call(void **state)
{
    (void)state;
    di_stream *s = open_stream(DI_PROTOCOL_MESSAGES,
                               "{\"model\":\"DeepSeek-V4-Pro\",\"max_tokens\":99,\"messages\":[{"
                               "\"role\":\"user\",\"content\":\"hi\"}],\"tools\":[{\"name\":"
                               "\"get_weather\",\"input_schema\":{\"type\":\"object\"}}]}",
                               NULL);
    assert_int_equal(di_stream_push_text(s, dsml_call, strlen(dsml_call), 5, NULL), DI_OK);
    size_t n = di_stream_event_count(s);
    int begin = -1, end = -1, reasoning = 0, text = 0;
    for (size_t i = 0; i < n; i++) {
        di_stream_event_kind k = di_stream_event_kind_at(s, i);
        if (k == DI_STREAM_REASONING) reasoning++;
        if (k == DI_STREAM_TEXT) text++;
        if (k == DI_STREAM_TOOL_CALL_BEGIN) begin = (int)i;
        if (k == DI_STREAM_TOOL_CALL_END) end = (int)i;
    }
    assert_int_equal(reasoning, 1);
    assert_int_equal(text, 1);
    assert_true(begin >= 0 && end > begin);
    assert_string_equal(di_stream_event_call_name(s, (size_t)begin), "get_weather");
    assert_int_equal(di_stream_event_call_index(s, (size_t)end), 0);
    assert_memory_equal(di_stream_event_call_id(s, (size_t)end), "call_00_", 8);
    assert_string_equal(di_stream_event_text(s, (size_t)end, NULL), "{\"city\": \"Pa\\\"ris 🎉\"}");
    assert_null(di_stream_event_call_id(s, 0));
    assert_int_equal(di_stream_event_kind_at(s, n), 0);
    /* Messages chunks are named SSE events */
    size_t len;
    const char *sse = di_stream_chunk_sse(s, 0, &len);
    assert_memory_equal(sse, "event: ", 7);
    assert_memory_equal(sse + len - 2, "\n\n", 2);
    assert_null(di_stream_response_json(s, NULL));

    assert_int_equal(di_stream_finish(s, DI_FINISH_STOP, NULL), DI_OK);
    n = di_stream_event_count(s);
    assert_int_equal(di_stream_event_kind_at(s, n - 1), DI_STREAM_FINISH);
    assert_string_equal(di_stream_event_text(s, n - 1, NULL), "tool_use");
    const char *r = di_stream_response_json(s, NULL);
    assert_non_null(strstr(r, "\"input\":{\"city\":\"Pa\\\"ris 🎉\"}"));
    /* a second finish is a no-op */
    assert_int_equal(di_stream_finish(s, DI_FINISH_LENGTH, NULL), DI_OK);
    assert_int_equal(di_stream_event_count(s), 0);
    di_stream_free(s);
}

static void test_finish_without_a_reason_reports_stop(void **state)
{
    (void)state;
    di_stream *s = open_stream(DI_PROTOCOL_CHAT, chat_tools, NULL);
    assert_int_equal(di_stream_push_text(s, dsml_call, strlen(dsml_call), 1, NULL), DI_OK);
    assert_int_equal(di_stream_finish(s, DI_FINISH_UNKNOWN, NULL), DI_OK);
    assert_non_null(strstr(di_stream_response_json(s, NULL), "\"finish_reason\":\"stop\""));
    di_stream_free(s);
}

static void test_parsing_override_opens_json_mode(void **state)
{
    (void)state;
    di_prompt *p = render(DI_PROTOCOL_MESSAGES,
                          "{\"model\":\"DeepSeek-V4-Pro\",\"max_tokens\":9,\"thinking\":{\"type\":"
                          "\"disabled\"},\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}");
    di_stream_options o;
    di_stream_options_init(&o);
    o.override_parsing = 1;
    o.parse_json_output = 1;
    const char *stops[] = {"END"};
    o.stop_sequences = stops;
    o.n_stop_sequences = 1;
    di_stream *s = NULL;
    assert_int_equal(di_stream_create(p, NULL, &o, &s, NULL), DI_OK);
    di_prompt_free(p);
    /* in JSON mode stop sequences are matched in the payload only (a stop in the
     * prefix or the suffix text is not one) */
    const char *out = "Sure:\n```json\n{\"a\": 1} END\n```\nbye more";
    assert_int_equal(di_stream_push_text(s, out, strlen(out), 3, NULL), DI_OK);
    assert_true(di_stream_finished(s));
    const char *r = di_stream_response_json(s, NULL);
    assert_non_null(strstr(r, "\"text\":\" {\\\"a\\\": 1} \""));
    assert_non_null(strstr(r, "\"stop_sequence\":\"END\""));
    di_stream_free(s);
}

static void test_token_pushes_never_split_a_character(void **state)
{
    (void)state;
    di_tokenizer *tok = load_v4_tokenizer();
    if (!tok) skip();
    const char *text = "日本語 🎉 ok</think>done";
    int32_t *ids;
    size_t n;
    assert_int_equal(di_tokenizer_encode(tok, text, strlen(text),
                                         DI_TOKENIZE_SPECIAL | DI_TOKENIZE_ADDED, &ids, &n, NULL),
                     DI_OK);
    di_stream *s = open_stream(DI_PROTOCOL_CHAT, chat_tools, tok);
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(di_stream_push_tokens(s, &ids[i], 1, NULL), DI_OK);
        for (size_t e = 0; e < di_stream_event_count(s); e++)
            assert_null(strstr(di_stream_event_text(s, e, NULL), "\xEF\xBF\xBD"));
    }
    di_error *err = NULL;
    int32_t bad = 1 << 30;
    assert_int_equal(di_stream_push_tokens(s, &bad, 1, &err), DI_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(di_error_message(err), "vocabulary"));
    di_error_free(err);
    assert_int_equal(di_stream_finish(s, DI_FINISH_STOP, NULL), DI_OK);
    const char *r = di_stream_response_json(s, NULL);
    assert_non_null(strstr(r, "\"reasoning_content\":\"日本語 🎉 ok\""));
    assert_non_null(strstr(r, "\"content\":\"done\""));
    char count[64];
    snprintf(count, sizeof count, "\"completion_tokens\":%zu", n);
    assert_non_null(strstr(r, count));
    uint32_t completion, reasoning;
    di_stream_usage(s, &completion, &reasoning);
    assert_int_equal(completion, n);
    assert_true(reasoning > 0);
    di_tokens_free(ids);
    di_stream_free(s);
    di_tokenizer_free(tok);
}

static void test_every_protocol_ends_once(void **state)
{
    (void)state;
    const char *bodies[3] = {
        chat_tools,
        "{\"model\":\"DeepSeek-V4-Pro\",\"max_tokens\":9,\"messages\":[{\"role\":\"user\","
        "\"content\":\"hi\"}]}",
        "{\"model\":\"DeepSeek-V4-Pro\",\"input\":\"hi\",\"instructions\":\"be brief\","
        "\"temperature\":0.7}"};
    const char *last[3] = {NULL, "message_stop", "response.incomplete"};
    for (int k = 0; k < 3; k++) {
        di_stream *s = open_stream((di_protocol)(k + 1), bodies[k], NULL);
        assert_int_equal(di_stream_push_text(s, "x</think>y", 10, 2, NULL), DI_OK);
        assert_int_equal(di_stream_finish(s, DI_FINISH_LENGTH, NULL), DI_OK);
        size_t n = di_stream_chunk_count(s);
        int finishes = 0;
        for (size_t e = 0; e < di_stream_event_count(s); e++)
            finishes += di_stream_event_kind_at(s, e) == DI_STREAM_FINISH;
        assert_int_equal(finishes, 1);
        if (last[k])
            assert_string_equal(di_stream_chunk_event(s, n - 1), last[k]);
        else
            assert_null(di_stream_chunk_event(s, n - 1));
        di_stream_free(s);
    }
}

/* The R1 and V3 chat templates define the tool-call token format (deepseek-recipe
 * does not): a conversation whose assistant turn calls tools, rendered by the
 * template, holds exactly what the model writes; parsed back at every split
 * position, it gives the same calls. */
static void test_template_tool_calls_round_trip(void **state)
{
    (void)state;
    const char *body =
        "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"},{\"role\":\"assistant\","
        "\"content\":null,\"tool_calls\":[{\"id\":\"a\",\"type\":\"function\",\"function\":{"
        "\"name\":\"get_weather\",\"arguments\":\"{\\\"city\\\": \\\"Paris 🎉\\\"}\"}},{\"id\":"
        "\"b\",\"type\":\"function\",\"function\":{\"name\":\"get_time\",\"arguments\":"
        "\"{}\"}}]},{\"role\":\"user\",\"content\":\"again\"}],\"tools\":[{\"type\":"
        "\"function\",\"function\":{\"name\":\"get_weather\"}},{\"type\":\"function\","
        "\"function\":{\"name\":\"get_time\"}}]}";
    for (int enc = DI_ENCODING_DSV3; enc <= DI_ENCODING_R1; enc++) {
        di_codec *codec = NULL;
        di_prompt *p = NULL;
        assert_int_equal(di_codec_create(NULL, (di_encoding)enc, &codec, NULL), DI_OK);
        assert_int_equal(di_codec_render(codec, DI_PROTOCOL_CHAT, body, strlen(body), &p, NULL),
                         DI_OK);
        /* the assistant turn as the template wrote it */
        const char *text = di_prompt_text(p, NULL);
        const char *from = strstr(text, "<｜tool▁calls▁begin｜>");
        const char *to = strstr(text, "<｜end▁of▁sentence｜>");
        assert_non_null(from);
        assert_non_null(to);
        size_t len = (size_t)(to - from) + strlen("<｜end▁of▁sentence｜>");
        for (size_t cut = 0; cut <= len; cut++) {
            if (cut < len && !on_boundary(from, cut)) continue;
            di_stream *s = NULL;
            assert_int_equal(di_stream_create(p, NULL, NULL, &s, NULL), DI_OK);
            static const char think[] = "<think>\nhmm\n</think>\n\n";
            if (enc == DI_ENCODING_R1) /* R1 reasons first */
                assert_int_equal(di_stream_push_text(s, think, strlen(think), 1, NULL), DI_OK);
            assert_int_equal(di_stream_push_text(s, from, cut, 1, NULL), DI_OK);
            assert_int_equal(di_stream_push_text(s, from + cut, len - cut, 1, NULL), DI_OK);
            assert_int_equal(di_stream_finish(s, DI_FINISH_STOP, NULL), DI_OK);
            char *r = strdup(di_stream_response_json(s, NULL));
            blank_call_ids(r);
            assert_non_null(strstr(r, "\"name\":\"get_weather\",\"arguments\":\"{\\\"city\\\": "
                                      "\\\"Paris 🎉\\\"}\""));
            assert_non_null(strstr(r, "\"name\":\"get_time\",\"arguments\":\"{}\""));
            assert_non_null(strstr(r, "\"finish_reason\":\"tool_calls\""));
            assert_non_null(strstr(r, "\"content\":\"\""));
            if (enc == DI_ENCODING_R1) assert_non_null(strstr(r, "\"reasoning_content\":\"hmm\""));
            free(r);
            di_stream_free(s);
        }
        di_prompt_free(p);
        di_codec_free(codec);
    }
}

/* A tool-call block the model writes when the request declares no tools, an
 * empty list, or tool_choice "none" is answer text with the V3/R1 templates, as
 * deepseek-recipe keeps DSML as text then: the oracle is the V4 encoding's
 * parsing options for the same body (compared with deepseek-recipe's in
 * tests/parity/stream_parity.py), and the output is the markup unchanged. */
static void test_template_calls_nobody_asked_for_stay_text(void **state)
{
    (void)state;
#define MSGS "\"model\":\"DeepSeek-V4-Pro\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]"
#define TOOL "[{\"type\":\"function\",\"function\":{\"name\":\"get_time\"}}]"
    static const char *const bodies[] = {
        "{" MSGS "}",
        "{" MSGS ",\"tools\":[]}",
        "{" MSGS ",\"tools\":" TOOL ",\"tool_choice\":\"none\"}",
        "{" MSGS ",\"tools\":" TOOL "}",
        "{" MSGS ",\"tools\":" TOOL ",\"tool_choice\":\"auto\"}",
    };
    static const char call[] = "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>"
                               "get_time\n```json\n{}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>";
    for (size_t b = 0; b < sizeof bodies / sizeof bodies[0]; b++) {
        di_prompt *v4 = render(DI_PROTOCOL_CHAT, bodies[b]);
        di_stream_options want;
        di_stream_options_init(&want);
        assert_int_equal(di_stream_options_from_prompt(v4, &want), DI_OK);
        di_prompt_free(v4);
        assert_int_equal(want.parse_tool_calls, b >= 3);
        for (int enc = DI_ENCODING_DSV3; enc <= DI_ENCODING_R1; enc++) {
            di_codec *codec = NULL;
            di_prompt *p = NULL;
            assert_int_equal(di_codec_create(NULL, (di_encoding)enc, &codec, NULL), DI_OK);
            assert_int_equal(
                di_codec_render(codec, DI_PROTOCOL_CHAT, bodies[b], strlen(bodies[b]), &p, NULL),
                DI_OK);
            di_stream_options o;
            di_stream_options_init(&o);
            assert_int_equal(di_stream_options_from_prompt(p, &o), DI_OK);
            assert_int_equal(o.parse_tool_calls, want.parse_tool_calls);
            di_stream *s = NULL;
            assert_int_equal(di_stream_create(p, NULL, NULL, &s, NULL), DI_OK);
            if (enc == DI_ENCODING_R1)
                assert_int_equal(di_stream_push_text(s, "</think>", 8, 1, NULL), DI_OK);
            assert_int_equal(di_stream_push_text(s, call, strlen(call), 1, NULL), DI_OK);
            assert_int_equal(di_stream_finish(s, DI_FINISH_STOP, NULL), DI_OK);
            const char *r = di_stream_response_json(s, NULL);
            if (want.parse_tool_calls) {
                assert_non_null(strstr(r, "\"name\":\"get_time\""));
                assert_non_null(strstr(r, "\"finish_reason\":\"tool_calls\""));
            } else {
                assert_non_null(strstr(r, "\"content\":\"<｜tool▁calls▁begin｜>"));
                assert_null(strstr(r, "\"tool_calls\":["));
                assert_non_null(strstr(r, "\"finish_reason\":\"stop\""));
            }
            di_stream_free(s);
            di_prompt_free(p);
            di_codec_free(codec);
        }
    }
    /* a tool_choice the templates cannot honour is an error naming the field */
    static const char *const bad[][2] = {
        {"{" MSGS ",\"tool_choice\":\"any\"}", "tool_choice: \"any\" is not one of"},
        {"{" MSGS ",\"tool_choice\":3}", "tool_choice: expected \"none\""},
        {"{" MSGS ",\"tool_choice\":\"required\"}", "no tools are declared"},
        {"{" MSGS ",\"tools\":" TOOL ",\"tool_choice\":{\"type\":\"function\",\"function\":{"
         "\"name\":\"nope\"}}}",
         "tool_choice.function.name: \"nope\" is not one of the declared tools"},
    };
    for (size_t b = 0; b < sizeof bad / sizeof bad[0]; b++) {
        di_codec *codec = NULL;
        di_prompt *p = NULL;
        di_error *err = NULL;
        assert_int_equal(di_codec_create(NULL, DI_ENCODING_DSV3, &codec, NULL), DI_OK);
        assert_int_equal(
            di_codec_render(codec, DI_PROTOCOL_CHAT, bad[b][0], strlen(bad[b][0]), &p, &err),
            DI_ERR_INVALID_REQUEST);
        assert_null(p);
        if (!strstr(di_error_message(err), bad[b][1]))
            fail_msg("'%s' does not say '%s'", di_error_message(err), bad[b][1]);
        di_error_free(err);
        di_codec_free(codec);
    }
#undef MSGS
#undef TOOL
}

/* di_stream_push_tokens_logprobs: every bad argument is refused with the field
 * named, and leaves the stream as it was (the entries themselves are compared
 * with deepseek-recipe's in tests/parity/stream_parity.py, tok-logprobs-*). */
static void test_logprobs_push_errors_name_the_argument(void **state)
{
    (void)state;
    di_tokenizer *tok = load_v4_tokenizer();
    if (!tok) skip();
    di_stream *s = open_stream(DI_PROTOCOL_CHAT, chat_tools, tok);
    int32_t ids[2] = {84, 85}, top_ids[2] = {5, 1 << 30};
    float lp[2] = {-0.5f, -0.25f}, top[2] = {-1.0f, -2.0f};
    static const char *const want[] = {
        "invalid log probabilities: 1 log probabilities for 2 token IDs",
        "logprobs must not be NULL",
        "n_top: at most 20",
        "top_ids and top_logprobs must not be NULL when n_top > 0",
        "top_ids[1] = 1073741824 is outside the vocabulary",
    };
    for (int k = 0; k < 5; k++) {
        di_error *err = NULL;
        di_status st =
            k == 0   ? di_stream_push_tokens_logprobs(s, ids, 2, lp, 1, NULL, NULL, 0, &err)
            : k == 1 ? di_stream_push_tokens_logprobs(s, ids, 2, NULL, 2, NULL, NULL, 0, &err)
            : k == 2 ? di_stream_push_tokens_logprobs(s, ids, 2, lp, 2, top_ids, top, 21, &err)
            : k == 3 ? di_stream_push_tokens_logprobs(s, ids, 2, lp, 2, NULL, top, 1, &err)
                     : di_stream_push_tokens_logprobs(s, ids, 2, lp, 2, top_ids, top, 1, &err);
        assert_int_equal(st, DI_ERR_INVALID_ARGUMENT);
        if (!strstr(di_error_message(err), want[k]))
            fail_msg("'%s' lacks '%s'", di_error_message(err), want[k]);
        di_error_free(err);
        assert_int_equal(di_stream_chunk_count(s), 0);
        assert_false(di_stream_finished(s));
    }
    /* the stream goes on: a good push carries its entries */
    top_ids[1] = 6;
    assert_int_equal(di_stream_push_tokens_logprobs(s, ids, 2, lp, 2, top_ids, top, 1, NULL),
                     DI_OK);
    int found = 0;
    for (size_t c = 0; c < di_stream_chunk_count(s); c++)
        found |= strstr(di_stream_chunk_json(s, c, NULL),
                        "\"logprobs\":{\"reasoning_content\":[{") != NULL;
    assert_true(found);
    assert_int_equal(di_stream_finish(s, DI_FINISH_STOP, NULL), DI_OK);
    di_stream_free(s);
    /* without a tokenizer, token pushes cannot be decoded */
    s = open_stream(DI_PROTOCOL_CHAT, chat_tools, NULL);
    assert_int_equal(di_stream_push_tokens_logprobs(s, ids, 2, lp, 2, NULL, NULL, 0, NULL),
                     DI_ERR_INVALID_STATE);
    di_stream_free(s);
    di_tokenizer_free(tok);
}

static void test_options_from_prompt_start_the_override(void **state)
{
    (void)state;
    di_prompt *p = render(DI_PROTOCOL_CHAT, chat_tools);
    di_stream_options o;
    di_stream_options_init(&o);
    assert_int_equal(di_stream_options_from_prompt(NULL, &o), DI_ERR_INVALID_ARGUMENT);
    assert_int_equal(di_stream_options_from_prompt(p, &o), DI_OK);
    assert_int_equal(o.override_parsing, 1);
    assert_int_equal(o.parse_tool_calls, 1);
    assert_int_equal(o.thinking_stage, DI_THINKING_REASONING_START);
    assert_int_equal(o.n_stop_sequences, 1);
    assert_string_equal(o.stop_sequences[0], "STOP");
    /* add a stop sequence, keep the rest of what the request implies */
    const char *stops[] = {"STOP", "HALT"};
    o.stop_sequences = stops;
    o.n_stop_sequences = 2;
    di_stream *s = NULL;
    assert_int_equal(di_stream_create(p, NULL, &o, &s, NULL), DI_OK);
    di_prompt_free(p);
    const char *out = "think</think>ok HALT more";
    assert_int_equal(di_stream_push_text(s, out, strlen(out), 1, NULL), DI_OK);
    assert_true(di_stream_finished(s));
    assert_string_equal(di_stream_stop_sequence(s), "HALT");
    assert_non_null(strstr(di_stream_response_json(s, NULL), "\"reasoning_content\":\"think\""));
    di_stream_free(s);

    /* an empty stop sequence is refused (it would match everywhere) */
    p = render(DI_PROTOCOL_CHAT, chat_tools);
    di_stream_options_init(&o);
    o.override_parsing = 1;
    const char *empty[] = {""};
    o.stop_sequences = empty;
    o.n_stop_sequences = 1;
    assert_int_equal(di_stream_create(p, NULL, &o, &s, NULL), DI_ERR_INVALID_ARGUMENT);
    di_prompt_free(p);
}

static void test_a_failed_call_leaves_no_stale_chunks(void **state)
{
    (void)state;
    di_stream *s = open_stream(DI_PROTOCOL_CHAT, chat_tools, NULL);
    assert_int_equal(di_stream_push_text(s, "abc", 3, 1, NULL), DI_OK);
    assert_true(di_stream_chunk_count(s) > 0);
    assert_int_equal(di_stream_push_text(s, "\xff", 1, 1, NULL), DI_ERR_INVALID_UTF8);
    assert_int_equal(di_stream_chunk_count(s), 0);
    assert_int_equal(di_stream_event_count(s), 0);
    assert_int_equal(di_stream_finish(s, DI_FINISH_STOP, NULL), DI_OK);
    assert_true(di_stream_chunk_count(s) > 0);
    assert_int_equal(di_stream_push_text(s, "x", 1, 1, NULL), DI_ERR_INVALID_STATE);
    assert_int_equal(di_stream_chunk_count(s), 0);
    assert_null(di_stream_stop_sequence(s));
    di_stream_free(s);
}

/* A model stuck writing newlines, a token at a time, must not make each push cost
 * more than the last: the held run is capped (and nothing is lost). */
static void test_an_endless_newline_run_is_released(void **state)
{
    (void)state;
    di_stream *s = open_stream(DI_PROTOCOL_CHAT, chat_tools, NULL);
    assert_int_equal(di_stream_push_text(s, "a", 1, 1, NULL), DI_OK);
    size_t released = 0;
    for (int i = 0; i < 5000; i++) {
        assert_int_equal(di_stream_push_text(s, "\n", 1, 1, NULL), DI_OK);
        for (size_t e = 0; e < di_stream_event_count(s); e++)
            released += di_stream_event_kind_at(s, e) == DI_STREAM_REASONING;
    }
    assert_true(released >= 5000 - 1024);
    assert_int_equal(di_stream_finish(s, DI_FINISH_STOP, NULL), DI_OK);
    uint32_t completion;
    di_stream_usage(s, &completion, NULL);
    assert_int_equal(completion, 5001);
    di_stream_free(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stream_rejects_bad_arguments),
        cmocka_unit_test(test_invalid_utf8_push_is_rejected_and_loses_nothing),
        cmocka_unit_test(test_dsml_tool_call_split_at_every_byte),
        cmocka_unit_test(test_stop_sequence_ends_the_stream_inside_the_push),
        cmocka_unit_test(test_events_describe_the_tool_call),
        cmocka_unit_test(test_finish_without_a_reason_reports_stop),
        cmocka_unit_test(test_parsing_override_opens_json_mode),
        cmocka_unit_test(test_token_pushes_never_split_a_character),
        cmocka_unit_test(test_every_protocol_ends_once),
        cmocka_unit_test(test_template_tool_calls_round_trip),
        cmocka_unit_test(test_template_calls_nobody_asked_for_stay_text),
        cmocka_unit_test(test_logprobs_push_errors_name_the_argument),
        cmocka_unit_test(test_options_from_prompt_start_the_override),
        cmocka_unit_test(test_a_failed_call_leaves_no_stale_chunks),
        cmocka_unit_test(test_an_endless_newline_run_is_released),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
