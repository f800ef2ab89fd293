/* Request fields as a host sees them (docs/api.md, "Request fields" and
 * "Sampling precedence"): the chat templates' prompts report the body's
 * sampling fields; every field the engine cannot honour is refused by
 * di_submit naming it, and the same body without it is accepted; the body's
 * sampling fields win over di_request's, checked against the same request
 * with the value moved into di_request (the sampler is the oracle of
 * itself: identical tokens); max_tokens past the context is an error; the
 * usage's completion_tokens equals di_event_completion_tokens; responses name
 * the served model; di_engine_model_info describes the file; the clear names
 * and their aliases agree. With SmolLM2 (skipped when the asset is missing)
 * and a tiny Hugging Face folder. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "deepinfer/deepinfer.h"

#define SMOL DI_ASSET_DIR "/smollm2-135m-instruct/SmolLM2-135M-Instruct.Q4_1.gguf"
#define TINY DI_FIXTURE_DIR "/model/qwen2-tied-f16"

static di_prompt *render(di_encoding enc, di_protocol protocol, const char *body, di_status want,
                         const char *want_in_message)
{
    di_codec *c = NULL;
    assert_int_equal(di_codec_create(NULL, enc, &c, NULL), DI_OK);
    di_prompt *p = NULL;
    di_error *err = NULL;
    di_status st = di_codec_render(c, protocol, body, strlen(body), &p, &err);
    if (st != want) fail_msg("render %s: %d (%s)", body, (int)st, di_error_message(err));
    if (want_in_message && !strstr(di_error_message(err), want_in_message))
        fail_msg("render %s: message \"%s\" lacks \"%s\"", body, di_error_message(err),
                 want_in_message);
    di_error_free(err);
    di_codec_free(c);
    return p;
}

static void test_template_prompts_report_the_body(void **state)
{
    (void)state;
    const di_encoding encs[] = {DI_ENCODING_CHATML, DI_ENCODING_DSV3, DI_ENCODING_R1};
    for (size_t k = 0; k < 3; k++) {
        di_prompt *p = render(encs[k], DI_PROTOCOL_CHAT,
                              "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],"
                              "\"temperature\":0.25,\"top_p\":0.5,\"max_tokens\":7,"
                              "\"stop\":[\"x\",\"yz\"]}",
                              DI_OK, NULL);
        assert_true(di_prompt_temperature(p) == 0.25f);
        assert_true(di_prompt_top_p(p) == 0.5f);
        assert_int_equal(di_prompt_stop_count(p), 2);
        assert_string_equal(di_prompt_stop(p, 1), "yz");
        assert_null(di_prompt_stop(p, 2));
        uint32_t mt = 0;
        assert_int_equal(di_prompt_max_tokens(p, 10, 4096, &mt, NULL), DI_OK);
        assert_int_equal(mt, 7);
        assert_int_equal(di_prompt_max_tokens(p, 4093, 4096, &mt, NULL), DI_ERR_CONTEXT_LENGTH);
        di_prompt_free(p);
        /* a body without them: the defaults, and no stop sequences */
        p = render(encs[k], DI_PROTOCOL_CHAT,
                   "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"stop\":\"END\"}",
                   DI_OK, NULL);
        assert_true(di_prompt_temperature(p) == 1.0f);
        assert_true(di_prompt_top_p(p) == 1.0f);
        assert_int_equal(di_prompt_stop_count(p), 1);
        di_prompt_free(p);
    }
    /* max_completion_tokens wins over the older max_tokens, as OpenAI's */
    di_prompt *p = render(DI_ENCODING_CHATML, DI_PROTOCOL_CHAT,
                          "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],"
                          "\"max_completion_tokens\":3,\"max_tokens\":9}",
                          DI_OK, NULL);
    uint32_t mt = 0;
    assert_int_equal(di_prompt_max_tokens(p, 10, 4096, &mt, NULL), DI_OK);
    assert_int_equal(mt, 3);
    di_prompt_free(p);
    /* Messages converted for ChatML report theirs too */
    p = render(DI_ENCODING_CHATML, DI_PROTOCOL_MESSAGES,
               "{\"model\":\"m\",\"max_tokens\":5,\"temperature\":0.5,\"stop_sequences\":[\"q\"],"
               "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}",
               DI_OK, NULL);
    assert_true(di_prompt_temperature(p) == 0.5f);
    assert_int_equal(di_prompt_stop_count(p), 1);
    assert_int_equal(di_prompt_max_tokens(p, 10, 4096, &mt, NULL), DI_OK);
    assert_int_equal(mt, 5);
    di_prompt_free(p);
    /* out of range or of the wrong type: the field named */
    static const struct {
        const char *body, *field;
    } bad[] = {
        {"\"temperature\":3", "temperature"},
        {"\"top_p\":-1", "top_p"},
        {"\"max_tokens\":0", "max_tokens"},
        {"\"stop\":5", "stop"},
        {"\"stop\":[\"a\",\"\"]", "stop[1]"},
        {"\"seed\":-2", "seed"},
        {"\"presence_penalty\":2.5", "presence_penalty"},
        {"\"logit_bias\":{\"abc\":1}", "logit_bias"},
        {"\"logit_bias\":{\"5\":101}", "logit_bias.5"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char body[256];
        snprintf(body, sizeof body, "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],%s}",
                 bad[i].body);
        assert_null(render(DI_ENCODING_CHATML, DI_PROTOCOL_CHAT, body, DI_ERR_INVALID_REQUEST,
                           bad[i].field));
    }
}

/* A ChatML answer in json_object mode is the JSON, without the Markdown fence
 * small models put around it (the smallest failing input of the issue). */
static void test_chatml_json_object_drops_the_fence(void **state)
{
    (void)state;
    static const char *const bodies[] = {
        "{\"response_format\":{\"type\":\"json_object\"},\"messages\":[{\"role\":\"user\","
        "\"content\":\"JSON please\"}]}",
        "{\"model\":\"m\",\"text\":{\"format\":{\"type\":\"json_object\"}},\"input\":\"JSON "
        "please\"}",
    };
    const di_protocol protocols[] = {DI_PROTOCOL_CHAT, DI_PROTOCOL_RESPONSES};
    for (int k = 0; k < 2; k++) {
        di_prompt *p = render(DI_ENCODING_CHATML, protocols[k], bodies[k], DI_OK, NULL);
        di_stream *st = NULL;
        assert_int_equal(di_stream_create(p, NULL, NULL, &st, NULL), DI_OK);
        di_prompt_free(p);
        assert_int_equal(di_stream_ready(st, 5, 0, NULL, NULL), DI_OK);
        const char *out = "```json\n{\"a\": 1}\n```";
        assert_int_equal(di_stream_push_text(st, out, strlen(out), 6, NULL), DI_OK);
        assert_int_equal(di_stream_finish(st, DI_FINISH_STOP, NULL), DI_OK);
        const char *r = di_stream_response_json(st, NULL);
        if (strstr(r, "```")) fail_msg("the fence stayed: %s", r);
        assert_non_null(strstr(r, "{\\\"a\\\": 1}"));
        di_stream_free(st);
    }
    /* without json_object the text is the model's, fence and all */
    di_prompt *p = render(DI_ENCODING_CHATML, DI_PROTOCOL_CHAT,
                          "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}", DI_OK, NULL);
    di_stream *st = NULL;
    assert_int_equal(di_stream_create(p, NULL, NULL, &st, NULL), DI_OK);
    di_prompt_free(p);
    const char *out = "```json\n{}\n```";
    assert_int_equal(di_stream_push_text(st, out, strlen(out), 4, NULL), DI_OK);
    assert_int_equal(di_stream_finish(st, DI_FINISH_STOP, NULL), DI_OK);
    assert_non_null(strstr(di_stream_response_json(st, NULL), "```json"));
    di_stream_free(st);
}

/* ---- the engine ---- */

typedef struct rec {
    uint64_t id;
    int done;
    di_status status;
    di_finish finish;
    uint32_t completion_tokens, n_tokens;
    char response[8192];
    int n_delta, n_delta_mismatch;
    int32_t first_token;
} rec;

