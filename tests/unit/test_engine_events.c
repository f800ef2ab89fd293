/* lib/api/event.c: a di_stream's output becomes engine events — text, tool-call
 * deltas and the complete call with its id, name and arguments, protocol
 * chunks — read back through the public getters. The stream's own behaviour is
 * deepseek-recipe's (tests/parity/stream_parity.py); this checks the mapping. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "api/engine_internal.h"
#include "api/event.h"

static const char *const chat_tools =
    "{\"model\":\"DeepSeek-V4-Pro\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],"
    "\"stream\":true,\"tools\":[{\"type\":\"function\",\"function\":{"
    "\"name\":\"get_weather\",\"parameters\":{\"type\":\"object\",\"properties\":{\"city\":{"
    "\"type\":\"string\"}}}}}]}";

static const char *const dsml_call =
    "Checking.\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"get_weather\">\n"
    "<｜DSML｜parameter name=\"city\" string=\"true\">Pa\"ris</｜DSML｜parameter>\n"
    "</｜DSML｜invoke>\n</｜DSML｜tool_calls>";

static void test_stream_output_becomes_text_tool_call_and_chunk_events(void **state)
{
    (void)state;
    di_codec *codec = NULL;
    di_prompt *p = NULL;
    assert_int_equal(di_codec_create(NULL, DI_ENCODING_DSV4, &codec, NULL), DI_OK);
    assert_int_equal(
        di_codec_render(codec, DI_PROTOCOL_CHAT, chat_tools, strlen(chat_tools), &p, NULL), DI_OK);
    di_stream *s = NULL;
    assert_int_equal(di_stream_create(p, NULL, NULL, &s, NULL), DI_OK);
    event_list l = {0};
    int user = 0;
    assert_int_equal(di_stream_ready(s, 10, 0, NULL, NULL), DI_OK);
    collect_stream(&l, 7, NULL, &user, s, NULL);
    /* Pushed in pieces of 5 bytes, as tokens would arrive. */
    size_t n = strlen(dsml_call);
    for (size_t i = 0; i < n; i += 5) {
        size_t k = n - i < 5 ? n - i : 5;
        /* do not cut a UTF-8 character: extend to its end */
        while (i + k < n && ((unsigned char)dsml_call[i + k] & 0xC0) == 0x80) k++;
        assert_int_equal(di_stream_push_text(s, dsml_call + i, k, 1, NULL), DI_OK);
        collect_stream(&l, 7, NULL, &user, s, NULL);
        i += k - 5;
    }
    char *finish = NULL;
    assert_int_equal(di_stream_finish(s, DI_FINISH_STOP, NULL), DI_OK);
    collect_stream(&l, 7, NULL, &user, s, &finish);
    assert_false(l.oom);
    assert_non_null(finish);
    assert_string_equal(finish, "tool_calls");

    char text[256] = "", args[256] = "";
    const char *call_json = NULL, *call_id = NULL;
    int n_chunks = 0, n_calls = 0, saw_done = 0;
    for (di_event *ev = l.head; ev; ev = ev->next) {
        assert_int_equal(di_event_request_id(ev), 7);
        size_t len;
        const char *t = di_event_text(ev, &len);
        switch (di_event_kind_of(ev)) {
        case DI_EVENT_TEXT:
        case DI_EVENT_REASONING: /* V4-Pro thinks by default: "Checking." is reasoning */
            strncat(text, t, sizeof text - strlen(text) - 1);
            break;
        case DI_EVENT_TOOL_CALL_DELTA:
            assert_int_equal(di_event_tool_call_index(ev), 0);
            assert_string_equal(di_event_tool_call_name(ev), "get_weather");
            assert_non_null(di_event_tool_call_id(ev));
            if (call_id) assert_string_equal(call_id, di_event_tool_call_id(ev));
            call_id = di_event_tool_call_id(ev);
            strncat(args, t, sizeof args - strlen(args) - 1);
            break;
        case DI_EVENT_TOOL_CALL:
            n_calls++;
            assert_string_equal(di_event_tool_call_name(ev), "get_weather");
            assert_true(strncmp(di_event_tool_call_id(ev), "call_", 5) == 0);
            if (call_id) assert_string_equal(call_id, di_event_tool_call_id(ev));
            call_json = t;
            assert_null(di_event_chunk_sse(ev, NULL));
            break;
        case DI_EVENT_CHUNK: {
            n_chunks++;
            size_t sl;
            const char *sse = di_event_chunk_sse(ev, &sl);
            assert_non_null(sse);
            assert_int_equal(strlen(sse), sl);
            if (strcmp(sse, "data: [DONE]\n\n") == 0) {
                saw_done = 1;
                assert_null(di_event_chunk_json(ev, NULL));
            } else {
                assert_non_null(di_event_chunk_json(ev, NULL));
            }
            assert_null(di_event_chunk_name(ev)); /* Chat's events are unnamed */
            break;
        }
        default: fail_msg("unexpected event kind %d", (int)di_event_kind_of(ev));
        }
    }
    assert_string_equal(text, "Checking.");
    assert_int_equal(n_calls, 1);
    assert_non_null(call_json);
    /* The arguments as docs/stream.md's DSML rules write them; the deltas add up to them. */
    assert_string_equal(call_json, "{\"city\": \"Pa\\\"ris\"}");
    assert_string_equal(args, call_json);
    assert_true(n_chunks >= 4);
    assert_true(saw_done);
    for (di_event *ev = l.head, *next; ev; ev = next) {
        next = ev->next;
        event_free(ev);
    }
    free(finish);
    di_stream_free(s);
    di_prompt_free(p);
    di_codec_free(codec);
}

