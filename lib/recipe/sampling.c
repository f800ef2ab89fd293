/* Sampling fields of request bodies and the fields the engine cannot honour
 * (sampling.h). Ranges are OpenAI's (Chat Completions) and Anthropic's
 * (Messages); docs/api.md, "Request fields", has the table. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "recipe/sampling.h"

void rc_sampling_free(rc_sampling *s)
{
    free(s->bias_ids);
    free(s->bias_values);
    free(s->constraint_text);
    s->bias_ids = NULL;
    s->bias_values = NULL;
    s->n_bias = 0;
    s->constraint_text = NULL;
    s->constraint = RC_CONSTRAINT_NONE;
    for (size_t i = 0; i < s->n_call_tools; i++) {
        free(s->call_tools[i].name);
        free(s->call_tools[i].schema);
    }
    free(s->call_tools);
    s->call_tools = NULL;
    s->n_call_tools = 0;
}

/* A number field in [lo, hi] into *out with `bit` set in s->set. */
static int number(rc_err *e, json_t *root, const char *key, double lo, double hi, float *out,
                  unsigned bit, rc_sampling *s)
{
    double x;
    int r = rc_get_number(e, root, key, "", &x);
    if (r < 0) return -1;
    if (r == 0) return 0;
    if (!(x >= lo && x <= hi)) return rc_fail(e, "%s: must be in [%g, %g]", key, lo, hi);
    *out = (float)x;
    s->set |= bit;
    return 0;
}

/* Chat's seed, penalties and logit_bias ({"token id": bias in [-100, 100]}),
 * and the sampling extensions vLLM and llama-server take in Chat bodies:
 * top_k, min_p, repetition_penalty. */
static int chat_extra(rc_err *e, json_t *root, rc_sampling *s)
{
    unsigned long long u;
    int r = rc_get_uint(e, root, "seed", "", UINT64_MAX, &u);
    if (r < 0) return -1;
    if (r > 0) s->seed = u, s->set |= RC_SET_SEED;
    if ((r = rc_get_uint(e, root, "top_k", "", INT32_MAX, &u)) < 0) return -1;
    if (r > 0) s->top_k = (int32_t)u, s->set |= RC_SET_TOP_K;
    if (number(e, root, "min_p", 0, 1, &s->min_p, RC_SET_MIN_P, s) < 0 ||
        number(e, root, "repetition_penalty", 1e-6, 100, &s->repetition_penalty,
               RC_SET_REPETITION_PENALTY, s) < 0)
        return -1;
    if (number(e, root, "presence_penalty", -2, 2, &s->presence_penalty, RC_SET_PRESENCE_PENALTY,
               s) < 0 ||
        number(e, root, "frequency_penalty", -2, 2, &s->frequency_penalty, RC_SET_FREQUENCY_PENALTY,
               s) < 0)
        return -1;
    json_t *bias = NULL;
    if ((r = rc_get_object(e, root, "logit_bias", "", &bias)) <= 0) return r;
    size_t n = json_object_size(bias);
    if (n == 0) return 0;
    s->bias_ids = malloc(n * sizeof *s->bias_ids);
    s->bias_values = malloc(n * sizeof *s->bias_values);
    if (!s->bias_ids || !s->bias_values) {
        e->status = DI_ERR_OUT_OF_MEMORY;
        return rc_fail(e, "out of memory");
    }
    const char *key;
    json_t *v;
    json_object_foreach(bias, key, v)
    {
        char *end;
        long id = *key >= '0' && *key <= '9' ? strtol(key, &end, 10) : -1;
        if (id < 0 || *end || id > INT32_MAX)
            return rc_fail(e, "logit_bias: key \"%.40s\" is not a token id", key);
        if (!json_is_number(v) || json_number_value(v) < -100 || json_number_value(v) > 100)
            return rc_fail(e, "logit_bias.%.40s: expected a number in [-100, 100]", key);
        s->bias_ids[s->n_bias] = (int32_t)id;
        s->bias_values[s->n_bias++] = (float)json_number_value(v);
    }
    return 0;
}