static void on_event(void *user, const di_event *ev)
{
    rec *r = user;
    size_t n = 0;
    switch (di_event_kind_of(ev)) {
    case DI_EVENT_TOKENS: {
        const int32_t *t = di_event_tokens(ev, &n);
        if (r->n_tokens == 0 && n) r->first_token = t[0];
        r->n_tokens += (uint32_t)n;
        assert_null(di_event_delta(ev, NULL));
        break;
    }
    case DI_EVENT_TEXT:
    case DI_EVENT_REASONING: {
        size_t a = 0, b = 0;
        const char *x = di_event_delta(ev, &a), *y = di_event_text(ev, &b);
        r->n_delta++;
        if (x != y || a != b) r->n_delta_mismatch++;
        assert_null(di_event_tool_call_arguments(ev, NULL));
        break;
    }
    case DI_EVENT_CHUNK:
        assert_ptr_equal(di_event_chunk_event_name(ev), di_event_chunk_name(ev));
        break;
    case DI_EVENT_DONE: {
        r->done++;
        r->status = di_event_status(ev);
        r->finish = di_event_finish_reason(ev);
        r->completion_tokens = di_event_completion_tokens(ev);
        size_t len = 0;
        const char *j = di_event_response_json(ev, &len);
        if (j && len < sizeof r->response) memcpy(r->response, j, len + 1);
        break;
    }
    default: break;
    }
    assert_non_null(di_event_kind_name(di_event_kind_of(ev)));
}

static di_engine *make_engine(const char *path, int64_t n_ctx, const char *served)
{
    di_engine_config cfg;
    di_engine_config_init(&cfg);
    cfg.model_path = path;
    cfg.n_threads = 2;
    cfg.n_ctx = n_ctx;
    cfg.served_model_name = served;
    di_engine *e = NULL;
    di_error *err = NULL;
    if (di_engine_create(&cfg, &e, &err) != DI_OK) fail_msg("%s", di_error_message(err));
    return e;
}

static void poll_until_idle(di_engine *e)
{
    for (int i = 0; i < 100000 && di_engine_pending_count(e) > 0; i++)
        assert_true(di_poll(e, 50) >= 0);
    assert_int_equal(di_engine_pending(e), 0);
}

/* Submit a Chat body (with `req`'s other fields) and run it to its end. */
static di_status run_chat(di_engine *e, const char *body, const di_request *base, rec *r,
                          di_error **err)
{
    di_request q = *base;
    q.protocol = DI_PROTOCOL_CHAT;
    q.json = body;
    q.json_len = strlen(body);
    q.on_event = on_event;
    q.user_data = r;
    memset(r, 0, sizeof *r);
    di_status st = di_submit(e, &q, &r->id, err);
    if (st == DI_OK) poll_until_idle(e);
    return st;
}