static void test_getters_are_safe_on_null_and_other_kinds(void **state)
{
    (void)state;
    size_t n = 99;
    assert_int_equal(di_event_kind_of(NULL), 0);
    assert_null(di_event_text(NULL, &n));
    assert_int_equal(n, 0);
    assert_null(di_event_tokens(NULL, &n));
    assert_int_equal(di_event_tool_call_index(NULL), -1);
    assert_string_equal(di_event_message(NULL), "");
    assert_int_equal(di_event_completion_tokens(NULL), 0);
    event_list l = {0};
    di_event *ev = event_new(&l, 3, NULL, NULL, DI_EVENT_DONE);
    assert_non_null(ev);
    assert_string_equal(di_event_text(ev, &n), "");
    assert_null(di_event_chunk_sse(ev, NULL));
    assert_null(di_event_tokens(ev, &n));
    assert_int_equal(di_event_status(ev), DI_OK);
    assert_null(di_event_response_json(ev, &n));
    event_free(ev);
}

/* Token requests' stop strings (lib/api/stop_strings.c) against a naive oracle:
 * random texts over {a, b} pushed in random pieces with random stop strings
 * (overlapping prefixes such as "aab" in "aaab" included) must give exactly the
 * whole text's prefix before the occurrence that completes first (strstr on
 * the whole text; the longest of those ending at the same byte), or the whole
 * text — whatever the pieces, as streaming a byte at a time would. */
static void test_stop_strings_equal_a_search_of_the_whole_text(void **state)
{
    (void)state;
    uint64_t x = 88172645463325252ull;
#define RND() (x ^= x << 13, x ^= x >> 7, x ^= x << 17, x)
    for (int round = 0; round < 3000; round++) {
        char text[64], stops[3][6];
        size_t n = 1 + RND() % 40, n_stops = 1 + RND() % 3;
        for (size_t i = 0; i < n; i++) text[i] = RND() % 2 ? 'a' : 'b';
        text[n] = '\0';
        api_request a;
        memset(&a, 0, sizeof a);
        char *ptrs[3];
        for (size_t k = 0; k < n_stops; k++) {
            size_t m = 1 + RND() % 5;
            for (size_t i = 0; i < m; i++) stops[k][i] = RND() % 2 ? 'a' : 'b';
            stops[k][m] = '\0';
            ptrs[k] = stops[k];
            if (m > a.max_stop) a.max_stop = m;
        }
        a.stops = ptrs;
        a.n_stops = n_stops;
        /* the oracle: the occurrence that completes first (the longest at a tie) */
        size_t want = n, end = n + 1;
        for (size_t k = 0; k < n_stops; k++) {
            const char *f = strstr(text, stops[k]);
            size_t at = f ? (size_t)(f - text) : n, e = at + strlen(stops[k]);
            if (f && (e < end || (e == end && at < want))) {
                want = at;
                end = e;
            }
        }
        event_list l = {0};
        int hit = 0;
        size_t i = 0;
        while (i < n && !hit) {
            size_t len = 1 + RND() % 6;
            if (len > n - i) len = n - i;
            hit = api_stop_feed(&a, 1, &l, text + i, len, 0);
            assert_true(hit >= 0);
            i += len;
        }
        if (!hit) assert_int_equal(api_stop_feed(&a, 1, &l, "", 0, 1), 0);
        assert_int_equal(hit, want < n);
        char got[64];
        size_t got_len = 0;
        for (di_event *ev = l.head; ev; ev = ev->next) {
            assert_true(got_len + ev->text_len <= n);
            memcpy(got + got_len, ev->text, ev->text_len);
            got_len += ev->text_len;
        }
        if (got_len != want || memcmp(got, text, want) != 0)
            fail_msg("text %s, stops %s %s %s: got %.*s", text, stops[0],
                     n_stops > 1 ? stops[1] : "", n_stops > 2 ? stops[2] : "", (int)got_len, got);
        while (l.head) {
            di_event *next = l.head->next;
            event_free(l.head);
            l.head = next;
        }
        free(a.held);
    }
#undef RND
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stream_output_becomes_text_tool_call_and_chunk_events),
        cmocka_unit_test(test_getters_are_safe_on_null_and_other_kinds),
        cmocka_unit_test(test_stop_strings_equal_a_search_of_the_whole_text),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