int rc_sampling_extra(rc_err *e, json_t *root, di_protocol protocol, rc_sampling *s)
{
    if (protocol == DI_PROTOCOL_CHAT) return chat_extra(e, root, s);
    if (protocol == DI_PROTOCOL_MESSAGES) {
        unsigned long long u;
        int r = rc_get_uint(e, root, "top_k", "", INT32_MAX, &u);
        if (r < 0) return -1;
        if (r > 0) s->top_k = (int32_t)u, s->set |= RC_SET_TOP_K;
    }
    return 0;
}

/* One stop sequence: a non-empty string (not a number beyond 64 bits, which
 * the parser keeps as a marked string), without a NUL, which a C string
 * cannot match. */
static int add_stop(rc_err *e, rc_conversation *conv, json_t *v, const char *what)
{
    if (!rc_json_is_text(v)) return rc_fail(e, "%s: expected a string", what);
    if (json_string_length(v) == 0) return rc_fail(e, "%s: empty string", what);
    if (strlen(json_string_value(v)) != json_string_length(v))
        return rc_fail(e, "%s: contains a NUL character", what);
    if (rc_add_stop(conv, json_string_value(v)) < 0) {
        e->status = DI_ERR_OUT_OF_MEMORY;
        return rc_fail(e, "out of memory");
    }
    return 0;
}

/* The Chat fields a chat template does not render, checked as rc_convert_chat
 * checks them for the V4 encodings (types and ranges), so that none of the wrong
 * type passes unseen; their values are judged by rc_sampling_check_supported. */
static int chat_types(rc_err *e, json_t *root)
{
    unsigned long long u;
    int flag = 0, logprobs = 0, r;
    const char *str = NULL;
    json_t *o = NULL;
    rc_effort effort;
    if (rc_get_string(e, root, "model", "", &str) < 0 ||
        rc_get_uint(e, root, "n", "", 255, &u) < 0 ||
        rc_get_bool(e, root, "logprobs", "", &logprobs) < 0 ||
        (r = rc_get_uint(e, root, "top_logprobs", "", 20, &u)) < 0 ||
        rc_get_bool(e, root, "parallel_tool_calls", "", &flag) < 0 ||
        rc_get_bool(e, root, "stream", "", &flag) < 0 ||
        rc_get_object(e, root, "stream_options", "", &o) < 0)
        return -1;
    if (r > 0 && !logprobs) return rc_fail(e, "top_logprobs: requires logprobs: true");
    str = NULL;
    if (rc_get_string(e, root, "reasoning_effort", "", &str) < 0) return -1;
    if (str && rc_parse_effort(e, str, "reasoning_effort", &effort, &flag) < 0) return -1;
    o = NULL;
    if (rc_get_object(e, root, "response_format", "", &o) < 0) return -1;
    str = NULL;
    if (o && rc_get_string(e, o, "type", "response_format.", &str) < 0) return -1;
    if (o && !str) return rc_fail(e, "response_format.type: missing");
    if (str && !rc_streq(str, "text") && !rc_streq(str, "json_object") &&
        !rc_streq(str, "json_schema") && !rc_streq(str, "regex"))
        return rc_fail(e, "response_format.type: unknown value \"%.40s\"", str);
    /* the format's own fields, as the V4 conversion checks them (request_chat.c) */
    if (str && rc_streq(str, "json_schema")) {
        json_t *js = NULL, *schema;
        if (rc_get_object(e, o, "json_schema", "response_format.", &js) < 0) return -1;
        if (!js) return rc_fail(e, "response_format.json_schema: missing");
        if (!(schema = json_object_get(js, "schema")) || json_is_null(schema))
            return rc_fail(e, "response_format.json_schema.schema: missing");
        if (rc_get_bool(e, js, "strict", "response_format.json_schema.", &flag) < 0) return -1;
        if (rc_get_string(e, js, "name", "response_format.json_schema.", &str) < 0) return -1;
    } else if (str && rc_streq(str, "regex")) {
        const char *re = NULL;
        if (rc_get_string(e, o, "regex", "response_format.", &re) < 0) return -1;
        if (!re) return rc_fail(e, "response_format.regex: missing");
    }
    o = NULL;
    if (rc_get_array(e, root, "modalities", "", &o) < 0) return -1;
    for (size_t i = 0; o && i < json_array_size(o); i++)
        if (!rc_json_is_text(json_array_get(o, i)))
            return rc_fail(e, "modalities[%zu]: expected a string", i);
    o = NULL;
    if (rc_get_array(e, root, "tools", "", &o) < 0) return -1;
    for (size_t i = 0; o && i < json_array_size(o); i++) {
        json_t *t = json_array_get(o, i), *f = NULL;
        char path[48];
        if (!json_is_object(t)) return rc_fail(e, "tools[%zu]: expected an object", i);
        snprintf(path, sizeof path, "tools[%zu].", i);
        if (rc_get_object(e, t, "function", path, &f) < 0) return -1;
        snprintf(path, sizeof path, "tools[%zu].function.", i);
        if (f && rc_get_bool(e, f, "strict", path, &flag) < 0) return -1;
    }
    return 0;
}