static void test_unsupported_fields_are_refused(void **state)
{
    (void)state;
    if (access(SMOL, R_OK) != 0) skip();
    di_engine *e = make_engine(SMOL, 512, NULL);
    static const struct {
        di_protocol protocol;
        const char *fields, *named;
    } cases[] = {
        {DI_PROTOCOL_CHAT, "\"reasoning_effort\":\"high\"", "reasoning_effort"},
        {DI_PROTOCOL_CHAT, "\"audio\":{\"voice\":\"x\"}", "audio"},
        {DI_PROTOCOL_CHAT, "\"modalities\":[\"text\",\"audio\"]", "modalities"},
        {DI_PROTOCOL_MESSAGES, "\"thinking\":{\"type\":\"enabled\",\"budget_tokens\":1024}",
         "thinking"},
        {DI_PROTOCOL_RESPONSES, "\"store\":true", "store"},
        {DI_PROTOCOL_RESPONSES, "\"previous_response_id\":\"resp_1\"", "previous_response_id"},
        {DI_PROTOCOL_RESPONSES, "\"background\":true", "background"},
        {DI_PROTOCOL_RESPONSES, "\"reasoning\":{\"effort\":\"high\"}", "reasoning.effort"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int resp = cases[i].protocol == DI_PROTOCOL_RESPONSES;
        const char *head =
            resp ? "{\"model\":\"m\",\"input\":\"hi\",\"max_output_tokens\":2"
                 : "{\"model\":\"m\",\"max_tokens\":2,\"messages\":[{\"role\":\"user\","
                   "\"content\":\"hi\"}]";
        char body[1024];
        snprintf(body, sizeof body, "%s,%s}", head, cases[i].fields);
        di_request q;
        di_request_init(&q);
        q.protocol = cases[i].protocol;
        q.json = body;
        q.json_len = strlen(body);
        q.on_event = on_event;
        rec r = {0};
        q.user_data = &r;
        di_error *err = NULL;
        uint64_t id;
        di_status st = di_submit(e, &q, &id, &err);
        if (st != DI_ERR_UNSUPPORTED || !strstr(di_error_message(err), cases[i].named))
            fail_msg("case %zu (%s): status %d, \"%s\"", i, body, (int)st, di_error_message(err));
        di_error_free(err);
        /* without the field the same body is served */
        snprintf(body, sizeof body, "%s}", head);
        q.json_len = strlen(body);
        if (di_submit(e, &q, &r.id, &err) != DI_OK)
            fail_msg("case %zu without the field: %s", i, di_error_message(err));
        poll_until_idle(e);
        assert_int_equal(r.status, DI_OK);
    }
    /* informational fields and the values that change nothing are accepted */
    di_request base;
    di_request_init(&base);
    rec r;
    assert_int_equal(run_chat(e,
                              "{\"model\":\"m\",\"max_tokens\":2,\"n\":1,\"logprobs\":false,"
                              "\"user\":\"u\",\"metadata\":{\"k\":\"v\"},\"parallel_tool_calls\":"
                              "true,\"reasoning_effort\":\"none\",\"messages\":[{\"role\":\"user\","
                              "\"content\":\"hi\"}]}",
                              &base, &r, NULL),
                     DI_OK);
    assert_int_equal(r.status, DI_OK);
    /* the codec itself still renders such bodies, as deepseek-recipe does */
    di_prompt *p =
        render(DI_ENCODING_DSV4, DI_PROTOCOL_CHAT,
               "{\"model\":\"DeepSeek-V4-Pro\",\"logprobs\":true,\"messages\":[{\"role\":"
               "\"user\",\"content\":\"hi\"}]}",
               DI_OK, NULL);
    di_prompt_free(p);
    assert_int_equal(di_engine_destroy(e), DI_OK);
}

/* Output tokens of a finished request, compared by the response text. */
static void assert_same_output(const rec *a, const rec *b)
{
    const char *ca = strstr(a->response, "\"content\""), *cb = strstr(b->response, "\"content\"");
    assert_non_null(ca);
    assert_non_null(cb);
    const char *ea = strstr(ca, "\"finish_reason\""), *eb = strstr(cb, "\"finish_reason\"");
    assert_non_null(ea);
    assert_non_null(eb);
    assert_int_equal(ea - ca, eb - cb);
    assert_memory_equal(ca, cb, (size_t)(ea - ca));
    assert_int_equal(a->completion_tokens, b->completion_tokens);
}

/* The complete tool calls of a Chat response: a new array of {"name": …,
 * "arguments": parsed}. A call whose arguments are not JSON must be the last
 * and cut by max_tokens (left out). */
static json_t *complete_calls(const char *response, di_finish finish)
{
    json_t *root = json_loads(response, 0, NULL);
    if (!root) fail_msg("not JSON: %s", response);
    json_t *calls = json_object_get(
        json_object_get(json_array_get(json_object_get(root, "choices"), 0), "message"),
        "tool_calls");
    size_t n = json_array_size(calls);
    json_t *out = json_array();
    for (size_t i = 0; i < n; i++) {
        json_t *fn = json_object_get(json_array_get(calls, i), "function");
        const char *a = json_string_value(json_object_get(fn, "arguments"));
        json_t *args = a ? json_loads(a, 0, NULL) : NULL;
        if (!args && i + 1 == n && finish == DI_FINISH_LENGTH) break;
        if (!args) {
            json_decref(out);
            json_decref(root);
            fail_msg("arguments are not JSON: %s", response);
        }
        json_array_append_new(
            out, json_pack("{s:O,s:o}", "name", json_object_get(fn, "name"), "arguments", args));
    }
    json_decref(root);
    return out;
}

/* The weather tool's schema, checked by hand: {"city": string of 1-12
 * characters, "days": integer in [1, 7], "unit": "c" | "f"}, all required, no
 * other property. */
static const char weather_schema[] =
    "{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\",\"minLength\":1,"
    "\"maxLength\":12},\"days\":{\"type\":\"integer\",\"minimum\":1,\"maximum\":7},"
    "\"unit\":{\"type\":\"string\",\"enum\":[\"c\",\"f\"]}},\"required\":[\"city\",\"days\","
    "\"unit\"],"
    "\"additionalProperties\":false}";

static int weather_args_ok(json_t *a)
{
    json_t *city = json_object_get(a, "city"), *days = json_object_get(a, "days");
    const char *unit = json_string_value(json_object_get(a, "unit"));
    size_t n_chars = 0;
    for (const char *c = json_string_value(city); c && *c; c++) n_chars += ((*c & 0xC0) != 0x80);
    return json_is_object(a) && json_object_size(a) == 3 && json_is_string(city) && n_chars >= 1 &&
           n_chars <= 12 && json_is_integer(days) && json_integer_value(days) >= 1 &&
           json_integer_value(days) <= 7 && unit &&
           (strcmp(unit, "c") == 0 || strcmp(unit, "f") == 0);
}

static void assert_weather_args(json_t *a, const char *response)
{
    if (!weather_args_ok(a)) fail_msg("arguments do not match the schema: %s", response);
}

/* The ids of text's tokens in e's vocabulary, each biased by `bias` into
 * q's logit_bias (arrays of at most 32). */
static size_t bias_text(di_engine *e, const char *text, float bias, int32_t *ids, float *values,
                        size_t n)
{
    int32_t *t = NULL;
    size_t nt = 0;
    assert_int_equal(
        di_tokenizer_encode(di_engine_tokenizer(e), text, strlen(text), 0, &t, &nt, NULL), DI_OK);
    for (size_t i = 0; i < nt && n < 32; i++) ids[n] = t[i], values[n++] = bias;
    di_tokens_free(t);
    return n;
}

/* Strict tools on SmolLM2 (Hermes calls): a required call, a named call, a
 * call in auto mode pushed by logit_bias toward <tool_call>, through Chat,
 * Messages (input_schema with strict) and Responses — sampled with
 * temperature 1.5 and logit_bias toward tokens that break the JSON; every
 * call is parsed back by the stream parser and its arguments match the
 * schema. */
static void test_strict_tools_constrain_hermes_calls(void **state)
{
    (void)state;
    if (access(SMOL, R_OK) != 0) skip();
    di_engine *e = make_engine(SMOL, 1024, NULL);
    char tools_chat[1024], tools_msg[1024], tools_resp[1024];
    snprintf(tools_chat, sizeof tools_chat,
             "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"strict\":true,"
             "\"parameters\":%s}},{\"type\":\"function\",\"function\":{\"name\":\"noop\","
             "\"parameters\":{\"type\":\"object\"}}}]",
             weather_schema);
    snprintf(tools_msg, sizeof tools_msg,
             "[{\"name\":\"get_weather\",\"strict\":true,\"input_schema\":%s}]", weather_schema);
    snprintf(tools_resp, sizeof tools_resp,
             "[{\"type\":\"function\",\"name\":\"get_weather\",\"strict\":true,\"parameters\":%s}]",
             weather_schema);
    int32_t ids[32];
    float values[32];
    size_t nb = bias_text(e, "}\"]} hello 99 <tool_call></tool_call>", 4.0f, ids, values, 0);
    static const char *const choices[] = {
        "\"required\"", "{\"type\":\"function\",\"function\":{\"name\":\"get_weather\"}}",
        "\"auto\""};
    int n_calls = 0;
    for (int k = 0; k < 3; k++)
        for (int seed = 1; seed <= 1; seed++) {
            char body[4096];
            snprintf(body, sizeof body,
                     "{\"model\":\"m\",\"max_tokens\":64,\"temperature\":1.5,\"seed\":%d,"
                     "\"messages\":[{\"role\":\"user\",\"content\":\"Weather in Paris?\"}],"
                     "\"tools\":%s,\"tool_choice\":%s}",
                     seed, tools_chat, choices[k]);
            di_request q;
            di_request_init(&q);
            q.logit_bias_ids = ids;
            q.logit_bias_values = values;
            q.n_logit_bias = nb;
            int32_t auto_ids[32];
            float auto_values[32];
            if (k == 2) { /* auto: push the model into a call */
                size_t na = bias_text(e, "<tool_call>", 30.0f, auto_ids, auto_values, 0);
                q.logit_bias_ids = auto_ids;
                q.logit_bias_values = auto_values;
                q.n_logit_bias = na;
            }
            rec r;
            di_error *err = NULL;
            if (run_chat(e, body, &q, &r, &err) != DI_OK) fail_msg("%s", di_error_message(err));
            assert_int_equal(r.status, DI_OK);
            json_t *calls = complete_calls(r.response, r.finish);
            for (size_t c = 0; c < json_array_size(calls); c++) {
                json_t *call = json_array_get(calls, c), *a = json_object_get(call, "arguments");
                const char *name = json_string_value(json_object_get(call, "name"));
                n_calls++;
                if (k == 2 && strcmp(name, "noop") == 0) {
                    assert_true(json_is_object(a)); /* not strict: any object */
                } else {
                    assert_string_equal(name, "get_weather");
                    assert_weather_args(a, r.response);
                }
            }
            json_decref(calls);
        }
    assert_true(n_calls >= 2);
    /* Messages (tool_choice any) and Responses (required) */
    for (int k = 0; k < 2; k++) {
        char body[4096];
        if (k == 0)
            snprintf(body, sizeof body,
                     "{\"model\":\"m\",\"max_tokens\":64,\"temperature\":1.5,\"messages\":[{"
                     "\"role\":\"user\",\"content\":\"Weather?\"}],\"tools\":%s,\"tool_choice\":"
                     "{\"type\":\"any\"}}",
                     tools_msg);
        else
            snprintf(body, sizeof body,
                     "{\"model\":\"m\",\"max_output_tokens\":64,\"temperature\":1.5,\"input\":"
                     "\"Weather?\",\"tools\":%s,\"tool_choice\":\"required\"}",
                     tools_resp);
        di_request q;
        di_request_init(&q);
        q.protocol = k == 0 ? DI_PROTOCOL_MESSAGES : DI_PROTOCOL_RESPONSES;
        q.json = body;
        q.json_len = strlen(body);
        q.seed = 3;
        q.on_event = on_event;
        rec r = {0};
        q.user_data = &r;
        di_error *err = NULL;
        if (di_submit(e, &q, &r.id, &err) != DI_OK) fail_msg("%s", di_error_message(err));
        poll_until_idle(e);
        assert_int_equal(r.status, DI_OK);
        json_t *root = json_loads(r.response, 0, NULL);
        assert_non_null(root);
        json_t *content = json_object_get(root, k == 0 ? "content" : "output");
        int n = 0;
        size_t last = json_array_size(content);
        for (size_t i = 0; i < last; i++) {
            json_t *b = json_array_get(content, i), *args = NULL;
            const char *type = json_string_value(json_object_get(b, "type"));
            if (k == 0 && type && strcmp(type, "tool_use") == 0)
                args = json_incref(json_object_get(b, "input"));
            if (k == 1 && type && strcmp(type, "function_call") == 0)
                args = json_loads(json_string_value(json_object_get(b, "arguments")), 0, NULL);
            /* (only the last may be cut by max_tokens: Messages then gives its
             * input as {}, Responses its arguments unfinished) */
            if (i + 1 == last && r.finish == DI_FINISH_LENGTH && !weather_args_ok(args)) {
                json_decref(args);
                break;
            }
            if (!args) fail_msg("not a call: %s", r.response);
            assert_weather_args(args, r.response);
            json_decref(args);
            n++;
        }
        if (!n) fail_msg("no call: %s", r.response);
        json_decref(root);
    }
    assert_int_equal(di_engine_destroy(e), DI_OK);
}

/* The number of tool calls in a response of `protocol` (Chat tool_calls,
 * Messages tool_use blocks, Responses function_call items). */
static size_t count_calls(di_protocol protocol, const char *response)
{
    json_t *root = json_loads(response, 0, NULL);
    if (!root) fail_msg("not JSON: %s", response);
    size_t n = 0;
    if (protocol == DI_PROTOCOL_CHAT) {
        n = json_array_size(json_object_get(
            json_object_get(json_array_get(json_object_get(root, "choices"), 0), "message"),
            "tool_calls"));
    } else {
        json_t *items =
            json_object_get(root, protocol == DI_PROTOCOL_MESSAGES ? "content" : "output");
        const char *kind = protocol == DI_PROTOCOL_MESSAGES ? "tool_use" : "function_call";
        for (size_t i = 0; i < json_array_size(items); i++) {
            const char *type = json_string_value(json_object_get(json_array_get(items, i), "type"));
            n += type && strcmp(type, kind) == 0;
        }
    }
    json_decref(root);
    return n;
}

/* parallel_tool_calls: false (Chat, Responses) and Messages'
 * disable_parallel_tool_use: true allow one call per turn: SmolLM2 at
 * temperature 0 repeats its call until max_tokens when it may (several
 * calls), and with the flag stops after exactly one, which ends the turn
 * (the end token, not max_tokens); in auto mode, pushed toward <tool_call>,
 * at most one. */
static void test_parallel_tool_calls_false_gives_one_call(void **state)
{
    (void)state;
    if (access(SMOL, R_OK) != 0) skip();
    di_engine *e = make_engine(SMOL, 1024, NULL);
    static const char tool_chat[] =
        "[{\"type\":\"function\",\"function\":{\"name\":\"ping\",\"parameters\":{\"type\":"
        "\"object\",\"properties\":{\"host\":{\"type\":\"string\"}}}}}]";
    static const char tool_resp[] =
        "[{\"type\":\"function\",\"name\":\"ping\",\"parameters\":{\"type\":\"object\","
        "\"properties\":{\"host\":{\"type\":\"string\"}}}}]";
    static const char tool_msg[] =
        "[{\"name\":\"ping\",\"input_schema\":{\"type\":\"object\",\"properties\":{\"host\":{"
        "\"type\":\"string\"}}}}]";
    int32_t ids[32];
    float values[32];
    size_t nb = bias_text(e, "<tool_call>", 30.0f, ids, values, 0);
    for (int k = 0; k < 8; k++) {
        if (k == 2) continue; /* auto: only with the flag (then at most one call) */
        int single = k % 2,
            mode = k / 2; /* 0 Chat required, 1 Chat auto, 2 Responses, 3 Messages */
        di_protocol protocol = mode == 2   ? DI_PROTOCOL_RESPONSES
                               : mode == 3 ? DI_PROTOCOL_MESSAGES
                                           : DI_PROTOCOL_CHAT;
        char body[2048];
        if (protocol == DI_PROTOCOL_CHAT)
            snprintf(body, sizeof body,
                     "{\"model\":\"m\",\"max_tokens\":160,\"temperature\":0,\"messages\":[{"
                     "\"role\":\"user\",\"content\":\"Ping example.com, then ping it again.\"}],"
                     "\"tools\":%s,\"tool_choice\":\"%s\"%s}",
                     tool_chat, mode == 0 ? "required" : "auto",
                     single ? ",\"parallel_tool_calls\":false" : "");
        else if (protocol == DI_PROTOCOL_RESPONSES)
            snprintf(body, sizeof body,
                     "{\"model\":\"m\",\"max_output_tokens\":160,\"temperature\":0,\"input\":"
                     "\"Ping example.com, then ping it again.\",\"tools\":%s,\"tool_choice\":"
                     "\"required\"%s}",
                     tool_resp, single ? ",\"parallel_tool_calls\":false" : "");
        else
            snprintf(body, sizeof body,
                     "{\"model\":\"m\",\"max_tokens\":160,\"temperature\":0,\"messages\":[{"
                     "\"role\":\"user\",\"content\":\"Ping example.com, then ping it again.\"}],"
                     "\"tools\":%s,\"tool_choice\":{\"type\":\"any\"%s}}",
                     tool_msg, single ? ",\"disable_parallel_tool_use\":true" : "");
        di_request q;
        di_request_init(&q);
        q.protocol = protocol;
        q.json = body;
        q.json_len = strlen(body);
        q.on_event = on_event;
        if (mode == 1) {
            q.logit_bias_ids = ids;
            q.logit_bias_values = values;
            q.n_logit_bias = nb;
        }
        rec r = {0};
        q.user_data = &r;
        di_error *err = NULL;
        if (di_submit(e, &q, &r.id, &err) != DI_OK) fail_msg("%s", di_error_message(err));
        poll_until_idle(e);
        assert_int_equal(r.status, DI_OK);
        size_t n = count_calls(protocol, r.response);
        if (mode == 1 ? n > 1 : single && (n != 1 || r.finish != DI_FINISH_STOP))
            fail_msg("%s: %zu calls, finish %d: %s", body, n, (int)r.finish, r.response);
        if (!single && n < 2) fail_msg("%s: %zu calls: %s", body, n, r.response);
    }
    assert_int_equal(di_engine_destroy(e), DI_OK);
}

/* A strict tool's string argument cannot spell the call's closing
 * </tool_call> (the stream parser would end the call inside the string and
 * return the rest as answer text): SmolLM2 at temperature 1, pushed by
 * logit_bias toward the tag's tokens, writes "</tool_call" in its argument
 * (within 16 seeds: which seed does depends on the kernels' last bits) but
 * never the whole tag, and the
 * reply stays one call (required and named tool_choice), its text empty. */
static void test_strict_string_cannot_close_the_call(void **state)
{
    (void)state;
    if (access(SMOL, R_OK) != 0) skip();
    di_engine *e = make_engine(SMOL, 1024, NULL);
    int32_t ids[32];
    float values[32];
    size_t nb = bias_text(e, "</tool_call>", 6.0f, ids, values, 0);
    for (int named = 0; named < 2; named++) {
        int hint = 0; /* "</tool_call" written: the bias took hold */
        for (int seed = 1; seed <= 16 && !hint; seed++) {
            char body[2048];
            snprintf(
                body, sizeof body,
                "{\"model\":\"m\",\"max_tokens\":64,\"temperature\":1,\"seed\":%d,\"messages\":[{"
                "\"role\":\"user\",\"content\":\"Write a note.\"}],\"tools\":[{\"type\":"
                "\"function\",\"function\":{\"name\":\"note\",\"strict\":true,\"parameters\":{"
                "\"type\":\"object\",\"properties\":{\"text\":{\"type\":\"string\"}},"
                "\"required\":[\"text\"],\"additionalProperties\":false}}}],\"tool_choice\":%s}",
                seed,
                named ? "{\"type\":\"function\",\"function\":{\"name\":\"note\"}}"
                      : "\"required\"");
            di_request q;
            di_request_init(&q);
            q.logit_bias_ids = ids;
            q.logit_bias_values = values;
            q.n_logit_bias = nb;
            rec r;
            di_error *err = NULL;
            if (run_chat(e, body, &q, &r, &err) != DI_OK) fail_msg("%s", di_error_message(err));
            assert_int_equal(r.status, DI_OK);
            json_t *root = json_loads(r.response, 0, NULL);
            json_t *msg =
                json_object_get(json_array_get(json_object_get(root, "choices"), 0), "message");
            json_t *calls = json_object_get(msg, "tool_calls");
            const char *content = json_string_value(json_object_get(msg, "content"));
            const char *args = json_string_value(json_object_get(
                json_object_get(json_array_get(calls, 0), "function"), "arguments"));
            if (json_array_size(calls) != 1 || !args || (content && content[0]) ||
                strstr(args, "</tool_call>"))
                fail_msg("%s", r.response);
            hint = strstr(args, "</tool_call") != NULL;
            if (hint) print_message("named %d: the bias took hold at seed %d\n", named, seed);
            json_decref(root);
        }
        if (!hint) fail_msg("named %d: no argument spelled \"</tool_call\"", named);
    }
    assert_int_equal(di_engine_destroy(e), DI_OK);
}

/* A strict tool whose schema does not compile: DI_ERR_INVALID_REQUEST at
 * di_submit naming the schema's field and keyword, for each protocol's field;
 * the engine serves the next request. */
static void test_strict_tool_schema_errors_name_the_field(void **state)
{
    (void)state;
    if (access(SMOL, R_OK) != 0) skip();
    di_engine *e = make_engine(SMOL, 512, NULL);
    static const char bad[] = "{\"type\":\"object\",\"properties\":{\"x\":{\"type\":\"string\","
                              "\"format\":\"hostname\"}}}";
    static const struct {
        di_protocol protocol;
        const char *fmt, *named;
    } cases[] = {
        {DI_PROTOCOL_CHAT,
         "{\"model\":\"m\",\"max_tokens\":2,\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],"
         "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"a\",\"parameters\":{}}},"
         "{\"type\":\"function\",\"function\":{\"name\":\"b\",\"parameters\":{}}},"
         "{\"type\":\"function\",\"function\":{\"name\":\"f\",\"strict\":true,\"parameters\":%s}}]"
         "}",
         "tools[2].function.parameters.properties.x: format: unsupported format 'hostname'"},
        {DI_PROTOCOL_MESSAGES,
         "{\"model\":\"m\",\"max_tokens\":2,\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],"
         "\"tools\":[{\"name\":\"f\",\"strict\":true,\"input_schema\":%s}]}",
         "tools[0].input_schema.properties.x: format: unsupported format 'hostname'"},
        {DI_PROTOCOL_RESPONSES,
         "{\"model\":\"m\",\"max_output_tokens\":2,\"input\":\"hi\",\"tools\":[{\"type\":"
         "\"function\",\"name\":\"f\",\"strict\":true,\"parameters\":%s}]}",
         "tools[0].parameters.properties.x: format: unsupported format 'hostname'"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char body[2048];
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-nonliteral"
        snprintf(body, sizeof body, cases[i].fmt, bad);
#pragma GCC diagnostic pop
        di_request q;
        di_request_init(&q);
        q.protocol = cases[i].protocol;
        q.json = body;
        q.json_len = strlen(body);
        q.on_event = on_event;
        rec r = {0};
        q.user_data = &r;
        di_error *err = NULL;
        uint64_t id;
        di_status st = di_submit(e, &q, &id, &err);
        if (st != DI_ERR_INVALID_REQUEST || !strstr(di_error_message(err), cases[i].named))
            fail_msg("case %zu: status %d, \"%s\"", i, (int)st, di_error_message(err));
        di_error_free(err);
    }
    di_request base;
    di_request_init(&base);
    rec r;
    assert_int_equal(run_chat(e,
                              "{\"model\":\"m\",\"max_tokens\":2,\"messages\":[{\"role\":\"user\","
                              "\"content\":\"hi\"}]}",
                              &base, &r, NULL),
                     DI_OK);
    assert_int_equal(r.status, DI_OK);
    assert_int_equal(di_engine_destroy(e), DI_OK);
}

/* An output format with a forced call (tool_choice required or a named tool):
 * the output is the call (its arguments any JSON object, the tool not being
 * strict) and the format, which would apply to an answer, does not; with
 * tool_choice auto the reply is the format's answer or a call. */
static void test_response_format_with_a_forced_call_is_a_call(void **state)
{
    (void)state;
    if (access(SMOL, R_OK) != 0) skip();
    di_engine *e = make_engine(SMOL, 512, NULL);
    static const char *const choices[] = {
        "\"required\"", "{\"type\":\"function\",\"function\":{\"name\":\"f\"}}", "\"auto\""};
    for (int k = 0; k < 3; k++) {
        char body[1024];
        snprintf(body, sizeof body,
                 "{\"model\":\"m\",\"max_tokens\":24,\"temperature\":0,\"messages\":[{\"role\":"
                 "\"user\",\"content\":\"json\"}],\"tools\":[{\"type\":\"function\",\"function\":{"
                 "\"name\":\"f\",\"parameters\":{\"type\":\"object\",\"properties\":{}}}}],"
                 "\"tool_choice\":%s,\"response_format\":{\"type\":\"json_object\"}}",
                 choices[k]);
        di_request base;
        di_request_init(&base);
        rec r;
        di_error *err = NULL;
        if (run_chat(e, body, &base, &r, &err) != DI_OK) fail_msg("%s", di_error_message(err));
        assert_int_equal(r.status, DI_OK);
        json_t *calls = complete_calls(r.response, r.finish);
        if (k < 2) {
            if (!json_array_size(calls)) fail_msg("no call: %s", r.response);
            assert_string_equal(
                json_string_value(json_object_get(json_array_get(calls, 0), "name")), "f");
            assert_true(json_is_object(json_object_get(json_array_get(calls, 0), "arguments")));
        }
        json_decref(calls);
    }
    assert_int_equal(di_engine_destroy(e), DI_OK);
}

static void test_sampling_precedence(void **state)
{
    (void)state;
    if (access(SMOL, R_OK) != 0) skip();
    di_engine *e = make_engine(SMOL, 512, NULL);
    const char *msgs = "\"messages\":[{\"role\":\"user\",\"content\":\"Name three colors.\"}]";
    char body[512];
    rec a, b;
    di_request hot, cold;
    di_request_init(&hot);
    hot.temperature = 1.7f;
    hot.seed = 11;
    di_request_init(&cold);
    cold.temperature = 0.0f;
    /* the body's temperature 0 beats di_request's 1.7: greedy, as di_request's 0 */
    snprintf(body, sizeof body, "{\"max_tokens\":12,\"temperature\":0,%s}", msgs);
    assert_int_equal(run_chat(e, body, &hot, &a, NULL), DI_OK);
    snprintf(body, sizeof body, "{\"max_tokens\":12,%s}", msgs);
    assert_int_equal(run_chat(e, body, &cold, &b, NULL), DI_OK);
    assert_same_output(&a, &b);
    /* the body's temperature and seed beat di_request's greedy setting */
    snprintf(body, sizeof body, "{\"max_tokens\":12,\"temperature\":1.7,\"seed\":11,%s}", msgs);
    assert_int_equal(run_chat(e, body, &cold, &a, NULL), DI_OK);
    snprintf(body, sizeof body, "{\"max_tokens\":12,%s}", msgs);
    assert_int_equal(run_chat(e, body, &hot, &b, NULL), DI_OK);
    assert_same_output(&a, &b);
    /* vLLM's and llama-server's Chat extensions: top_k 1 is greedy whatever
     * the temperature */
    snprintf(body, sizeof body, "{\"max_tokens\":12,\"top_k\":1,\"n\":1,%s}", msgs);
    assert_int_equal(run_chat(e, body, &hot, &a, NULL), DI_OK);
    snprintf(body, sizeof body, "{\"max_tokens\":12,%s}", msgs);
    assert_int_equal(run_chat(e, body, &cold, &b, NULL), DI_OK);
    assert_same_output(&a, &b);
    /* max_tokens: the body's wins; di_request's applies when the body has none */
    di_request nine = cold;
    nine.max_tokens = 9;
    snprintf(body, sizeof body, "{\"max_tokens\":3,%s}", msgs);
    assert_int_equal(run_chat(e, body, &nine, &a, NULL), DI_OK);
    assert_int_equal(a.finish, DI_FINISH_LENGTH);
    assert_int_equal(a.completion_tokens, 3);
    snprintf(body, sizeof body, "{%s}", msgs);
    assert_int_equal(run_chat(e, body, &nine, &a, NULL), DI_OK);
    assert_int_equal(a.completion_tokens, 9);
    /* past the context (512): an error saying so, from either source */
    di_error *err = NULL;
    di_request big = cold;
    big.max_tokens = 600;
    assert_int_equal(run_chat(e, body, &big, &a, &err), DI_ERR_CONTEXT_LENGTH);
    assert_non_null(strstr(di_error_message(err), "max_tokens"));
    assert_non_null(strstr(di_error_message(err), "512"));
    di_error_free(err);
    err = NULL;
    snprintf(body, sizeof body, "{\"max_tokens\":600,%s}", msgs);
    assert_int_equal(run_chat(e, body, &cold, &a, &err), DI_ERR_CONTEXT_LENGTH);
    di_error_free(err);
    /* the body's logit_bias is applied: -100 on the greedy first token changes it */
    snprintf(body, sizeof body, "{\"max_tokens\":1,%s}", msgs);
    assert_int_equal(run_chat(e, body, &cold, &a, NULL), DI_OK);
    const char *c0 = strstr(a.response, "\"content\":\"");
    assert_non_null(c0);
    /* find the token of that text and bias it away */
    const di_tokenizer *tok = di_engine_tokenizer(e);
    int32_t *ids;
    size_t n_ids;
    char piece[64];
    const char *q0 = c0 + strlen("\"content\":\"");
    const char *q1 = strchr(q0, '"');
    assert_non_null(q1);
    snprintf(piece, sizeof piece, "%.*s", (int)(q1 - q0), q0);
    assert_int_equal(di_tokenizer_encode(tok, piece, strlen(piece), 0, &ids, &n_ids, NULL), DI_OK);
    assert_true(n_ids >= 1);
    snprintf(body, sizeof body, "{\"max_tokens\":1,\"logit_bias\":{\"%d\":-100},%s}", (int)ids[0],
             msgs);
    di_tokens_free(ids);
    assert_int_equal(run_chat(e, body, &cold, &b, NULL), DI_OK);
    assert_string_not_equal(strstr(b.response, "\"content\""), strstr(a.response, "\"content\""));
    assert_int_equal(di_engine_destroy(e), DI_OK);
}

/* The usage's completion_tokens in the response JSON. */
static unsigned usage_completion(const char *response)
{
    const char *u = strstr(response, "\"completion_tokens\":");
    assert_non_null(u);
    return (unsigned)strtoul(u + strlen("\"completion_tokens\":"), NULL, 10);
}

static void test_usage_agrees_and_names_the_model(void **state)
{
    (void)state;
    if (access(SMOL, R_OK) != 0) skip();
    di_engine *e = make_engine(SMOL, 512, NULL);
    assert_string_equal(di_engine_served_model_name(e), "SmolLM2-135M-Instruct.Q4_1");
    di_request cold;
    di_request_init(&cold);
    cold.temperature = 0.0f;
    rec r;
    /* ends by its end-of-sequence token (<|im_end|>), which both counts include */
    assert_int_equal(
        run_chat(e,
                 "{\"model\":\"gpt-4o\",\"max_tokens\":200,\"messages\":[{\"role\":\"user\","
                 "\"content\":\"Say hello.\"}]}",
                 &cold, &r, NULL),
        DI_OK);
    assert_int_equal(r.finish, DI_FINISH_STOP);
    assert_int_equal(usage_completion(r.response), r.completion_tokens);
    assert_int_equal(r.n_tokens, r.completion_tokens);
    assert_true(r.n_delta > 0);
    assert_int_equal(r.n_delta_mismatch, 0);
    /* the model that answered, not the body's name */
    assert_non_null(strstr(r.response, "\"model\":\"SmolLM2-135M-Instruct.Q4_1\""));
    /* ends by its budget */
    assert_int_equal(
        run_chat(e, "{\"max_tokens\":4,\"messages\":[{\"role\":\"user\",\"content\":\"Count.\"}]}",
                 &cold, &r, NULL),
        DI_OK);
    assert_int_equal(usage_completion(r.response), 4);
    assert_int_equal(r.completion_tokens, 4);
    /* di_request's stop_tokens end a protocol request too: stopping at its first
     * greedy token leaves no text, one generated token */
    di_request stop = cold;
    int32_t first = r.first_token;
    stop.stop_tokens = &first;
    stop.n_stop_tokens = 1;
    assert_int_equal(
        run_chat(e, "{\"max_tokens\":4,\"messages\":[{\"role\":\"user\",\"content\":\"Count.\"}]}",
                 &stop, &r, NULL),
        DI_OK);
    assert_int_equal(r.finish, DI_FINISH_STOP);
    assert_int_equal(r.completion_tokens, 1);
    assert_non_null(strstr(r.response, "\"content\":\"\""));
    assert_int_equal(di_engine_destroy(e), DI_OK);
    /* a configured served name */
    e = make_engine(SMOL, 512, "smol");
    assert_int_equal(
        run_chat(e, "{\"max_tokens\":2,\"messages\":[{\"role\":\"user\",\"content\":\"Hi.\"}]}",
                 &cold, &r, NULL),
        DI_OK);
    assert_non_null(strstr(r.response, "\"model\":\"smol\""));
    size_t len;
    const char *info = di_engine_model_info(e, &len);
    assert_non_null(info);
    assert_int_equal(strlen(info), len);
    static const char *const has[] = {
        "\"served_model_name\":\"smol\"", "\"architecture\":\"llama\"", "\"family\":\"llama\"",
        "\"Q4_1\":{\"tensors\":",         "\"encoding\":\"chatml\"",    "\"context_length\":512",
        "\"vocab_size\":49152",           "\"text\":\"<|im_end|>\"",    "\"chat_template\":\"{"};
    for (size_t i = 0; i < sizeof has / sizeof has[0]; i++)
        if (!strstr(info, has[i])) fail_msg("model info lacks %s: %s", has[i], info);
    /* SmolLM2-135M: 134,515,008 parameters (its embeddings tied) */
    const char *pc = strstr(info, "\"parameters\":");
    assert_non_null(pc);
    assert_int_equal(strtoll(pc + strlen("\"parameters\":"), NULL, 10), 134515008);
    assert_int_equal(di_engine_prompt_encoding(e), DI_ENCODING_CHATML);
    assert_int_equal(di_engine_encoding(e), DI_ENCODING_CHATML);
    assert_int_equal(di_engine_destroy(e), DI_OK);
}

static void test_model_info_of_a_folder(void **state)
{
    (void)state;
    di_engine *e = make_engine(TINY, 0, NULL);
    assert_string_equal(di_engine_served_model_name(e), "qwen2-tied-f16");
    const char *info = di_engine_model_info(e, NULL);
    static const char *const has[] = {"\"family\":\"qwen2\"",
                                      "\"architecture\":\"Qwen2ForCausalLM\"",
                                      "\"F16\":{",
                                      "\"mtp_layers\":0,\"dspark_block_size\":0",
                                      "\"encoding\":null",
                                      "\"chat_template\":null"};
    for (size_t i = 0; i < sizeof has / sizeof has[0]; i++)
        if (!strstr(info, has[i])) fail_msg("model info lacks %s: %s", has[i], info);
    assert_int_equal(di_engine_prompt_encoding(e), DI_ENCODING_NONE);
    assert_int_equal(di_engine_destroy(e), DI_OK);
    /* the draft layers a checkpoint brings: DeepSeek-V3's MTP module, V4.1's
     * DSpark head (and V4.1 named as such) */
    static const struct {
        const char *dir, *has;
    } drafts[] = {
        {DI_FIXTURE_DIR "/model/dsv3-mtp-f32", "\"mtp_layers\":1,\"dspark_block_size\":0"},
        {DI_FIXTURE_DIR "/model/dsv41-dspark-release",
         "\"family\":\"deepseek_v41\",\"parameters\""},
        {DI_FIXTURE_DIR "/model/dsv41-dspark-release", "\"mtp_layers\":0,\"dspark_block_size\":4"},
    };
    for (size_t i = 0; i < sizeof drafts / sizeof drafts[0]; i++) {
        e = make_engine(drafts[i].dir, 0, NULL);
        info = di_engine_model_info(e, NULL);
        if (!strstr(info, drafts[i].has)) fail_msg("model info lacks %s: %s", drafts[i].has, info);
        assert_int_equal(di_engine_destroy(e), DI_OK);
    }
    assert_null(di_engine_model_info(NULL, NULL));
    assert_null(di_engine_served_model_name(NULL));
    assert_int_equal(di_engine_pending_count(NULL), 0);
}

static void test_names(void **state)
{
    (void)state;
    assert_string_equal(di_encoding_name(DI_ENCODING_DSV4), "dsv4");
    assert_string_equal(di_encoding_name(DI_ENCODING_DSV41), "dsv41");
    assert_string_equal(di_encoding_name(DI_ENCODING_DSV3), "dsv3");
    assert_string_equal(di_encoding_name(DI_ENCODING_R1), "r1");
    assert_string_equal(di_encoding_name(DI_ENCODING_CHATML), "chatml");
    assert_null(di_encoding_name(DI_ENCODING_NONE));
    assert_null(di_encoding_name(99));
    assert_string_equal(di_event_kind_name(DI_EVENT_REASONING), "reasoning");
    assert_string_equal(di_stream_event_kind_name(DI_STREAM_REASONING), "reasoning");
    assert_string_equal(di_event_kind_name(DI_EVENT_DONE), "done");
    assert_string_equal(di_stream_event_kind_name(DI_STREAM_TOOL_CALL_ARGUMENTS),
                        "tool_call_arguments");
    assert_null(di_event_kind_name((di_event_kind)0));
    assert_null(di_stream_event_kind_name((di_stream_event_kind)42));
    assert_null(di_event_delta(NULL, NULL));
    assert_null(di_event_tool_call_arguments(NULL, NULL));
    assert_null(di_stream_chunk_event_name(NULL, 0));
    /* a directory that is not a model folder says so */
    di_engine_config cfg;
    di_engine_config_init(&cfg);
    cfg.model_path = DI_FIXTURE_DIR "/model";
    di_engine *e = NULL;
    di_error *err = NULL;
    assert_int_equal(di_engine_create(&cfg, &e, &err), DI_ERR_IO);
    assert_non_null(strstr(di_error_message(err), "is a directory without a config.json"));
    di_error_free(err);
    di_tokenizer *tok = NULL;
    err = NULL;
    assert_int_equal(di_tokenizer_load(DI_FIXTURE_DIR "/model", &tok, &err), DI_ERR_IO);
    assert_non_null(strstr(di_error_message(err), "is a directory without a tokenizer.json"));
    di_error_free(err);
}

/* A chat template renders only the messages: every other Chat field is still
 * checked, as the V4 encodings check it (the smallest failing inputs: each was
 * accepted unseen, n: "2" and logprobs: "true" among them). */
static void test_template_fields_of_the_wrong_type(void **state)
{
    (void)state;
    static const struct {
        const char *body, *field;
    } bad[] = {
        {"\"n\":\"2\"", "n:"},
        {"\"n\":2.0", "n:"},
        {"\"n\":18446744073709551615", "n:"},
        {"\"n\":300", "n:"},
        {"\"logprobs\":\"true\"", "logprobs"},
        {"\"top_logprobs\":\"3\"", "top_logprobs"},
        {"\"top_logprobs\":21,\"logprobs\":true", "top_logprobs"},
        {"\"top_logprobs\":3", "top_logprobs: requires logprobs"},
        {"\"parallel_tool_calls\":\"false\"", "parallel_tool_calls"},
        {"\"stream\":\"yes\"", "stream"},
        {"\"stream_options\":true", "stream_options"},
        {"\"reasoning_effort\":5", "reasoning_effort"},
        {"\"reasoning_effort\":\"bogus\"", "reasoning_effort"},
        {"\"response_format\":\"json_object\"", "response_format"},
        {"\"response_format\":{}", "response_format.type"},
        {"\"response_format\":{\"type\":\"bogus\"}", "response_format.type"},
        {"\"response_format\":{\"type\":\"json_schema\"}", "response_format.json_schema: missing"},
        {"\"response_format\":{\"type\":\"json_schema\",\"json_schema\":\"x\"}",
         "response_format.json_schema"},
        {"\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"x\"}}",
         "response_format.json_schema.schema: missing"},
        {"\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"schema\":{},"
         "\"strict\":\"yes\"}}",
         "response_format.json_schema.strict"},
        {"\"response_format\":{\"type\":\"regex\"}", "response_format.regex: missing"},
        {"\"response_format\":{\"type\":\"regex\",\"regex\":5}", "response_format.regex"},
        {"\"modalities\":\"audio\"", "modalities"},
        {"\"modalities\":[5]", "modalities[0]"},
        {"\"model\":5", "model"},
        {"\"tools\":{}", "tools"},
        {"\"tools\":[5]", "tools[0]"},
        {"\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"strict\":\"true\","
         "\"parameters\":{\"type\":\"object\",\"properties\":{}}}}]",
         "tools[0].function.strict"},
        {"\"max_completion_tokens\":5,\"max_tokens\":\"x\"", "max_tokens"},
        {"\"max_completion_tokens\":5,\"max_tokens\":0", "max_tokens"},
        {"\"stop\":18446744073709551615", "stop"},
        {"\"stop\":[\"a\",18446744073709551615]", "stop[1]"},
        {"\"stop\":\"a\\u0000b\"", "stop"},
        {"\"stop\":[[\"a\"]]", "stop[0]"},
        {"\"logit_bias\":{\" 5\":1}", "logit_bias"},
        {"\"logit_bias\":{\"+5\":1}", "logit_bias"},
        {"\"logit_bias\":{\"\":1}", "logit_bias"},
    };
    const di_encoding encs[] = {DI_ENCODING_CHATML, DI_ENCODING_DSV3, DI_ENCODING_R1};
    for (size_t k = 0; k < 3; k++)
        for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
            char body[512];
            snprintf(body, sizeof body,
                     "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],%s}", bad[i].body);
            if (encs[k] == DI_ENCODING_DSV3 && strncmp(bad[i].body, "\"tools\"", 7) == 0 &&
                strstr(bad[i].body, "strict"))
                continue; /* DeepSeek-V3's template renders no strict tools either way */
            assert_null(
                render(encs[k], DI_PROTOCOL_CHAT, body, DI_ERR_INVALID_REQUEST, bad[i].field));
        }
    /* the V4 encodings' logit_bias keys too */
    assert_null(render(DI_ENCODING_DSV4, DI_PROTOCOL_CHAT,
                       "{\"model\":\"DeepSeek-V4-Pro\",\"messages\":[{\"role\":\"user\","
                       "\"content\":\"hi\"}],\"logit_bias\":{\" 5\":1}}",
                       DI_ERR_INVALID_REQUEST, "logit_bias"));
    /* the right types still render */
    di_prompt *p = render(DI_ENCODING_CHATML, DI_PROTOCOL_CHAT,
                          "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],"
                          "\"n\":1,\"logprobs\":false,\"parallel_tool_calls\":"
                          "true,\"stream\":true,\"stream_options\":{\"include_usage\":true},"
                          "\"reasoning_effort\":\"none\",\"response_format\":{\"type\":\"text\"},"
                          "\"modalities\":[\"text\"],\"max_completion_tokens\":5,\"max_tokens\":9,"
                          "\"stop\":[\"x\"],\"logit_bias\":{\"5\":1,\"007\":-1}}",
                          DI_OK, NULL);
    assert_int_equal(di_prompt_stop_count(p), 1);
    di_prompt_free(p);
}

/* A name for responses is JSON text: a served_model_name that is not UTF-8 is
 * refused, a folder's name is made UTF-8, a path ending in "." names its
 * folder, and a config's long _name_or_path is cut at a character boundary. */
static void test_names_are_utf8(void **state)
{
    (void)state;
    di_engine_config cfg;
    di_engine_config_init(&cfg);
    cfg.model_path = TINY;
    cfg.served_model_name = "bad\xff\xfename";
    di_engine *e = NULL;
    di_error *err = NULL;
    assert_int_equal(di_engine_create(&cfg, &e, &err), DI_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(di_error_message(err), "served_model_name"));
    assert_null(e);
    di_error_free(err);
    /* "dir/.", "dir/sub/..", "dir///" name the folder */
    static const char *const paths[] = {TINY "/.", TINY "/../qwen2-tied-f16/.", TINY "///"};
    for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++) {
        e = make_engine(paths[i], 0, NULL);
        assert_string_equal(di_engine_served_model_name(e), "qwen2-tied-f16");
        /* and so does the model's own name, the config giving none */
        if (!strstr(di_engine_model_info(e, NULL), "\"name\":\"qwen2-tied-f16\""))
            fail_msg("%s: %.200s", paths[i], di_engine_model_info(e, NULL));
        assert_int_equal(di_engine_destroy(e), DI_OK);
    }
    /* a copy of the folder named "m\xff", whose config names it with 126 ASCII
     * bytes and then "é" (bytes 127 and 128) */
    char dir[] = "/tmp/di_names_XXXXXX", sub[128], file[256];
    assert_non_null(mkdtemp(dir));
    snprintf(sub, sizeof sub, "%s/m\xff", dir);
    assert_int_equal(mkdir(sub, 0755), 0);
    snprintf(file, sizeof file, "%s/model.safetensors", sub);
    assert_int_equal(symlink(TINY "/model.safetensors", file), 0);
    FILE *in = fopen(TINY "/config.json", "rb");
    assert_non_null(in);
    static char config[65536];
    size_t n = fread(config, 1, sizeof config - 1, in);
    fclose(in);
    config[n] = 0;
    char *brace = strchr(config, '{');
    assert_non_null(brace);
    snprintf(file, sizeof file, "%s/config.json", sub);
    FILE *out = fopen(file, "wb");
    assert_non_null(out);
    char name[160];
    memset(name, 'a', 126);
    snprintf(name + 126, sizeof name - 126, "\xc3\xa9tail");
    fprintf(out, "{\"_name_or_path\":\"%s\",%s", name, brace + 1);
    fclose(out);
    e = make_engine(sub, 0, NULL);
    assert_string_equal(di_engine_served_model_name(e), "m\xef\xbf\xbd");
    const char *info = di_engine_model_info(e, NULL);
    if (!strstr(info, "\"served_model_name\":\"m\xef\xbf\xbd\""))
        fail_msg("served_model_name missing: %s", info);
    name[126] = 0; /* the name cut before the "é" it could not hold */
    char want[200];
    snprintf(want, sizeof want, "\"name\":\"%s\"", name);
    if (!strstr(info, want)) fail_msg("name cut mid-character: %.300s", info);
    assert_int_equal(di_engine_destroy(e), DI_OK);
    unlink(file);
    snprintf(file, sizeof file, "%s/model.safetensors", sub);
    unlink(file);
    rmdir(sub);
    rmdir(dir);
}