int rc_sampling_template(rc_err *e, json_t *root, rc_sampling *s, rc_conversation *conv)
{
    if (chat_types(e, root) < 0) return -1;
    static const char *const lengths[] = {"max_completion_tokens", "max_tokens"};
    /* both are checked; max_completion_tokens wins */
    for (int k = 0; k < 2; k++) {
        unsigned long long u;
        int r = rc_get_uint(e, root, lengths[k], "", UINT32_MAX, &u);
        if (r < 0) return -1;
        if (r > 0 && (u < 1 || u > RC_MAX_TOKENS_LIMIT))
            return rc_fail(e, "%s: must be in [1, %u]", lengths[k], RC_MAX_TOKENS_LIMIT);
        if (r > 0 && !(s->set & RC_SET_MAX_TOKENS))
            s->max_tokens = (uint32_t)u, s->set |= RC_SET_MAX_TOKENS;
    }
    if (number(e, root, "temperature", 0, 2, &s->temperature, RC_SET_TEMPERATURE, s) < 0 ||
        number(e, root, "top_p", 0, 1, &s->top_p, RC_SET_TOP_P, s) < 0)
        return -1;
    if ((s->set & RC_SET_TOP_P) && s->top_p <= 0.0f) { /* top_p 0: only the most likely token */
        s->temperature = 0.0f;
        s->top_p = 1.0f;
        s->set |= RC_SET_TEMPERATURE;
    }
    json_t *stop = json_object_get(root, "stop");
    if (json_is_array(stop)) {
        if (json_array_size(stop) > 16) return rc_fail(e, "stop: more than 16 sequences");
        char what[32];
        for (size_t i = 0; i < json_array_size(stop); i++) {
            snprintf(what, sizeof what, "stop[%zu]", i);
            if (add_stop(e, conv, json_array_get(stop, i), what) < 0) return -1;
        }
    } else if (stop && !json_is_null(stop)) {
        if (!rc_json_is_text(stop))
            return rc_fail(e, "stop: expected a string or an array of strings");
        if (add_stop(e, conv, stop, "stop") < 0) return -1;
    }
    return chat_extra(e, root, s);
}

/* Record `field: why` unless an earlier field was refused. */
static void refuse(rc_sampling *s, const char *field, const char *why)
{
    if (!s->unsupported[0]) snprintf(s->unsupported, sizeof s->unsupported, "%s: %s", field, why);
}

/* The body's function tools and tool_choice, for constraining the calls
 * (sampling.h, call_tools). Chat nests a tool in `function`; Responses'
 * function tools are {"type": "function", name, parameters, strict}; a
 * Messages tool is {name, input_schema, strict} (Anthropic's strict tools,
 * structured outputs). The body's conversion has checked the shapes. */
static void take_tools(json_t *root, di_protocol protocol, rc_sampling *s)
{
    json_t *tools = json_object_get(root, "tools");
    json_t *tc = json_object_get(root, "tool_choice");
    const char *choice = json_string_value(tc);
    const char *kind = json_string_value(json_object_get(tc, "type"));
    if (!json_is_array(tools) || (choice && rc_streq(choice, "none")) ||
        (kind && rc_streq(kind, "none")))
        return;
    const char *named = NULL;
    if (choice && rc_streq(choice, "required")) s->call_forced = 1;
    if (kind && rc_streq(kind, "any")) s->call_forced = 1; /* Messages */
    if (kind && (rc_streq(kind, "function") || rc_streq(kind, "tool"))) {
        json_t *fn = json_object_get(tc, "function"); /* Chat nests the name */
        named = json_string_value(json_object_get(fn ? fn : tc, "name"));
        s->call_forced = named != NULL;
    }
    s->call_named = -1;
    size_t n = json_array_size(tools);
    s->call_tools = calloc(n ? n : 1, sizeof *s->call_tools);
    if (!s->call_tools) {
        s->call_oom = 1;
        return;
    }
    for (size_t i = 0; i < n; i++) {
        json_t *t = json_array_get(tools, i), *f = t;
        const char *type = json_string_value(json_object_get(t, "type"));
        const char *key = "parameters";
        if (protocol == DI_PROTOCOL_CHAT) {
            f = json_object_get(t, "function");
            if (!json_is_object(f)) continue;
        } else if (protocol == DI_PROTOCOL_RESPONSES) {
            if (!type || !rc_streq(type, "function")) continue; /* built-in and namespace tools */
        } else {
            if (type && !rc_streq(type, "custom")) continue; /* Anthropic's server tools */
            key = "input_schema";
        }
        const char *name = json_string_value(json_object_get(f, "name"));
        if (!name) continue;
        struct rc_call_tool *ct = &s->call_tools[s->n_call_tools];
        snprintf(ct->field, sizeof ct->field, "tools[%u]%s.%s", (unsigned)(i % 100000000u),
                 protocol == DI_PROTOCOL_CHAT ? ".function" : "", key);
        if (!(ct->name = strdup(name))) {
            s->call_oom = 1;
            return;
        }
        s->n_call_tools++;
        if (named && rc_streq(named, name)) s->call_named = (int)(s->n_call_tools - 1);
        if (!json_is_true(json_object_get(f, "strict"))) continue;
        s->call_strict = 1;
        json_t *params = json_object_get(f, key);
        /* no parameters: a call without arguments, the empty object */
        ct->schema = params ? json_dumps(params, JSON_COMPACT | JSON_ENCODE_ANY)
                            : strdup("{\"type\":\"object\",\"properties\":{},"
                                     "\"additionalProperties\":false}");
        if (!ct->schema) {
            s->call_oom = 1;
            return;
        }
    }
}

/* The reasoning switch of a body whose encoding decides reasoning itself
 * (reasoning 0: never reasons, 1: always does, 2: the body decides). */
static void check_reasoning(json_t *root, di_protocol protocol, int reasoning, rc_sampling *s)
{
    if (reasoning == 2) return;
    const char *field = NULL;
    if (protocol == DI_PROTOCOL_MESSAGES) {
        json_t *t = json_object_get(json_object_get(root, "thinking"), "type");
        if (json_is_string(t) && !rc_streq(json_string_value(t), "disabled")) field = "thinking";
    } else {
        int chat = protocol == DI_PROTOCOL_CHAT;
        json_t *eff = chat ? json_object_get(root, "reasoning_effort")
                           : json_object_get(json_object_get(root, "reasoning"), "effort");
        int none = json_is_string(eff) && rc_streq(json_string_value(eff), "none");
        if (json_is_string(eff) && none == (reasoning == 1))
            field = chat ? "reasoning_effort" : "reasoning.effort";
    }
    if (field)
        refuse(s, field,
               reasoning ? "this model always reasons (its chat template opens a <think> block)"
                         : "this model's encoding has no reasoning block");
}

/* Record `field: expected want` unless an earlier field had the wrong type. */
static void wrong(rc_sampling *s, const char *field, const char *want)
{
    if (!s->invalid[0]) snprintf(s->invalid, sizeof s->invalid, "%s: expected %s", field, want);
}

/* A field that must be a boolean, or absent or null. */
static void need_bool(json_t *root, const char *key, rc_sampling *s)
{
    json_t *v = json_object_get(root, key);
    if (v && !json_is_null(v) && !json_is_boolean(v)) wrong(s, key, "a boolean");
}