/* ChatML converts Messages and Responses with its reasoning switches replaced:
 * the body's own are still checked first (each was replaced unseen); and the
 * fields the engine judges, of the wrong type, are DI_ERR_INVALID_REQUEST from
 * di_submit (Responses' store: "true" was served as if absent). */
static void test_converted_switches_and_judged_fields(void **state)
{
    (void)state;
    static const struct {
        di_protocol protocol;
        const char *fields, *named;
    } bad[] = {
        {DI_PROTOCOL_RESPONSES, "\"reasoning\":\"high\"", "reasoning"},
        {DI_PROTOCOL_RESPONSES, "\"reasoning\":{\"effort\":\"bogus\"}", "reasoning.effort"},
        {DI_PROTOCOL_RESPONSES, "\"reasoning\":{\"effort\":5}", "effort"},
        {DI_PROTOCOL_MESSAGES, "\"thinking\":\"enabled\"", "thinking"},
        {DI_PROTOCOL_MESSAGES, "\"thinking\":{\"type\":5}", "thinking.type"},
        {DI_PROTOCOL_MESSAGES, "\"thinking\":{\"type\":\"bogus\"}", "thinking.type"},
        {DI_PROTOCOL_MESSAGES, "\"thinking\":{\"type\":\"disabled\",\"budget_tokens\":\"x\"}",
         "thinking.budget_tokens"},
        {DI_PROTOCOL_MESSAGES, "\"output_config\":{\"effort\":\"bogus\"}", "output_config.effort"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char body[512];
        snprintf(body, sizeof body,
                 bad[i].protocol == DI_PROTOCOL_RESPONSES
                     ? "{\"model\":\"m\",\"input\":\"hi\",%s}"
                     : "{\"model\":\"m\",\"max_tokens\":5,\"messages\":[{\"role\":\"user\","
                       "\"content\":\"hi\"}],%s}",
                 bad[i].fields);
        assert_null(render(DI_ENCODING_CHATML, bad[i].protocol, body, DI_ERR_INVALID_REQUEST,
                           bad[i].named));
    }
    if (access(SMOL, R_OK) != 0) skip();
    di_engine *e = make_engine(SMOL, 256, NULL);
    static const struct {
        di_protocol protocol;
        const char *fields, *named;
    } judged[] = {
        {DI_PROTOCOL_RESPONSES, "\"store\":\"true\"", "store"},
        {DI_PROTOCOL_RESPONSES, "\"background\":\"yes\"", "background"},
        {DI_PROTOCOL_RESPONSES, "\"parallel_tool_calls\":\"false\"", "parallel_tool_calls"},
        {DI_PROTOCOL_RESPONSES, "\"truncation\":5", "truncation"},
        {DI_PROTOCOL_RESPONSES, "\"include\":\"message.output_text.logprobs\"", "include"},
        {DI_PROTOCOL_RESPONSES, "\"include\":[5]", "include"},
        {DI_PROTOCOL_CHAT, "\"modalities\":\"audio\"", "modalities"},
    };
    for (size_t i = 0; i < sizeof judged / sizeof judged[0]; i++) {
        char body[512];
        snprintf(body, sizeof body,
                 judged[i].protocol == DI_PROTOCOL_RESPONSES
                     ? "{\"model\":\"m\",\"input\":\"hi\",%s}"
                     : "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],%s}",
                 judged[i].fields);
        di_request q;
        di_request_init(&q);
        q.protocol = judged[i].protocol;
        q.json = body;
        q.json_len = strlen(body);
        q.on_event = on_event;
        di_error *err = NULL;
        uint64_t id;
        di_status st = di_submit(e, &q, &id, &err);
        if (st != DI_ERR_INVALID_REQUEST || !strstr(di_error_message(err), judged[i].named))
            fail_msg("case %zu (%s): status %d, \"%s\"", i, body, (int)st, di_error_message(err));
        di_error_free(err);
    }
    assert_int_equal(di_engine_destroy(e), DI_OK);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_template_prompts_report_the_body),
        cmocka_unit_test(test_chatml_json_object_drops_the_fence),
        cmocka_unit_test(test_unsupported_fields_are_refused),
        cmocka_unit_test(test_response_format_with_a_forced_call_is_a_call),
        cmocka_unit_test(test_strict_tools_constrain_hermes_calls),
        cmocka_unit_test(test_parallel_tool_calls_false_gives_one_call),
        cmocka_unit_test(test_strict_string_cannot_close_the_call),
        cmocka_unit_test(test_strict_tool_schema_errors_name_the_field),
        cmocka_unit_test(test_sampling_precedence),
        cmocka_unit_test(test_usage_agrees_and_names_the_model),
        cmocka_unit_test(test_model_info_of_a_folder),
        cmocka_unit_test(test_names),
        cmocka_unit_test(test_template_fields_of_the_wrong_type),
        cmocka_unit_test(test_names_are_utf8),
        cmocka_unit_test(test_converted_switches_and_judged_fields),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