/* A field that must be an array of strings, or absent or null. */
static void need_strings(json_t *root, const char *key, rc_sampling *s)
{
    json_t *v = json_object_get(root, key);
    if (!v || json_is_null(v)) return;
    int ok = json_is_array(v);
    for (size_t i = 0; ok && i < json_array_size(v); i++)
        ok = rc_json_is_text(json_array_get(v, i));
    if (!ok) wrong(s, key, "an array of strings");
}

static const char not_yet[] = "not supported by this engine yet";

/* Fields that are refused whatever their value (not absent, not null). */
static void refuse_present(json_t *root, const char *const *names, size_t n, rc_sampling *s)
{
    for (size_t i = 0; i < n; i++) {
        json_t *v = json_object_get(root, names[i]);
        if (v && !json_is_null(v)) refuse(s, names[i], not_yet);
    }
}

static void check_chat(json_t *root, rc_sampling *s)
{
    need_strings(root, "modalities", s);
    /* honoured: n choices from one prefill (the conversion checked that n is
     * an integer in [0, 255]) */
    json_t *v = json_object_get(root, "n");
    s->n = 1;
    if (json_is_integer(v)) {
        json_int_t n = json_integer_value(v);
        if (n < 1 || n > (json_int_t)RC_MAX_N) {
            if (!s->invalid[0])
                snprintf(s->invalid, sizeof s->invalid, "n: %lld choices, expected 1 to %u",
                         (long long)n, RC_MAX_N);
        } else {
            s->n = (uint32_t)n;
        }
    }
    /* honoured: the engine reports the raw logits' log probabilities (the
     * conversion has checked top_logprobs' range and that it needs logprobs) */
    s->logprobs = json_is_true(json_object_get(root, "logprobs"));
    v = json_object_get(root, "top_logprobs");
    s->top_logprobs = s->logprobs && json_is_integer(v) && json_integer_value(v) > 0 &&
                              json_integer_value(v) <= 20
                          ? (int32_t)json_integer_value(v)
                          : 0;
    /* honoured: the grammar of the calls allows one (tool_constraint.c) */
    s->call_single = json_is_false(json_object_get(root, "parallel_tool_calls"));
    v = json_object_get(root, "modalities");
    for (size_t i = 0; json_is_array(v) && i < json_array_size(v); i++) {
        json_t *m = json_array_get(v, i);
        if (json_is_string(m) && !rc_streq(json_string_value(m), "text"))
            refuse(s, "modalities", "only text output is generated");
    }
    static const char *const absent[] = {"audio", "prediction", "web_search_options", "functions",
                                         "function_call"};
    refuse_present(root, absent, sizeof absent / sizeof absent[0], s);
}

static void check_messages(json_t *root, rc_sampling *s)
{
    /* honoured: the grammar of the calls allows one (tool_constraint.c) */
    s->call_single = json_is_true(
        json_object_get(json_object_get(root, "tool_choice"), "disable_parallel_tool_use"));
    static const char *const absent[] = {"mcp_servers", "container"};
    refuse_present(root, absent, sizeof absent / sizeof absent[0], s);
}

static void check_responses(json_t *root, rc_sampling *s)
{
    need_bool(root, "store", s);
    need_bool(root, "background", s);
    need_bool(root, "parallel_tool_calls", s);
    need_strings(root, "include", s);
    json_t *t = json_object_get(root, "truncation");
    if (t && !json_is_null(t) && !rc_json_is_text(t)) wrong(s, "truncation", "a string");
    /* honoured: top_logprobs > 0, or include "message.output_text.logprobs",
     * asks for the output text's log probabilities (the conversion has checked
     * top_logprobs' range) */
    json_t *v = json_object_get(root, "top_logprobs");
    if (json_is_integer(v) && json_integer_value(v) > 0 && json_integer_value(v) <= 20) {
        s->logprobs = 1;
        s->top_logprobs = (int32_t)json_integer_value(v);
    }
    v = json_object_get(root, "include");
    for (size_t i = 0; json_is_array(v) && i < json_array_size(v); i++) {
        json_t *m = json_array_get(v, i);
        if (json_is_string(m) && rc_streq(json_string_value(m), "message.output_text.logprobs"))
            s->logprobs = 1;
    }
    /* honoured: the grammar of the calls allows one (tool_constraint.c) */
    s->call_single = json_is_false(json_object_get(root, "parallel_tool_calls"));
    if (json_is_true(json_object_get(root, "store")))
        refuse(s, "store", "true: responses are not stored");
    if (json_is_true(json_object_get(root, "background")))
        refuse(s, "background", "true: requests run in the foreground only");
    v = json_object_get(root, "truncation");
    if (json_is_string(v) && !rc_streq(json_string_value(v), "disabled"))
        refuse(s, "truncation", "only \"disabled\" (a prompt longer than the context is an error)");
    static const char *const absent[] = {"previous_response_id", "conversation", "prompt",
                                         "max_tool_calls"};
    refuse_present(root, absent, sizeof absent / sizeof absent[0], s);
}

/* The constraint of an output format object (Chat's response_format,
 * Responses' text.format): its JSON Schema (at `schema`, under `nest` when set)
 * or regex. The body's conversion has checked the shapes. */
static void take_constraint(json_t *format, const char *nest, const char *field_schema,
                            const char *field_regex, rc_sampling *s)
{
    const char *type = json_string_value(json_object_get(format, "type"));
    if (!type) return;
    const char *text = NULL;
    char *dumped = NULL;
    if (rc_streq(type, "json_object")) {
        text = "{\"type\":\"object\"}";
        s->constraint = RC_CONSTRAINT_JSON_SCHEMA;
        s->constraint_field = nest ? "response_format" : "text.format";
    } else if (rc_streq(type, "json_schema")) {
        json_t *holder = nest ? json_object_get(format, nest) : format;
        json_t *schema = json_object_get(holder, "schema");
        if (!schema) return;
        dumped = json_dumps(schema, JSON_COMPACT | JSON_ENCODE_ANY);
        if (!dumped) {
            s->constraint_oom = 1;
            return;
        }
        s->constraint = RC_CONSTRAINT_JSON_SCHEMA;
        s->constraint_field = field_schema;
    } else if (field_regex && rc_streq(type, "regex")) {
        json_t *re = json_object_get(format, "regex");
        text = json_string_value(re);
        if (!text) return;
        if (strlen(text) != json_string_length(re)) { /* a NUL: the C string would cut it */
            if (!s->invalid[0])
                snprintf(s->invalid, sizeof s->invalid,
                         "%s: holds a NUL character (write \\x00 in the regex)", field_regex);
            return;
        }
        s->constraint = RC_CONSTRAINT_REGEX;
        s->constraint_field = field_regex;
    } else
        return;
    s->constraint_text = dumped ? dumped : strdup(text);
    if (!s->constraint_text) s->constraint_oom = 1;
}

void rc_sampling_check_supported(json_t *root, di_protocol protocol, int reasoning, rc_sampling *s)
{
    if (!json_is_object(root)) return;
    if (protocol == DI_PROTOCOL_CHAT)
        check_chat(root, s);
    else if (protocol == DI_PROTOCOL_MESSAGES)
        check_messages(root, s);
    else
        check_responses(root, s);
    check_reasoning(root, protocol, reasoning, s);
    free(s->constraint_text);
    s->constraint_text = NULL;
    s->constraint = RC_CONSTRAINT_NONE;
    if (protocol == DI_PROTOCOL_CHAT)
        take_constraint(json_object_get(root, "response_format"), "json_schema",
                        "response_format.json_schema.schema", "response_format.regex", s);
    else if (protocol == DI_PROTOCOL_RESPONSES)
        take_constraint(json_object_get(json_object_get(root, "text"), "format"), NULL,
                        "text.format.schema", NULL, s);
    for (size_t i = 0; i < s->n_call_tools; i++) {
        free(s->call_tools[i].name);
        free(s->call_tools[i].schema);
    }
    free(s->call_tools);
    s->call_tools = NULL;
    s->n_call_tools = 0;
    s->call_strict = s->call_forced = s->call_oom = 0; /* (call_single: check_*) */
    s->call_named = -1;
    take_tools(root, protocol, s);
}
